"""Model configuration from GGUF metadata and tensor-layout validation (spec §1, §2.2).

Unlike ds4, which validates the metadata against the fixed DeepSeek V4 Flash constants,
the reference reads every shape from the `deepseek4.*` keys so that tiny test models of
other shapes run through the same code. The key *types* follow ds4's rules (§1.3).
"""

import math

from .gguf import (GGUFArray, GGUFError, T_ARRAY, T_BOOL, T_F32, T_F64, T_I32, T_U32, T_U64)
from .ops import RopeParams, yarn_corr_dims
from .quants import SUPPORTED_WEIGHT_TYPES

P = "deepseek4."


def _req(reader, key, allowed, what):
    if key not in reader.metadata:
        raise GGUFError("%s: required metadata key %s missing" % (reader.path, key))
    t = reader.metadata_types[key]
    if t not in allowed:
        raise GGUFError("%s: metadata key %s has type %d, expected %s" % (reader.path, key, t, what))
    return reader.metadata[key]


def _u32(r, key):
    return int(_req(r, key, (T_U32,), "u32"))


def _u64(r, key):
    return int(_req(r, key, (T_U64, T_U32), "u64 or u32"))


def _f32(r, key):
    return float(_req(r, key, (T_F32, T_F64, T_U32, T_I32), "f32, f64, u32 or i32"))


def _bool(r, key):
    return bool(_req(r, key, (T_BOOL,), "bool"))


def _array(r, key, item_types, n_min, what):
    v = _req(r, key, (T_ARRAY,), "array")
    if not isinstance(v, GGUFArray) or v.item_type not in item_types:
        raise GGUFError("%s: metadata key %s must be an array of %s" % (r.path, key, what))
    if len(v) < n_min:
        raise GGUFError("%s: metadata key %s has %d items, expected >= %d" % (r.path, key, len(v), n_min))
    return v.tolist()


