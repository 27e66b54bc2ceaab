"""Command line: dump contents, greedy continuation, tiny-model writing, error exit codes."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from tools.reference import cli  # noqa: E402
from tools.reference.model import Model, Session  # noqa: E402
from tools.reference.tinymodel import build_tiny_model  # noqa: E402

SMALL = dict(n_layer=3, n_embd=64, n_vocab=64, n_head=2, head_dim=32, n_rot=8, q_lora=32,
             o_lora=16, n_out_group=1, n_expert=4, n_expert_used=2, n_ff_exp=32, n_hash_layer=1,
             n_swa=4, n_idx_head=2, idx_head_dim=32, idx_top_k=2, n_hc=2, hc_iters=20,
             compress_ratios=(0, 4, 128), swiglu_clamp=10.0)


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.model_path = os.path.join(cls._tmp.name, "small.gguf")
        build_tiny_model(cls.model_path, seed=3, shape=SMALL)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def run_cli(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stderr(err):
            rc = cli.run(list(args), out=out)
        return rc, out.getvalue(), err.getvalue()

    def test_dump_and_greedy(self):
        npz = os.path.join(self._tmp.name, "o.npz")
        rc, out, err = self.run_cli("--model", self.model_path, "--tokens", "1, 2,3,4,5",
                                    "--greedy", "3", "--dump", npz, "--intermediates")
        self.assertEqual(rc, 0, err)
        d = np.load(npz)
        prompt = [1, 2, 3, 4, 5]
        g = d["greedy"].tolist()
        self.assertEqual(int(d["prompt_len"]), 5)
        self.assertEqual(d["tokens"].tolist(), prompt + g[:2])
        ref = Session(Model(self.model_path)).prefill(prompt + g[:2])
        np.testing.assert_array_equal(d["logits"], ref)
        for i in range(3):
            self.assertEqual(g[i], int(np.argmax(ref[4 + i])))
        self.assertIn("greedy: " + ",".join(map(str, g)), out)
        self.assertIn("p6/l1.attn.q", d.files)
        np.testing.assert_array_equal(d["p6/logits"], ref[6])

    def test_simulate_flag_without_dump(self):
        rc, out, _ = self.run_cli("--model", self.model_path, "--tokens", "7", "--simulate-activation-quant",
                                  "--kv-f16", "none", "--top", "2")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"top: \d+:-?\d+\.\d+, \d+:-?\d+\.\d+\n")

    def test_make_tiny(self):
        p = os.path.join(self._tmp.name, "made.gguf")
        rc, out, _ = self.run_cli("--make-tiny", p, "--recipe", "q2", "--seed", "4")
        self.assertEqual(rc, 0)
        m = Model(p)
        self.assertEqual(m.cfg.compress_ratios, [0, 0, 4, 128, 4, 128, 4])
        self.assertEqual(m.reader.tensors["blk.5.ffn_up_exps.weight"].type_name, "IQ2_XXS")

    def test_errors(self):
        cases = [
            (("--model", self.model_path, "--tokens", "1,x"), "comma-separated"),
            (("--model", self.model_path, "--tokens", ","), "is empty"),
            (("--model", self.model_path, "--tokens", "64"), "outside the vocabulary"),
            (("--model", self.model_path, "--tokens", "1", "--greedy", "-1"), "--greedy must be >= 0"),
            (("--model", os.path.join(self._tmp.name, "absent.gguf"), "--tokens", "1"), "cannot map"),
        ]
        for args, msg in cases:
            rc, _, err = self.run_cli(*args)
            self.assertEqual(rc, 2, args)
            self.assertIn(msg, err)
        with redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit):
                cli.run(["--tokens", "1"])


if __name__ == "__main__":
    unittest.main()
