"""Hand-computed cases for FP8/FP4/Hadamard/f16 (spec §3.4.4, §3.4.7, §7.2), Sinkhorn and
the HC split/post (§3.3), RoPE + YaRN (§1.4, §3.4.3) and softplus."""

import math
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from tools.reference import kvsim, ops  # noqa: E402


class FP8Test(unittest.TestCase):
    def test_table(self):
        t = kvsim.E4M3FN_TABLE
        self.assertEqual(len(t), 127)
        self.assertEqual(t[126], 448.0)
        self.assertEqual(t[1], 2.0 ** -9)
        self.assertEqual(t[7], 7 * 2.0 ** -9)
        self.assertEqual(t[8], 2.0 ** -6)
        self.assertEqual(t[56], 1.0)
        self.assertEqual(t[57], 1.125)
        self.assertTrue(np.all(np.diff(t) > 0))

    def test_rounding_and_ties(self):
        v = np.array([448.0, 1.0625, 1.1875, -0.3, 2.0 ** -10, 3 * 2.0 ** -10, -500.0 / 2])
        got = kvsim.fp8_e4m3_block(v)          # amax 448 -> scale 1
        # 1.0625: tie 1.0 (idx 56) / 1.125 (57) -> even 56; 1.1875: tie 57/58 -> 58 (1.25);
        # 0.3 -> 0.3125 (nearer than 0.28125); 2^-10: tie 0 / 2^-9 -> 0;
        # 3*2^-10: tie 2^-9 (idx 1) / 2^-8 (idx 2) -> 2^-8; 250 -> 256 (nearer than 240).
        np.testing.assert_array_equal(got, [448.0, 1.0, 1.25, -0.3125, 0.0, 2.0 ** -8, -256.0])

    def test_block_scale(self):
        got = kvsim.fp8_e4m3_block(np.array([449.0, 3.0, -0.001]))
        # scale = 2^ceil(log2(449/448)) = 2: 224.5 -> 224, 1.5 exact, -0.0005 is below half
        # the smallest subnormal 2^-9 and rounds to (negative) zero.
        np.testing.assert_array_equal(got, [448.0, 3.0, -0.0])
        tiny = kvsim.fp8_e4m3_block(np.zeros(4))
        np.testing.assert_array_equal(tiny, np.zeros(4))

    def test_pow2_ceil_exact(self):
        np.testing.assert_array_equal(kvsim.pow2_ceil(np.array([1.0, 1.0 + 2 ** -52, 0.75, 0.5, 3.0, 2.0 ** -130])),
                                      [1.0, 2.0, 1.0, 0.5, 4.0, 2.0 ** -130])

    def test_kv_row_blocks_and_tail(self):
        x = np.zeros(80)
        x[0] = 896.0          # block 0 (dims 0..63): scale 2
        x[1] = 3.1            # 1.55 -> 1.5 (E4M3 step 0.125 near 1.5) -> 3.0
        x[64] = 0.3           # block 1 (dims 64..71, partial): scale 2^ceil(log2(0.3/448)) = 2^-10
        x[72:80] = 0.123456   # RoPE tail untouched
        y = kvsim.fp8_kv_simulate(x, 72)
        self.assertEqual(y[0], 896.0)
        self.assertEqual(y[1], 3.0)
        # 0.3 / 2^-10 = 307.2 -> E4M3 neighbours 288 and 320 -> 320 -> 0.3125
        self.assertEqual(y[64], 0.3125)
        np.testing.assert_array_equal(y[72:], x[72:])


class FP4HadamardTest(unittest.TestCase):
    def test_fp4_rounding_ties(self):
        v = np.zeros(32)
        v[:8] = [6.0, 2.5, 5.0, 0.25, 0.75, -1.25, 3.4, -6.0]
        got = kvsim.fp4_e2m1_block(v)
        np.testing.assert_array_equal(got[:8], [6.0, 2.0, 4.0, 0.0, 1.0, -1.0, 3.0, -6.0])

    def test_fp4_scale(self):
        v = np.zeros(32)
        v[:3] = [7.0, 1.0, 0.6]
        got = kvsim.fp4_e2m1_block(v)           # scale 2: 3.5 -> tie 3/4 -> 4; 0.5 -> 0.5; 0.3 -> 0.5
        np.testing.assert_array_equal(got[:3], [8.0, 1.0, 1.0])

    def test_hadamard_hand_and_matrix(self):
        np.testing.assert_allclose(kvsim.hadamard(np.array([1.0, 2.0, 3.0, 4.0])), [5.0, -1.0, -2.0, 0.0])
        h = np.array([[1.0]])
        for _ in range(5):
            h = np.block([[h, h], [h, -h]])
        x = np.random.default_rng(3).standard_normal((3, 32))
        np.testing.assert_allclose(kvsim.hadamard(x), x @ h.T / math.sqrt(32), rtol=0, atol=1e-13)
        with self.assertRaises(ValueError):
            kvsim.hadamard(np.zeros(12))

    def test_indexer_qat(self):
        x = np.zeros(32)
        x[0] = 32.0 / math.sqrt(32)              # Hadamard of e_0 * c = constant row
        got = kvsim.indexer_qat(x)
        # Hadamard gives 1.0 everywhere: amax 1 -> scale 2^ceil(log2(1/6)) = 0.25, 4 -> 4 exact
        np.testing.assert_allclose(got, np.ones(32))
        with self.assertRaises(ValueError):
            kvsim.indexer_qat(np.zeros(16))

    def test_f16_round(self):
        with np.errstate(over="ignore"):
            got = kvsim.round_f16(np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 70000.0, 1e-8]))
        np.testing.assert_array_equal(got, [1.0, 1 + 2.0 ** -9, np.inf, 0.0])


