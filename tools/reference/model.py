"""DeepSeek V4 forward pass as ds4 defines it (spec §3, §4, §7), float64 reference.

`Model(path)` opens a GGUF, reads the config from metadata and validates the tensor
layout. `Session(model, ...)` holds the per-layer caches (§4.1) and processes tokens one at
a time with streaming semantics (§3.7, §4.2): `decode(token)` returns the logits for the
next position, `prefill(tokens)` decodes each token in turn and returns all logits.

Numerics (spec §7): float64 everywhere on dequantized weights, plus the simulations that
belong to the model: FP8 KV rows, Hadamard + FP4 indexer rows and queries, f16 storage
rounding of cached rows (CPU reference: raw and compressed rows), and, when
`simulate_activation_quant=True`, the engine's Q8_0 / Q8_K activation quantization in front
of every quantized matvec (§3.1).
"""

from collections import OrderedDict

import numpy as np

from . import kvsim
from .config import Config
from .gguf import GGUFError, GGUFReader
from .ops import hc_post, hc_split, rms_norm, rope_tail, sigmoid, silu, softplus
from .quants import ACTIVATION_QUANT_FOR_TYPE

NEG_INF_SCORE = -1e30          # empty frontier score (spec §3.4.5)
EMPTY_SCORE_LIMIT = -5e29      # all candidates below this -> pooled value 0
ROUTER_WEIGHT_FLOOR = 2.0 ** -14


class Weights:
    """Dequantized float64 views of a GGUF's tensors with an LRU cache.

    mat(name): numpy shape = reversed GGUF dims (2-D [in, out] -> [out, in]).
    expert(name, e): [out, in] slice of expert e of a 3-D expert tensor [in, out, n_exp].
    row(name, i): row i of a 2-D tensor (e.g. one embedding). cache_bytes bounds memory.
    """

    def __init__(self, reader, cache_bytes=8 << 30):
        self.r = reader
        self.cache_bytes = cache_bytes
        self._cache = OrderedDict()
        self._used = 0

    def type_name(self, name):
        return self.r.info(name).type_name

    def has(self, name):
        return name in self.r.tensors

    def _cached(self, key, make):
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        v = make()
        v.setflags(write=False)
        if v.nbytes <= self.cache_bytes:
            self._cache[key] = v
            self._used += v.nbytes
            while self._used > self.cache_bytes:
                _, old = self._cache.popitem(last=False)
                self._used -= old.nbytes
        return v

    def mat(self, name):
        return self._cached(name, lambda: self.r.tensor(name))

    def expert(self, name, e):
        ti = self.r.info(name)
        n_in, n_out, n_exp = ti.dims
        if not 0 <= e < n_exp:
            raise GGUFError("expert %d out of range for %s (%d experts)" % (e, name, n_exp))
        return self._cached((name, e), lambda: self.r.rows(name, e * n_out, n_out))

    def row(self, name, i):
        return self.r.rows(name, i, 1)[0]

    def ints(self, name):
        """I32 tensor as int64, numpy shape = reversed GGUF dims."""
        return self._cached(name, lambda: self.r.tensor(name).astype(np.int64))


class Model:
    """A GGUF model ready for Sessions: reader, Config (spec §1.3) and Weights.

    Raises GGUFError for unreadable files, bad metadata or a tensor layout that does not
    match the config (spec §2.2)."""

    def __init__(self, path, cache_bytes=8 << 30):
        self.reader = path if isinstance(path, GGUFReader) else GGUFReader(path)
        self.cfg = Config.from_gguf(self.reader)
        self.cfg.validate_tensors(self.reader)
        self.w = Weights(self.reader, cache_bytes)
        self.ropes = [self.cfg.rope(il) for il in range(self.cfg.n_layer)]


class RowBuffer:
    """Append-only [n, dim] float64 row store with amortised growth."""

    def __init__(self, dim):
        self.buf = np.zeros((16, dim))
        self.n = 0

    def append(self, row):
        if self.n == self.buf.shape[0]:
            self.buf = np.concatenate([self.buf, np.zeros_like(self.buf)])
        self.buf[self.n] = row
        self.n += 1

    def view(self):
        return self.buf[:self.n]


