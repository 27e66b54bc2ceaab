"""Trains ds4-nano (docs/nano.md): the DeepSeek V4 architecture at a small shape, on the token
files written by ds4-tokenize, reproducibly from a seed.

    python3 tools/train/train_nano.py --data DIR --out OUT [--minutes 4] [--seed 1]

DIR holds train/<name>.u32 and heldout/<name>.u32 (little-endian uint32 token ids) and, for the
chat view (tools/train/chat_view.py, tokenized with `ds4-tokenize --specials`), train_chat/ and
heldout_chat/ of the same names; --chat-share of the training windows then come from the chat
view, starting at an example's <｜begin▁of▁sentence｜>. Writes to
OUT: nano-part{0,1,2,3}.npz (trained weights: f16 matrices, f32 vectors, vocabulary rows +
vmap + hash tables; each part < 16 MiB) and train-log.json (config, loss curve, held-out
losses). tools/train/pack_nano.py turns the parts into the shipped weights GGUF.
"""

import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nano_model import FLASH_CONSTANTS, Nano, ratio_schedule  # noqa: E402

N_VOCAB = 129280
BOS_ID = 0             # <｜begin▁of▁sentence｜>
FIRST_ADDED_ID = 128000  # V4 added tokens (<｜User｜>, <｜Assistant｜>, </think>, ...) start here

# The nano shape (C++ twin: model::Config::nano, src/model/config.cpp).
NANO_SHAPE = dict(
    n_layer=6, n_embd=256, n_vocab=N_VOCAB, n_head=4, head_dim=128, n_rot=32, q_lora=128,
    o_lora=64, n_out_group=2, n_expert=4, n_expert_used=2, n_ff_exp=256, n_hash_layer=2,
    n_swa=128, n_idx_head=4, idx_head_dim=64, idx_top_k=32, n_hc=4, hc_iters=20,
    compress_ratios=ratio_schedule(6), swiglu_clamp=10.0,
)

# Sampling weight of each corpus (Italian and English prose first; the Bible is large).
CORPUS_WEIGHT = dict(promessi_sposi=0.30, tiny_shakespeare=0.22, bible_kjv=0.22, jargon=0.16,
                     devils_dictionary=0.10)


def full_cfg():
    c = dict(NANO_SHAPE)
    c.update(FLASH_CONSTANTS)
    return c


def load_tokens(folder):
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.u32"))):
        out[os.path.basename(path)[:-4]] = np.fromfile(path, dtype="<u4").astype(np.int64)
    if not out:
        raise SystemExit("no .u32 files in %s" % folder)
    return out


def vocab_rows(train, n_rows, forced=()):
    """vmap [N_VOCAB]: the `forced` ids (the chat view's special tokens), then the most
    frequent training tokens get rows 0.. (by frequency, ties by id), n_rows-1 in all; every
    other token shares the last row."""
    counts = np.bincount(np.concatenate(list(train.values())), minlength=N_VOCAB)
    key = -counts.astype(np.float64)
    key[list(forced)] = -np.inf
    order = np.lexsort((np.arange(N_VOCAB), key))
    k = min(n_rows - 1, int((counts > 0).sum()))
    vmap = np.full(N_VOCAB, k, dtype=np.int64)
    vmap[order[:k]] = np.arange(k)
    covered = counts[order[:k]].sum() / counts.sum()
    return vmap, k, covered


def hash_tables(cfg, seed):
    """ffn_gate_tid2eid of each hash layer: n_used distinct random experts per token."""
    rng = np.random.default_rng(seed + 1000)
    out = []
    for _ in range(cfg["n_hash_layer"]):
        keys = rng.random((N_VOCAB, cfg["n_expert"]))
        out.append(np.argsort(keys, axis=1)[:, :cfg["n_expert_used"]].astype(np.int64))
    return out


