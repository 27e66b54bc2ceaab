"""Rewrites a ds4 GGUF into the `deepseek4` dialect that llama.cpp loads (node-llama-cpp 3.21.1,
llama.cpp release v0.4.0). Tensor bytes, names and shapes stay as they are; only the
metadata and the tensor list change (docs/parity.md, "llama.cpp"):

1. `deepseek4.context_length` and `deepseek4.rope.scaling.original_context_length` are
   written as u32: llama.cpp rejects u64 ("key ... has wrong type u64 but expected type u32");
   ds4 writes u64 and accepts both (spec §1.3).
2. `deepseek4.expert_gating_func` = 4 (LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS) is added:
   llama.cpp requires it and refuses any other value; ds4 hard-codes sqrt(softplus) (§3.5).
3. `deepseek4.rope.scaling.type` = "yarn" is added: without it llama.cpp applies plain linear
   1/16 interpolation to every RoPE pair of the compressed layers (ext_factor 0) instead of
   ds4's YaRN ramp (§3.4.3), and logits differ by ~10 % from position 1 on.
4. `blk.{il}.exp_probs_b.bias` of the hash-routed layers (il < hash_layer_count) is dropped:
   llama.cpp creates that tensor only for score-routed layers and fails on unused tensors
   ("wrong number of tensors"); ds4 ignores the bias on hash layers (§3.5), so nothing changes.

Not rewritable here (a property of the weights' shapes, see `llama_shape_problems`): llama.cpp
applies the indexer's Hadamard transform with a matrix of the largest power of two >= 64 that
divides the indexer head size, so an indexer head of 32 (our tiny preset) aborts its graph
build (GGML_ASSERT in ggml_reshape_2d), and the Hadamard equals ds4's (one transform over the
whole head, §3.4.7) only when the head size is a power of two >= 64.

    python3 -m tools.reference.llama_compat IN.gguf OUT.gguf
"""

import sys

from . import gguf as G

GATING_SQRT_SOFTPLUS = 4
U32_KEYS = ("deepseek4.context_length", "deepseek4.rope.scaling.original_context_length")


def llama_shape_problems(reader):
    """Reasons (list of str, empty when none) why llama.cpp cannot run this ds4 GGUF's shapes."""
    problems = []
    d = reader.get("deepseek4.attention.indexer.key_length")
    if d is not None and (d < 64 or d & (d - 1)):
        problems.append("indexer head size %d: llama.cpp's indexer Hadamard needs a power of two >= 64 "
                        "(it aborts in ggml_reshape_2d below 64)" % d)
    return problems


def to_llama_cpp(src, dst):
    """Writes `dst`, the llama.cpp dialect of ds4 GGUF `src` (rules 1-4 of the module doc).

    Returns the list of changes made (str). Raises G.GGUFError for a file that is not a
    readable `deepseek4` GGUF or has shapes llama.cpp cannot run (llama_shape_problems), and
    ValueError when a u64 value does not fit u32."""
    r = G.GGUFReader(src)
    if r.get("general.architecture") != "deepseek4":
        raise G.GGUFError("%s: general.architecture is %r, expected 'deepseek4'" % (src, r.get("general.architecture")))
    problems = llama_shape_problems(r)
    if problems:
        raise G.GGUFError("%s: %s" % (src, "; ".join(problems)))
    changes = []
    w = G.GGUFWriter(r.alignment)
    for key, value in r.metadata.items():
        if key == "general.alignment":
            continue                       # written by GGUFWriter itself
        t = r.metadata_types[key]
        if key in U32_KEYS and t != G.T_U32:
            if not 0 <= value < 2 ** 32:
                raise ValueError("%s: %s = %d does not fit u32" % (src, key, value))
            changes.append("%s: %s -> u32" % (key, G.VALUE_TYPE_NAMES[t]))
            t = G.T_U32
        w.add_kv(key, value, ("array", value.item_type) if t == G.T_ARRAY else t)
    for key, value, vtype in (("deepseek4.expert_gating_func", GATING_SQRT_SOFTPLUS, G.T_U32),
                              ("deepseek4.rope.scaling.type", "yarn", G.T_STRING)):
        if key in r.metadata:
            if r.metadata[key] != value:
                raise G.GGUFError("%s: %s is %r, llama.cpp's deepseek4 needs %r" % (src, key, r.metadata[key], value))
            continue
        w.add_kv(key, value, vtype)
        changes.append("%s = %r added" % (key, value))
    n_hash = int(r.get("deepseek4.hash_layer_count", 0))
    for name, ti in r.tensors.items():
        parts = name.split(".")
        if name.endswith(".exp_probs_b.bias") and parts[0] == "blk" and int(parts[1]) < n_hash:
            changes.append("%s dropped (hash-routed layer)" % name)
            continue
        # Raw block bytes, unchanged (GGUFWriter.add_tensor would convert F32/F16 arrays).
        w._names.add(name)
        w.tensors.append((name, tuple(ti.dims), ti.type_id, bytes(r.raw(name))))
    w.write(dst)
    return changes


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python3 -m tools.reference.llama_compat IN.gguf OUT.gguf", file=sys.stderr)
        return 2
    try:
        for c in to_llama_cpp(argv[0], argv[1]):
            print(c)
    except (G.GGUFError, ValueError) as e:
        print("llama_compat: error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
