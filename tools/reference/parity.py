"""Parity of the C++ CPU forward pass (ds4-dump-logits) with this float64 reference.

  python3 -m tools.reference.parity --model M.gguf --dump-tool build/ds4-dump-logits
        (--tokens 1,2,3 | --text-file F [--max-tokens N]) [--greedy N] [--chunk N]
        [--simulate-activation-quant] [--stepwise | --free] [--logits-tol 1e-4]
        [--component-tol T] [--tie-eps 1e-4] [--work DIR] [--json OUT]

Runs the C++ dump (logits of every position, greedy continuation, the Forward trace) and the
reference Session (record=True, RoPE angles in f32 as the CPU does) on the same model and
prompt tokens (the C++ tool tokenizes --text-file; its tokens.npy is what both sides
evaluate). Three modes (guide.py explains the first two):

* default, end to end: the reference runs on its own state; only near-ties of discontinuous
  steps (FP8/FP4/f16 roundings, indexer/router top-k, greedy argmax) that the C++ run
  resolved the other way are adopted, within --tie-eps of the value's scale;
* --stepwise: additionally teacher-forced with every C++ intermediate, so each component is
  compared on identical inputs (needed with Q8 activation quantization, whose code flips
  make end-to-end runs of quantized models diverge);
* --free: no adoption at all (shows where unresolved near-ties make the runs part).

Checks (exit 1 when any fails):
* logits: relative L2 ||cpp - ref|| / ||ref|| of every position < --logits-tol;
* every traced component: largest relative L2 over layers and positions <= --component-tol
  (default: the logits tolerance);
* discrete choices: router experts (as sets) of every layer and position, indexer
  selections and compressed-row counts identical; no rounding/selection difference that is
  not a near-tie;
* greedy: the C++ continuation equals the reference's for all N tokens.

Logits and trace are compared on the positions whose fed tokens agree (the prompt plus the
greedy prefix both sides share). On failure it prints the first position, layer and
component whose value differs (relative L2 > --component-tol, or any discrete difference),
with the numbers. Exit code 0 pass, 1 parity failure, 2 bad input. A per-component table
(largest relative L2 over all layers and positions) and the adopted near-ties are always
printed; --json writes the summary numbers.
"""

import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

from .guide import Guide
from .model import Model, Session

TRACE_MAGIC = b"DS4TRACE"
DISCRETE = ("router.experts", "idx.selected", "attn.n_comp")


# ---------------------------------------------------------------------------------------
# C++ side

