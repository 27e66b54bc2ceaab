"""The training model (nano_model.Nano) computes the same function as the independent numpy
reference (tools/reference) on a tiny random f32 model: every layer kind, hash and score
routing, 160 tokens (float64; measured max rel L2 3e-15) (the ratio-4 layers pass the indexer's top-k, ratio-128 layers emit rows).

    /usr/bin/python3 -m unittest discover -s tools/train -p 'test_*.py'

Skips without torch (python3-torch)."""

import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def nano_from_gguf(path):
    """A Nano holding the float64->f32 weights of a GGUF (one vocabulary row per token)."""
    from nano_model import FLASH_CONSTANTS, Nano
    from tools.reference.model import Model
    m = Model(path)
    c = m.cfg
    cfg = dict(n_layer=c.n_layer, n_embd=c.n_embd, n_vocab=c.n_vocab, n_head=c.n_head,
               head_dim=c.head_dim, n_rot=c.n_rot, q_lora=c.q_lora, o_lora=c.o_lora,
               n_out_group=c.n_out_group, n_expert=c.n_expert, n_expert_used=c.n_expert_used,
               n_ff_exp=c.n_ff_exp, n_hash_layer=c.n_hash_layer, n_swa=c.n_swa,
               n_idx_head=c.n_idx_head, idx_head_dim=c.idx_head_dim, idx_top_k=c.idx_top_k,
               n_hc=c.n_hc, hc_iters=c.hc_iters, compress_ratios=tuple(c.compress_ratios),
               swiglu_clamp=c.swiglu_clamp[0])
    cfg.update(FLASH_CONSTANTS)
    cfg.update(hc_eps=c.hc_eps, rms_eps=c.rms_eps, expert_weight_scale=c.expert_weight_scale)
    params = {}
    from nano_model import tensor_shapes
    for name in tensor_shapes(cfg, c.n_vocab):
        if name in m.reader.tensors:
            params[name] = torch.from_numpy(np.array(m.reader.tensor(name), dtype=np.float64))
        else:  # optional routing bias
            params[name] = torch.zeros(c.n_expert, dtype=torch.float64)
    tables = [torch.from_numpy(np.array(m.w.ints("blk.%d.ffn_gate_tid2eid.weight" % il))) for il in range(c.n_hash_layer)]
    return m, Nano(cfg, torch.arange(c.n_vocab), tables, params=params)


@unittest.skipIf(torch is None, "needs torch (python3-torch)")
class NanoMatchesReference(unittest.TestCase):
    def test_logits_match_reference_on_tiny_f32(self):
        from tools.reference.model import Session
        from tools.reference.tinymodel import build_tiny_model
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tiny.gguf")
            build_tiny_model(path, seed=3, recipe="f32")
            m, nano = nano_from_gguf(path)
            nano = nano.double().eval()   # float64 like the reference: differences are rounding only
            rng = np.random.default_rng(5)
            toks = rng.integers(0, m.cfg.n_vocab, size=160)
            ref = Session(m, kv_f16="cpu").prefill(toks)
            with torch.no_grad():
                got = nano.token_logits(nano(torch.from_numpy(toks)[None]))[0].double().numpy()
        rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
        self.assertLess(rel.max(), 1e-10, "max rel L2 %g at position %d" % (rel.max(), rel.argmax()))

    def test_nll_normalises_over_shared_rows(self):
        """A vocabulary of 10 tokens on 4 rows: nll() equals the log-softmax over the expanded
        10-token logits."""
        from nano_model import Nano
        vmap = torch.tensor([0, 1, 2, 3, 3, 3, 3, 3, 3, 3])
        nano = Nano.__new__(Nano)
        torch.nn.Module.__init__(nano)
        nano.register_buffer("vmap", vmap)
        nano.register_buffer("row_logcount", torch.log(torch.bincount(vmap).double()).float())
        rl = torch.randn(2, 3, 4)
        tg = torch.tensor([[0, 5, 9], [3, 2, 1]])
        want = -torch.log_softmax(nano.token_logits(rl), -1).gather(-1, tg[..., None])[..., 0]
        self.assertTrue(torch.allclose(nano.nll(rl, tg), want, atol=1e-5))


if __name__ == "__main__":
    unittest.main()
