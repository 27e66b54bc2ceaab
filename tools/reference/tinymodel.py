"""Writes small random DeepSeek V4 GGUF models with this package's own writer.

Tensor names follow spec §2.2 exactly; metadata uses the `deepseek4.*` keys of §1.3 with
their ds4 types. Shapes are free (see TINY_SHAPE), so the same forward code runs on them.

recipe "f32": every weight F32 (tid2eid I32).
recipe "q2": the shipped "q2" type mix (§2.2): F16 embedding/HC/compressor/indexer/router,
F32 norms and small vectors, Q8_0 attention, shared experts and output, IQ2_XXS routed
gate/up, Q2_K routed down. recipe "q4": like q2 with Q4_K routed gate/up/down.
Quantized expert blocks are random bytes with scales picked for unit-variance outputs
(a valid encoding, not a fit of float weights); Q8_0 tensors quantize float weights.
"""

import numpy as np

from .gguf import GGUFWriter, T_F32, T_I32, T_U64
from .quants import quantize_q8_0

TINY_SHAPE = dict(
    n_layer=7, n_embd=256, n_vocab=512, n_head=4, head_dim=64, n_rot=16, q_lora=64,
    o_lora=32, n_out_group=2, n_expert=16, n_expert_used=3, n_ff_exp=256, n_hash_layer=3,
    n_swa=16, n_idx_head=4, idx_head_dim=32, idx_top_k=8, n_hc=4, hc_iters=20,
    compress_ratios=(0, 0, 4, 128, 4, 128, 4), swiglu_clamp=10.0,
)


def _f16(x):
    return x.astype(np.float16).view(np.uint8)


def _random_kquant_blocks(rng, type_name, n_in, n_rows, out_std):
    """Random valid blocks for Q2_K / Q4_K / IQ2_XXS rows of n_in elements (multiple of 256)
    whose dot with a unit vector has roughly `out_std` spread."""
    nb = n_rows * n_in // 256
    elem = out_std / np.sqrt(n_in)
    if type_name == "IQ2_XXS":
        blk = rng.integers(0, 256, size=(nb, 66), dtype=np.uint8)
        # |x| ~ d * 8 * 25 / 4 on average -> d = elem / 50
        blk[:, 0:2] = _f16(np.full((nb, 1), elem / 50.0)).reshape(nb, 2)
    elif type_name == "Q2_K":
        blk = rng.integers(0, 256, size=(nb, 84), dtype=np.uint8)
        blk[:, 80:82] = _f16(np.full((nb, 1), elem / 10.0)).reshape(nb, 2)
        blk[:, 82:84] = _f16(np.full((nb, 1), elem / 10.0)).reshape(nb, 2)
    elif type_name == "Q4_K":
        blk = rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
        blk[:, 0:2] = _f16(np.full((nb, 1), elem / 200.0)).reshape(nb, 2)
        blk[:, 2:4] = _f16(np.full((nb, 1), elem / 100.0)).reshape(nb, 2)
    else:
        raise ValueError("no random block generator for %s" % type_name)
    return blk.reshape(-1)


