"""Self-tests of parity.py that need no C++ build: the trace file parser and the comparison
(first-divergence localisation, discrete choices, greedy bookkeeping)."""

import os
import struct
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from tools.reference import parity  # noqa: E402


def record(name, pos, values, dims, dtype=0):
    b = name.encode()
    out = struct.pack("<I", len(b)) + b + struct.pack("<qBBH", pos, dtype, len(dims), 0)
    out += struct.pack("<%dq" % len(dims), *dims)
    return out + np.asarray(values, dtype="<f4" if dtype == 0 else "<i4").tobytes()


class ReadTraceTest(unittest.TestCase):
    def write(self, data):
        fd, path = tempfile.mkstemp(suffix=".bin")
        os.write(fd, data)
        os.close(fd)
        self.addCleanup(os.remove, path)
        return path

    def test_round_trip(self):
        data = b"DS4TRACE" + struct.pack("<I", 1)
        data += record("l2.attn.q", 3, [[1.5, -2.0, 0.25], [8, 0, 1]], [2, 3])
        data += record("l2.router.experts", 3, [4, 9, 1], [3], dtype=1)
        data += record("l3.attn.n_comp", 4, [17], [], dtype=1)
        t = parity.read_trace(self.write(data))
        self.assertEqual(sorted(t), [3, 4])
        np.testing.assert_array_equal(t[3]["l2.attn.q"], [[1.5, -2.0, 0.25], [8, 0, 1]])
        self.assertEqual(t[3]["l2.router.experts"].dtype, np.int32)
        self.assertEqual(t[4]["l3.attn.n_comp"].shape, ())
        self.assertEqual(int(t[4]["l3.attn.n_comp"]), 17)

    def test_bad_files(self):
        with self.assertRaisesRegex(ValueError, "not a DS4TRACE"):
            parity.read_trace(self.write(b"GGUF" + b"\0" * 20))
        with self.assertRaisesRegex(ValueError, "version 2"):
            parity.read_trace(self.write(b"DS4TRACE" + struct.pack("<I", 2)))
        good = b"DS4TRACE" + struct.pack("<I", 1) + record("x", 0, [1, 2, 3], [3])
        with self.assertRaisesRegex(ValueError, "truncated"):
            parity.read_trace(self.write(good[:-2]))
        with self.assertRaisesRegex(ValueError, "truncated"):
            parity.read_trace(self.write(good[:20]))


def run_pair(n=4, vocab=6, greedy=2):
    """A synthetic reference run and an identical C++ run (f32 copy)."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(n, vocab))
    trace = []
    for p in range(n):
        trace.append({"l0.attn.kv": rng.normal(size=8), "l0.router.experts": np.array([3, 1]),
                      "l0.router.weights": np.array([0.9, 0.6]),
                      "l0.ffn.expert_out": rng.normal(size=(2, 4)),
                      "l1.attn.kv": rng.normal(size=8), "logits": logits[p]})
    tokens = np.arange(n - greedy + 1, dtype=np.int64)
    gen = [int(np.argmax(logits[len(tokens) - 1 + i])) for i in range(greedy)]
    tokens = np.concatenate([tokens, gen[:-1]]).astype(np.int64)
    ref = {"tokens": tokens, "logits": logits, "greedy": np.array(gen), "trace": trace}
    cpp = {"tokens": tokens.copy(), "logits": logits.astype(np.float32), "greedy": np.array(gen),
           "prompt_len": n - greedy + 1,
           "trace": {p: {k: np.asarray(v, dtype=np.float32 if np.asarray(v).dtype.kind == "f" else np.int32)
                         for k, v in rec.items()} for p, rec in enumerate(trace)}}
    return cpp, ref


class CompareTest(unittest.TestCase):
    def test_identical_runs_pass(self):
        cpp, ref = run_pair()
        s = parity.compare(cpp, ref, 1e-4, 1e-4, expect_greedy=True)
        self.assertEqual(s["failures"], [])
        self.assertIsNone(s["first_divergence"])
        self.assertEqual(s["greedy_match"], 2)
        self.assertEqual(s["argmax_agree"], 4)
        self.assertLess(s["logits_rel_l2_max"], 1e-6)

    def test_selection_order_is_not_a_difference(self):
        cpp, ref = run_pair()
        rec = cpp["trace"][1]
        rec["l0.router.experts"] = rec["l0.router.experts"][::-1].copy()
        rec["l0.router.weights"] = rec["l0.router.weights"][::-1].copy()
        rec["l0.ffn.expert_out"] = rec["l0.ffn.expert_out"][::-1].copy()
        s = parity.compare(cpp, ref, 1e-4, 1e-4, expect_greedy=True)
        self.assertEqual(s["failures"], [])

    def test_first_divergence_is_earliest_position_then_layer(self):
        cpp, ref = run_pair()
        cpp["trace"][2]["l1.attn.kv"] = cpp["trace"][2]["l1.attn.kv"] + 1.0
        cpp["trace"][2]["l0.ffn.expert_out"] = cpp["trace"][2]["l0.ffn.expert_out"] * 1.01
        cpp["trace"][3]["l0.attn.kv"] = cpp["trace"][3]["l0.attn.kv"] + 1.0
        cpp["logits"][3] += 0.5
        s = parity.compare(cpp, ref, 1e-4, 1e-4, expect_greedy=True)
        self.assertTrue(any("logits relative L2" in f for f in s["failures"]))
        fd = s["first_divergence"]
        self.assertEqual((fd["pos"], fd["name"]), (2, "l0.ffn.expert_out"))
        self.assertAlmostEqual(fd["rel_l2"], 0.01, places=5)

    def test_discrete_and_greedy_differences_fail(self):
        cpp, ref = run_pair()
        cpp["trace"][1]["l0.router.experts"] = np.array([3, 2], dtype=np.int32)
        cpp["greedy"] = cpp["greedy"].copy()
        cpp["greedy"][1] = (cpp["greedy"][1] + 1) % 6
        s = parity.compare(cpp, ref, 1e-4, 1e-4, expect_greedy=True)
        self.assertEqual(s["discrete_bad"], {"router.experts": 1})
        self.assertEqual(s["greedy_match"], 1)
        self.assertEqual(len(s["failures"]), 2)
        self.assertEqual((s["first_divergence"]["pos"], s["first_divergence"]["name"]),
                         (1, "l0.router.experts"))

    def test_missing_trace_entry_is_reported(self):
        cpp, ref = run_pair()
        del cpp["trace"][0]["l1.attn.kv"]
        s = parity.compare(cpp, ref, 1e-4, 1e-4, expect_greedy=True)
        self.assertEqual(s["first_divergence"]["name"], "l1.attn.kv")
        self.assertIn("missing", s["first_divergence"]["detail"])
        self.assertTrue(s["failures"])


if __name__ == "__main__":
    unittest.main()