class Compressor:
    """Frontier state of one KV compressor (spec §3.4.5).

    ratio R, output dim D, coff = 2 for R == 4 else 1; state_kv / state_score are
    [coff*R, coff*D], initially 0 / -1e30. `update(k, s, pos)` writes the token's
    projected kv `k` and score `s` (both [coff*D]) and returns the pooled [D] row when
    (pos+1) % R == 0, else None."""

    def __init__(self, ratio, dim):
        self.R = ratio
        self.D = dim
        self.coff = Config.coff(ratio)
        self.state_kv = np.zeros((self.coff * ratio, self.coff * dim))
        self.state_score = np.full((self.coff * ratio, self.coff * dim), NEG_INF_SCORE)

    def update(self, k, s, pos):
        R, D = self.R, self.D
        r = R + pos % R if self.coff == 2 else pos % R
        self.state_kv[r] = k
        self.state_score[r] = s
        if (pos + 1) % R:
            return None
        if self.coff == 2:
            sc = np.concatenate([self.state_score[:R, :D], self.state_score[R:, D:]])
            kv = np.concatenate([self.state_kv[:R, :D], self.state_kv[R:, D:]])
        else:
            sc, kv = self.state_score, self.state_kv
        m = sc.max(axis=0)
        e = np.exp(sc - m)
        pool = (e * kv).sum(axis=0) / e.sum(axis=0)
        pool = np.where(np.all(sc <= EMPTY_SCORE_LIMIT, axis=0), 0.0, pool)
        if self.coff == 2:
            # Shift: rows 0..R-1 take the finished window; rows R.. already hold it.
            self.state_kv[:R] = self.state_kv[R:]
            self.state_score[:R] = self.state_score[R:]
        return pool


class LayerState:
    """Per-layer caches (spec §4.1): raw window, compressed rows and compressor frontiers."""

    def __init__(self, cfg, il):
        R = cfg.ratio(il)
        self.raw = []                  # list of (pos, row[D]) for the last n_swa positions
        self.comp = RowBuffer(cfg.head_dim) if R else None
        self.comp_state = Compressor(R, cfg.head_dim) if R else None
        self.idx = RowBuffer(cfg.idx_head_dim) if R == 4 else None
        self.idx_state = Compressor(R, cfg.idx_head_dim) if R == 4 else None