def tiny_metadata(shape):
    """List of (key, value, vtype) metadata entries for a model of `shape` (TINY_SHAPE keys)."""
    s = shape
    p = "deepseek4."
    return [
        ("general.architecture", "deepseek4", None),
        ("general.name", "ds4-reference-tiny", None),
        (p + "context_length", 4096, T_U64),
        (p + "block_count", s["n_layer"], None),
        (p + "embedding_length", s["n_embd"], None),
        (p + "vocab_size", s["n_vocab"], None),
        (p + "attention.head_count", s["n_head"], None),
        (p + "attention.head_count_kv", 1, None),
        (p + "attention.key_length", s["head_dim"], None),
        (p + "attention.value_length", s["head_dim"], None),
        (p + "rope.dimension_count", s["n_rot"], None),
        (p + "attention.q_lora_rank", s["q_lora"], None),
        (p + "attention.output_lora_rank", s["o_lora"], None),
        (p + "attention.output_group_count", s["n_out_group"], None),
        (p + "expert_count", s["n_expert"], None),
        (p + "expert_used_count", s["n_expert_used"], None),
        (p + "expert_feed_forward_length", s["n_ff_exp"], None),
        (p + "expert_shared_count", 1, None),
        (p + "hash_layer_count", s["n_hash_layer"], None),
        (p + "expert_group_count", 0, None),
        (p + "expert_group_used_count", 0, None),
        (p + "attention.sliding_window", s["n_swa"], None),
        (p + "attention.indexer.head_count", s["n_idx_head"], None),
        (p + "attention.indexer.key_length", s["idx_head_dim"], None),
        (p + "attention.indexer.top_k", s["idx_top_k"], None),
        (p + "hyper_connection.count", s["n_hc"], None),
        (p + "hyper_connection.sinkhorn_iterations", s["hc_iters"], None),
        (p + "hyper_connection.epsilon", 1e-6, None),
        (p + "attention.compress_ratios", list(s["compress_ratios"]), ("array", T_I32)),
        (p + "swiglu_clamp_exp", [float(s["swiglu_clamp"])] * s["n_layer"], ("array", T_F32)),
        (p + "rope.scaling.original_context_length", 65536, T_U64),
        (p + "rope.freq_base", 10000.0, None),
        (p + "rope.scaling.factor", 16.0, None),
        (p + "rope.scaling.yarn_beta_fast", 32.0, None),
        (p + "rope.scaling.yarn_beta_slow", 1.0, None),
        (p + "attention.compress_rope_freq_base", 160000.0, None),
        (p + "expert_weights_scale", 1.5, None),
        (p + "attention.layer_norm_rms_epsilon", 1e-6, None),
        (p + "expert_weights_norm", True, None),
    ]