def batches(train, L, B, rng, chat=None, chat_share=0.0):
    """Batches [B, L+1] of training windows: corpus by CORPUS_WEIGHT; with probability
    chat_share the window comes from that corpus' chat view and starts at an example start
    (BOS), as a chat prompt does at inference; otherwise anywhere in the raw text."""
    names = [n for n in CORPUS_WEIGHT if n in train] + [n for n in train if n not in CORPUS_WEIGHT]
    w = np.array([CORPUS_WEIGHT.get(n, 0.1) for n in names])
    w = w / w.sum()
    starts = {}
    for n, t in (chat or {}).items():
        b = np.flatnonzero(t == BOS_ID)
        starts[n] = b[b < len(t) - L - 1]
    while True:
        which = rng.choice(len(names), size=B, p=w)
        rows = []
        for i in which:
            n = names[i]
            if n in starts and len(starts[n]) and rng.random() < chat_share:
                t = chat[n]
                s = starts[n][rng.integers(0, len(starts[n]))]
            else:
                t = train[n]
                s = rng.integers(0, len(t) - L - 1)
            rows.append(t[s:s + L + 1])
        yield np.stack(rows)


def heldout_windows(heldout, L, per_file):
    """First `per_file` non-overlapping windows of L+1 tokens of each held-out file."""
    out = {}
    for name, t in heldout.items():
        n = min(per_file, (len(t) - 1) // L)
        out[name] = np.stack([t[i * L:i * L + L + 1] for i in range(n)])
    return out


@torch.no_grad()
def evaluate(model, windows, device, bs=8):
    model.eval()
    res = {}
    for name, w in windows.items():
        tot, n = 0.0, 0
        for i in range(0, len(w), bs):
            x = torch.from_numpy(w[i:i + bs]).to(device)
            nll = model.nll(model(x[:, :-1]), x[:, 1:])
            tot += nll.double().sum().item()
            n += nll.numel()
        res[name] = tot / n
    model.train()
    return res


def round_params_f16(model):
    """Matrices to their shipped precision (f16); vectors stay f32."""
    with torch.no_grad():
        for name, p in model.named_gguf().items():
            if p.dim() >= 2:
                p.copy_(p.half().float())


def save_parts(model, vmap, tables, out):
    """Four npz parts (< 16 MiB each): embedding + small tensors + maps, output head, then
    the layers in two halves."""
    named = {k: v.detach().cpu() for k, v in model.named_gguf().items()}
    conv = {k: (v.half().numpy() if v.dim() >= 2 else v.float().numpy()) for k, v in named.items()}
    half = model.cfg["n_layer"] // 2
    part0 = {k: v for k, v in conv.items() if not k.startswith("blk.") and k != "output.weight"}
    part0["nano.vmap"] = vmap.astype(np.int32)
    for il, t in enumerate(tables):
        part0["blk.%d.ffn_gate_tid2eid.weight" % il] = t.astype(np.int32)
    part1 = {"output.weight": conv["output.weight"]}
    part2 = {k: v for k, v in conv.items() if k.startswith("blk.") and int(k.split(".")[1]) < half}
    part3 = {k: v for k, v in conv.items() if k.startswith("blk.") and int(k.split(".")[1]) >= half}
    for i, p in enumerate((part0, part1, part2, part3)):
        np.savez(os.path.join(out, "nano-part%d.npz" % i), **p)


def main():
    ap = argparse.ArgumentParser(description="Train ds4-nano.")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=4.0, help="training time budget")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--schedule-steps", type=int, default=0,
                    help="cosine schedule length (default: estimated from the speed of the first 30 steps)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=16384, help="learned vocabulary rows (incl. the shared one)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--chat-share", type=float, default=0.4,
                    help="share of training windows from the chat view (when train_chat/ exists)")
    ap.add_argument("--eval-every", type=int, default=150)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)
    cfg = full_cfg()
    train = load_tokens(os.path.join(a.data, "train"))
    heldout = load_tokens(os.path.join(a.data, "heldout"))
    chat = load_tokens(os.path.join(a.data, "train_chat")) if os.path.isdir(os.path.join(a.data, "train_chat")) else {}
    chat_ho = load_tokens(os.path.join(a.data, "heldout_chat")) if chat else {}
    forced = sorted({int(i) for t in chat.values() for i in np.unique(t) if i < 2 or i >= FIRST_ADDED_ID})
    vmap, k, covered = vocab_rows({**train, **{"chat_" + n: t for n, t in chat.items()}}, a.rows, forced)
    print("chat view: %s, forced rows for ids %s" % ({n: len(t) for n, t in chat.items()}, forced), flush=True)
    tables = hash_tables(cfg, a.seed)
    model = Nano(cfg, torch.from_numpy(vmap), [torch.from_numpy(t) for t in tables], seed=a.seed).to(a.device)
    n_params = sum(p.numel() for p in model.parameters())
    log = dict(shape={k2: (list(v) if isinstance(v, tuple) else v) for k2, v in NANO_SHAPE.items()},
               seed=a.seed, batch=a.batch, seq=a.seq, rows=k + 1, row_coverage=covered,
               params=n_params, train_tokens={n: int(len(t)) for n, t in train.items()},
               heldout_tokens={n: int(len(t)) for n, t in heldout.items()}, curve=[], evals=[],
               chat_share=a.chat_share if chat else 0.0, forced_ids=forced,
               chat_train_tokens={n: int(len(t)) for n, t in chat.items()}, chat_evals=[])
    print("params %d, learned rows %d (cover %.4f of training tokens)" % (n_params, k, covered), flush=True)

    decay = [p for n, p in model.p.items() if p.dim() >= 2]
    no_decay = [p for n, p in model.p.items() if p.dim() < 2 and not n.endswith("exp_probs_b__bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(a.seed)
    gen = batches(train, a.seq, a.batch, rng, chat, a.chat_share)
    windows = heldout_windows(heldout, a.seq, 6)
    chat_windows = heldout_windows(chat_ho, a.seq, 6)
    budget = a.minutes * 60.0
    warm = 100
    t0 = time.time()
    best, best_state = float("inf"), None
    step = 0
    est_steps = None
    while step < a.max_steps:
        el = time.time() - t0
        if el > budget:
            break
        if step == 30 and not a.schedule_steps:
            est_steps = int(budget / (el / 30))
            print("schedule: %d steps" % est_steps, flush=True)
        if a.schedule_steps:
            est_steps = a.schedule_steps
        total = est_steps or a.max_steps
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(total, 1)))))
        for g in opt.param_groups:
            g["lr"] = lr
        x = torch.from_numpy(next(gen)).to(a.device)
        aux, loads = [], {}
        logits = model(x[:, :-1], aux=aux, loads=loads)
        loss = model.nll(logits, x[:, 1:]).mean()
        aux_loss = torch.stack(aux).mean() if aux else torch.zeros((), device=a.device)
        opt.zero_grad(set_to_none=True)
        (loss + 0.1 * aux_loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # auxiliary-loss-free load balancing of score-routed layers
            for il, ld in loads.items():
                bias = model.w("blk.%d.exp_probs_b.bias" % il)
                bias += 1e-3 * torch.sign(ld.mean() - ld)
        if step % 25 == 0:
            log["curve"].append([step, round(time.time() - t0, 1), loss.item(), aux_loss.item()])
            print("step %5d  t %6.1fs  loss %.4f  aux %.4f  lr %.2e" % (step, time.time() - t0, loss.item(),
                                                                       aux_loss.item(), lr), flush=True)
        if step > 0 and step % a.eval_every == 0:
            ev = evaluate(model, windows, a.device)
            mean = float(np.mean(list(ev.values())))
            log["evals"].append([step, mean, ev])
            print("  held-out %.4f %s" % (mean, {n: round(v, 3) for n, v in ev.items()}), flush=True)
            if chat_windows:
                cev = evaluate(model, chat_windows, a.device)
                log["chat_evals"].append([step, float(np.mean(list(cev.values()))), cev])
                print("  held-out chat %.4f %s" % (log["chat_evals"][-1][1], {n: round(v, 3) for n, v in cev.items()}), flush=True)
            if mean < best:
                best = mean
                best_state = {n: p.detach().clone() for n, p in model.p.items()}
        step += 1
    ev = evaluate(model, windows, a.device)
    mean = float(np.mean(list(ev.values())))
    log["evals"].append([step, mean, ev])
    if best_state is not None and best < mean:
        with torch.no_grad():
            for n, p in model.p.items():
                p.copy_(best_state[n])
    round_params_f16(model)
    ev = evaluate(model, windows, a.device)
    log["final_heldout_f16"] = ev
    if chat_windows:
        log["final_heldout_chat_f16"] = evaluate(model, chat_windows, a.device)
    log["steps"] = step
    log["schedule_steps"] = est_steps
    log["train_seconds"] = time.time() - t0
    print("final (f16 weights) held-out %s" % ev, flush=True)
    save_parts(model.cpu(), vmap, tables, a.out)
    with open(os.path.join(a.out, "train-log.json"), "w") as f:
        json.dump(log, f, indent=1)


if __name__ == "__main__":
    main()
