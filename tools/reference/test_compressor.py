"""Compressor frontier and emission (spec §3.4.5) on hand-made token streams, checked
against softmax pools written out here with scalar loops."""

import math
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from tools.reference.model import Compressor  # noqa: E402


def pool(cands):
    """cands: list of (score, kv) -> softmax(score)-weighted kv."""
    m = max(s for s, _ in cands)
    w = [math.exp(s - m) for s, _ in cands]
    return sum(wi * kv for wi, (_, kv) in zip(w, cands)) / sum(w)


class Ratio4Test(unittest.TestCase):
    """Overlapping windows: D = 2, state rows are [first half | second half] of width 4."""

    def setUp(self):
        rng = np.random.default_rng(11)
        self.k = rng.standard_normal((12, 4))
        self.s = rng.standard_normal((12, 4))
        self.c = Compressor(4, 2)
        self.rows = {}
        for p in range(12):
            r = self.c.update(self.k[p], self.s[p], p)
            if r is not None:
                self.rows[p] = r

    def test_emits_at_window_ends_only(self):
        self.assertEqual(sorted(self.rows), [3, 7, 11])

    def test_first_window_uses_only_current_second_half(self):
        for j in range(2):
            expect = pool([(self.s[p][2 + j], self.k[p][2 + j]) for p in range(4)])
            self.assertAlmostEqual(self.rows[3][j], expect, places=14)

    def test_later_windows_blend_previous_first_half(self):
        for end in (7, 11):
            prev = range(end - 7, end - 3)
            cur = range(end - 3, end + 1)
            for j in range(2):
                cands = [(self.s[p][j], self.k[p][j]) for p in prev]
                cands += [(self.s[p][2 + j], self.k[p][2 + j]) for p in cur]
                self.assertAlmostEqual(self.rows[end][j], pool(cands), places=14)

    def test_frontier_after_shift(self):
        # After the emission at p = 11 rows 0..3 and 4..7 both hold tokens 8..11.
        np.testing.assert_array_equal(self.c.state_kv[:4], self.k[8:12])
        np.testing.assert_array_equal(self.c.state_kv[4:], self.k[8:12])
        np.testing.assert_array_equal(self.c.state_score[:4], self.s[8:12])


class NonOverlappingTest(unittest.TestCase):
    def test_ratio3_pools_each_window(self):
        rng = np.random.default_rng(12)
        k = rng.standard_normal((6, 3))
        s = rng.standard_normal((6, 3)) * 4
        c = Compressor(3, 3)
        out = {p: c.update(k[p], s[p], p) for p in range(6)}
        self.assertEqual([p for p, r in out.items() if r is not None], [2, 5])
        for end in (2, 5):
            for j in range(3):
                expect = pool([(s[p][j], k[p][j]) for p in range(end - 2, end + 1)])
                self.assertAlmostEqual(out[end][j], expect, places=14)

    def test_ratio128_state_rows(self):
        c = Compressor(128, 1)
        self.assertEqual(c.state_kv.shape, (128, 1))
        for p in range(127):
            self.assertIsNone(c.update(np.array([float(p)]), np.array([0.0]), p))
        row = c.update(np.array([127.0]), np.array([0.0]), 127)
        self.assertAlmostEqual(row[0], 63.5, places=12)      # equal scores -> plain mean

    def test_all_empty_scores_give_zero(self):
        c = Compressor(2, 2)
        c.update(np.array([5.0, 1.0]), np.array([-1e30, 0.0]), 0)
        row = c.update(np.array([7.0, 2.0]), np.array([-1e30, 0.0]), 1)
        self.assertEqual(row[0], 0.0)
        self.assertAlmostEqual(row[1], 1.5, places=14)


if __name__ == "__main__":
    unittest.main()