def build_tiny_model(path, seed=0, recipe="f32", shape=None, drop=(), extra_metadata=(),
                     replace=None):
    """Write a random model to `path`; returns the shape dict used.

    shape: overrides of TINY_SHAPE. drop: tensor names to leave out (for error tests).
    extra_metadata: (key, value, vtype) entries appended/overriding (for error tests).
    replace: dict tensor name -> (array, type name) written instead of the random tensor
    (for error tests)."""
    replace = dict(replace or {})
    if recipe not in ("f32", "q2", "q4"):
        raise ValueError("recipe must be f32, q2 or q4")
    s = dict(TINY_SHAPE)
    s.update(shape or {})
    rng = np.random.default_rng(seed)
    E, V, NH, D = s["n_embd"], s["n_vocab"], s["n_head"], s["head_dim"]
    H = s["n_hc"]
    mix = 2 * H + H * H
    F, NE = s["n_ff_exp"], s["n_expert"]
    w = GGUFWriter()
    meta = {k: (v, t) for k, v, t in tiny_metadata(s)}
    for k, v, t in extra_metadata:
        meta[k] = (v, t)
    for k, (v, t) in meta.items():
        if v is not None:
            w.add_kv(k, v, t)

    def f16_or_f32(kind):
        if kind == "int":
            return "I32"
        if recipe == "f32":
            return "F32"
        return {"small": "F32", "dense": "F16", "attn": "Q8_0", "int": "I32"}[kind]

    def add(name, arr, kind):
        if name in drop:
            return
        if name in replace:
            w.add_tensor(name, *replace.pop(name))
            return
        t = f16_or_f32(kind)
        if t == "Q8_0":
            w.add_tensor(name, quantize_q8_0(arr), "Q8_0", dims=tuple(reversed(arr.shape)))
        else:
            w.add_tensor(name, arr, t)

    def mat(n_out, n_in, gain=1.0):
        return rng.standard_normal((n_out, n_in)) * (gain / np.sqrt(n_in))

    def norm_w(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    def hc(prefix):
        add(prefix + "_fn.weight", mat(mix, H * E, 0.5), "dense")
        add(prefix + "_scale.weight", 0.5 + 0.5 * rng.random(3), "small")
        add(prefix + "_base.weight", 0.3 * rng.standard_normal(mix), "small")

    add("token_embd.weight", rng.standard_normal((V, E)), "dense")
    for il in range(s["n_layer"]):
        b = "blk.%d." % il
        R = s["compress_ratios"][il]
        hc(b + "hc_attn")
        add(b + "attn_norm.weight", norm_w(E), "small")
        add(b + "attn_q_a.weight", mat(s["q_lora"], E), "attn")
        add(b + "attn_q_a_norm.weight", norm_w(s["q_lora"]), "small")
        add(b + "attn_q_b.weight", mat(NH * D, s["q_lora"]), "attn")
        add(b + "attn_kv.weight", mat(D, E), "attn")
        add(b + "attn_kv_a_norm.weight", norm_w(D), "small")
        add(b + "attn_sinks.weight", 0.5 * rng.standard_normal(NH), "small")
        gin = NH // s["n_out_group"] * D
        add(b + "attn_output_a.weight", mat(s["n_out_group"] * s["o_lora"], gin), "attn")
        add(b + "attn_output_b.weight", mat(E, s["n_out_group"] * s["o_lora"]), "attn")
        if R:
            cw = (2 if R == 4 else 1) * D
            add(b + "attn_compressor_ape.weight", 0.5 * rng.standard_normal((R, cw)), "dense")
            add(b + "attn_compressor_kv.weight", mat(cw, E), "dense")
            add(b + "attn_compressor_gate.weight", mat(cw, E), "dense")
            add(b + "attn_compressor_norm.weight", norm_w(D), "small")
        if R == 4:
            DI, IH = s["idx_head_dim"], s["n_idx_head"]
            add(b + "indexer.attn_q_b.weight", mat(IH * DI, s["q_lora"]), "dense")
            add(b + "indexer.proj.weight", mat(IH, E), "dense")
            add(b + "indexer_compressor_ape.weight", 0.5 * rng.standard_normal((R, 2 * DI)), "dense")
            add(b + "indexer_compressor_kv.weight", mat(2 * DI, E), "dense")
            add(b + "indexer_compressor_gate.weight", mat(2 * DI, E), "dense")
            add(b + "indexer_compressor_norm.weight", norm_w(DI), "small")
        hc(b + "hc_ffn")
        add(b + "ffn_norm.weight", norm_w(E), "small")
        add(b + "ffn_gate_inp.weight", mat(NE, E, 2.0), "dense")
        if il >= s["n_hash_layer"]:
            add(b + "exp_probs_b.bias", 0.1 * rng.standard_normal(NE), "small")
        if recipe == "f32":
            add(b + "ffn_gate_exps.weight", rng.standard_normal((NE, F, E)) / np.sqrt(E), "small")
            add(b + "ffn_up_exps.weight", rng.standard_normal((NE, F, E)) / np.sqrt(E), "small")
            add(b + "ffn_down_exps.weight", rng.standard_normal((NE, E, F)) / np.sqrt(F), "small")
        else:
            gu = "IQ2_XXS" if recipe == "q2" else "Q4_K"
            dn = "Q2_K" if recipe == "q2" else "Q4_K"
            for nm, t, n_in, n_out in (("ffn_gate_exps", gu, E, F), ("ffn_up_exps", gu, E, F),
                                       ("ffn_down_exps", dn, F, E)):
                if b + nm + ".weight" not in drop:
                    w.add_tensor(b + nm + ".weight", _random_kquant_blocks(rng, t, n_in, n_out * NE, 1.0),
                                 t, dims=(n_in, n_out, NE))
        add(b + "ffn_gate_shexp.weight", mat(F, E), "attn")
        add(b + "ffn_up_shexp.weight", mat(F, E), "attn")
        add(b + "ffn_down_shexp.weight", mat(E, F), "attn")
        if il < s["n_hash_layer"]:
            tid = np.stack([rng.permutation(NE)[:s["n_expert_used"]] for _ in range(V)])
            add(b + "ffn_gate_tid2eid.weight", tid.astype(np.int32), "int")
    add("output_hc_fn.weight", mat(H, H * E, 0.5), "dense")
    add("output_hc_scale.weight", np.array([0.7]), "small")
    add("output_hc_base.weight", 0.3 * rng.standard_normal(H), "small")
    add("output_norm.weight", norm_w(E), "small")
    add("output.weight", mat(V, E), "attn")
    if replace:
        raise ValueError("replace names unknown tensors: %s" % sorted(replace))
    w.write(path)
    return s
