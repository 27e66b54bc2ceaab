"""Full forward passes on tiny random models written by this package's own writer.

The main model is the brief's tiny config (7 layers, ratios 0,0,4,128,4,128,4, 3 hash
layers, hidden 256, 4 heads x 64 with 16 RoPE dims, window 16, indexer 4 x 32 top-8,
16 experts / 3 used, expert ff 256, HC 4, q_lora 64, o_lora 32, 2 output groups, vocab
512, F32 weights) run on a 300-token prompt. Components are re-derived here from the
recorded intermediates with independently written formulas."""

import math
import os
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from tools.reference import kvsim, ops  # noqa: E402
from tools.reference.gguf import GGUFError, T_I32, T_U32  # noqa: E402
from tools.reference.model import Model, Session  # noqa: E402
from tools.reference.tinymodel import TINY_SHAPE, build_tiny_model  # noqa: E402

N_TOKENS = 300

SMALL = dict(n_layer=3, n_embd=64, n_vocab=64, n_head=2, head_dim=32, n_rot=8, q_lora=32,
             o_lora=16, n_out_group=1, n_expert=4, n_expert_used=2, n_ff_exp=32, n_hash_layer=1,
             n_swa=4, n_idx_head=2, idx_head_dim=32, idx_top_k=2, n_hc=2, hc_iters=20,
             compress_ratios=(0, 4, 128), swiglu_clamp=10.0)


def scalar_sink_attention(q, keys, sink, scale):
    """One head: softmax over [sink] + scores, value mass only from keys."""
    scores = [float(np.dot(q, k)) * scale for k in keys]
    m = max([sink] + scores)
    w = [math.exp(s - m) for s in scores]
    den = math.exp(sink - m) + sum(w)
    return sum(wi * k for wi, k in zip(w, keys)) / den


class TinyModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls._tmp.name, "tiny.gguf")
        build_tiny_model(cls.path, seed=0)
        cls.model = Model(cls.path)
        cls.tokens = np.random.default_rng(1).integers(0, TINY_SHAPE["n_vocab"], N_TOKENS).tolist()
        cls.sess = Session(cls.model, record=True)
        cls.logits = cls.sess.prefill(cls.tokens)
        cls.trace = cls.sess.trace

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def W(self, name):
        return self.model.w.mat(name)

    def test_config_read_from_metadata(self):
        c = self.model.cfg
        self.assertEqual((c.n_layer, c.n_embd, c.n_head, c.head_dim, c.n_rot, c.n_swa), (7, 256, 4, 64, 16, 16))
        self.assertEqual(c.compress_ratios, [0, 0, 4, 128, 4, 128, 4])
        self.assertEqual((c.n_idx_head, c.idx_head_dim, c.idx_top_k), (4, 32, 8))
        self.assertEqual((c.n_expert, c.n_expert_used, c.n_hash_layer, c.n_hc), (16, 3, 3, 4))
        self.assertIsNone(self.model.ropes[0].yarn)
        self.assertEqual(self.model.ropes[2].base, 160000.0)
        self.assertEqual(self.model.ropes[2].yarn[0], 1.0 / 16)

    def test_logits_finite(self):
        self.assertEqual(self.logits.shape, (N_TOKENS, 512))
        self.assertTrue(np.all(np.isfinite(self.logits)))
        self.assertGreater(float(self.logits.std()), 0.1)

    def test_prefill_equals_token_by_token(self):
        s = Session(self.model)
        step = np.stack([s.decode(t) for t in self.tokens])
        np.testing.assert_array_equal(step, self.logits)

    def test_compressed_row_counts(self):
        for il, R in enumerate(self.model.cfg.compress_ratios):
            st = self.sess.layers[il]
            if not R:
                self.assertIsNone(st.comp)
                continue
            for p in range(N_TOKENS):
                self.assertEqual(int(self.trace[p]["l%d.attn.n_comp" % il]), (p + 1) // R, (il, p))
                emitted = "l%d.attn.comp_row" % il in self.trace[p]
                self.assertEqual(emitted, (p + 1) % R == 0, (il, p))
                if R == 4:
                    self.assertEqual("l%d.idx.comp_row" % il in self.trace[p], emitted)
            self.assertEqual(st.comp.n, N_TOKENS // R)
            if R == 4:
                self.assertEqual(st.idx.n, st.comp.n)

    def test_indexer_selects_once_rows_exceed_top_k(self):
        for il in (2, 4, 6):
            idx_rows = self.sess.layers[il].idx.view()
            for p in range(N_TOKENS):
                rec = self.trace[p]
                n = (p + 1) // 4
                key = "l%d.idx.selected" % il
                self.assertEqual(key in rec, n > 8, (il, p))
                if n <= 8:
                    continue
                sel = rec[key]
                self.assertEqual(len(sel), 8)
                self.assertTrue(np.all(np.diff(sel) > 0))
                scores = rec["l%d.idx.scores" % il]
                self.assertEqual(len(scores), n)
                rest = np.setdiff1d(np.arange(n), sel)
                self.assertGreaterEqual(scores[sel].min(), scores[rest].max())
            # Independent score recomputation at the last position.
            p = N_TOKENS - 1
            rec = self.trace[p]
            b = "blk.%d." % il
            c = self.model.cfg
            qi = (self.W(b + "indexer.attn_q_b.weight") @ rec["l%d.attn.qr" % il]).reshape(4, 32)
            qi = kvsim.indexer_qat(ops.rope_tail(qi, p, self.model.ropes[il]))
            wh = self.W(b + "indexer.proj.weight") @ rec["l%d.attn.h" % il] / math.sqrt(4 * 32)
            n = (p + 1) // 4
            ref = [sum(wh[h] * max(0.0, float(qi[h] @ idx_rows[r])) for h in range(4)) for r in range(n)]
            np.testing.assert_allclose(rec["l%d.idx.scores" % il], ref, rtol=1e-12, atol=1e-12)
            self.assertEqual(c.idx_top_k, 8)

    def _check_attention(self, il, p):
        c = self.model.cfg
        rec = self.trace[p]
        keys = [self.trace[t]["l%d.attn.kv" % il] for t in range(max(0, p - c.n_swa + 1), p + 1)]
        R = c.compress_ratios[il]
        if R:
            comp = self.sess.layers[il].comp.view()[:(p + 1) // R]
            if "l%d.idx.selected" % il in rec:
                comp = comp[rec["l%d.idx.selected" % il]]
            keys += list(comp)
        sinks = self.W("blk.%d.attn_sinks.weight" % il)
        q = rec["l%d.attn.q" % il]
        o = np.stack([scalar_sink_attention(q[h], keys, sinks[h], 1 / math.sqrt(c.head_dim))
                      for h in range(c.n_head)])
        o = ops.rope_tail(o, p, self.model.ropes[il], inverse=True)
        np.testing.assert_allclose(rec["l%d.attn.o" % il], o, rtol=1e-11, atol=1e-13)
        # Grouped output projection.
        wa = self.W("blk.%d.attn_output_a.weight" % il)
        low = np.concatenate([wa[g * 32:(g + 1) * 32] @ o[2 * g:2 * g + 2].reshape(-1) for g in range(2)])
        y = self.W("blk.%d.attn_output_b.weight" % il) @ low
        np.testing.assert_allclose(rec["l%d.attn.y" % il], y, rtol=1e-11, atol=1e-13)

    def test_attention_dense_window(self):
        for p in (0, 5, 15, 16, 200):
            self._check_attention(0, p)

    def test_attention_with_compressed_rows(self):
        for il, p in ((3, 127), (3, 299), (2, 30), (4, 40), (6, 299)):
            self._check_attention(il, p)

    def test_kv_rows_are_fp8_then_f16(self):
        c = self.model.cfg
        for il in (0, 3):
            kv = self.trace[77]["l%d.attn.kv" % il]
            np.testing.assert_array_equal(kv, kvsim.round_f16(kv))
            np.testing.assert_array_equal(kv[:c.n_nope], kvsim.fp8_kv_simulate(kv, c.n_nope)[:c.n_nope])

    def _compressed_row(self, il, end, kind):
        c = self.model.cfg
        R = c.compress_ratios[il]
        b = "blk.%d.%s_compressor" % (il, kind)
        D = c.head_dim if kind == "attn" else c.idx_head_dim
        wkv, wg, ape = self.W(b + "_kv.weight"), self.W(b + "_gate.weight"), self.W(b + "_ape.weight")
        hs = {t: self.trace[t]["l%d.attn.h" % il] for t in range(max(0, end + 1 - 2 * R), end + 1)}
        cands = [[] for _ in range(D)]
        for t, h in hs.items():
            k = wkv @ h
            s = wg @ h + ape[t % R]
            for j in range(D):
                if R == 4 and t <= end - R:
                    cands[j].append((s[j], k[j]))            # previous window, first half
                elif R == 4:
                    cands[j].append((s[D + j], k[D + j]))    # current window, second half
                elif t > end - R:
                    cands[j].append((s[j], k[j]))
        pool = np.array([sum(math.exp(s - max(x for x, _ in cs)) * v for s, v in cs)
                         / sum(math.exp(s - max(x for x, _ in cs)) for s, _ in cs) for cs in cands])
        row = ops.rms_norm(pool, c.rms_eps, self.W(b + "_norm.weight"))
        row = ops.rope_tail(row, end + 1 - R, self.model.ropes[il])
        row = kvsim.fp8_kv_simulate(row, c.n_nope) if kind == "attn" else kvsim.indexer_qat(row)
        return kvsim.round_f16(row)

    def test_compressed_rows_recomputed(self):
        cases = ((2, 3, "attn"), (2, 7, "attn"), (2, 7, "indexer"), (6, 299, "indexer"),
                 (3, 127, "attn"), (3, 255, "attn"))
        for il, end, kind in cases:
            key = "l%d.%s.comp_row" % (il, "attn" if kind == "attn" else "idx")
            got = self.trace[end][key]
            ref = self._compressed_row(il, end, kind)
            # f16 rounding can flip on last-bit differences of the pool: allow one f16 ulp.
            np.testing.assert_allclose(got, ref, rtol=2 ** -10, atol=1e-7, err_msg=str((il, end, kind)))

    def test_router(self):
        c = self.model.cfg
        for p in (0, 1, 150, 299):
            tok = self.tokens[p]
            rec = self.trace[p]
            for il in range(c.n_layer):
                b = "blk.%d." % il
                h = rec["l%d.ffn.h" % il]
                probs = rec["l%d.router.probs" % il]
                logits = self.W(b + "ffn_gate_inp.weight") @ h
                np.testing.assert_allclose(probs, [math.sqrt(math.log1p(math.exp(z))) for z in logits], rtol=1e-13)
                sel = rec["l%d.router.experts" % il]
                wts = rec["l%d.router.weights" % il]
                if il < c.n_hash_layer:
                    table = self.model.reader.tensor(b + "ffn_gate_tid2eid.weight")
                    self.assertEqual(sel.tolist(), table[tok].astype(int).tolist())
                else:
                    score = probs + self.W(b + "exp_probs_b.bias")
                    order = sorted(range(16), key=lambda e: (-score[e], e))[:3]
                    self.assertEqual(sel.tolist(), order)
                np.testing.assert_allclose(wts, probs[sel] / probs[sel].sum() * 1.5, rtol=1e-14)
                self.assertAlmostEqual(float(wts.sum()), 1.5, places=12)

    def test_experts(self):
        p, il = 150, 4
        rec = self.trace[p]
        b = "blk.%d." % il
        h = rec["l%d.ffn.h" % il]
        gate, up, down = (self.W(b + n + ".weight") for n in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"))
        outs = rec["l%d.ffn.expert_out" % il]
        for i, (e, w) in enumerate(zip(rec["l%d.router.experts" % il], rec["l%d.router.weights" % il])):
            g = np.minimum(gate[e] @ h, 10.0)
            u = np.clip(up[e] @ h, -10.0, 10.0)
            mid = g / (1 + np.exp(-g)) * u * w
            np.testing.assert_allclose(outs[i], down[e] @ mid, rtol=1e-12, atol=1e-14)
        g = np.minimum(self.W(b + "ffn_gate_shexp.weight") @ h, 10.0)
        u = np.clip(self.W(b + "ffn_up_shexp.weight") @ h, -10.0, 10.0)
        sh = self.W(b + "ffn_down_shexp.weight") @ (g / (1 + np.exp(-g)) * u)
        np.testing.assert_allclose(rec["l%d.ffn.y" % il], outs.sum(axis=0) + sh, rtol=1e-12, atol=1e-13)

    def _hc_pre(self, X, b, kind):
        f = X.reshape(-1)
        fn = f / math.sqrt(float(np.mean(f * f)) + 1e-6)
        mix = self.W(b + "hc_%s_fn.weight" % kind) @ fn
        sc, base = self.W(b + "hc_%s_scale.weight" % kind), self.W(b + "hc_%s_base.weight" % kind)
        pre = np.array([1 / (1 + math.exp(-(mix[i] * sc[0] + base[i]))) + 1e-6 for i in range(4)])
        post = np.array([2 / (1 + math.exp(-(mix[4 + i] * sc[1] + base[4 + i]))) for i in range(4)])
        return pre, post

    def test_hc_chain(self):
        p = 3
        rec = self.trace[p]
        X = np.tile(self.W("token_embd.weight")[self.tokens[p]], (4, 1))
        for il in range(7):
            b = "blk.%d." % il
            pre, post = self._hc_pre(X, b, "attn")
            np.testing.assert_allclose(rec["l%d.hc_attn.pre" % il], pre, rtol=1e-12)
            np.testing.assert_allclose(rec["l%d.hc_attn.post" % il], post, rtol=1e-12)
            x_a = sum(pre[i] * X[i] for i in range(4))
            h = ops.rms_norm(x_a, 1e-6, self.W(b + "attn_norm.weight"))
            np.testing.assert_allclose(rec["l%d.attn.h" % il], h, rtol=1e-11, atol=1e-12)
            comb = rec["l%d.hc_attn.comb" % il]
            X1 = np.stack([post[c] * rec["l%d.attn.y" % il] + sum(comb[r, c] * X[r] for r in range(4))
                           for c in range(4)])
            pre, post = self._hc_pre(X1, b, "ffn")
            np.testing.assert_allclose(rec["l%d.hc_ffn.pre" % il], pre, rtol=1e-12)
            comb = rec["l%d.hc_ffn.comb" % il]
            X2 = np.stack([post[c] * rec["l%d.ffn.y" % il] + sum(comb[r, c] * X1[r] for r in range(4))
                           for c in range(4)])
            np.testing.assert_allclose(rec["l%d.state" % il], X2, rtol=1e-11, atol=1e-12)
            X = rec["l%d.state" % il]
        f = X.reshape(-1)
        pre = self.W("output_hc_fn.weight") @ (f / math.sqrt(float(np.mean(f * f)) + 1e-6))
        wts = 1 / (1 + np.exp(-(pre * self.W("output_hc_scale.weight")[0] + self.W("output_hc_base.weight")))) + 1e-6
        z = ops.rms_norm(wts @ X, 1e-6, self.W("output_norm.weight"))
        np.testing.assert_allclose(self.logits[p], self.W("output.weight") @ z, rtol=1e-11, atol=1e-12)

    def test_hc_comb_columns_normalised(self):
        for il in range(7):
            for kind in ("attn", "ffn"):
                comb = self.trace[10]["l%d.hc_%s.comb" % (il, kind)]
                np.testing.assert_allclose(comb.sum(axis=0), 1.0, atol=1e-5)

    def test_output_head(self):
        rec = self.trace[42]
        np.testing.assert_allclose(self.W("output.weight") @ rec["out.z"], self.logits[42], rtol=1e-12)

    def test_kv_f16_modes(self):
        toks = self.tokens[:12]
        gpu = Session(self.model, kv_f16="gpu", record=True)
        gpu.prefill(toks)
        none = Session(self.model, kv_f16="none", record=True)
        none_logits = none.prefill(toks)
        kv = gpu.trace[11]["l2.attn.kv"]
        np.testing.assert_array_equal(kv, kvsim.round_f16(kv))
        row = gpu.trace[11]["l2.attn.comp_row"]
        self.assertFalse(np.array_equal(row, kvsim.round_f16(row)))
        kv_none = none.trace[11]["l0.attn.kv"]
        self.assertFalse(np.array_equal(kv_none, kvsim.round_f16(kv_none)))
        self.assertFalse(np.array_equal(none_logits, self.logits[:12]))
        np.testing.assert_allclose(none_logits, self.logits[:12], atol=0.05)
        with self.assertRaises(ValueError):
            Session(self.model, kv_f16="fp8")

    def test_without_fp8_and_fp4(self):
        # llama.cpp's semantics (llama_crosscheck.py): no FP8 on KV rows, no FP4 on the
        # indexer, no f16 storage; the Hadamard of indexer rows stays.
        c = self.model.cfg
        toks = self.tokens[:40]
        s = Session(self.model, kv_f16="none", fp8_kv=False, indexer_fp4=False, record=True)
        logits = s.prefill(toks)
        kv = s.trace[39]["l2.attn.kv"]
        self.assertFalse(np.array_equal(kv[:c.n_nope], kvsim.fp8_kv_simulate(kv, c.n_nope)[:c.n_nope]))
        q = s.trace[39]["l2.idx.q"]
        self.assertFalse(np.array_equal(q, kvsim.fp4_blocks(q)))
        row = s.trace[39]["l2.idx.comp_row"]
        self.assertFalse(np.array_equal(row, kvsim.fp4_blocks(row)))
        # Position 0 differs only by the FP8/f16 roundings of one KV row per layer.
        self.assertTrue(np.all(np.isfinite(logits)))
        d0 = np.linalg.norm(logits[0] - self.logits[0]) / np.linalg.norm(self.logits[0])
        self.assertTrue(0 < d0 < 0.2, d0)

    def test_token_out_of_range(self):
        s = Session(self.model)
        with self.assertRaisesRegex(ValueError, "outside the vocabulary"):
            s.decode(512)
        with self.assertRaisesRegex(ValueError, "outside the vocabulary"):
            s.decode(-1)


class OtherShapesAndErrorsTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self._tmp.cleanup()

    def build(self, name="m.gguf", **kw):
        p = os.path.join(self._tmp.name, name)
        build_tiny_model(p, shape=SMALL, **kw)
        return p

    def test_small_shape_runs(self):
        m = Model(self.build())
        s = Session(m, record=True)
        logits = s.prefill(list(range(20)))
        self.assertTrue(np.all(np.isfinite(logits)))
        self.assertIn("l1.idx.selected", s.trace[11])          # 3 rows > top_k 2
        self.assertNotIn("l1.idx.selected", s.trace[10])
        self.assertEqual(len(s.trace[19]["l1.idx.selected"]), 2)
        self.assertEqual(s.layers[1].comp.n, 5)
        self.assertEqual(s.layers[2].comp.n, 0)

    def assertModelError(self, fragment, **kw):
        p = self.build(**kw)
        with self.assertRaises(GGUFError) as cm:
            Model(p)
        self.assertIn(fragment, str(cm.exception))

    def test_missing_tensor(self):
        self.assertModelError("required tensor blk.1.attn_kv.weight", drop=("blk.1.attn_kv.weight",))
        self.assertModelError("required tensor blk.0.ffn_gate_tid2eid.weight",
                              drop=("blk.0.ffn_gate_tid2eid.weight",))
        self.assertModelError("required tensor blk.1.indexer.proj.weight", drop=("blk.1.indexer.proj.weight",))

    def test_optional_bias_may_be_absent(self):
        m = Model(self.build(drop=("blk.1.exp_probs_b.bias",)))
        self.assertTrue(np.all(np.isfinite(Session(m).prefill([1, 2, 3]))))

    def test_wrong_shape(self):
        # metadata key_length 16 while the tensors were written for 32
        self.assertModelError("blk.0.attn_q_b.weight has shape [32, 64], expected [32, 32]",
                              extra_metadata=(("deepseek4.attention.key_length", 16, T_U32),
                                              ("deepseek4.attention.value_length", 16, T_U32)))
        self.assertModelError("blk.2.attn_sinks.weight has shape [3], expected [2]",
                              replace={"blk.2.attn_sinks.weight": (np.zeros(3), "F32")})

    def test_metadata_errors(self):
        self.assertModelError("deepseek4.block_count has type 5, expected u32",
                              extra_metadata=(("deepseek4.block_count", 3, T_I32),))
        self.assertModelError("required metadata key deepseek4.vocab_size missing",
                              extra_metadata=(("deepseek4.vocab_size", None, None),))
        self.assertModelError("compress_ratios has 2 items, expected >= 3",
                              extra_metadata=(("deepseek4.attention.compress_ratios", [0, 4], ("array", T_I32)),))
        self.assertModelError("head_count_kv must be 1",
                              extra_metadata=(("deepseek4.attention.head_count_kv", 2, T_U32),))
        self.assertModelError("expert_group_count must be 0",
                              extra_metadata=(("deepseek4.expert_group_count", 2, T_U32),))
        self.assertModelError("expert_weights_norm has type 4, expected bool",
                              extra_metadata=(("deepseek4.expert_weights_norm", 1, T_U32),))

    def test_gate_up_type_mismatch(self):
        up = np.zeros((4, 32, 64))
        self.assertModelError("routed gate (F32) and up (F16) types differ",
                              replace={"blk.0.ffn_up_exps.weight": (up, "F16")})

    def test_hash_table_out_of_range(self):
        bad = np.full((64, 2), 9, dtype=np.int32)
        m = Model(self.build(replace={"blk.0.ffn_gate_tid2eid.weight": (bad, "I32")}))
        with self.assertRaisesRegex(GGUFError, "outside \\[0, 4\\)"):
            Session(m).decode(3)


class QuantizedModelTest(unittest.TestCase):
    """The shipped q2 type mix; the activation simulation reproduces integer dots."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls._tmp.name, "q2.gguf")
        build_tiny_model(cls.path, recipe="q2", shape=dict(n_layer=4, compress_ratios=(0, 0, 4, 128)))
        cls.model = Model(cls.path)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_types(self):
        t = {n: i.type_name for n, i in self.model.reader.tensors.items()}
        self.assertEqual(t["blk.0.attn_q_a.weight"], "Q8_0")
        self.assertEqual(t["blk.3.ffn_gate_exps.weight"], "IQ2_XXS")
        self.assertEqual(t["blk.3.ffn_down_exps.weight"], "Q2_K")
        self.assertEqual(t["token_embd.weight"], "F16")

    def test_simulated_q8_0_matvec_matches_integer_dot(self):
        toks = [5, 77, 300, 12]
        sim = Session(self.model, simulate_activation_quant=True, record=True)
        sim_logits = sim.prefill(toks)
        plain_logits = Session(self.model).prefill(toks)
        self.assertTrue(np.all(np.isfinite(sim_logits)))
        self.assertFalse(np.array_equal(sim_logits, plain_logits))
        self.assertGreater(np.corrcoef(sim_logits[0], plain_logits[0])[0, 1], 0.95)
        # l0 query LoRA: Q8_0 blocks read here from raw bytes, activation quantized here.
        h = sim.trace[0]["l0.attn.h"]
        raw = np.asarray(self.model.reader.raw("blk.0.attn_q_a.weight")).reshape(64, 8, 34)
        wd = raw[:, :, 0:2].copy().view("<f2")[:, :, 0].astype(np.float64)
        wq = raw[:, :, 2:].view(np.int8).astype(np.int64)
        hb = h.astype(np.float32).reshape(8, 32)
        dx = np.abs(hb).max(axis=1) / np.float32(127)
        qx = np.clip(np.rint(hb * (np.float32(1) / dx)[:, None]), -128, 127).astype(np.int64)
        qr = np.array([sum(wd[o, b] * float(dx[b]) * int(wq[o, b] @ qx[b]) for b in range(8)) for o in range(64)])
        ref = ops.rms_norm(qr, 1e-6, self.model.w.mat("blk.0.attn_q_a_norm.weight"))
        np.testing.assert_allclose(sim.trace[0]["l0.attn.qr"], ref, rtol=1e-12, atol=1e-12)


if __name__ == "__main__":
    unittest.main()