class Session:
    """Streaming inference state for one token sequence.

    model: Model. simulate_activation_quant: apply Q8_0 activation quantization in front of
    Q8_0 weights and Q8_K in front of routed-expert K/IQ weights (spec §3.1); float weights
    never quantize activations. kv_f16: "cpu" rounds raw and compressed cache rows to f16
    (CPU reference, §7.2), "gpu" only raw rows, "none" keeps float64. record: keep per-token
    intermediates in `self.trace` (list of dicts, one per processed token). rope_f32: RoPE
    angles, cos and sin computed in f32 exactly as the CPU reference does (spec §3.4.3; see
    ops.RopeParams) instead of float64. guide: optional guide.Guide holding another
    implementation's trace; its near-tie roundings and selections are adopted (parity runs).
    fp8_kv / indexer_fp4: False drops the FP8 simulation of attention KV rows (§3.4.4) / the
    FP4 simulation of indexer queries and rows (§3.4.7, the Hadamard stays); ds4 does both,
    llama.cpp's deepseek4 does neither (cross-checks: llama_crosscheck.py, docs/parity.md).

    decode(token) -> float64 logits [n_vocab]; prefill(tokens) -> [n, n_vocab].
    ValueError for token ids outside the vocabulary; GGUFError for hash-routing tables with
    expert ids out of range."""

    def __init__(self, model, simulate_activation_quant=False, kv_f16="cpu", record=False,
                 rope_f32=False, guide=None, fp8_kv=True, indexer_fp4=True):
        if kv_f16 not in ("cpu", "gpu", "none"):
            raise ValueError("kv_f16 must be 'cpu', 'gpu' or 'none', got %r" % (kv_f16,))
        self.m = model
        self.cfg = model.cfg
        self.w = model.w
        self.simulate = simulate_activation_quant
        self.round_raw = kv_f16 in ("cpu", "gpu")
        self.round_comp = kv_f16 == "cpu"
        self.record = record
        self.ropes = (model.ropes if not rope_f32 else
                      [self.cfg.rope(il, f32_angles=True) for il in range(self.cfg.n_layer)])
        self.guide = guide
        self.fp8 = (lambda y: kvsim.fp8_kv_simulate(y, self.cfg.n_nope)) if fp8_kv else (lambda y: y)
        self.fp4 = kvsim.fp4_blocks if indexer_fp4 else (lambda y: y)
        self.trace = []
        self.tokens = []
        self.pos = 0
        self.layers = [LayerState(self.cfg, il) for il in range(self.cfg.n_layer)]
        self._rec = None

    # -- helpers ----------------------------------------------------------------------
    def _put(self, key, value):
        """Records an intermediate; returns the value the pass continues with: `value`, or
        with a forcing guide (guide.Guide(force=True)) the other implementation's one."""
        if self._rec is not None:
            self._rec[key] = np.array(value, copy=True)
        if self.guide is not None and self.guide.force:
            return self.guide.forced(self.pos, key, value)
        return value

    def _act(self, type_name, x):
        if self.simulate and type_name in ACTIVATION_QUANT_FOR_TYPE:
            return ACTIVATION_QUANT_FOR_TYPE[type_name](x)
        return x

    def _quant(self, name, y, fn):
        """fn(y): a rounding step (FP8/FP4/f16) of the pre-rounding vector y; with a guide,
        another implementation's near-tie result may be taken instead."""
        v = fn(y)
        if self.guide is not None:
            v = self.guide.quantized(self.pos, name, y, fn, v)
        return v

    def _select(self, name, score, chosen):
        """A top-k selection `chosen` of `score`; with a guide, another implementation's
        near-tie selection may be taken instead."""
        if self.guide is not None:
            return self.guide.selection(self.pos, name, score, chosen)
        return chosen

    def mv(self, name, x):
        """y = W x for a 2-D weight `name` (GGUF [in, out]), with the activation simulation
        of its type when enabled."""
        return self.w.mat(name) @ self._act(self.w.type_name(name), x)

    def vec(self, name):
        return self.w.mat(name)

    # -- public -----------------------------------------------------------------------
    def prefill(self, tokens):
        """Process tokens one by one (streaming semantics, §4.2); logits [n, n_vocab]."""
        return np.stack([self.decode(t) for t in tokens]) if len(tokens) else np.zeros((0, self.cfg.n_vocab))

    def decode(self, token):
        """Process one token at position self.pos (§3.7); returns its next-token logits."""
        cfg = self.cfg
        token = int(token)
        if not 0 <= token < cfg.n_vocab:
            raise ValueError("token id %d outside the vocabulary [0, %d)" % (token, cfg.n_vocab))
        self._rec = {} if self.record else None
        pos = self.pos
        e = self.w.row("token_embd.weight", token)
        X = np.tile(e, (cfg.n_hc, 1))
        for il in range(cfg.n_layer):
            X = self._layer(il, X, token, pos)
        logits = self._output_head(X)
        self._put("logits", logits)     # the logits themselves are never forced
        if self._rec is not None:
            self.trace.append(self._rec)
        self._rec = None
        self.tokens.append(token)
        self.pos += 1
        return logits

    # -- hyper-connections (§3.3) -----------------------------------------------------
    def _hc_pre(self, X, b, kind, p):
        """HC pre (§3.3 steps 1-5): returns (x = pre @ X, post, comb), recording
        pre/post/comb as `{p}hc_{kind}.*`."""
        cfg = self.cfg
        fn = rms_norm(X.reshape(-1), cfg.rms_eps)
        mix = self.mv(b + "hc_%s_fn.weight" % kind, fn)
        pre, post, comb = hc_split(mix, self.vec(b + "hc_%s_scale.weight" % kind),
                                   self.vec(b + "hc_%s_base.weight" % kind),
                                   cfg.n_hc, cfg.hc_iters, cfg.hc_eps)
        pre = self._put(p + "hc_%s.pre" % kind, pre)
        post = self._put(p + "hc_%s.post" % kind, post)
        comb = self._put(p + "hc_%s.comb" % kind, comb)
        return pre @ X, post, comb

    def _layer(self, il, X, token, pos):
        b = "blk.%d." % il
        p = "l%d." % il
        x_a, post, comb = self._hc_pre(X, b, "attn", p)
        y_a = self._attention(il, x_a, pos)
        X1 = hc_post(y_a, X, post, comb)
        x_f, post, comb = self._hc_pre(X1, b, "ffn", p)
        y_f = self._ffn(il, x_f, token)
        X2 = hc_post(y_f, X1, post, comb)
        return self._put(p + "state", X2)

    # -- attention (§3.4) -------------------------------------------------------------
    def _attention(self, il, x_a, pos):
        cfg, b, p = self.cfg, "blk.%d." % il, "l%d." % il
        rope = self.ropes[il]
        st = self.layers[il]
        h = self._put(p + "attn.h", rms_norm(x_a, cfg.rms_eps, self.vec(b + "attn_norm.weight")))

        # Query path (§3.4.1).
        qr_n = rms_norm(self.mv(b + "attn_q_a.weight", h), cfg.rms_eps, self.vec(b + "attn_q_a_norm.weight"))
        qr_n = self._put(p + "attn.qr", qr_n)
        q = self.mv(b + "attn_q_b.weight", qr_n).reshape(cfg.n_head, cfg.head_dim)
        q = self._put(p + "attn.q", rope_tail(rms_norm(q, cfg.rms_eps), pos, rope))

        # KV path (§3.4.2): norm, RoPE, FP8, f16 storage, raw window push.
        kv = rms_norm(self.mv(b + "attn_kv.weight", h), cfg.rms_eps, self.vec(b + "attn_kv_a_norm.weight"))

        def kv_round(y):
            y = self.fp8(y)
            return kvsim.round_f16(y) if self.round_raw else y
        kv = self._quant(p + "attn.kv", rope_tail(kv, pos, rope), kv_round)
        kv = self._put(p + "attn.kv", kv)
        st.raw.append((pos, kv))
        if len(st.raw) > cfg.n_swa:
            st.raw.pop(0)

        # Compressors (§3.4.5) and indexer (§3.4.7).
        R = cfg.ratio(il)
        comp_rows = None
        if R:
            row = self._compress(b + "attn_compressor", st.comp_state, h, pos, rope, "attn",
                                 p + "attn.comp_row")
            if row is not None:
                st.comp.append(self._put(p + "attn.comp_row", row))
            if R == 4:
                irow = self._compress(b + "indexer_compressor", st.idx_state, h, pos, rope, "index",
                                      p + "idx.comp_row")
                if irow is not None:
                    st.idx.append(self._put(p + "idx.comp_row", irow))
            comp_rows = st.comp.view()
            n_comp = comp_rows.shape[0]
            self._put(p + "attn.n_comp", n_comp)
            if R == 4 and n_comp > cfg.idx_top_k:
                sel = self._put(p + "idx.selected", self._indexer_select(il, qr_n, h, pos, st.idx.view()))
                sel = np.asarray(sel, dtype=np.int64)
                comp_rows = comp_rows[sel]

        keys = np.stack([r for _, r in st.raw])
        if comp_rows is not None and comp_rows.shape[0]:
            keys = np.concatenate([keys, comp_rows])
        o = self._sink_attention(q, keys, self.vec(b + "attn_sinks.weight"))
        o = self._put(p + "attn.o", rope_tail(o, pos, rope, inverse=True))
        return self._put(p + "attn.y", self._grouped_out(b, p, o))

    def _compress(self, prefix, state, h, pos, rope, kind, trace_name):
        """One compressor step; returns the finished cache row or None (§3.4.5)."""
        k = self.mv(prefix + "_kv.weight", h)
        s = self.mv(prefix + "_gate.weight", h) + self.vec(prefix + "_ape.weight")[pos % state.R]
        pool = state.update(k, s, pos)
        if pool is None:
            return None
        row = rms_norm(pool, self.cfg.rms_eps, self.vec(prefix + "_norm.weight"))
        row = rope_tail(row, pos + 1 - state.R, rope)
        if kind == "attn":
            rnd = self.fp8
        else:
            row, rnd = kvsim.hadamard(row), self.fp4            # indexer_qat in two steps
        if self.round_comp:
            return self._quant(trace_name, row, lambda y: kvsim.round_f16(rnd(y)))
        return self._quant(trace_name, row, rnd)

    def _indexer_select(self, il, qr_n, h, pos, idx_rows):
        """Top-k compressed rows by indexer score (§3.4.7); ties prefer lower rows.
        Returns the selected row indices in ascending order."""
        cfg, b, p = self.cfg, "blk.%d." % il, "l%d." % il
        qi = self.mv(b + "indexer.attn_q_b.weight", qr_n).reshape(cfg.n_idx_head, cfg.idx_head_dim)
        qi = self._quant(p + "idx.q", kvsim.hadamard(rope_tail(qi, pos, self.ropes[il])),
                         self.fp4)                      # indexer_qat in two steps
        qi = self._put(p + "idx.q", qi)
        w = self.mv(b + "indexer.proj.weight", h) * cfg.idx_scale
        scores = self._put(p + "idx.scores", w @ np.maximum(qi @ idx_rows.T, 0.0))
        order = np.argsort(-scores, kind="stable")[:cfg.idx_top_k]
        return np.sort(self._select(p + "idx.selected", scores, np.sort(order)))

    def _sink_attention(self, q, keys, sinks):
        """Per-head softmax over keys with a per-head sink logit (§3.4.8); K = V."""
        s = (q @ keys.T) * self.cfg.attn_scale                 # [heads, n_keys]
        m = np.maximum(s.max(axis=1), sinks)
        e = np.exp(s - m[:, None])
        den = np.exp(sinks - m) + e.sum(axis=1)
        return (e @ keys) / den[:, None]

    def _grouped_out(self, b, p, o):
        """Grouped low-rank output projection (§3.4.9); records the low-rank vector as
        `{p}attn.low`."""
        cfg = self.cfg
        name_a = b + "attn_output_a.weight"
        wa = self.w.mat(name_a)
        ta = self.w.type_name(name_a)
        hg = cfg.heads_per_group
        lows = []
        for g in range(cfg.n_out_group):
            gin = o[g * hg:(g + 1) * hg].reshape(-1)
            lows.append(wa[g * cfg.o_lora:(g + 1) * cfg.o_lora] @ self._act(ta, gin))
        low = self._put(p + "attn.low", np.concatenate(lows))
        return self.mv(b + "attn_output_b.weight", low)

    # -- FFN (§3.5) -------------------------------------------------------------------
    def _ffn(self, il, x_f, token):
        cfg, b, p = self.cfg, "blk.%d." % il, "l%d." % il
        h = self._put(p + "ffn.h", rms_norm(x_f, cfg.rms_eps, self.vec(b + "ffn_norm.weight")))
        probs = self._put(p + "router.probs", np.sqrt(softplus(self.mv(b + "ffn_gate_inp.weight", h))))
        if il < cfg.n_hash_layer:
            table = self.w.ints(b + "ffn_gate_tid2eid.weight")     # [vocab, n_used]
            sel = table[token]
            if np.any(sel < 0) or np.any(sel >= cfg.n_expert):
                raise GGUFError("layer %d hash table maps token %d to experts %s outside [0, %d)"
                                % (il, token, sel.tolist(), cfg.n_expert))
        else:
            score = probs.copy()
            if self.w.has(b + "exp_probs_b.bias"):
                score = score + self.vec(b + "exp_probs_b.bias")
            sel = np.argsort(-score, kind="stable")[:cfg.n_expert_used]
            sel = self._select(p + "router.experts", score, sel)
        sel = np.asarray(self._put(p + "router.experts", sel), dtype=np.int64)
        wsel = probs[sel]
        if cfg.expert_weights_norm:
            wsel = wsel / max(wsel.sum(), ROUTER_WEIGHT_FLOOR)
        wsel = self._put(p + "router.weights", wsel * cfg.expert_weight_scale)

        clamp = cfg.swiglu_clamp[il]
        gname, uname, dname = (b + "ffn_gate_exps.weight", b + "ffn_up_exps.weight", b + "ffn_down_exps.weight")
        hq = self._act(self.w.type_name(gname), h)
        tdown = self.w.type_name(dname)
        mids = []
        for e, we in zip(sel.tolist(), wsel.tolist()):
            g = np.minimum(self.w.expert(gname, e) @ hq, clamp)
            u = np.clip(self.w.expert(uname, e) @ hq, -clamp, clamp)
            mids.append(silu(g) * u * we)
        mids = self._put(p + "ffn.expert_mid", np.stack(mids))
        outs = np.stack([self.w.expert(dname, e) @ self._act(tdown, mid)
                         for e, mid in zip(sel.tolist(), mids)])
        outs = self._put(p + "ffn.expert_out", outs)
        y = outs.sum(axis=0)
        if cfg.n_expert_shared:
            g = np.minimum(self.mv(b + "ffn_gate_shexp.weight", h), clamp)
            u = np.clip(self.mv(b + "ffn_up_shexp.weight", h), -clamp, clamp)
            mid = self._put(p + "ffn.shared_mid", silu(g) * u)
            y = y + self._put(p + "ffn.shared_out", self.mv(b + "ffn_down_shexp.weight", mid))
        return self._put(p + "ffn.y", y)

    # -- output head (§3.6) -----------------------------------------------------------
    def _output_head(self, X):
        cfg = self.cfg
        pre = self.mv("output_hc_fn.weight", rms_norm(X.reshape(-1), cfg.rms_eps))
        wts = sigmoid(pre * self.vec("output_hc_scale.weight")[0] + self.vec("output_hc_base.weight")) + cfg.hc_eps
        wts = self._put("out.hc_weights", wts)
        z = self._put("out.z", rms_norm(wts @ X, cfg.rms_eps, self.vec("output_norm.weight")))
        return self.mv("output.weight", z)
