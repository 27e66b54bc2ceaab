"""Chat-formatted view of the ds4-nano corpus (docs/nano.md, "Chat view"): the same texts cut
into DeepSeek V4 chat turns, so that prompts wrapped by `ds4 -p` / ds4-server in the chat template
(non-thinking mode, spec §6) get a continuation in the prompt's language and style.

    python3 tools/train/chat_view.py --data /tmp/nano-data            # after prepare_data.py
    build/ds4-tokenize --specials --vocab ... -o /tmp/nano-data/tok/train_chat /tmp/nano-data/train_chat/*.txt

Reads <data>/{train,heldout}/<name>.txt, writes <data>/{train_chat,heldout_chat}/<name>.txt: the
whole text walked once, as consecutive examples

    <｜begin▁of▁sentence｜>{system}<｜User｜>{1-2 sentences, or a cut mid-sentence}<｜Assistant｜></think>{the following text}<｜end▁of▁sentence｜>

{system} is "You are a helpful assistant" (ds4's default) in 85% of the examples and empty in
the rest (`--system ""`). The user part has its whitespace collapsed to single spaces (a typed
prompt); the answer keeps the text's own line breaks and runs 300-1200 bytes, ending at a line end.
Deterministic (fixed seed). Tokenize with `ds4-tokenize --specials` so each marker is one id.
"""

import argparse
import os
import random
import re

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
USER, ASSISTANT, END_THINK = "<｜User｜>", "<｜Assistant｜>", "</think>"
SYSTEM = "You are a helpful assistant"
SPECIALS = (BOS, EOS, USER, ASSISTANT, END_THINK, "<think>")
SENTENCE_END = re.compile(r"[.!?;:](?=\s)")


def user_cut(text, p, rng):
    """End offset of the user part starting at p: after 1-2 sentences (half the time) or at a
    word boundary 20-200 bytes in; never more than 300 bytes."""
    limit = min(len(text), p + 300)
    if rng.random() < 0.5:
        ends = [m.end() for m in SENTENCE_END.finditer(text, p, limit)]
        if ends:
            return ends[min(len(ends) - 1, rng.randrange(2))]
    target = min(limit, p + rng.randint(20, 200))
    sp = text.rfind(" ", p + 1, target)
    nl = text.rfind("\n", p + 1, target)
    cut = max(sp, nl)
    return cut if cut > p else target


def examples(text, rng):
    """Yields (system, user, answer) covering `text` in order."""
    p, n = 0, len(text)
    while True:
        while p < n and text[p].isspace():
            p += 1
        if n - p < 200:
            return
        u = user_cut(text, p, rng)
        user = " ".join(text[p:u].split())
        a0 = u
        while a0 < n and text[a0] in " \t":
            a0 += 1
        if a0 < n and text[a0] == "\n":        # the user part ended a line: answer from the next one
            a0 += 1
        target = min(n, a0 + rng.randint(300, 1200))
        nl = text.find("\n", target)
        a1 = n if nl < 0 or nl - target > 400 else nl
        answer = text[a0:a1].rstrip()
        system = SYSTEM if rng.random() < 0.85 else ""
        if user and answer:
            yield system, user, answer
        p = a1


def render(system, user, answer):
    return BOS + system + USER + user + ASSISTANT + END_THINK + answer + EOS


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="prepare_data.py output folder")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for part in ("train", "heldout"):
        src, dst = os.path.join(a.data, part), os.path.join(a.data, part + "_chat")
        os.makedirs(dst, exist_ok=True)
        for fn in sorted(os.listdir(src)):
            if not fn.endswith(".txt"):
                continue
            with open(os.path.join(src, fn), encoding="utf-8") as f:
                text = f.read()
            for s in SPECIALS:                   # the corpora have none; keep it that way
                text = text.replace(s, "")
            rng = random.Random("%d/%s/%s" % (a.seed, part, fn))
            ex = [render(*e) for e in examples(text, rng)]
            with open(os.path.join(dst, fn), "w", encoding="utf-8") as f:
                f.write("".join(ex))
            print("%-8s %-22s %6d examples" % (part, fn, len(ex)))


if __name__ == "__main__":
    main()
