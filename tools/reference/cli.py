"""Command line of the reference implementation.

  python3 -m tools.reference --model M.gguf --tokens 1,2,3 [--dump out.npz]
        [--intermediates] [--greedy N] [--simulate-activation-quant] [--kv-f16 cpu|gpu|none]
  python3 -m tools.reference --make-tiny out.gguf [--recipe f32|q2|q4] [--seed 0]

The npz holds `tokens` (int64 [n], every token fed to the model), `logits` (float64
[n, vocab], logits after each fed token), `prompt_len`, optionally `greedy` (the N
generated ids) and, with --intermediates, one array per recorded value named
`p{position}/{name}` (see README.md for the names).
"""

import argparse
import sys

import numpy as np

from .gguf import GGUFError
from .model import Model, Session
from .tinymodel import build_tiny_model


def _parse_tokens(text):
    try:
        toks = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise ValueError("--tokens must be a comma-separated list of integers, got %r" % text)
    if not toks:
        raise ValueError("--tokens is empty")
    return toks


def run(argv=None, out=sys.stdout):
    """Parse argv and run; returns the process exit code (0 ok, 2 usage/input error)."""
    ap = argparse.ArgumentParser(prog="python3 -m tools.reference", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF model file")
    ap.add_argument("--tokens", help="comma-separated prompt token ids")
    ap.add_argument("--dump", help="write logits (and intermediates) to this .npz")
    ap.add_argument("--intermediates", action="store_true", help="also dump per-layer intermediates")
    ap.add_argument("--greedy", type=int, default=0, help="generate N tokens greedily after the prompt")
    ap.add_argument("--simulate-activation-quant", action="store_true",
                    help="reproduce the engine's Q8_0/Q8_K activation quantization")
    ap.add_argument("--kv-f16", choices=("cpu", "gpu", "none"), default="cpu",
                    help="f16 rounding of cached rows: cpu (raw+compressed), gpu (raw only), none")
    ap.add_argument("--top", type=int, default=5, help="print the top-N logits of the last position")
    ap.add_argument("--make-tiny", metavar="PATH", help="write a random tiny model and exit")
    ap.add_argument("--recipe", choices=("f32", "q2", "q4"), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        if a.make_tiny:
            shape = build_tiny_model(a.make_tiny, seed=a.seed, recipe=a.recipe)
            print("wrote %s (%s, %d layers)" % (a.make_tiny, a.recipe, shape["n_layer"]), file=out)
            return 0
        if not a.model or not a.tokens:
            ap.error("--model and --tokens are required (or use --make-tiny)")
        if a.greedy < 0:
            raise ValueError("--greedy must be >= 0")
        toks = _parse_tokens(a.tokens)
        model = Model(a.model)
        sess = Session(model, simulate_activation_quant=a.simulate_activation_quant,
                       kv_f16=a.kv_f16, record=a.intermediates)
        logits = list(sess.prefill(toks))
        fed = list(toks)
        greedy = []
        for i in range(a.greedy):
            nxt = int(np.argmax(logits[-1]))
            greedy.append(nxt)
            if i + 1 < a.greedy:
                logits.append(sess.decode(nxt))
                fed.append(nxt)
        last = logits[-1]
        top = np.argsort(-last, kind="stable")[:max(a.top, 0)]
        print("positions %d, last argmax %d" % (len(fed), int(np.argmax(last))), file=out)
        print("top: " + ", ".join("%d:%.6f" % (t, last[t]) for t in top), file=out)
        if greedy:
            print("greedy: " + ",".join(str(t) for t in greedy), file=out)
        if a.dump:
            arrays = {"tokens": np.array(fed, dtype=np.int64), "logits": np.stack(logits),
                      "prompt_len": np.array(len(toks))}
            if greedy:
                arrays["greedy"] = np.array(greedy, dtype=np.int64)
            if a.intermediates:
                for p, rec in enumerate(sess.trace):
                    for k, v in rec.items():
                        arrays["p%d/%s" % (p, k)] = v
            np.savez(a.dump, **arrays)
            print("wrote %s" % a.dump, file=out)
        return 0
    except (GGUFError, ValueError, OSError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2


def main():
    sys.exit(run())
