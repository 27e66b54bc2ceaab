"""DeepSeek V4 forward pass in PyTorch, whole sequences at once, for training ds4-nano.

Written from ../shared/docs/model-spec.md (§3 forward, §3.4 attention, §3.5 MoE, §7
numerics); it computes the same function as ds4's CPU engine and tools/reference on f32
weights: hyper-connections with Sinkhorn (§3.3), tail RoPE with YaRN on compressed layers
(§3.4.3), FP8 KV rows with f16 storage (§3.4.4, §7.2), ratio-4 (overlapping) and ratio-128
compressors (§3.4.5), the indexer's Hadamard + FP4 path and top-k (§3.4.7), sink attention
over the raw window plus compressed rows (§3.4.8), grouped low-rank output (§3.4.9), hash and
sqrt-softplus score routing, clamped SwiGLU experts and the shared expert (§3.5), the HC
output head (§3.6). The roundings (FP8, FP4, f16) are straight-through in training: forward
exact, gradient identity.

Parameters are keyed by their GGUF tensor names and stored in numpy orientation (reversed
GGUF dims: a GGUF [in, out] matrix is a [out, in] parameter; experts [n_exp, out, in]; APE
[R, width]). Vocabulary rows: `emb`/`out` hold `n_rows` rows and `vmap[token]` picks a token's
row; several tokens may share a row (ds4-nano gives learned rows only to frequent tokens), and
the loss normalises over the whole vocabulary by counting each row `count[row]` times.

Batch layout: tokens [B, L]; every sequence starts at position 0.
"""

import math

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------
# Shapes and metadata

FLASH_CONSTANTS = dict(
    hc_eps=1e-6, rms_eps=1e-6, rope_base=10000.0, compress_rope_base=160000.0,
    rope_scale=16.0, rope_orig_ctx=65536, yarn_beta_fast=32.0, yarn_beta_slow=1.0,
    expert_weight_scale=1.5, expert_weights_norm=True,
)


def ratio_schedule(n_layer):
    """Ratios of the real models (spec §1.2): 0, 0, then 4 / 128 alternating."""
    return tuple(0 if il < 2 else (4 if il % 2 == 0 else 128) for il in range(n_layer))


def coff(ratio):
    return 2 if ratio == 4 else 1


# ---------------------------------------------------------------------------------------
# Roundings (spec §3.4.4, §3.4.7, §7.2)