class Config:
    """All hyperparameters of one model (spec §1.1-1.4), read from metadata.

    Attributes (names follow the spec): n_layer, n_embd, n_vocab, n_head, head_dim (=key =
    value length), n_rot, n_nope, q_lora, o_lora, n_out_group, n_expert, n_expert_used,
    n_ff_exp, n_expert_shared, n_hash_layer, n_swa, n_idx_head, idx_head_dim, idx_top_k,
    n_hc, hc_iters, hc_eps, compress_ratios (list[int], len n_layer), swiglu_clamp
    (list[float]), rope_orig_ctx, rope_base, rope_scale, yarn_beta_fast, yarn_beta_slow,
    compress_rope_base, expert_weight_scale, rms_eps, expert_weights_norm.

    Raises GGUFError on a missing key, a wrong key type, or an inconsistent shape.
    """

    @classmethod
    def from_gguf(cls, r):
        c = cls()
        c.n_layer = _u32(r, P + "block_count")
        c.n_embd = _u32(r, P + "embedding_length")
        c.n_vocab = _u32(r, P + "vocab_size")
        c.n_head = _u32(r, P + "attention.head_count")
        c.n_head_kv = _u32(r, P + "attention.head_count_kv")
        c.head_dim = _u32(r, P + "attention.key_length")
        c.value_dim = _u32(r, P + "attention.value_length")
        c.n_rot = _u32(r, P + "rope.dimension_count")
        c.q_lora = _u32(r, P + "attention.q_lora_rank")
        c.o_lora = _u32(r, P + "attention.output_lora_rank")
        c.n_out_group = _u32(r, P + "attention.output_group_count")
        c.n_expert = _u32(r, P + "expert_count")
        c.n_expert_used = _u32(r, P + "expert_used_count")
        c.n_ff_exp = _u32(r, P + "expert_feed_forward_length")
        c.n_expert_shared = _u32(r, P + "expert_shared_count")
        c.n_hash_layer = _u32(r, P + "hash_layer_count")
        for k in ("expert_group_count", "expert_group_used_count"):
            if P + k in r.metadata and _u32(r, P + k) != 0:
                raise GGUFError("%s: %s%s must be 0 (no group routing)" % (r.path, P, k))
        c.n_swa = _u32(r, P + "attention.sliding_window")
        c.n_idx_head = _u32(r, P + "attention.indexer.head_count")
        c.idx_head_dim = _u32(r, P + "attention.indexer.key_length")
        c.idx_top_k = _u32(r, P + "attention.indexer.top_k")
        c.n_hc = _u32(r, P + "hyper_connection.count")
        c.hc_iters = _u32(r, P + "hyper_connection.sinkhorn_iterations")
        c.hc_eps = _f32(r, P + "hyper_connection.epsilon")
        c.compress_ratios = [int(x) for x in _array(
            r, P + "attention.compress_ratios", (T_I32, T_U32), c.n_layer, "i32/u32")][:c.n_layer]
        c.swiglu_clamp = [float(x) for x in _array(
            r, P + "swiglu_clamp_exp", (T_F32, T_F64), c.n_layer, "f32/f64")][:c.n_layer]
        c.rope_orig_ctx = _u64(r, P + "rope.scaling.original_context_length")
        c.rope_base = _f32(r, P + "rope.freq_base")
        c.rope_scale = _f32(r, P + "rope.scaling.factor")
        c.yarn_beta_fast = _f32(r, P + "rope.scaling.yarn_beta_fast")
        c.yarn_beta_slow = _f32(r, P + "rope.scaling.yarn_beta_slow")
        c.compress_rope_base = _f32(r, P + "attention.compress_rope_freq_base")
        c.expert_weight_scale = _f32(r, P + "expert_weights_scale")
        c.rms_eps = _f32(r, P + "attention.layer_norm_rms_epsilon")
        c.expert_weights_norm = _bool(r, P + "expert_weights_norm")
        c._check(r.path)
        return c

    def _check(self, path):
        def bad(msg):
            raise GGUFError("%s: inconsistent model shape: %s" % (path, msg))
        positive = ("n_layer", "n_embd", "n_vocab", "n_head", "head_dim", "n_rot", "q_lora",
                    "o_lora", "n_out_group", "n_expert", "n_expert_used", "n_ff_exp", "n_swa",
                    "n_hc", "hc_iters")
        for k in positive:
            if getattr(self, k) <= 0:
                bad("%s must be > 0" % k)
        if self.n_head_kv != 1:
            bad("attention.head_count_kv must be 1 (single shared KV row), got %d" % self.n_head_kv)
        if self.value_dim != self.head_dim:
            bad("value_length %d != key_length %d (K = V)" % (self.value_dim, self.head_dim))
        if self.n_rot % 2 or self.n_rot > self.head_dim:
            bad("rope.dimension_count %d must be even and <= key_length %d" % (self.n_rot, self.head_dim))
        if self.n_head % self.n_out_group:
            bad("head_count %d not divisible by output_group_count %d" % (self.n_head, self.n_out_group))
        if self.n_expert_used > self.n_expert:
            bad("expert_used_count %d > expert_count %d" % (self.n_expert_used, self.n_expert))
        if self.n_expert_shared not in (0, 1):
            bad("expert_shared_count must be 0 or 1, got %d" % self.n_expert_shared)
        if self.n_hash_layer > self.n_layer:
            bad("hash_layer_count %d > block_count %d" % (self.n_hash_layer, self.n_layer))
        for il, r in enumerate(self.compress_ratios):
            if r < 0:
                bad("compress_ratios[%d] = %d is negative" % (il, r))
        for il, v in enumerate(self.swiglu_clamp):
            if not v > 0:
                bad("swiglu_clamp_exp[%d] = %g must be > 0" % (il, v))
        if any(r == 4 for r in self.compress_ratios):
            d = self.idx_head_dim
            if self.n_idx_head <= 0 or d <= 0 or self.idx_top_k <= 0:
                bad("ratio-4 layers need indexer head_count, key_length and top_k > 0")
            if d & (d - 1) or d % 32:
                bad("indexer key_length %d must be a power of two and a multiple of 32" % d)
            if self.n_rot > d:
                bad("rope.dimension_count %d > indexer key_length %d" % (self.n_rot, d))
        if self.rope_scale <= 0 or self.rope_base <= 1 or self.compress_rope_base <= 1:
            bad("RoPE bases must be > 1 and the scaling factor > 0")

    # -- derived ----------------------------------------------------------------------
    @property
    def n_nope(self):
        return self.head_dim - self.n_rot

    @property
    def hc_dim(self):
        return self.n_hc * self.n_embd

    @property
    def hc_mix(self):
        return 2 * self.n_hc + self.n_hc * self.n_hc

    @property
    def heads_per_group(self):
        return self.n_head // self.n_out_group

    def ratio(self, il):
        return self.compress_ratios[il]

    @staticmethod
    def coff(ratio):
        """Compressor overlap factor: 2 for ratio 4 (overlapping windows), else 1."""
        return 2 if ratio == 4 else 1

    def has_indexer(self, il):
        return self.compress_ratios[il] == 4

    def rope(self, il, f32_angles=False):
        """RopeParams of layer il (spec §3.4.3): ratio-0 layers use rope.freq_base without
        YaRN; compressed layers use compress_rope_freq_base with the YaRN blend.
        f32_angles: see RopeParams."""
        if self.compress_ratios[il] == 0:
            return RopeParams(self.n_rot, self.rope_base, f32_angles=f32_angles)
        low, high = yarn_corr_dims(self.n_rot, self.compress_rope_base, self.rope_orig_ctx,
                                   self.yarn_beta_fast, self.yarn_beta_slow)
        return RopeParams(self.n_rot, self.compress_rope_base, (1.0 / self.rope_scale, low, high),
                          f32_angles=f32_angles)

    @property
    def attn_scale(self):
        return 1.0 / math.sqrt(self.head_dim)

    @property
    def idx_scale(self):
        return 1.0 / math.sqrt(self.n_idx_head * self.idx_head_dim)

    # -- tensor layout (spec §2.2) ----------------------------------------------------
    def expected_tensors(self):
        """dict name -> (GGUF dims, allowed type names, required) for every tensor."""
        E, V, NH, D = self.n_embd, self.n_vocab, self.n_head, self.head_dim
        F, NE = self.n_ff_exp, self.n_expert
        fl = ("F32", "F16", "BF16", "Q8_0", "Q2_K", "Q4_K", "IQ2_XXS")
        t = {
            "token_embd.weight": ((E, V), fl, True),
            "output_hc_fn.weight": ((self.hc_dim, self.n_hc), fl, True),
            "output_hc_scale.weight": ((1,), fl, True),
            "output_hc_base.weight": ((self.n_hc,), fl, True),
            "output_norm.weight": ((E,), fl, True),
            "output.weight": ((E, V), fl, True),
        }
        for il in range(self.n_layer):
            b = "blk.%d." % il
            R = self.compress_ratios[il]
            lt = {
                "hc_attn_fn.weight": (self.hc_dim, self.hc_mix), "hc_attn_scale.weight": (3,),
                "hc_attn_base.weight": (self.hc_mix,), "attn_norm.weight": (E,),
                "attn_q_a.weight": (E, self.q_lora), "attn_q_a_norm.weight": (self.q_lora,),
                "attn_q_b.weight": (self.q_lora, NH * D), "attn_kv.weight": (E, D),
                "attn_kv_a_norm.weight": (D,), "attn_sinks.weight": (NH,),
                "attn_output_a.weight": (self.heads_per_group * D, self.n_out_group * self.o_lora),
                "attn_output_b.weight": (self.n_out_group * self.o_lora, E),
                "hc_ffn_fn.weight": (self.hc_dim, self.hc_mix), "hc_ffn_scale.weight": (3,),
                "hc_ffn_base.weight": (self.hc_mix,), "ffn_norm.weight": (E,),
                "ffn_gate_inp.weight": (E, NE),
                "ffn_gate_exps.weight": (E, F, NE), "ffn_up_exps.weight": (E, F, NE),
                "ffn_down_exps.weight": (F, E, NE),
            }
            if self.n_expert_shared:
                lt.update({"ffn_gate_shexp.weight": (E, F), "ffn_up_shexp.weight": (E, F),
                           "ffn_down_shexp.weight": (F, E)})
            if R:
                w = self.coff(R) * D
                lt.update({"attn_compressor_ape.weight": (w, R), "attn_compressor_kv.weight": (E, w),
                           "attn_compressor_gate.weight": (E, w), "attn_compressor_norm.weight": (D,)})
            if R == 4:
                DI = self.idx_head_dim
                wi = self.coff(R) * DI
                lt.update({"indexer.attn_q_b.weight": (self.q_lora, self.n_idx_head * DI),
                           "indexer.proj.weight": (E, self.n_idx_head),
                           "indexer_compressor_ape.weight": (wi, R),
                           "indexer_compressor_kv.weight": (E, wi),
                           "indexer_compressor_gate.weight": (E, wi),
                           "indexer_compressor_norm.weight": (DI,)})
            for k, dims in lt.items():
                t[b + k] = (dims, fl, True)
            t[b + "exp_probs_b.bias"] = ((NE,), fl, False)
            if il < self.n_hash_layer:
                t[b + "ffn_gate_tid2eid.weight"] = ((self.n_expert_used, V), ("I32",), True)
        return t

    def validate_tensors(self, reader):
        """Check that every required tensor exists with exactly the expected GGUF dims and a
        supported type; routed gate and up must share a type. GGUFError otherwise."""
        for name, (dims, types, required) in self.expected_tensors().items():
            if name not in reader.tensors:
                if required:
                    raise GGUFError("%s: required tensor %s %s missing" % (reader.path, name, list(dims)))
                continue
            ti = reader.tensors[name]
            if ti.dims != tuple(dims):
                raise GGUFError("%s: tensor %s has shape %s, expected %s"
                                % (reader.path, name, list(ti.dims), list(dims)))
            if ti.type_name not in types or ti.type_name not in SUPPORTED_WEIGHT_TYPES:
                raise GGUFError("%s: tensor %s has type %s, expected one of %s"
                                % (reader.path, name, ti.type_name, ", ".join(types)))
        for il in range(self.n_layer):
            g = reader.tensors["blk.%d.ffn_gate_exps.weight" % il].type_name
            u = reader.tensors["blk.%d.ffn_up_exps.weight" % il].type_name
            if g != u:
                raise GGUFError("%s: layer %d routed gate (%s) and up (%s) types differ" % (reader.path, il, g, u))