def sinkhorn_scalar(L, iters, eps):
    n = len(L)
    M = []
    for r in range(n):
        mx = max(L[r])
        e = [math.exp(v - mx) for v in L[r]]
        s = sum(e)
        M.append([v / s + eps for v in e])
    for it in range(iters):
        if it > 0:
            for r in range(n):
                s = sum(M[r]) + eps
                M[r] = [v / s for v in M[r]]
        for c in range(n):
            s = sum(M[r][c] for r in range(n)) + eps
            for r in range(n):
                M[r][c] /= s
    return np.array(M)


def sig(z):
    return 1.0 / (1.0 + math.exp(-z))


class HyperConnectionTest(unittest.TestCase):
    def test_sinkhorn_uniform_hand(self):
        eps = 1e-6
        got = ops.sinkhorn(np.zeros((4, 4)), 1, eps)
        np.testing.assert_allclose(got, np.full((4, 4), (0.25 + eps) / (1 + 5 * eps)), rtol=1e-15)

    def test_sinkhorn_against_scalar(self):
        L = np.random.default_rng(5).standard_normal((4, 4)) * 3
        got = ops.sinkhorn(L, 20, 1e-6)
        np.testing.assert_allclose(got, sinkhorn_scalar(L.tolist(), 20, 1e-6), rtol=1e-13)
        np.testing.assert_allclose(got.sum(axis=0), 1.0, atol=1e-5)
        # rows converge more slowly: 20 iterations leave them within a few percent
        np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=5e-2)

    def test_split_and_post(self):
        rng = np.random.default_rng(9)
        n = 2
        mix = rng.standard_normal(2 * n + n * n)
        scale = np.array([0.5, 1.5, 2.0])
        base = rng.standard_normal(2 * n + n * n)
        pre, post, comb = ops.hc_split(mix, scale, base, n, 20, 1e-6)
        for i in range(n):
            self.assertAlmostEqual(pre[i], sig(mix[i] * 0.5 + base[i]) + 1e-6, places=15)
            self.assertAlmostEqual(post[i], 2 * sig(mix[n + i] * 1.5 + base[n + i]), places=15)
        L = [[mix[2 * n + n * r + c] * 2.0 + base[2 * n + n * r + c] for c in range(n)] for r in range(n)]
        np.testing.assert_allclose(comb, sinkhorn_scalar(L, 20, 1e-6), rtol=1e-13)
        X = rng.standard_normal((n, 5))
        y = rng.standard_normal(5)
        out = ops.hc_post(y, X, post, comb)
        for c in range(n):
            ref = post[c] * y + sum(comb[r][c] * X[r] for r in range(n))
            np.testing.assert_allclose(out[c], ref, rtol=1e-14)


class RopeTest(unittest.TestCase):
    def test_plain_rotation_hand(self):
        rope = ops.RopeParams(4, 10000.0)
        x = np.array([7.0, 8.0, 1.0, 0.0, 0.0, 1.0])
        y = ops.rope_tail(x, 1, rope)
        np.testing.assert_allclose(y, [7.0, 8.0, math.cos(1), math.sin(1), -math.sin(0.01), math.cos(0.01)],
                                   rtol=1e-15, atol=1e-16)
        np.testing.assert_allclose(ops.rope_tail(y, 1, rope, inverse=True), x, atol=1e-15)
        np.testing.assert_array_equal(ops.rope_tail(x, 0, rope), x)

    def test_yarn_real_model_numbers(self):
        low, high = ops.yarn_corr_dims(64, 160000.0, 65536, 32.0, 1.0)
        self.assertEqual((low, high), (15, 25))
        rope = ops.RopeParams(64, 160000.0, (1.0 / 16, low, high))
        ext = lambda k: 160000.0 ** (-2.0 * k / 64)  # noqa: E731
        expect = {10: ext(10), 15: ext(15), 30: ext(30) / 16, 25: ext(25) / 16,
                  20: ext(20) * (0.5 / 16 + 0.5)}
        for k, v in expect.items():
            np.testing.assert_allclose(rope.inv_freq[k], v, rtol=1e-14, err_msg="pair %d" % k)

    def test_batch_heads(self):
        rope = ops.RopeParams(2, 10.0)
        x = np.array([[0.0, 1.0, 0.0], [5.0, 0.0, 2.0]])
        y = ops.rope_tail(x, 2, rope)
        np.testing.assert_allclose(y, [[0.0, math.cos(2), math.sin(2)], [5.0, -2 * math.sin(2), 2 * math.cos(2)]],
                                   atol=1e-15)


class ActivationFunctionTest(unittest.TestCase):
    def test_softplus_pieces(self):
        got = ops.softplus(np.array([30.0, 20.0, 0.0, -20.0, -30.0]))
        np.testing.assert_allclose(got, [30.0, math.log1p(math.exp(20)), math.log(2), math.log1p(math.exp(-20)),
                                         math.exp(-30)], rtol=1e-15)

    def test_sigmoid_silu_extremes(self):
        np.testing.assert_allclose(ops.sigmoid(np.array([0.0, 800.0, -800.0])), [0.5, 1.0, 0.0])
        np.testing.assert_allclose(ops.silu(np.array([2.0, -1000.0])), [2 * sig(2.0), 0.0])

    def test_rms_norm(self):
        x = np.array([3.0, 4.0])
        np.testing.assert_allclose(ops.rms_norm(x, 0.0), x / math.sqrt(12.5))
        np.testing.assert_allclose(ops.rms_norm(x, 1e-6, np.array([2.0, 0.5])),
                                   x * [2.0, 0.5] / math.sqrt(12.5 + 1e-6))


if __name__ == "__main__":
    unittest.main()