E4M3FN = [(m * 2.0 ** -9 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
          for i in range(127) for e, m in [((i >> 3) & 15, i & 7)]]
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _round_to_table(v, table):
    """Nearest entry of the ascending non-negative table to |v| (ties to the even index),
    sign restored. |v| <= table[-1]."""
    t = torch.tensor(table, dtype=v.dtype, device=v.device)
    a = v.abs()
    lo = (torch.bucketize(a, t, right=True) - 1).clamp(0, len(table) - 1)
    hi = (lo + 1).clamp(max=len(table) - 1)
    dlo = a - t[lo]
    dhi = t[hi] - a
    even = torch.where(lo % 2 == 0, lo, hi)
    pick = torch.where(dlo < dhi, lo, torch.where(dhi < dlo, hi, even))
    return torch.copysign(t[pick], v)


def _pow2_ceil(r):
    m, e = torch.frexp(r)
    e = torch.where(m == 0.5, e - 1, e)
    return torch.ldexp(torch.ones_like(r), e)


def _block_round(v, maxv, floor, table):
    amax = v.abs().amax(dim=-1, keepdim=True).clamp(min=floor)
    scale = _pow2_ceil(amax / maxv)
    return _round_to_table((v / scale).clamp(-maxv, maxv), table) * scale


def _blockwise(x, n, block, fn):
    parts = [fn(x[..., s:min(s + block, n)]) for s in range(0, n, block)]
    if n < x.shape[-1]:
        parts.append(x[..., n:])
    return torch.cat(parts, dim=-1)


def fp8_kv(x, n_nope):
    """FP8 E4M3FN round trip of dims [0, n_nope) in blocks of 64, power-of-two scales, amax
    floor 1e-4; the RoPE tail unchanged (spec §3.4.4)."""
    return _blockwise(x, n_nope, 64, lambda v: _block_round(v, 448.0, 1e-4, E4M3FN))


def fp4_blocks(x):
    """FP4 E2M1 round trip in blocks of 32 (spec §3.4.7); last axis a multiple of 32."""
    return _blockwise(x, x.shape[-1], 32, lambda v: _block_round(v, 6.0, 7.052966104933725e-38, E2M1))


def round_f16(x):
    return x.to(torch.float16).to(x.dtype)


def ste(x, fn):
    """fn(x) forward, identity gradient."""
    with torch.no_grad():
        y = fn(x)
    return x + (y - x).detach()


def hadamard_matrix(n, dtype, device):
    """Sylvester Walsh-Hadamard matrix / sqrt(n): x @ H is the butterfly of spec §3.4.7."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(n)).to(dtype=dtype, device=device)


# ---------------------------------------------------------------------------------------
# Small ops (spec conventions, §3.3, §3.4.3)

def rms_norm(x, eps, w=None):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def softplus_ds4(z):
    """z if z > 20, exp(z) if z < -20, log1p(exp(z)) otherwise."""
    mid = torch.log1p(torch.exp(z.clamp(-20.0, 20.0)))
    return torch.where(z > 20.0, z, torch.where(z < -20.0, torch.exp(z.clamp(max=0.0)), mid))


def sinkhorn(logits, iters, eps):
    m = torch.softmax(logits, dim=-1) + eps
    m = m / (m.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        m = m / (m.sum(-1, keepdim=True) + eps)
        m = m / (m.sum(-2, keepdim=True) + eps)
    return m


def yarn_corr_dims(n_rot, base, orig_ctx, beta_fast, beta_slow):
    def cd(beta):
        return n_rot * math.log(orig_ctx / (beta * 2.0 * math.pi)) / (2.0 * math.log(base))
    return max(0, math.floor(cd(beta_fast))), min(n_rot - 1, math.ceil(cd(beta_slow)))


def rope_tables(cfg, ratio, n_pos, device):
    """(cos, sin) [n_pos, n_rot/2] float64 of the layer kind (spec §3.4.3): ratio 0 plain RoPE
    with rope_base; compressed layers compress_rope_base with the YaRN frequency blend."""
    n = cfg["n_rot"]
    k = torch.arange(n // 2, dtype=torch.float64)
    base = cfg["rope_base"] if ratio == 0 else cfg["compress_rope_base"]
    inv = base ** (-2.0 * k / n)
    if ratio:
        low, high = yarn_corr_dims(n, base, cfg["rope_orig_ctx"], cfg["yarn_beta_fast"], cfg["yarn_beta_slow"])
        ramp = 1.0 - ((k - low) / max(0.001, high - low)).clamp(0.0, 1.0)
        inv = inv * ((1.0 / cfg["rope_scale"]) * (1.0 - ramp) + ramp)
    th = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(th).to(device), torch.sin(th).to(device)


def rope_tail(x, cos, sin, inverse=False):
    """Rotate adjacent pairs of the last 2*cos.shape[-1] dims; cos/sin broadcast against
    x[..., pairs] (shape [..., n_rot/2])."""
    n = 2 * cos.shape[-1]
    head, t = x[..., :x.shape[-1] - n], x[..., x.shape[-1] - n:]
    t0, t1 = t[..., 0::2], t[..., 1::2]
    s = -sin if inverse else sin
    r0 = t0 * cos - t1 * s
    r1 = t0 * s + t1 * cos
    return torch.cat([head, torch.stack([r0, r1], dim=-1).flatten(-2)], dim=-1)


# ---------------------------------------------------------------------------------------
# Parameters

def tensor_shapes(cfg, n_rows):
    """dict GGUF name -> numpy-orientation shape (spec §2.2), vocabulary matrices with n_rows
    rows. Hash tables are buffers, not parameters (see Nano.tid2eid)."""
    E, H, D = cfg["n_embd"], cfg["n_head"], cfg["head_dim"]
    F_, NE, n = cfg["n_ff_exp"], cfg["n_expert"], cfg["n_hc"]
    mix, hcd = 2 * n + n * n, n * E
    hg = H // cfg["n_out_group"]
    s = {"token_embd.weight": (n_rows, E), "output_hc_fn.weight": (n, hcd),
         "output_hc_scale.weight": (1,), "output_hc_base.weight": (n,),
         "output_norm.weight": (E,), "output.weight": (n_rows, E)}
    for il, R in enumerate(cfg["compress_ratios"]):
        b = "blk.%d." % il
        lt = {"hc_attn_fn.weight": (mix, hcd), "hc_attn_scale.weight": (3,), "hc_attn_base.weight": (mix,),
              "attn_norm.weight": (E,), "attn_q_a.weight": (cfg["q_lora"], E),
              "attn_q_a_norm.weight": (cfg["q_lora"],), "attn_q_b.weight": (H * D, cfg["q_lora"]),
              "attn_kv.weight": (D, E), "attn_kv_a_norm.weight": (D,), "attn_sinks.weight": (H,),
              "attn_output_a.weight": (cfg["n_out_group"] * cfg["o_lora"], hg * D),
              "attn_output_b.weight": (E, cfg["n_out_group"] * cfg["o_lora"]),
              "hc_ffn_fn.weight": (mix, hcd), "hc_ffn_scale.weight": (3,), "hc_ffn_base.weight": (mix,),
              "ffn_norm.weight": (E,), "ffn_gate_inp.weight": (NE, E), "exp_probs_b.bias": (NE,),
              "ffn_gate_exps.weight": (NE, F_, E), "ffn_up_exps.weight": (NE, F_, E),
              "ffn_down_exps.weight": (NE, E, F_),
              "ffn_gate_shexp.weight": (F_, E), "ffn_up_shexp.weight": (F_, E),
              "ffn_down_shexp.weight": (E, F_)}
        if R:
            w = coff(R) * D
            lt.update({"attn_compressor_ape.weight": (R, w), "attn_compressor_kv.weight": (w, E),
                       "attn_compressor_gate.weight": (w, E), "attn_compressor_norm.weight": (D,)})
        if R == 4:
            DI, IH = cfg["idx_head_dim"], cfg["n_idx_head"]
            lt.update({"indexer.attn_q_b.weight": (IH * DI, cfg["q_lora"]),
                       "indexer.proj.weight": (IH, E),
                       "indexer_compressor_ape.weight": (R, 2 * DI),
                       "indexer_compressor_kv.weight": (2 * DI, E),
                       "indexer_compressor_gate.weight": (2 * DI, E),
                       "indexer_compressor_norm.weight": (DI,)})
        for k, v in lt.items():
            s[b + k] = v
    return s


def init_value(name, shape, cfg, gen):
    """Initial value of a parameter (seeded generator `gen`): matrices N(0, 1/fan_in) with
    residual-branch outputs scaled down by sqrt(2 n_layer); norms 1; HC bases favouring the
    identity combine; routing bias 0."""
    n = cfg["n_hc"]
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    if name.endswith("_scale.weight"):
        return torch.full(shape, 0.5)
    if name.endswith("_base.weight"):
        v = torch.zeros(shape)
        if name.startswith("blk"):
            comb = v[2 * n:].view(n, n)
            comb += 4.0 * torch.eye(n)
        return v
    if name.endswith("attn_sinks.weight") or name.endswith("exp_probs_b.bias"):
        return torch.zeros(shape)
    if name.endswith("_ape.weight"):
        return 0.02 * torch.randn(shape, generator=gen)
    if name == "token_embd.weight":
        return torch.randn(shape, generator=gen)
    fan_in = shape[-1]
    std = 1.0 / math.sqrt(fan_in)
    if name.endswith("attn_output_b.weight") or name.endswith("ffn_down_exps.weight") \
            or name.endswith("ffn_down_shexp.weight"):
        std /= math.sqrt(2 * cfg["n_layer"])
    if name.endswith("_fn.weight"):
        std *= 0.1
    return std * torch.randn(shape, generator=gen)


class Nano(torch.nn.Module):
    """The model. cfg: dict with the shape keys of tools/reference/tinymodel.TINY_SHAPE plus
    FLASH_CONSTANTS; vmap: LongTensor [n_vocab] token -> row; tid2eid: LongTensor
    [n_vocab, n_expert_used] per hash layer (list); params: optional dict name -> tensor
    (else seeded init)."""

    def __init__(self, cfg, vmap, tid2eid, params=None, seed=0):
        super().__init__()
        self.cfg = cfg
        n_rows = int(vmap.max()) + 1
        self.register_buffer("vmap", vmap.long())
        self.register_buffer("row_logcount", torch.log(torch.bincount(vmap.long(), minlength=n_rows).double()).float())
        for il, t in enumerate(tid2eid):
            self.register_buffer("tid2eid_%d" % il, t.long())
        self.names = list(tensor_shapes(cfg, n_rows))
        gen = torch.Generator().manual_seed(seed)
        self.p = torch.nn.ParameterDict()
        for name, shape in tensor_shapes(cfg, n_rows).items():
            v = params[name] if params is not None else init_value(name, shape, cfg, gen)
            v = torch.as_tensor(v, dtype=torch.float32)
            if tuple(v.shape) != tuple(shape):
                raise ValueError("%s: shape %s, expected %s" % (name, tuple(v.shape), shape))
            self.p[name.replace(".", "__")] = torch.nn.Parameter(v.clone())
        self.qat = True
        self._tables = {}

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def named_gguf(self):
        return {n: self.w(n) for n in self.names}

    def _rope(self, ratio, L, device, dtype):
        """(cos, sin) [L, n_rot/2] in the compute dtype (angles in float64)."""
        key = (0 if ratio == 0 else 1, L, str(device), dtype)
        if key not in self._tables:
            cos, sin = rope_tables(self.cfg, ratio, L, device)
            self._tables[key] = cos.to(dtype), sin.to(dtype)
        return self._tables[key]

    # -- hyper-connections (§3.3) -------------------------------------------------------
    def _hc_pre(self, X, b, kind):
        c, n = self.cfg, self.cfg["n_hc"]
        fn = rms_norm(X.flatten(-2), c["rms_eps"])
        mix = fn @ self.w(b + "hc_%s_fn.weight" % kind).t()
        scale, base = self.w(b + "hc_%s_scale.weight" % kind), self.w(b + "hc_%s_base.weight" % kind)
        pre = torch.sigmoid(mix[..., :n] * scale[0] + base[:n]) + c["hc_eps"]
        post = 2.0 * torch.sigmoid(mix[..., n:2 * n] * scale[1] + base[n:2 * n])
        logits = (mix[..., 2 * n:] * scale[2] + base[2 * n:]).unflatten(-1, (n, n))
        comb = sinkhorn(logits, c["hc_iters"], c["hc_eps"])
        return torch.einsum("...r,...re->...e", pre, X), post, comb

    @staticmethod
    def _hc_post(y, X, post, comb):
        return post[..., :, None] * y[..., None, :] + torch.einsum("...rc,...re->...ce", comb, X)

    # -- compressor (§3.4.5) ------------------------------------------------------------
    def _compress(self, prefix, h, R, D, cos, sin):
        """Pooled rows [B, L//R, D] (row j finishes at position R*j+R-1), normalised and
        rotated to position R*j."""
        B, L, _ = h.shape
        nC = L // R
        k = h @ self.w(prefix + "_kv.weight").t()
        s = h @ self.w(prefix + "_gate.weight").t()
        ape = self.w(prefix + "_ape.weight")
        k = k[:, :nC * R].view(B, nC, R, -1)
        s = s[:, :nC * R].view(B, nC, R, -1) + ape
        if R == 4:
            kc, sc = k[..., D:], s[..., D:]
            kp = F.pad(k[:, :-1, :, :D], (0, 0, 0, 0, 1, 0))
            sp = F.pad(s[:, :-1, :, :D], (0, 0, 0, 0, 1, 0), value=-1e30)
            k, s = torch.cat([kp, kc], 2), torch.cat([sp, sc], 2)
        pool = (torch.softmax(s, dim=2) * k).sum(2)
        row = rms_norm(pool, self.cfg["rms_eps"], self.w(prefix + "_norm.weight"))
        return rope_tail(row, cos[0:nC * R:R][None], sin[0:nC * R:R][None])

    # -- attention (§3.4) ---------------------------------------------------------------
    def _attention(self, il, x, aux):
        c, b = self.cfg, "blk.%d." % il
        R = c["compress_ratios"][il]
        B, L, _ = x.shape
        H, D, n_rot = c["n_head"], c["head_dim"], c["n_rot"]
        eps = c["rms_eps"]
        cos, sin = self._rope(R, L, x.device, x.dtype)
        h = rms_norm(x, eps, self.w(b + "attn_norm.weight"))
        qr = rms_norm(h @ self.w(b + "attn_q_a.weight").t(), eps, self.w(b + "attn_q_a_norm.weight"))
        q = (qr @ self.w(b + "attn_q_b.weight").t()).view(B, L, H, D)
        q = rope_tail(rms_norm(q, eps), cos[None, :, None], sin[None, :, None])
        kv = rms_norm(h @ self.w(b + "attn_kv.weight").t(), eps, self.w(b + "attn_kv_a_norm.weight"))
        kv = rope_tail(kv, cos[None], sin[None])
        kv = ste(kv, lambda y: round_f16(fp8_kv(y, D - n_rot)))
        pos = torch.arange(L, device=x.device)
        raw_mask = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - c["n_swa"])  # [t, s]
        scale = 1.0 / math.sqrt(D)
        logits = torch.einsum("blhd,bsd->bhls", q, kv) * scale
        logits = logits.masked_fill(~raw_mask, float("-inf"))
        keys = kv
        if R:
            crow = self._compress(b + "attn_compressor", h, R, D, cos, sin)
            crow = ste(crow, lambda y: round_f16(fp8_kv(y, D - n_rot)))
            nC = crow.shape[1]
            j = torch.arange(nC, device=x.device)
            valid = (R * j[None, :] + R - 1) <= pos[:, None]                               # [t, j]
            cl = torch.einsum("blhd,bjd->bhlj", q, crow) * scale
            mask = valid[None, None].expand(B, 1, L, nC)
            if R == 4 and nC > c["idx_top_k"]:
                sel, idx_logits = self._indexer(il, b, qr, h, valid, cos, sin)
                mask = mask & sel[:, None]
                if aux is not None and self.training:
                    # Indexer training signal (as DeepSeek's sparse attention warm-up): match
                    # the head-averaged attention distribution over the valid compressed rows.
                    # Finite fill: rows without a valid entry must not produce NaN gradients.
                    with torch.no_grad():
                        tgt = torch.softmax(cl.masked_fill(~valid, -1e9), -1).mean(1) * valid
                    lp = torch.log_softmax(idx_logits.masked_fill(~valid, -1e9), -1)
                    rows = valid.any(-1)
                    kl = -(tgt * lp).sum(-1)
                    aux.append(kl[:, rows].mean())
            logits = torch.cat([logits, cl.masked_fill(~mask, float("-inf"))], -1)
            keys = torch.cat([kv, crow], 1)
        sink = self.w(b + "attn_sinks.weight")[None, :, None, None].expand(B, H, L, 1)
        probs = torch.softmax(torch.cat([logits, sink], -1), -1)[..., :-1]
        o = torch.einsum("bhls,bsd->blhd", probs, keys)
        o = rope_tail(o, cos[None, :, None], sin[None, :, None], inverse=True)
        G = c["n_out_group"]
        og = o.reshape(B, L, G, (H // G) * D)
        wa = self.w(b + "attn_output_a.weight").view(G, c["o_lora"], (H // G) * D)
        low = torch.einsum("blgi,goi->blgo", og, wa).flatten(-2)
        return low @ self.w(b + "attn_output_b.weight").t()

    def _indexer(self, il, b, qr, h, valid, cos, sin):
        """Indexer top-k (§3.4.7): returns (selected [B, L, nC] bool, scores [B, L, nC])."""
        c = self.cfg
        B, L, _ = h.shape
        IH, DI = c["n_idx_head"], c["idx_head_dim"]
        Hm = hadamard_matrix(DI, h.dtype, h.device)
        krow = self._compress(b + "indexer_compressor", h, 4, DI, cos, sin) @ Hm
        krow = ste(krow, lambda y: round_f16(fp4_blocks(y)))
        qi = (qr @ self.w(b + "indexer.attn_q_b.weight").t()).view(B, L, IH, DI)
        qi = rope_tail(qi, cos[None, :, None], sin[None, :, None]) @ Hm
        qi = ste(qi, fp4_blocks)
        wh = (h @ self.w(b + "indexer.proj.weight").t()) * (1.0 / math.sqrt(IH * DI))
        scores = torch.einsum("blh,blhj->blj", wh, torch.relu(torch.einsum("blhd,bjd->blhj", qi, krow)))
        k = c["idx_top_k"]
        masked = scores.detach().masked_fill(~valid, float("-inf"))
        # Ties (e.g. all-zero ReLU scores) prefer the lower row, as ds4 does: stable sort.
        top = torch.sort(masked, dim=-1, descending=True, stable=True).indices[..., :k]
        sel = torch.zeros_like(masked, dtype=torch.bool).scatter_(-1, top, True) & valid
        return sel, scores

    # -- MoE FFN (§3.5) -----------------------------------------------------------------
    def _ffn(self, il, x, tokens, loads):
        c, b = self.cfg, "blk.%d." % il
        h = rms_norm(x, c["rms_eps"], self.w(b + "ffn_norm.weight"))
        probs = torch.sqrt(softplus_ds4(h @ self.w(b + "ffn_gate_inp.weight").t()))
        if il < c["n_hash_layer"]:
            sel = getattr(self, "tid2eid_%d" % il)[tokens]
        else:
            score = probs.detach() + self.w(b + "exp_probs_b.bias").detach()
            sel = score.topk(c["n_expert_used"], dim=-1).indices
            if loads is not None:
                loads[il] = torch.zeros(c["n_expert"], device=x.device).scatter_add_(
                    0, sel.flatten(), torch.ones(sel.numel(), device=x.device))
        wsel = probs.gather(-1, sel)
        if c["expert_weights_norm"]:
            wsel = wsel / wsel.sum(-1, keepdim=True).clamp(min=2.0 ** -14)
        wsel = wsel * c["expert_weight_scale"]
        wfull = torch.zeros_like(probs).scatter(-1, sel, wsel)
        clamp = c["swiglu_clamp"]
        g = torch.einsum("ble,nfe->blnf", h, self.w(b + "ffn_gate_exps.weight")).clamp(max=clamp)
        u = torch.einsum("ble,nfe->blnf", h, self.w(b + "ffn_up_exps.weight")).clamp(-clamp, clamp)
        mid = F.silu(g) * u * wfull[..., None]
        y = torch.einsum("blnf,nef->ble", mid, self.w(b + "ffn_down_exps.weight"))
        gs = (h @ self.w(b + "ffn_gate_shexp.weight").t()).clamp(max=clamp)
        us = (h @ self.w(b + "ffn_up_shexp.weight").t()).clamp(-clamp, clamp)
        return y + (F.silu(gs) * us) @ self.w(b + "ffn_down_shexp.weight").t()

    # -- whole model --------------------------------------------------------------------
    def forward(self, tokens, aux=None, loads=None):
        """tokens [B, L] -> row logits [B, L, n_rows] (token t's logit is row vmap[t])."""
        c = self.cfg
        e = self.w("token_embd.weight")[self.vmap[tokens]]
        X = e[:, :, None, :].expand(-1, -1, c["n_hc"], -1)
        for il in range(c["n_layer"]):
            b = "blk.%d." % il
            xa, post, comb = self._hc_pre(X, b, "attn")
            X = self._hc_post(self._attention(il, xa, aux), X, post, comb)
            xf, post, comb = self._hc_pre(X, b, "ffn")
            X = self._hc_post(self._ffn(il, xf, tokens, loads), X, post, comb)
        pre = rms_norm(X.flatten(-2), c["rms_eps"]) @ self.w("output_hc_fn.weight").t()
        wts = torch.sigmoid(pre * self.w("output_hc_scale.weight")[0] + self.w("output_hc_base.weight")) + c["hc_eps"]
        z = rms_norm(torch.einsum("...r,...re->...e", wts, X), c["rms_eps"], self.w("output_norm.weight"))
        return z @ self.w("output.weight").t()

    def token_logits(self, row_logits):
        """Row logits -> full-vocabulary logits [..., n_vocab]."""
        return row_logits[..., self.vmap]

    def nll(self, row_logits, targets):
        """Per-position -log p(target) [B, L] with the softmax over the whole vocabulary."""
        lse = torch.logsumexp(row_logits + self.row_logcount, dim=-1)
        return lse - row_logits.gather(-1, self.vmap[targets][..., None])[..., 0]
