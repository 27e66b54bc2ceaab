"""Held-out perplexity of a ds4 GGUF with the independent numpy reference (tools/reference),
in the exact convention of `ds4 --perplexity-file` (first 32 tokens unscored), plus the
unigram baseline on the same tokens (docs/nano.md).

    python3 tools/train/nano_ppl.py --model build/models/ds4-nano-q2.gguf --tokens slice.u32
    python3 tools/train/nano_ppl.py --unigram TRAIN_DIR --tokens slice.u32

--tokens: little-endian uint32 ids (ds4-tokenize output). Quantized models run with the
engine's Q8_0/Q8_K activation quantization simulated (spec §3.1); f32 models without.
Prints "tokens=N scored=N nll=X avg_nll=X ppl=X" like ds4.
"""

import argparse
import glob
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

PREFIX = 32
N_VOCAB = 129280


def line(n, nll):
    scored = n - PREFIX
    return "tokens=%d scored=%d nll=%.6f avg_nll=%.6f ppl=%.6f" % (n, scored, nll, nll / scored, math.exp(nll / scored))


def reference_nll(model_path, toks):
    from tools.reference.model import Model, Session
    m = Model(model_path)
    quantized = any(t.type_name not in ("F32", "I32") for n, t in m.reader.tensors.items()
                    if len(t.dims) >= 2)
    s = Session(m, simulate_activation_quant=quantized, kv_f16="cpu")
    nll = 0.0
    for i, t in enumerate(toks[:-1]):
        logits = s.decode(int(t))
        if i + 1 >= PREFIX:
            mx = logits.max()
            nll += mx + math.log(np.exp(logits - mx).sum()) - logits[int(toks[i + 1])]
    return nll


def unigram_nll(train_dir, toks):
    """Add-one unigram over the whole vocabulary, counted on the training token files."""
    counts = np.zeros(N_VOCAB)
    for p in glob.glob(os.path.join(train_dir, "*.u32")):
        counts += np.bincount(np.fromfile(p, dtype="<u4"), minlength=N_VOCAB)
    logp = np.log(counts + 1.0) - math.log(counts.sum() + N_VOCAB)
    return -float(logp[toks[PREFIX:]].sum())


def main():
    ap = argparse.ArgumentParser(description="Reference / unigram perplexity of a token file.")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--model")
    ap.add_argument("--unigram", metavar="TRAIN_DIR")
    ap.add_argument("--max-tokens", type=int, default=0)
    a = ap.parse_args()
    if bool(a.model) == bool(a.unigram):
        ap.error("give exactly one of --model, --unigram")
    toks = np.fromfile(a.tokens, dtype="<u4").astype(np.int64)
    if a.max_tokens:
        toks = toks[:a.max_tokens]
    if len(toks) <= PREFIX:
        ap.error("%s: %d tokens; perplexity needs more than %d" % (a.tokens, len(toks), PREFIX))
    nll = reference_nll(a.model, toks) if a.model else unigram_nll(a.unigram, toks)
    print(line(len(toks), nll))


if __name__ == "__main__":
    main()
