#!/usr/bin/env bash
# ds4-nano end to end (docs/nano.md). usage: nano_test.sh BUILD_DIR SHARED_DIR SOURCE_DIR
set -u
build=$1; shared=$2; src=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*"; }
expect() {  # expect RC PATTERN -- command...
  local rc=$1 pat=$2; shift 3
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" -ne "$rc" ]; then bad "$* -> exit $got, expected $rc: ${out:0:400}"; return; fi
  if ! grep -qE -- "$pat" <<<"$out"; then bad "$* -> output lacks /$pat/: ${out:0:400}"; return; fi
  ok
}
vocab=$src/models/deepseek-v3-tokenizer.json.zst

# The default model (no -m) is ds4-nano q2: full vocabulary, 6 layers.
out=$("$build/ds4" --inspect -t 1 2>&1)
grep -q "ds4-nano-q2.gguf" <<<"$out" && grep -q "^layers: 6$" <<<"$out" && grep -q "^vocab: 129280$" <<<"$out" \
  && ok || bad "default model: $out"
expect 0 "layers: 6" -- "$build/ds4" -m "$build/models/ds4-nano-q4.gguf" --inspect -t 1

# ds4-server serves ds4-nano without -m: a greedy completion of an Italian prompt is text.
"$build/ds4-server" --port 0 -t 1 -c 2048 > "$tmp/server.log" 2>&1 &
srv=$!
port=""
for _ in $(seq 1 100); do
  port=$(grep -oE "listening on http://[0-9.]+:[0-9]+" "$tmp/server.log" | grep -oE "[0-9]+$")
  [ -n "$port" ] && break; sleep 0.2
