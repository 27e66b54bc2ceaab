"""Cross-check with llama.cpp (npm node-llama-cpp 3.21.1, whose prebuilt llama.cpp knows the
`deepseek4` architecture) on tiny models of the ds4 layout (docs/parity.md, "llama.cpp").

  python3 -m tools.reference.llama_crosscheck --mode engine|reference \
      --make-model build/ds4-make-model --vocab models/deepseek-v3-tokenizer.json.zst \
      --dump-tool build/ds4-dump-logits --npm-prefix build/npm-llama \
      --text-file F [--max-tokens 600] [--greedy 64] [--recipes f32,q2] [--work DIR] [--json OUT]

Per recipe: ds4-make-model writes a tiny model (preset tiny, seed 1) with the shape changes
llama.cpp needs, llama_compat.py rewrites it into llama.cpp's metadata dialect (same tensor
bytes), ds4-dump-logits tokenizes the text and gives ds4's logits and greedy continuation,
llama_logits.mjs gives llama.cpp's. Logits are compared after removing each position's mean
(llama.cpp returns ln p = logit - logsumexp): relative L2 ||a - b|| / ||a|| per position.

--mode engine: the C++ engine (ds4-dump-logits) against llama.cpp with its default F16 KV
  cache, on a model where ds4's extra roundings are no-ops: n_rot = head_dim (no non-RoPE
  dims, so no FP8 KV simulation) and indexer top-k 256 > compressed rows (every row is
  selected, so the indexer's FP4 simulation cannot change anything). What is left is f16
  storage / f16 activations in llama.cpp's attention products (~5e-4) and, in quantized
  recipes, the activation-code flips that this noise causes in Q8_0/Q8_K products.
  Checks per recipe: median rel. L2 <= --median-tol, argmax agreement >= --argmax-min,
  greedy tokens identical for the first --greedy-min.
--mode reference: this float64 reference with llama.cpp's semantics (no FP8 KV, no indexer
  FP4, no f16 storage) against llama.cpp with an F32 KV cache, f32 recipe, on the tiny shape
  with only the indexer changed (16 heads of 64): every position rel. L2 <= --logits-tol,
  every argmax identical (so the greedy continuations are too). The engine-vs-llama.cpp
  numbers of that model (FP8 on) are printed for information.

Skips (exit 0, "SKIPPED: ..." on stdout) when the npm install fixture could not reach the
registry (<npm-prefix>/REGISTRY_UNREACHABLE). Exit 1 when a check fails, 2 on bad input or a
tool failure.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .llama_compat import to_llama_cpp
from .model import Model, Session

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_SCRIPT = os.path.join(HERE, "llama_logits.mjs")

# Shape overrides of the tiny preset (ds4-make-model --config). llama.cpp needs an indexer head
# of >= 64 (llama_compat.llama_shape_problems); 16 indexer heads instead of 4 make exactly
# tied indexer scores (rows whose heads all have ReLU'd dots of 0), which the two break
# differently, rare enough not to occur in the test prompt.
SHAPES = {
    "reference": {"indexer_head_dim": 64, "n_indexer_head": 16},
    "engine": {"indexer_head_dim": 64, "n_indexer_head": 16, "n_rot": 64, "indexer_top_k": 256},
}


def run(cmd, what):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (what, res.returncode, (res.stderr or res.stdout).strip()))
    return res.stdout


def centered(z):
    z = np.asarray(z, dtype=np.float64)
    return z - z.mean(axis=1, keepdims=True)


def compare(a, b):
    """Per-position relative L2 of mean-removed logits a (reference side) and b, argmax
    agreement. Returns dict(rel, argmax_equal)."""
    ca, cb = centered(a), centered(b)
    rel = np.linalg.norm(ca - cb, axis=1) / np.linalg.norm(ca, axis=1)
    return {"rel": rel, "argmax_equal": ca.argmax(1) == cb.argmax(1)}


def summary(cmp):
    rel = cmp["rel"]
    first = np.where(rel > 1e-3)[0]
    return {"positions": int(len(rel)), "rel_max": float(rel.max()), "rel_median": float(np.median(rel)),
            "rel_p90": float(np.percentile(rel, 90)), "argmax_agree": int(cmp["argmax_equal"].sum()),
            "first_above_1e-3": int(first[0]) if len(first) else None}


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Runner:
    def __init__(self, args):
        self.a = args

    def make_model(self, recipe, mode, work):
        cfg = os.path.join(work, "shape-%s.json" % mode)
        with open(cfg, "w") as f:
            json.dump(SHAPES[mode], f)
        path = os.path.join(work, "tiny-%s-%s.gguf" % (mode, recipe))
        run([self.a.make_model, "--preset", "tiny", "--recipe", recipe, "--vocab", self.a.vocab,
             "--config", cfg, "--seed", "1", "-q", "-o", path], "ds4-make-model")
        llama_path = path[:-5] + ".llama.gguf"
        changes = to_llama_cpp(path, llama_path)
        return path, llama_path, changes

    def ds4(self, model, work, tag):
        out = os.path.join(work, "ds4-" + tag)
        run([self.a.dump_tool, "-m", model, "-o", out, "--text-file", self.a.text_file,
             "--max-tokens", str(self.a.max_tokens), "--greedy", str(self.a.greedy), "--threads", "1"],
            "ds4-dump-logits")
        with open(os.path.join(out, "meta.json")) as f:
            meta = json.load(f)
        return {"tokens": np.load(os.path.join(out, "tokens.npy")).astype(np.int64),
                "logits": np.load(os.path.join(out, "logits.npy")),
                "greedy": np.load(os.path.join(out, "greedy.npy")).astype(np.int64).tolist(),
                "prompt_len": int(meta["prompt_len"])}

    def llama(self, model, prompt, work, tag, kv_type):
        out = os.path.join(work, "llama-" + tag)
        tok = os.path.join(work, "prompt-%s.json" % tag)
        with open(tok, "w") as f:
            json.dump([int(t) for t in prompt], f)
        line = run([self.a.node, NODE_SCRIPT, self.a.npm_prefix, model, tok, out, str(self.a.greedy), kv_type],
                   "node llama_logits.mjs").strip()
        print("  " + line.splitlines()[-1] if line else "")
        with open(os.path.join(out, "meta.json")) as f:
            meta = json.load(f)
        lp = np.fromfile(os.path.join(out, "logprobs.f32"), dtype="<f4").reshape(-1, meta["n_vocab"])
        if not np.all(np.isfinite(lp)):
            raise RuntimeError("llama.cpp returned a zero probability (ln p = -inf); cannot recover logits")
        return {"logits": lp.astype(np.float64), "greedy": meta["greedy"], "seconds": meta["seconds"]}


def cpu_has_amx(cpuinfo="/proc/cpuinfo"):
    """True when the CPU flags list amx_int8 (llama.cpp's CPU backend then repacks Q4_K weights for
    AMX, and its scheduler aborts on this model's q4 graph: node-llama-cpp 3.21.1's prebuilt)."""
    try:
        with open(cpuinfo) as f:
            return any(line.startswith("flags") and " amx_int8" in line for line in f)
    except OSError:
        return False


def check_engine(r, recipe, work, results):
    a = r.a
    path, llama_path, changes = r.make_model(recipe, "engine", work)
    ds4 = r.ds4(path, work, "engine-" + recipe)
    prompt = ds4["tokens"][:ds4["prompt_len"]]
    ll = r.llama(llama_path, prompt, work, "engine-" + recipe, "F16")
    g = common_prefix(ds4["greedy"], ll["greedy"])
    n = ds4["prompt_len"] + min(g, a.greedy - 1)      # rows whose fed tokens agree
    cmp = compare(ds4["logits"][:n], ll["logits"][:n])
    s = summary(cmp)
    s.update(greedy_match=g, greedy=a.greedy, compat_changes=changes)
    results["engine-" + recipe] = s
    tol_med, arg_min, g_min = ((a.median_tol, a.argmax_min, a.greedy_min) if recipe == "f32" else
                               (a.q_median_tol, a.q_argmax_min, 0))
    print("engine vs llama.cpp (F16 KV), %s: %d positions, rel L2 median %.3g p90 %.3g max %.3g, "
          "first > 1e-3 at %s, argmax %d/%d, greedy %d/%d identical"
          % (recipe, s["positions"], s["rel_median"], s["rel_p90"], s["rel_max"], s["first_above_1e-3"],
             s["argmax_agree"], s["positions"], g, a.greedy))
    fails = []
    if s["rel_median"] > tol_med:
        fails.append("%s: median rel L2 %.3g > %.3g" % (recipe, s["rel_median"], tol_med))
    if s["argmax_agree"] < arg_min * s["positions"]:
        fails.append("%s: argmax agrees on %d/%d positions (< %.0f %%)" % (recipe, s["argmax_agree"], s["positions"], 100 * arg_min))
    if g < min(g_min, a.greedy):
        fails.append("%s: greedy continuations differ at token %d (need %d identical)" % (recipe, g, g_min))
    return fails


def check_reference(r, work, results):
    a = r.a
    path, llama_path, changes = r.make_model("f32", "reference", work)
    ds4 = r.ds4(path, work, "reference-f32")
    prompt = ds4["tokens"][:ds4["prompt_len"]]
    ll = r.llama(llama_path, prompt, work, "reference-f32", "F32")
    fed = list(prompt) + ll["greedy"][:-1]
    t0 = time.time()
    sess = Session(Model(path), kv_f16="none", rope_f32=True, fp8_kv=False, indexer_fp4=False)
    ref = sess.prefill(fed)
    cmp = compare(ref, ll["logits"])
    s = summary(cmp)
    s.update(greedy=a.greedy, reference_seconds=time.time() - t0, compat_changes=changes)
    # The engine (FP8 KV and FP4 indexer on, f16 storage) on the same model, for information.
    ng = common_prefix(ds4["greedy"], ll["greedy"])
    n = ds4["prompt_len"] + min(ng, a.greedy - 1)
    se = summary(compare(ds4["logits"][:n], ll["logits"][:n]))
    se["greedy_match"] = ng
    results["reference-f32"] = s
    results["engine-with-fp8-f32"] = se
    print("reference (no FP8/FP4/f16) vs llama.cpp (F32 KV), f32: %d positions, rel L2 max %.3g median %.3g, "
          "argmax %d/%d (greedy %d tokens)" % (s["positions"], s["rel_max"], s["rel_median"], s["argmax_agree"],
                                                s["positions"], a.greedy))
    print("  (engine with FP8/FP4/f16 vs llama.cpp on this model: rel L2 median %.3g max %.3g, argmax %d/%d, "
          "greedy %d/%d identical)" % (se["rel_median"], se["rel_max"], se["argmax_agree"], se["positions"],
                                       ng, a.greedy))
    fails = []
    bad = np.where(cmp["rel"] > a.logits_tol)[0]
    if len(bad):
        p = int(bad[0])
        fails.append("position %d (token %d): rel L2 %.3g > %.3g" % (p, fed[p], cmp["rel"][p], a.logits_tol))
    if not cmp["argmax_equal"].all():
        p = int(np.where(~cmp["argmax_equal"])[0][0])
        fails.append("position %d: argmax differs (reference %d, llama.cpp %d)"
                     % (p, int(ref[p].argmax()), int(ll["logits"][p].argmax())))
    return fails


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("engine", "reference"), required=True)
    ap.add_argument("--make-model", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--dump-tool", required=True)
    ap.add_argument("--npm-prefix", required=True)
    ap.add_argument("--node", default="node")
    ap.add_argument("--text-file", required=True)
    ap.add_argument("--max-tokens", type=int, default=600)
    ap.add_argument("--greedy", type=int, default=64)
    ap.add_argument("--recipes", default="f32", help="engine mode: comma-separated f32,q2,q4")
    ap.add_argument("--median-tol", type=float, default=2e-3)
    ap.add_argument("--argmax-min", type=float, default=0.98)
    ap.add_argument("--greedy-min", type=int, default=64)
    ap.add_argument("--q-median-tol", type=float, default=0.1)
    ap.add_argument("--q-argmax-min", type=float, default=0.7)
    ap.add_argument("--logits-tol", type=float, default=1e-5)
    ap.add_argument("--work")
    ap.add_argument("--json")
    a = ap.parse_args(argv)

    marker = os.path.join(a.npm_prefix, "REGISTRY_UNREACHABLE")
    if os.path.exists(marker):
        with open(marker) as f:
            print("SKIPPED: node-llama-cpp is not installed: " + f.read().strip())
        return 0
    if a.max_tokens < 1 or a.greedy < 1:
        print("llama_crosscheck: error: --max-tokens and --greedy must be >= 1", file=sys.stderr)
        return 2
    recipes = [x for x in a.recipes.split(",") if x]
    if any(x not in ("f32", "q2", "q4") for x in recipes):
        print("llama_crosscheck: error: --recipes takes f32, q2, q4", file=sys.stderr)
        return 2

    tmp = None
    if a.work:
        os.makedirs(a.work, exist_ok=True)
        work = a.work
    else:
        tmp = tempfile.TemporaryDirectory(prefix="ds4-llama-")
        work = tmp.name
    r = Runner(a)
    results, fails = {}, []
    try:
        if a.mode == "engine":
            for recipe in recipes:
                if recipe == "q4" and cpu_has_amx():
                    print("SKIPPED recipe q4: this CPU has AMX, and llama.cpp's CPU backend repacks Q4_K weights "
                          "into its AMX buffers, leaving ops of this model with no backend "
                          "(GGML_ASSERT(*cur_backend_id != -1)); not a ds4 result either way")
                    continue
                fails += check_engine(r, recipe, work, results)
        else:
            fails += check_reference(r, work, results)
    except (RuntimeError, ValueError, OSError) as e:
        print("llama_crosscheck: error: %s" % e, file=sys.stderr)
        return 2
    finally:
        if tmp is not None:
            tmp.cleanup()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    for f in fails:
        print("FAIL: " + f)
    print("llama.cpp cross-check %s: %s" % (a.mode, "FAILED" if fails else "OK"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
