"""Self-tests of the parity helpers in the reference: near-tie adoption (guide.Guide),
teacher forcing, and the f32 RoPE angles of the CPU (ops.RopeParams(f32_angles=True))."""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from tools.reference import ops  # noqa: E402
from tools.reference.guide import Guide  # noqa: E402


def half_grid(y):
    """Round to multiples of 0.5, ties to even multiples (a stand-in rounding step)."""
    return np.round(np.asarray(y) * 2.0) / 2.0


class QuantizedTest(unittest.TestCase):
    def test_near_tie_is_adopted_with_its_distance(self):
        y = np.array([0.2499999, 1.0, -0.74])
        value = half_grid(y)                       # [0, 1, -0.5]
        g = Guide({3: {"x": np.array([0.5, 1.0, -0.5], dtype=np.float32)}}, eps=1e-4)
        out = g.quantized(3, "x", y, half_grid, value)
        np.testing.assert_array_equal(out, [0.5, 1.0, -0.5])
        self.assertEqual(len(g.events), 1)
        e = g.events[0]
        self.assertEqual((e["pos"], e["name"], e["kind"], e["changed"]), (3, "x", "rounding", 1))
        self.assertAlmostEqual(e["need"], 1e-7, delta=1e-9)   # 0.25 - y[0], relative to max|y| = 1
        self.assertEqual(g.refused, [])

    def test_far_difference_is_refused(self):
        y = np.array([0.2, 1.0])
        g = Guide({0: {"x": np.array([0.5, 1.0])}}, eps=1e-4)
        out = g.quantized(0, "x", y, half_grid, half_grid(y))
        np.testing.assert_array_equal(out, [0.0, 1.0])
        self.assertEqual(g.events, [])
        self.assertEqual(g.refused, [(0, "x", "rounding")])

    def test_equal_or_missing_entries_change_nothing(self):
        y = np.array([0.3, 1.0])
        g = Guide({0: {"x": half_grid(y)}}, eps=1e-4)
        self.assertIs(g.quantized(0, "x", y, half_grid, half_grid(y)).dtype, np.dtype(np.float64))
        v = half_grid(y)
        self.assertIs(g.quantized(1, "x", y, half_grid, v), v)
        self.assertIs(g.quantized(0, "other", y, half_grid, v), v)
        self.assertEqual((g.events, g.refused), ([], []))

    def test_eps_must_be_positive(self):
        with self.assertRaises(ValueError):
            Guide({}, eps=0.0)


class SelectionTest(unittest.TestCase):
    def test_near_tie_selection_is_adopted(self):
        score = np.array([1.0, 0.99999999, 1.00000001, 0.2])     # our top-2: {2, 0}
        g = Guide({5: {"s": np.array([0, 1], dtype=np.int32)}}, eps=1e-4)
        out = g.selection(5, "s", score, np.array([2, 0]))
        self.assertEqual(sorted(out.tolist()), [0, 1])
        self.assertEqual(g.events[0]["kind"], "selection")
        self.assertAlmostEqual(g.events[0]["need"], 2e-8, delta=1e-12)

    def test_real_difference_is_refused(self):
        score = np.array([1.0, 0.9, 0.5])
        g = Guide({0: {"s": np.array([1, 2])}}, eps=1e-4)
        out = g.selection(0, "s", score, np.array([0, 1]))
        self.assertEqual(out.tolist(), [0, 1])
        self.assertEqual(g.refused, [(0, "s", "selection")])

    def test_invalid_other_choice_is_refused(self):
        score = np.array([1.0, 1.0, 0.5])
        for other in ([0, 0], [0, 7], [0]):
            g = Guide({0: {"s": np.array(other)}}, eps=1e-4)
            self.assertEqual(g.selection(0, "s", score, np.array([0, 1])).tolist(), [0, 1])
            self.assertEqual(len(g.refused), 1, other)

    def test_same_set_takes_the_other_order_without_an_event(self):
        g = Guide({0: {"s": np.array([2, 0, 1])}}, eps=1e-4)
        out = g.selection(0, "s", np.array([3.0, 2.0, 1.0]), np.array([0, 1, 2]))
        self.assertEqual(out.tolist(), [2, 0, 1])
        self.assertEqual((g.events, g.refused), ([], []))


