"""Packs the trained ds4-nano parts (train_nano.py output) into the shipped weights file:
a GGUF holding the nano config (deepseek4.* metadata, spec §1.3) and every tensor of the ds4
layout (spec §2.2) at full vocabulary size, matrices Q8_0, vectors F32, hash tables I32; no
tokenizer (ds4-make-model adds it). Tokens without a learned row repeat the shared row, so
zstd stores them almost for free.

    python3 tools/train/pack_nano.py OUT/nano-part*.npz -o build/ds4-nano-weights.gguf
    zstd -19 --long=27 build/ds4-nano-weights.gguf -o models/ds4-nano-weights.gguf.zst

`ds4-make-model --weights models/ds4-nano-weights.gguf.zst --recipe q2|q4|f32` then writes
the runnable models.
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from tools.reference.gguf import GGUFWriter  # noqa: E402
from tools.reference.quants import quantize_q8_0  # noqa: E402
from tools.reference.tinymodel import tiny_metadata  # noqa: E402
from train_nano import NANO_SHAPE  # noqa: E402

CONTEXT_LENGTH = 1048576  # informational (deepseek4.context_length), as Flash


def nano_metadata():
    s = dict(NANO_SHAPE)
    out = []
    for key, value, vtype in tiny_metadata(s):
        if key == "general.name":
            value = "ds4-nano-weights"
        if key == "deepseek4.context_length":
            value = CONTEXT_LENGTH
        out.append((key, value, vtype))
    return out


def load_parts(paths):
    t = {}
    for p in paths:
        with np.load(p) as z:
            for k in z.files:
                t[k] = z[k]
    return t


def pack(parts, path):
    t = load_parts(parts)
    vmap = t.pop("nano.vmap").astype(np.int64)
    w = GGUFWriter()
    for key, value, vtype in nano_metadata():
        w.add_kv(key, value, vtype)
    for name in sorted(t, key=_layout_order):
        a = t[name]
        if name in ("token_embd.weight", "output.weight"):
            a = a[vmap]                                    # [n_vocab, E]: one row per token
        if a.dtype == np.int32:
            w.add_tensor(name, a, "I32")
        elif a.ndim >= 2:
            dims = tuple(reversed(a.shape))
            w.add_tensor(name, quantize_q8_0(a.astype(np.float32).reshape(-1)), "Q8_0", dims)
        else:
            w.add_tensor(name, a.astype(np.float32), "F32")
    w.write(path)


def _layout_order(name):
    if name.startswith("blk."):
        return (1, int(name.split(".")[1]), name)
    return (0 if name == "token_embd.weight" else 2, 0, name)


def main():
    ap = argparse.ArgumentParser(description="Pack ds4-nano parts into the weights GGUF.")
    ap.add_argument("parts", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    pack(a.parts, a.output)


if __name__ == "__main__":
    main()