def read_trace(path):
    """Parse a ds4-dump-logits trace file (format in tools/dump-logits/trace_file.h).
    Returns {pos: {name: ndarray}}. Raises ValueError on a bad or truncated file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != TRACE_MAGIC or len(data) < 12:
        raise ValueError("%s: not a DS4TRACE file" % path)
    (version,) = struct.unpack_from("<I", data, 8)
    if version != 1:
        raise ValueError("%s: trace version %d, expected 1" % (path, version))
    out = {}
    off = 12
    try:
        while off < len(data):
            (nlen,) = struct.unpack_from("<I", data, off)
            off += 4
            name = data[off:off + nlen].decode("utf-8")
            if len(name.encode("utf-8")) != nlen:
                raise struct.error("name")
            off += nlen
            pos, dtype, ndim, _ = struct.unpack_from("<qBBH", data, off)
            off += 12
            dims = struct.unpack_from("<%dq" % ndim, data, off)
            off += 8 * ndim
            count = int(np.prod(dims)) if ndim else 1
            if dtype not in (0, 1) or off + 4 * count > len(data):
                raise struct.error("data")
            arr = np.frombuffer(data, dtype="<f4" if dtype == 0 else "<i4", count=count, offset=off)
            off += 4 * count
            out.setdefault(pos, {})[name] = arr.reshape(dims)
    except struct.error:
        raise ValueError("%s: truncated or corrupt record at byte %d" % (path, off))
    return out


def run_cpp(tool, model, work, tokens=None, text_file=None, max_tokens=0, greedy=0, chunk=0,
            trace=True, threads=0):
    """Run ds4-dump-logits into `work`; returns dict(tokens, logits, greedy, prompt_len, trace)."""
    cmd = [tool, "-m", model, "-o", work, "--greedy", str(greedy), "--chunk", str(chunk),
           "--threads", str(threads)]
    if tokens is not None:
        cmd += ["--tokens", ",".join(str(t) for t in tokens)]
    else:
        cmd += ["--text-file", text_file, "--max-tokens", str(max_tokens)]
    if trace:
        cmd.append("--trace")
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (tool, res.returncode, res.stderr.strip()))
    with open(os.path.join(work, "meta.json")) as f:
        meta = json.load(f)
    out = {"tokens": np.load(os.path.join(work, "tokens.npy")).astype(np.int64),
           "logits": np.load(os.path.join(work, "logits.npy")),
           "prompt_len": int(meta["prompt_len"]),
           "greedy": (np.load(os.path.join(work, "greedy.npy")).astype(np.int64) if greedy
                      else np.zeros(0, dtype=np.int64)),
           "trace": read_trace(os.path.join(work, "trace.bin")) if trace else {}}
    return out


# ---------------------------------------------------------------------------------------
# reference side

def run_reference(model_path, prompt, greedy=0, simulate=False, record=True, guide=None,
                  other_greedy=None):
    """Prefill `prompt` token by token, then `greedy` greedy steps (the last generated token is
    not fed). With a guide (guide.Guide over the C++ trace), near-tie roundings, selections
    and greedy tokens (other_greedy: the C++ continuation) follow the C++ run.
    Returns dict(tokens, logits [n_fed, vocab], greedy, trace)."""
    sess = Session(Model(model_path), simulate_activation_quant=simulate, kv_f16="cpu",
                   record=record, rope_f32=True, guide=guide)
    logits = list(sess.prefill(list(prompt)))
    fed = list(int(t) for t in prompt)
    gen = []
    for i in range(greedy):
        nxt = int(np.argmax(logits[-1]))
        if guide is not None and other_greedy is not None and i < len(other_greedy):
            nxt = guide.token(len(fed) - 1, logits[-1], nxt, int(other_greedy[i]))
        gen.append(nxt)
        if i + 1 < greedy:
            logits.append(sess.decode(nxt))
            fed.append(nxt)
    return {"tokens": np.array(fed, dtype=np.int64), "logits": np.stack(logits),
            "greedy": np.array(gen, dtype=np.int64), "trace": sess.trace}


# ---------------------------------------------------------------------------------------
# comparison

def rel_l2(c, r):
    c = np.asarray(c, dtype=np.float64).reshape(-1)
    r = np.asarray(r, dtype=np.float64).reshape(-1)
    den = np.linalg.norm(r)
    num = np.linalg.norm(c - r)
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return float(num / den)


def component(name):
    """'l4.attn.kv' -> ('attn.kv', 4); 'logits' -> ('logits', None)."""
    m = re.match(r"l(\d+)\.(.*)$", name)
    return (m.group(2), int(m.group(1))) if m else (name, None)


def compare_value(name, ref, cpp, ref_rec, cpp_rec):
    """Returns (discrete_equal or None, rel_l2 or None, detail string) for one trace entry."""
    comp, il = component(name)
    if comp == "router.experts":
        ok = sorted(ref.tolist()) == sorted(np.asarray(cpp).tolist())
        return ok, None, "ref %s cpp %s" % (ref.tolist(), np.asarray(cpp).tolist())
    if comp in ("idx.selected", "attn.n_comp"):
        r, c = np.asarray(ref).reshape(-1), np.asarray(cpp).reshape(-1)
        ok = r.shape == c.shape and bool(np.all(r == c))
        if ok:
            return True, None, ""
        if comp == "attn.n_comp":
            return False, None, "ref %s cpp %s" % (r.tolist(), c.tolist())
        rs, cs = set(r.tolist()), set(c.tolist())
        return False, None, "only ref %s, only cpp %s" % (sorted(rs - cs), sorted(cs - rs))
    cpp = np.asarray(cpp, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if comp in ("router.weights", "ffn.expert_mid", "ffn.expert_out"):
        # Align the C++ rows to the reference's selection order by expert id.
        key = "l%d.router.experts" % il
        re_, ce = list(ref_rec[key]), list(cpp_rec[key])
        if sorted(re_) != sorted(ce):
            return None, None, "experts differ"
        cpp = cpp[[ce.index(e) for e in re_]]
    if cpp.size != ref.size:
        return False, None, "shape ref %s cpp %s" % (ref.shape, cpp.shape)
    cpp = cpp.reshape(ref.shape)
    err = rel_l2(cpp, ref)
    d = np.abs(cpp - ref).reshape(-1)
    i = int(np.argmax(d)) if d.size else 0
    idx = np.unravel_index(i, ref.shape) if ref.ndim else ()
    detail = "max |diff| %.3g at %s: ref %.9g cpp %.9g" % (
        d[i] if d.size else 0.0, tuple(int(x) for x in idx), ref.reshape(-1)[i] if ref.size else 0,
        cpp.reshape(-1)[i] if cpp.size else 0)
    return None, err, detail


def guide_summary(guide):
    """Adoptions of a guided run per (kind, component): count, elements changed, largest
    relative distance to the tie; plus the refused differences."""
    if guide is None:
        return None
    by = {}
    for e in guide.events:
        key = "%s %s" % (e["kind"], component(e["name"])[0])
        v = by.setdefault(key, {"count": 0, "changed": 0, "max_need": 0.0, "first_pos": e["pos"]})
        v["count"] += 1
        v["changed"] += e["changed"]
        v["max_need"] = max(v["max_need"], e["need"])
    return {"eps": guide.eps, "adopted": by,
            "refused": [{"pos": p, "name": n, "kind": k} for p, n, k in guide.refused]}


def compare(cpp, ref, logits_tol, component_tol, expect_greedy, guide=None):
    """Compare the two runs; returns a summary dict (see keys below)."""
    n_greedy = len(ref["greedy"])
    match = 0
    while match < min(n_greedy, len(cpp["greedy"])) and cpp["greedy"][match] == ref["greedy"][match]:
        match += 1
    n_common = 0
    for a, b in zip(cpp["tokens"], ref["tokens"]):
        if a != b:
            break
        n_common += 1
    lc = cpp["logits"][:n_common].astype(np.float64)
    lr = ref["logits"][:n_common]
    rel = np.linalg.norm(lc - lr, axis=1) / np.linalg.norm(lr, axis=1)
    argmax_agree = int(np.sum(lc.argmax(axis=1) == lr.argmax(axis=1)))

    failures = []
    by_component = {}      # comp -> [max rel, pos, name]
    discrete_bad = {}      # comp -> count
    discrete_total = {}
    first = None
    name_mismatch = 0
    for pos in range(n_common):
        ref_rec = ref["trace"][pos] if ref["trace"] else {}
        cpp_rec = cpp["trace"].get(pos, {})
        for name, rv in ref_rec.items():
            comp, il = component(name)
            if name not in cpp_rec:
                name_mismatch += 1
                if first is None:
                    first = (pos, name, "missing in the C++ trace", None)
                continue
            ok, err, detail = compare_value(name, rv, cpp_rec[name], ref_rec, cpp_rec)
            if comp in DISCRETE:
                discrete_total[comp] = discrete_total.get(comp, 0) + 1
                if not ok:
                    discrete_bad[comp] = discrete_bad.get(comp, 0) + 1
                    if first is None:
                        first = (pos, name, detail, None)
                continue
            if err is None:
                continue
            cur = by_component.setdefault(comp, [0.0, -1, ""])
            if err > cur[0]:
                by_component[comp] = [err, pos, name]
            if err > component_tol and first is None:
                first = (pos, name, detail, err)
        extra = set(cpp_rec) - set(ref_rec)
        name_mismatch += len(extra)
        if extra and first is None:
            first = (pos, sorted(extra)[0], "only in the C++ trace", None)

    max_rel = float(rel.max()) if n_common else 0.0
    if n_common == 0:
        failures.append("no common positions")
    if max_rel >= logits_tol:
        worst = int(rel.argmax())
        first_bad = int(np.argmax(rel >= logits_tol))
        failures.append("logits relative L2 %.3g >= %.3g (first at position %d: %.3g; worst position %d)"
                        % (max_rel, logits_tol, first_bad, rel[first_bad], worst))
    if name_mismatch:
        failures.append("%d trace entries are present on one side only" % name_mismatch)
    over = sorted((v[0], k, v[1], v[2]) for k, v in by_component.items() if v[0] > component_tol)
    if over:
        failures.append("%d components exceed relative L2 %.3g: %s%s" % (
            len(over), component_tol,
            ", ".join("%s %.3g (%s, position %d)" % (k, e, n, p) for e, k, p, n in over[::-1][:5]),
            ", ..." if len(over) > 5 else ""))
    for comp, cnt in sorted(discrete_bad.items()):
        failures.append("%s differs at %d of %d (layer, position) entries" % (comp, cnt, discrete_total[comp]))
    if expect_greedy and match < n_greedy:
        s = match
        gap = lambda row: float(np.sort(row)[-1] - np.sort(row)[-2])
        pos = cpp["prompt_len"] + s - 1
        failures.append("greedy continuation differs at step %d: ref %d cpp %d (top-2 gap at position "
                        "%d: ref %.3g, cpp %.3g)" % (s, ref["greedy"][s], cpp["greedy"][s], pos,
                                                     gap(ref["logits"][pos]), gap(cpp["logits"][pos])))
    gs = guide_summary(guide)
    if gs is not None and gs["refused"]:
        r0 = gs["refused"][0]
        failures.append("%d differences at roundings/selections are not near-ties (first: %s at "
                        "position %d)" % (len(gs["refused"]), r0["name"], r0["pos"]))
    return {
        "guide": gs,
        "positions": n_common,
        "prompt_len": cpp["prompt_len"],
        "logits_rel_l2_max": max_rel,
        "logits_rel_l2_mean": float(rel.mean()) if n_common else 0.0,
        "logits_rel_l2_worst_pos": int(rel.argmax()) if n_common else -1,
        "argmax_agree": argmax_agree,
        "greedy_n": n_greedy,
        "greedy_match": match,
        "discrete_total": discrete_total,
        "discrete_bad": discrete_bad,
        "components": {k: {"max_rel_l2": v[0], "pos": v[1], "name": v[2]} for k, v in by_component.items()},
        "first_divergence": None if first is None else {
            "pos": first[0], "name": first[1], "detail": first[2], "rel_l2": first[3]},
        "failures": failures,
    }


def report(s, ref_tokens, logits_tol, component_tol, out=sys.stdout):
    p = lambda *a: print(*a, file=out)
    p("positions compared: %d (prompt %d), greedy match %d/%d, argmax agreement %d/%d"
      % (s["positions"], s["prompt_len"], s["greedy_match"], s["greedy_n"], s["argmax_agree"],
         s["positions"]))
    p("logits relative L2: max %.3g (position %d), mean %.3g, tolerance %.3g"
      % (s["logits_rel_l2_max"], s["logits_rel_l2_worst_pos"], s["logits_rel_l2_mean"], logits_tol))
    for comp in sorted(s["discrete_total"]):
        p("  %-16s identical at %d/%d (layer, position) entries"
          % (comp, s["discrete_total"][comp] - s["discrete_bad"].get(comp, 0), s["discrete_total"][comp]))
    p("largest relative L2 per component (over layers and positions):")
    for comp, v in sorted(s["components"].items(), key=lambda kv: -kv[1]["max_rel_l2"]):
        if v["pos"] < 0:
            p("  %-16s 0  (identical everywhere)" % comp)
        else:
            p("  %-16s %.3g  (%s at position %d)" % (comp, v["max_rel_l2"], v["name"], v["pos"]))
    g = s.get("guide")
    if g is not None:
        if g["adopted"]:
            p("near-ties resolved as the C++ run did (eps %.3g of the value's scale):" % g["eps"])
            for key, v in sorted(g["adopted"].items()):
                p("  %-24s %4d times (%d values), largest distance to the tie %.3g, first at position %d"
                  % (key, v["count"], v["changed"], v["max_need"], v["first_pos"]))
        else:
            p("no near-ties needed resolving (eps %.3g)" % g["eps"])
    if s["failures"]:
        p("PARITY FAILED:")
        for f in s["failures"]:
            p("  " + f)
        fd = s["first_divergence"]
        if fd is not None:
            comp, il = component(fd["name"])
            where = "layer %d, %s" % (il, comp) if il is not None else comp
            err = "" if fd["rel_l2"] is None else "relative L2 %.3g > %.3g; " % (fd["rel_l2"], component_tol)
            p("  first divergence: position %d (token %d), %s: %s%s"
              % (fd["pos"], ref_tokens[fd["pos"]], where, err, fd["detail"]))
    else:
        p("PARITY OK")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m tools.reference.parity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dump-tool", required=True, help="path of ds4-dump-logits")
    ap.add_argument("--tokens", help="comma-separated prompt token ids")
    ap.add_argument("--text-file", help="text the C++ tool tokenizes into the prompt")
    ap.add_argument("--max-tokens", type=int, default=0, help="prompt length cut for --text-file")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=0, help="C++ prefill chunk (0 = whole prompt)")
    ap.add_argument("--threads", type=int, default=0, help="C++ threads (0 = all cores)")
    ap.add_argument("--simulate-activation-quant", action="store_true")
    ap.add_argument("--logits-tol", type=float, default=1e-4)
    ap.add_argument("--component-tol", type=float, default=None)
    ap.add_argument("--tie-eps", type=float, default=1e-4,
                    help="near-tie width, relative to the scale of the rounded vector / scores")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--free", action="store_true",
                      help="free-running reference: do not resolve near-ties as the C++ run did")
    mode.add_argument("--stepwise", action="store_true",
                      help="teacher-force the reference with every C++ intermediate, so each "
                           "component is compared on identical inputs")
    ap.add_argument("--work", help="keep the C++ outputs in this directory")
    ap.add_argument("--json", help="write the summary to this JSON file")
    a = ap.parse_args(argv)
    if (a.tokens is None) == (a.text_file is None):
        ap.error("give exactly one of --tokens and --text-file")
    if a.greedy < 0 or a.max_tokens < 0:
        ap.error("--greedy and --max-tokens must be >= 0")
    component_tol = a.component_tol if a.component_tol is not None else a.logits_tol
    tokens = None
    if a.tokens is not None:
        try:
            tokens = [int(t) for t in a.tokens.split(",") if t.strip()]
        except ValueError:
            ap.error("--tokens must be comma-separated integers")
    try:
        with tempfile.TemporaryDirectory(prefix="ds4-parity-") as tmp:
            work = a.work or tmp
            cpp = run_cpp(a.dump_tool, a.model, work, tokens=tokens, text_file=a.text_file,
                          max_tokens=a.max_tokens, greedy=a.greedy, chunk=a.chunk, threads=a.threads)
        prompt = cpp["tokens"][:cpp["prompt_len"]]
        guide = None if a.free else Guide(cpp["trace"], a.tie_eps, force=a.stepwise)
        ref = run_reference(a.model, prompt, greedy=a.greedy, simulate=a.simulate_activation_quant,
                            guide=guide, other_greedy=cpp["greedy"])
    except (RuntimeError, ValueError, OSError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    s = compare(cpp, ref, a.logits_tol, component_tol, expect_greedy=a.greedy > 0, guide=guide)
    report(s, ref["tokens"], a.logits_tol, component_tol)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    return 1 if s["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