done
resp=$(/usr/bin/python3 - "$port" <<'PY'
import sys, urllib.request
body = b'{"model":"ds4","prompt":"Il giorno dopo, Renzo","max_tokens":8,"temperature":0}'
req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % sys.argv[1], data=body,
                             headers={"content-type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).read().decode())
PY
)
kill "$srv"; wait "$srv" 2>/dev/null
grep -q "ds4-nano-q2.gguf" "$tmp/server.log" && grep -q '"completion_tokens":8' <<<"$resp" \
  && grep -qE '"text":"[^"]+' <<<"$resp" && ok || bad "server default model: $(cat "$tmp/server.log") $resp"

# Held-out perplexity (text never trained on: the last 10% of promessi_sposi.txt, cut at a line
# boundary, exactly as tools/train/prepare_data.py splits it): engine and reference within 1%.
/usr/bin/python3 - "$shared/testdata/text/promessi_sposi.txt" "$tmp/heldout.txt" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
cut = data.find(b"\n", int(len(data) * 0.9)) + 1
piece = data[cut:cut + 520]
piece = piece[:piece.rfind(b"\n") + 1]
open(sys.argv[2], "wb").write(piece)
PY
eng=$("$build/ds4" -t 1 --perplexity-file "$tmp/heldout.txt" 2>/dev/null)
"$build/ds4-tokenize" --vocab "$vocab" -o "$tmp/tok" "$tmp/heldout.txt" 2>/dev/null
ref=$(cd "$src" && /usr/bin/python3 tools/train/nano_ppl.py --model "$build/models/ds4-nano-q2.gguf" --tokens "$tmp/tok/heldout.u32")

echo "engine:    $eng"; echo "reference: $ref"
/usr/bin/python3 - "$eng" "$ref" <<'PY' && ok || bad "perplexity engine vs reference: $eng / $ref"
import sys
f = lambda s: dict(kv.split("=") for kv in s.split())
e, r = f(sys.argv[1]), f(sys.argv[2])
assert e["tokens"] == r["tokens"] and e["scored"] == r["scored"], (e, r)
assert int(e["scored"]) == int(e["tokens"]) - 32 and int(e["scored"]) > 100, e
pe, pr = float(e["ppl"]), float(r["ppl"])
assert abs(pe - pr) / pr < 0.01, (pe, pr)
assert pe < 1000, pe   # trained: a uniform guess over 129280 tokens would be 129280
PY

# --perplexity-file: the unscored prefix, the output line, bad input.
"$build/ds4-tokenize" --vocab "$vocab" -o "$tmp/tok" "$0" 2>/dev/null
expect 0 "^tokens=[0-9]+ scored=[0-9]+ nll=[0-9.]+ avg_nll=[0-9.]+ ppl=[0-9.]+$" -- "$build/ds4" -t 1 --perplexity-file "$0" -c 4096
printf 'a b' > "$tmp/short.txt"
expect 1 "more than 32 tokens" -- "$build/ds4" -t 1 --perplexity-file "$tmp/short.txt"
expect 2 "does not use -p/--prompt-file" -- "$build/ds4" --perplexity-file "$tmp/short.txt" -p hi
expect 2 "File does not exist: .*missing.txt" -- "$build/ds4" -t 1 --perplexity-file "$tmp/missing.txt"
printf 'caf\xe9 \xff\n' > "$tmp/bad_utf8.txt"
expect 1 "not valid UTF-8" -- "$build/ds4" -t 1 --perplexity-file "$tmp/bad_utf8.txt"
expect 1 "context is 64 tokens" -- "$build/ds4" -t 1 --perplexity-file "$tmp/heldout.txt" -c 64

# ds4-make-model --weights: taking every tensor of the tiny f32 model reproduces it byte for byte.
"$build/ds4-make-model" --weights "$build/models/ds4-tiny-f32.gguf" --recipe f32 --vocab "$vocab" \
  --name ds4-tiny-f32 -q -o "$tmp/again.gguf" && cmp -s "$tmp/again.gguf" "$build/models/ds4-tiny-f32.gguf" \
  && ok || bad "make-model --weights round trip differs"
expect 1 "fixes the shape" -- "$build/ds4-make-model" --weights "$build/models/ds4-tiny-f32.gguf" \
  --config "$0" -o "$tmp/x.gguf"
# The tools' usage errors exit 2 and name the tool, as ds4's and ds4-server's do (not CLI11's per-error codes).
for tool in ds4-make-model ds4-tokenize ds4-dump-logits; do
  expect 2 "^$tool: .*(is required|not expected)" -- "$build/$tool" --no-such-flag
done
# ds4-bench: an unknown flag and a missing model are bad input, exit 2 (its own tests: the rest).
expect 2 "not expected" -- "$build/ds4-bench" --no-such-flag
expect 2 "does not exist" -- "$build/ds4-bench" -m "$tmp/missing.gguf" --prompt-file "$0"
expect 2 "model file .* is not a regular file" -- "$build/ds4-bench" -m "$tmp" --prompt-file "$0"
(cd "$src" && /usr/bin/python3 - "$tmp/bad_weights.gguf" <<'PY'
import sys
import numpy as np
from tools.reference.gguf import GGUFWriter
from tools.reference.tinymodel import TINY_SHAPE, tiny_metadata
w = GGUFWriter()
for k, v, t in tiny_metadata(dict(TINY_SHAPE, n_vocab=8192)):
    w.add_kv(k, v, t)
w.add_tensor("token_embd.weight", np.zeros((8192, 128), np.float32), "F32")   # wrong shape
w.add_tensor("bogus.weight", np.zeros(32, np.float32), "F32")
w.write(sys.argv[1])
PY
)
expect 1 "token_embd.weight' has shape \[128, 8192\], the layout needs \[256, 8192\]" -- \
  "$build/ds4-make-model" --weights "$tmp/bad_weights.gguf" --vocab "$vocab" -o "$tmp/x.gguf"
expect 1 "missing tensor 'output.weight'" -- "$build/ds4-make-model" --weights "$tmp/bad_weights.gguf" --vocab "$vocab" -o "$tmp/x.gguf"
expect 1 "'bogus.weight' is not part of the layout" -- "$build/ds4-make-model" --weights "$tmp/bad_weights.gguf" --vocab "$vocab" -o "$tmp/x.gguf"

# ds4-tokenize --specials (the chat view's tokenizer): each chat marker becomes its single id,
# the same ids as the engine's chat path (`ds4 --dump-tokens`); without it they are plain text.
printf '<｜begin▁of▁sentence｜>You<｜User｜>Il giorno<｜Assistant｜></think>dopo<｜end▁of▁sentence｜>' > "$tmp/chat.txt"
"$build/ds4-tokenize" --specials --vocab "$vocab" -o "$tmp/tokc" "$tmp/chat.txt" 2>/dev/null
"$build/ds4-tokenize" --vocab "$vocab" -o "$tmp/tokp" "$tmp/chat.txt" 2>/dev/null
"$build/ds4" --dump-tokens -p "$(cat "$tmp/chat.txt")" > "$tmp/dump.txt" 2>&1
/usr/bin/python3 - "$tmp/tokc/chat.u32" "$tmp/tokp/chat.u32" "$tmp/dump.txt" <<'PY' && ok || bad "ds4-tokenize --specials"
import struct, sys
u32 = lambda p: list(struct.unpack("<%dI" % (len(open(p, "rb").read()) // 4), open(p, "rb").read()))
sp, plain = u32(sys.argv[1]), u32(sys.argv[2])
dump = [int(l.split("\t")[0]) for l in open(sys.argv[3]) if l.strip()]
assert sp == dump, (sp, dump)
assert [t for t in sp if t < 2 or t >= 128000] == [0, 128803, 128804, 128822, 1], sp
assert all(1 < t < 128000 for t in plain) and len(plain) > len(sp), plain
PY

# tools/train/chat_view.py writes examples whose prompt part is exactly what the chat renderer
# makes of {system, user} in non-thinking mode, and which cover the text in order.
mkdir -p "$tmp/cv/train" "$tmp/cv/heldout"
head -c 20000 "$shared/testdata/text/promessi_sposi.txt" > "$tmp/cv/train/ps.txt"
head -c 3000 "$shared/testdata/text/tiny_shakespeare.txt" > "$tmp/cv/heldout/ts.txt"
(cd "$src" && /usr/bin/python3 tools/train/chat_view.py --data "$tmp/cv" > /dev/null)
/usr/bin/python3 - "$tmp/cv" "$build/ds4" <<'PY' && ok || bad "chat_view.py vs ds4 --render-chat"
import json, os, subprocess, sys
d, ds4 = sys.argv[1], sys.argv[2]
B, E, U, A, T = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "</think>"
text = open(os.path.join(d, "train/ps.txt"), encoding="utf-8").read()
ex = open(os.path.join(d, "train_chat/ps.txt"), encoding="utf-8").read()
assert ex.startswith(B) and ex.endswith(E)
items = [B + x + E for x in ex[len(B):-len(E)].split(E + B)]
assert len(items) >= 10 and os.path.getsize(os.path.join(d, "heldout_chat/ts.txt")) > 0
systems, rendered, pos = set(), set(), 0
for i, it in enumerate(items):
    head, answer = it[:-len(E)].split(T)
    system, user = head[len(B):-len(A)].split(U)
    systems.add(system)
    assert " ".join(user.split()) == user and 0 < len(user.encode()) <= 300 and answer, it
    pos = text.index(answer, pos) + len(answer)          # answers follow the text in order
    if system not in rendered:                            # one example of each system prompt
        rendered.add(system)
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        with open(os.path.join(d, "m.json"), "w", encoding="utf-8") as f:
            json.dump(msgs, f)
        r = subprocess.run([ds4, "--render-chat", os.path.join(d, "m.json"), "--think-mode", "chat"],
                           capture_output=True, check=True).stdout.decode()
        assert r == head + T, (r, head + T)
assert systems == {"", "You are a helpful assistant"}, systems
PY

echo "nano_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