class TokenTest(unittest.TestCase):
    def test_greedy_near_tie(self):
        logits = np.array([0.0, 5.0, 4.9999999, -1.0])
        g = Guide({}, eps=1e-4)
        self.assertEqual(g.token(9, logits, 1, 2), 2)
        self.assertEqual(g.events[0]["pos"], 9)
        self.assertEqual(g.token(9, logits, 1, 0), 1)
        self.assertEqual(g.refused, [(9, "greedy", "token")])
        self.assertEqual(g.token(9, logits, 1, 1), 1)


class ForcedTest(unittest.TestCase):
    def test_forced_takes_the_other_value_in_our_dtype_and_shape(self):
        g = Guide({2: {"a": np.arange(6, dtype=np.float32), "n": np.array(3, dtype=np.int32)}},
                  eps=1e-4, force=True)
        out = g.forced(2, "a", np.zeros((2, 3)))
        self.assertEqual((out.shape, out.dtype), ((2, 3), np.dtype(np.float64)))
        np.testing.assert_array_equal(out, [[0, 1, 2], [3, 4, 5]])
        v = np.zeros(4)
        self.assertIs(g.forced(2, "a", v), v)          # size mismatch: keep ours
        self.assertIs(g.forced(1, "a", v), v)          # no such position
        self.assertEqual(int(g.forced(2, "n", 7)), 3)


class RopeF32Test(unittest.TestCase):
    def test_plain_angles_are_the_f32_running_product(self):
        rope = ops.RopeParams(16, 10000.0, f32_angles=True)
        scale = np.float32(10000.0 ** (-2.0 / 16))
        for pos in (0, 1, 61, 600, 65535):
            chain = np.cumprod(np.array([pos] + [scale] * 7, dtype=np.float32), dtype=np.float32)
            np.testing.assert_array_equal(rope.angles(pos), chain.astype(np.float64))
            exact = ops.RopeParams(16, 10000.0).angles(pos)
            np.testing.assert_allclose(rope.angles(pos), exact, rtol=1e-6, atol=0)

    def test_yarn_blend_in_f32(self):
        rope = ops.RopeParams(16, 160000.0, (1.0 / 16, 3, 7), f32_angles=True)
        exact = ops.RopeParams(16, 160000.0, (1.0 / 16, 3, 7))
        for pos in (5, 600):
            a = rope.angles(pos)
            self.assertEqual(a.dtype, np.float64)
            np.testing.assert_array_equal(a, a.astype(np.float32))   # f32 values
            np.testing.assert_allclose(a, exact.angles(pos), rtol=2e-6, atol=0)
            c, s = rope.cos_sin(pos)
            np.testing.assert_array_equal(c, np.cos(a).astype(np.float32))
            np.testing.assert_array_equal(s, np.sin(a).astype(np.float32))

    def test_rotation_uses_the_f32_tables(self):
        rope = ops.RopeParams(4, 10000.0, f32_angles=True)
        x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])          # last 4 dims rotate
        y = ops.rope_tail(x, 600, rope)
        c, s = rope.cos_sin(600)
        self.assertEqual(y[0], 1.0)
        self.assertAlmostEqual(y[1], 2.0 * c[0] - 3.0 * s[0], places=14)
        self.assertAlmostEqual(y[2], 2.0 * s[0] + 3.0 * c[0], places=14)
        # f32 cos/sin are not exactly unit length: the inverse undoes the turn to ~1e-7.
        np.testing.assert_allclose(ops.rope_tail(y, 600, rope, inverse=True), x, rtol=0, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
