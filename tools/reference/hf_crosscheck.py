"""Cross-check with transformers' `DeepseekV4ForCausalLM` (transformers 5.17, torch 2.11; run on
the device machine, whose image has both) on a tiny f32 GGUF of the ds4 layout.

  python3 -m tools.reference.hf_crosscheck --model M.gguf --ds4-dir DIR [--reference]
      [--device cuda] [--json OUT]

--ds4-dir: a ds4-dump-logits output folder for the same model (tokens.npy, logits.npy,
greedy.npy, meta.json). The transformers model is built from the GGUF metadata
(`hf_config`), its state dict is filled with our tensors (`hf_state_dict`, every parameter
and persistent buffer of the model must be covered, nothing may be left over) and it is run
once, without a cache, on the tokens ds4 fed (prompt + greedy[:-1]) in float64.

Compared (logits with each position's mean removed, relative L2 per position):
* transformers vs ds4's engine (FP8 KV / FP4 indexer / f16 cache simulation on);
* with --reference: transformers vs this float64 reference with those three simulations
  off (Session(kv_f16="none", fp8_kv=False, indexer_fp4=False)), which is what
  transformers computes (docs/parity.md, "transformers");
* greedy: transformers' argmax after the prompt and after each fed greedy token equals
  ds4's greedy tokens (so a greedy run of transformers would give the same continuation).
Prints the numbers and writes them to --json. Exit 0 after a completed comparison (the
numbers are the result; docs/parity.md records them), 2 when the model cannot be built.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from . import gguf as G

RATIO_TO_LAYER_TYPE = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def md(r, key):
    v = r.get("deepseek4." + key)
    if v is None:
        raise G.GGUFError("%s: metadata deepseek4.%s missing" % (r.path, key))
    return v.tolist() if isinstance(v, G.GGUFArray) else v


def hf_config_kwargs(r):
    """DeepseekV4Config keyword arguments from ds4 GGUF metadata (spec §1.3)."""
    n_layer = int(md(r, "block_count"))
    ratios = [int(x) for x in md(r, "attention.compress_ratios")[:n_layer]]
    clamp = [float(x) for x in md(r, "swiglu_clamp_exp")[:n_layer]]
    if len(set(clamp)) != 1:
        raise G.GGUFError("%s: per-layer swiglu clamps %s; transformers has one swiglu_limit" % (r.path, clamp))
    head_dim = int(md(r, "attention.key_length"))
    n_hash = int(md(r, "hash_layer_count"))
    return dict(
        vocab_size=int(md(r, "vocab_size")), hidden_size=int(md(r, "embedding_length")),
        moe_intermediate_size=int(md(r, "expert_feed_forward_length")), num_hidden_layers=n_layer,
        num_attention_heads=int(md(r, "attention.head_count")),
        num_key_value_heads=int(md(r, "attention.head_count_kv")), head_dim=head_dim,
        q_lora_rank=int(md(r, "attention.q_lora_rank")),
        partial_rotary_factor=int(md(r, "rope.dimension_count")) / head_dim,
        num_experts_per_tok=int(md(r, "expert_used_count")), n_routed_experts=int(md(r, "expert_count")),
        n_shared_experts=int(md(r, "expert_shared_count")), scoring_func="sqrtsoftplus",
        norm_topk_prob=bool(md(r, "expert_weights_norm")),
        routed_scaling_factor=float(md(r, "expert_weights_scale")),
        max_position_embeddings=int(md(r, "context_length")), rope_theta=float(md(r, "rope.freq_base")),
        layer_types=[RATIO_TO_LAYER_TYPE[x] for x in ratios],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        compress_rope_theta=float(md(r, "attention.compress_rope_freq_base")),
        hc_mult=int(md(r, "hyper_connection.count")),
        hc_sinkhorn_iters=int(md(r, "hyper_connection.sinkhorn_iterations")),
        hc_eps=float(md(r, "hyper_connection.epsilon")),
        mlp_layer_types=["hash_moe" if i < n_hash else "moe" for i in range(n_layer)],
        swiglu_limit=clamp[0], sliding_window=int(md(r, "attention.sliding_window")),
        o_groups=int(md(r, "attention.output_group_count")), o_lora_rank=int(md(r, "attention.output_lora_rank")),
        index_n_heads=int(md(r, "attention.indexer.head_count")),
        index_head_dim=int(md(r, "attention.indexer.key_length")),
        index_topk=int(md(r, "attention.indexer.top_k")), num_nextn_predict_layers=0,
        rms_norm_eps=float(md(r, "attention.layer_norm_rms_epsilon")), tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "factor": float(md(r, "rope.scaling.factor")),
                         "original_max_position_embeddings": int(md(r, "rope.scaling.original_context_length")),
                         "beta_fast": float(md(r, "rope.scaling.yarn_beta_fast")),
                         "beta_slow": float(md(r, "rope.scaling.yarn_beta_slow"))},
    )


def hf_state_dict(r):
    """{transformers parameter name: float64/int64 numpy array} for every tensor of the GGUF.

    GGUF [in, out] weights read as numpy [out, in], which is torch's Linear layout. Routed
    experts: gate_up_proj [E, 2*I, H] = concat(gate [E, I, H], up [E, I, H]) on axis 1,
    down_proj [E, H, I]; tid2eid [vocab, n_used] (int64). Raises G.GGUFError for a tensor that
    has no transformers counterpart."""
    sd = {}
    used = set()

    def t(name):
        used.add(name)
        return r.tensor(name)

    sd["model.embed_tokens.weight"] = t("token_embd.weight")
    sd["lm_head.weight"] = t("output.weight")
    sd["model.norm.weight"] = t("output_norm.weight")
    sd["model.hc_head.hc_fn"] = t("output_hc_fn.weight")
    sd["model.hc_head.hc_base"] = t("output_hc_base.weight")
    sd["model.hc_head.hc_scale"] = t("output_hc_scale.weight")
    n_layer = int(md(r, "block_count"))
    n_hash = int(md(r, "hash_layer_count"))
    ratios = [int(x) for x in md(r, "attention.compress_ratios")[:n_layer]]
    for il in range(n_layer):
        b, p = "blk.%d." % il, "model.layers.%d." % il
        for kind in ("attn", "ffn"):
            for part in ("fn", "base", "scale"):
                sd[p + "%s_hc.%s" % (kind, part)] = t(b + "hc_%s_%s.weight" % (kind, part))
        sd[p + "input_layernorm.weight"] = t(b + "attn_norm.weight")
        sd[p + "post_attention_layernorm.weight"] = t(b + "ffn_norm.weight")
        a = p + "self_attn."
        for hf, gg in (("q_a_proj", "attn_q_a"), ("q_a_norm", "attn_q_a_norm"), ("q_b_proj", "attn_q_b"),
                       ("kv_proj", "attn_kv"), ("kv_norm", "attn_kv_a_norm"), ("o_a_proj", "attn_output_a"),
                       ("o_b_proj", "attn_output_b")):
            sd[a + hf + ".weight"] = t(b + gg + ".weight")
        sd[a + "sinks"] = t(b + "attn_sinks.weight")
        if ratios[il]:
            c = a + "compressor."
            sd[c + "kv_proj.weight"] = t(b + "attn_compressor_kv.weight")
            sd[c + "gate_proj.weight"] = t(b + "attn_compressor_gate.weight")
            sd[c + "position_bias"] = t(b + "attn_compressor_ape.weight")
            sd[c + "kv_norm.weight"] = t(b + "attn_compressor_norm.weight")
            if ratios[il] == 4:
                x = c + "indexer."
                sd[x + "kv_proj.weight"] = t(b + "indexer_compressor_kv.weight")
                sd[x + "gate_proj.weight"] = t(b + "indexer_compressor_gate.weight")
                sd[x + "position_bias"] = t(b + "indexer_compressor_ape.weight")
                sd[x + "kv_norm.weight"] = t(b + "indexer_compressor_norm.weight")
                sd[x + "q_b_proj.weight"] = t(b + "indexer.attn_q_b.weight")
                sd[x + "scorer.weights_proj.weight"] = t(b + "indexer.proj.weight")
        m = p + "mlp."
        sd[m + "gate.weight"] = t(b + "ffn_gate_inp.weight")
        if il < n_hash:
            sd[m + "gate.tid2eid"] = t(b + "ffn_gate_tid2eid.weight").astype(np.int64)
            if b + "exp_probs_b.bias" in r.tensors:
                used.add(b + "exp_probs_b.bias")      # unused on hash layers, by both (§3.5)
        elif b + "exp_probs_b.bias" in r.tensors:
            sd[m + "gate.e_score_correction_bias"] = t(b + "exp_probs_b.bias")
        sd[m + "experts.gate_up_proj"] = np.concatenate(
            [t(b + "ffn_gate_exps.weight"), t(b + "ffn_up_exps.weight")], axis=1)
        sd[m + "experts.down_proj"] = t(b + "ffn_down_exps.weight")
        for hf, gg in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")):
            sd[m + "shared_experts.%s.weight" % hf] = t(b + gg + ".weight")
    left = sorted(set(r.tensors) - used)
    if left:
        raise G.GGUFError("%s: tensors without a transformers counterpart: %s" % (r.path, left))
    return sd


def build_model(r, device, log):
    import torch
    import transformers
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    kw = hf_config_kwargs(r)
    try:
        cfg = DeepseekV4Config(attn_implementation="eager", **kw)
    except Exception as e:          # noqa: BLE001 - older configs may not take the argument
        log("DeepseekV4Config(attn_implementation=...) failed (%s: %s); retrying without" % (type(e).__name__, e))
        cfg = DeepseekV4Config(**kw)
    for attr in ("_attn_implementation", "_experts_implementation"):
        try:
            setattr(cfg, attr, "eager")
        except Exception as e:      # noqa: BLE001 - report and go on: the defaults may do
            log("cannot set config.%s: %s" % (attr, e))
    model = DeepseekV4ForCausalLM(cfg)
    model = model.to(dtype=torch.float64).eval()
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in hf_state_dict(r).items()}
    own = model.state_dict()
    shape_bad = ["%s: ours %s, model %s" % (k, tuple(v.shape), tuple(own[k].shape))
                 for k, v in sd.items() if k in own and tuple(own[k].shape) != tuple(v.shape)]
    if shape_bad or set(sd) - set(own):
        for k, v in own.items():
            log("  model tensor %s %s" % (k, tuple(v.shape)))
        raise G.GGUFError("shape mismatches: %s; names the model lacks: %s"
                          % ("; ".join(shape_bad), sorted(set(sd) - set(own))))
    res = model.load_state_dict(sd, strict=False)
    missing = [k for k in res.missing_keys if "inv_freq" not in k]
    if missing or res.unexpected_keys:
        raise G.GGUFError("state dict: missing %s, unexpected %s" % (missing, res.unexpected_keys))
    log("transformers %s, torch %s: model built, %d tensors loaded, layer_types %s"
        % (transformers.__version__, torch.__version__, len(sd), cfg.layer_types))
    return model.to(device)


def rel_l2(a, b):
    ca = a - a.mean(axis=1, keepdims=True)
    cb = b - b.mean(axis=1, keepdims=True)
    return np.linalg.norm(ca - cb, axis=1) / np.linalg.norm(ca, axis=1)


def stats(rel, a, b):
    first = np.where(rel > 1e-3)[0]
    return {"positions": int(len(rel)), "rel_max": float(rel.max()), "rel_median": float(np.median(rel)),
            "first_above_1e-3": int(first[0]) if len(first) else None,
            "argmax_agree": int((a.argmax(1) == b.argmax(1)).sum())}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ds4-dir", required=True)
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    a = ap.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    out = {"model": os.path.basename(a.model)}
    try:
        r = G.GGUFReader(a.model)
        tokens = np.load(os.path.join(a.ds4_dir, "tokens.npy")).astype(np.int64)
        ours = np.load(os.path.join(a.ds4_dir, "logits.npy")).astype(np.float64)
        greedy = np.load(os.path.join(a.ds4_dir, "greedy.npy")).astype(np.int64)
        with open(os.path.join(a.ds4_dir, "meta.json")) as f:
            prompt_len = int(json.load(f)["prompt_len"])
        import torch
        t0 = time.time()
        model = build_model(r, a.device, log)
        out["build_seconds"] = time.time() - t0
    except Exception as e:          # noqa: BLE001 - report whatever the library raised
        import traceback
        traceback.print_exc()
        log("hf_crosscheck: error: %s: %s" % (type(e).__name__, e))
        return 2

    fed = tokens[:len(ours)]
    t0 = time.time()
    try:
        with torch.no_grad():
            hf = model(input_ids=torch.from_numpy(fed)[None].to(a.device), use_cache=False).logits[0]
    except Exception as e:          # noqa: BLE001
        import traceback
        traceback.print_exc()
        log("hf_crosscheck: error in the forward pass: %s: %s" % (type(e).__name__, e))
        return 2
    hf = hf.double().cpu().numpy()
    out["forward_seconds"] = time.time() - t0

    rel = rel_l2(hf, ours)
    out["hf_vs_engine"] = stats(rel, hf, ours)
    hf_next = hf[prompt_len - 1:].argmax(1)
    match = 0
    for x, y in zip(hf_next, greedy):
        if x != y:
            break
        match += 1
    out["greedy_match"] = match
    out["greedy"] = int(len(greedy))
    log("transformers vs engine: %s; greedy %d/%d identical" % (out["hf_vs_engine"], match, len(greedy)))
    log("  rel L2 of the first 8 positions: %s" % " ".join("%.2e" % x for x in rel[:8]))

    if a.reference:
        from .model import Model, Session
        t0 = time.time()
        s = Session(Model(a.model), kv_f16="none", fp8_kv=False, indexer_fp4=False)
        ref = s.prefill(fed.tolist())
        out["reference_seconds"] = time.time() - t0
        rel_r = rel_l2(ref, hf)
        out["hf_vs_reference"] = stats(rel_r, ref, hf)
        out["reference_vs_engine"] = stats(rel_l2(ref, ours), ref, ours)
        bad = np.where(rel_r > 1e-5)[0]
        out["hf_vs_reference"]["first_above_1e-5"] = int(bad[0]) if len(bad) else None
        log("transformers vs reference (no FP8/FP4/f16): %s" % out["hf_vs_reference"])
        log("  rel L2 of the first 8 positions: %s" % " ".join("%.2e" % x for x in rel_r[:8]))
        log("reference (no FP8/FP4/f16) vs engine: %s" % out["reference_vs_engine"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
