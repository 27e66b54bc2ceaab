"""Tests of llama_compat.py: the rewrite of a ds4 GGUF into llama.cpp's deepseek4 dialect."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from tools.reference import gguf as G  # noqa: E402
from tools.reference.llama_compat import llama_shape_problems, to_llama_cpp  # noqa: E402
from tools.reference.tinymodel import build_tiny_model  # noqa: E402


class LlamaCompatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        base = os.path.join(cls._tmp.name, "base.gguf")
        # u64 context lengths as ds4 writes them; indexer head 64 (llama.cpp needs >= 64).
        build_tiny_model(base, seed=3, shape={"idx_head_dim": 64}, extra_metadata=(
            ("deepseek4.context_length", 1 << 20, G.T_U64),
            ("deepseek4.rope.scaling.original_context_length", 65536, G.T_U64)))
        # Plus the (unused) router bias on the hash layers, as ds4-make-model writes it.
        r = G.GGUFReader(base)
        w = G.GGUFWriter(r.alignment)
        for k, v in r.metadata.items():
            t = r.metadata_types[k]
            w.add_kv(k, v, ("array", v.item_type) if t == G.T_ARRAY else t)
        for name, ti in r.tensors.items():
            w._names.add(name)
            w.tensors.append((name, tuple(ti.dims), ti.type_id, bytes(r.raw(name))))
        n_expert = r.get("deepseek4.expert_count")
        for il in range(r.get("deepseek4.hash_layer_count")):
            w.add_tensor("blk.%d.exp_probs_b.bias" % il, [0.25] * n_expert, "F32")
        cls.src = os.path.join(cls._tmp.name, "ds4.gguf")
        w.write(cls.src)
        cls.dst = os.path.join(cls._tmp.name, "llama.gguf")
        cls.changes = to_llama_cpp(cls.src, cls.dst)
        cls.a, cls.b = G.GGUFReader(cls.src), G.GGUFReader(cls.dst)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_metadata_rules(self):
        for key in ("deepseek4.context_length", "deepseek4.rope.scaling.original_context_length"):
            self.assertEqual(self.a.metadata_types[key], G.T_U64)
            self.assertEqual(self.b.metadata_types[key], G.T_U32)
            self.assertEqual(self.b.get(key), self.a.get(key))
        self.assertEqual(self.b.get("deepseek4.expert_gating_func"), 4)
        self.assertEqual(self.b.metadata_types["deepseek4.expert_gating_func"], G.T_U32)
        self.assertEqual(self.b.get("deepseek4.rope.scaling.type"), "yarn")
        for key, value in self.a.metadata.items():      # everything else unchanged
            if key not in ("deepseek4.context_length", "deepseek4.rope.scaling.original_context_length"):
                got = self.b.get(key)
                self.assertEqual(got.tolist() if isinstance(got, G.GGUFArray) else got,
                                 value.tolist() if isinstance(value, G.GGUFArray) else value, key)
        self.assertEqual(len(self.changes), 7, self.changes)

    def test_tensors(self):
        n_hash = self.a.get("deepseek4.hash_layer_count")
        dropped = {"blk.%d.exp_probs_b.bias" % il for il in range(n_hash)}
        self.assertTrue(dropped <= set(self.a.tensors))
        self.assertEqual(set(self.b.tensors), set(self.a.tensors) - dropped)
        self.assertIn("blk.%d.exp_probs_b.bias" % n_hash, self.b.tensors)
        for name, ti in self.b.tensors.items():
            self.assertEqual(ti.dims, self.a.tensors[name].dims, name)
            self.assertEqual(ti.type_id, self.a.tensors[name].type_id, name)
            self.assertEqual(bytes(self.b.raw(name)), bytes(self.a.raw(name)), name)

    def test_idempotent(self):
        again = os.path.join(self._tmp.name, "again.gguf")
        self.assertEqual(to_llama_cpp(self.dst, again), [])

    def test_rejects_small_indexer_head(self):
        path = os.path.join(self._tmp.name, "idx32.gguf")
        build_tiny_model(path, seed=1)                     # indexer head 32
        self.assertEqual(len(llama_shape_problems(G.GGUFReader(path))), 1)
        with self.assertRaisesRegex(G.GGUFError, "indexer head size 32"):
            to_llama_cpp(path, os.path.join(self._tmp.name, "x.gguf"))

    def test_rejects_other_gating(self):
        path = os.path.join(self._tmp.name, "softmax.gguf")
        build_tiny_model(path, seed=1, shape={"idx_head_dim": 64},
                         extra_metadata=(("deepseek4.expert_gating_func", 1, G.T_U32),))
        with self.assertRaisesRegex(G.GGUFError, "expert_gating_func is 1"):
            to_llama_cpp(path, os.path.join(self._tmp.name, "x.gguf"))

    def test_rejects_other_architecture(self):
        path = os.path.join(self._tmp.name, "arch-llama.gguf")
        build_tiny_model(path, seed=1, shape={"idx_head_dim": 64},
                         extra_metadata=(("general.architecture", "llama", G.T_STRING),))
        with self.assertRaisesRegex(G.GGUFError, "expected 'deepseek4'"):
            to_llama_cpp(path, os.path.join(self._tmp.name, "x.gguf"))


if __name__ == "__main__":
    unittest.main()
