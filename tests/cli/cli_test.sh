#!/usr/bin/env bash
# End-to-end checks of the ds4 binary as a user runs it: help, one-shot generation, determinism,
# diagnostics (--dump-tokens, --render-chat, --dump-logprobs, --inspect) and every bad-input
# case (clear message, non-zero exit, never a crash).
# usage: cli_test.sh BUILD_DIR SHARED_DIR
set -u
build=$1; shared=$2
ds4=$build/ds4
model=$build/models/ds4-tiny-q2.gguf
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export HOME=$tmp  # never touch the user's ~/.ds4_history
source "$(dirname "$0")/expect.sh"

expect 0 "--prompt-file" -- "$ds4" --help
expect 2 "^ds4: The following argument was not expected: --nope" -- "$ds4" --nope
expect 2 "temp.*not in range" -- "$ds4" -m "$model" -p hi --temp -1
expect 2 "^ds4: --temp: Failed parsing abc" -- "$ds4" -m "$model" -p hi --temp abc
expect 2 "^ds4: --temp: Failed parsing nan as a number \\(NaN is not a value\\)" -- "$ds4" -m "$model" -p hi --temp nan
expect 2 "^ds4: --top-p: Failed parsing NaN" -- "$ds4" -m "$model" -p hi --top-p NaN
expect 2 "ctx: Failed parsing 12x as a whole number" -- "$ds4" -m "$model" -p hi -c 12x
# --seed is unsigned: a sign or a value past 2^64 - 1 is refused, not wrapped or clamped.
u64_max=18446744073709551615
expect 2 "^ds4: --seed: Failed parsing -1 as a whole number \\(digits only, at most $u64_max\\)" -- "$ds4" -m "$model" -p hi --seed -1
expect 2 "^ds4: --seed: Value 18446744073709551616 is larger than $u64_max" -- \
  "$ds4" -m "$model" -p hi --seed 18446744073709551616
expect 2 "seed.*not in range" -- "$ds4" -m "$model" -p hi --seed 0
expect 2 "^ds4: --tokens: Value -5 is less than 1$" -- "$ds4" -m "$model" -p hi -n -5
expect 2 "^ds4: --tokens: Value 0 is less than 1$" -- "$ds4" -m "$model" -p hi -n 0
expect 2 "^ds4: --tokens: Value 99999999999999999999 is larger than 9223372036854775807$" -- \
  "$ds4" -m "$model" -p hi -n 99999999999999999999
expect 2 "^ds4: --ctx: Value -99999999999999999999 is smaller than -9223372036854775808$" -- \
  "$ds4" -m "$model" -p hi -c -99999999999999999999
expect 2 "^ds4: --tokens: Failed parsing \\+5 as a whole number$" -- "$ds4" -m "$model" -p hi -n +5
expect 2 "not both" -- "$ds4" -m "$model" -p hi --prompt-file "$0"
# DS4_THREADS (read when -t is not given) has -t's range and a clear error.
expect 2 "^ds4: DS4_THREADS must be a whole number from 1 to 4096, got \"abc\"" -- env DS4_THREADS=abc "$ds4" -m "$model" -p hi -n 1
expect 2 "DS4_THREADS must be a whole number from 1 to 4096, got \"0\"" -- env DS4_THREADS=0 "$ds4" -m "$model" -p hi -n 1
expect 2 "DS4_THREADS must be a whole number from 1 to 4096, got \"100000\"" -- env DS4_THREADS=100000 "$ds4" -m "$model" -p hi -n 1
expect 0 "backend cpu" -- env DS4_THREADS=1 "$ds4" -m "$model" -p hi -n 1
expect 1 "missing.gguf" -- "$ds4" -m "$tmp/missing.gguf" -p hi
head -c 1000 "$model" > "$tmp/trunc.gguf"
expect 1 "trunc.gguf.*(offset|truncated)" -- "$ds4" -m "$tmp/trunc.gguf" -p hi
printf 'GGUX' > "$tmp/magic.gguf"; tail -c +5 "$model" | head -c 100000 >> "$tmp/magic.gguf"
expect 1 "magic" -- "$ds4" -m "$tmp/magic.gguf" -p hi
printf 'caf\xe9 \xff\n' > "$tmp/bad_utf8.txt"
expect 1 "not valid UTF-8" -- "$ds4" -m "$model" --prompt-file "$tmp/bad_utf8.txt" -n 2
head -c 20000 "$shared/testdata/text/promessi_sposi.txt" > "$tmp/long.txt"
expect 1 "context size is 256 tokens" -- "$ds4" -m "$model" --prompt-file "$tmp/long.txt" -c 256 -n 2
expect 1 "needs -p" -- "$ds4" -m "$model" --dump-tokens
# GPU placement flags: bad values are clear errors on any machine; --gpu-vram 0 means no CUDA.
expect 1 "--gpu-devices \"x\": \"x\" is not a CUDA device ordinal" -- "$ds4" -m "$model" -p hi -n 1 --gpu-devices x
expect 1 "device 1 is listed twice" -- "$ds4" -m "$model" -p hi -n 1 --gpu-devices 1,1
expect 2 "gpu-devices.*needs at least one device" -- "$ds4" -m "$model" -p hi -n 1 --gpu-devices ""
if ! nvidia-smi -L >/dev/null 2>&1; then  # no GPU: several devices are an error, not a CPU run
  expect 1 "gpu-devices.*no CUDA (device|backend)" -- "$ds4" -m "$model" -p hi -n 1 --gpu-devices 0,1
  # --backend cuda names itself in the error (it is --cuda's long form)
  expect 1 "--cuda \(--backend cuda\): (no CUDA device|this build has no CUDA backend)" -- "$ds4" -m "$model" -p hi -n 1 --backend cuda
  # the default device or a memory budget: a CPU run that says why
  expect 0 "note: (no CUDA device is available|this build has no CUDA backend); --gpu-devices ignored, running on the CPU" -- "$ds4" -m "$model" -p hi -n 1 --gpu-devices 0 -t 1
  expect 0 "note: (no CUDA device is available|this build has no CUDA backend); --gpu-vram ignored, running on the CPU" -- "$ds4" -m "$model" -p hi -n 1 --gpu-vram 8 -t 1
fi
expect 1 "--gpu-vram \"abc\"" -- "$ds4" -m "$model" -p hi -n 1 --gpu-vram abc
expect 1 "needs --gpu-devices with at least two" -- "$ds4" -m "$model" -p hi -n 1 --cuda-tensor-parallel
expect 1 "leaves no GPU memory" -- "$ds4" -m "$model" -p hi -n 1 --cuda --gpu-vram 0
expect 0 "backend cpu" -- "$ds4" -m "$model" -p hi -n 1 --gpu-vram 0 -t 1
# --raw-prompt: exactly the text's tokens are prefilled (no template); it needs a prompt.
expect 1 "--raw-prompt needs -p" -- "$ds4" -m "$model" --raw-prompt
raw="Once upon a time<｜User｜>there"
n_raw=$("$ds4" -m "$model" --dump-tokens -p "$raw" | wc -l)
out=$("$ds4" -m "$model" --raw-prompt -p "$raw" -n 2 --temp 0 -t 1 2>&1 >/dev/null)
grep -q "($n_raw tokens), generation" <<<"$out" && ok || bad "raw prompt prefill is not $n_raw tokens: $out"
out=$("$ds4" -m "$model" -p "$raw" -n 2 --temp 0 -t 1 2>&1 >/dev/null)
grep -q "($n_raw tokens), generation" <<<"$out" && bad "chat prompt has no template tokens: $out" || ok

# --dump-tokens: specials are single ids and the pieces decode back to the text.
out=$("$ds4" -m "$model" --dump-tokens -p $'<｜User｜>Ciao, mondo!<｜Assistant｜>' 2>&1)
[ "$(wc -l <<<"$out")" -ge 4 ] && grep -q '"<｜User｜>"' <<<"$out" && grep -q '"<｜Assistant｜>"' <<<"$out" && ok || bad "dump-tokens: $out"

# --render-chat reproduces the official golden vectors byte for byte.
for c in 1 2 4; do
  mode=thinking; [ "$c" = 4 ] && mode=chat
  "$ds4" --render-chat "$shared/testdata/encoding/case_$c.input.json" --think-mode $mode > "$tmp/r$c.txt" 2>"$tmp/r$c.err" \
    && cmp -s "$tmp/r$c.txt" "$shared/testdata/encoding/case_$c.expected.txt" && ok || bad "render-chat case $c: $(head -c 300 "$tmp/r$c.err")"
done

# One-shot generation is deterministic with --temp 0 on a prompt of > 600 tokens (ratio-4 layers
# exceed top-k, ratio-128 layers emit rows), and with a fixed seed at temperature 1.
head -c 3000 "$shared/testdata/text/promessi_sposi.txt" > "$tmp/p600.txt"
n=$("$ds4" -m "$model" --dump-tokens --prompt-file "$tmp/p600.txt" | wc -l)
[ "$n" -gt 600 ] && ok || bad "prompt has only $n tokens"
a=$("$ds4" -m "$model" --prompt-file "$tmp/p600.txt" -n 24 --temp 0 -c 2048 2>/dev/null)
b=$("$ds4" -m "$model" --prompt-file "$tmp/p600.txt" -n 24 --temp 0 -c 2048 -t 1 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "greedy output differs between runs: [$a] vs [$b]"
a=$("$ds4" -m "$model" -p "Dimmi una storia" -n 16 --seed 7 2>/dev/null)
b=$("$ds4" -m "$model" -p "Dimmi una storia" -n 16 --seed 7 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "seeded output differs between runs"
expect 0 "prefill: .* t/s .* generation: .* t/s" -- "$ds4" -m "$model" -p hi -n 4 --nothink

# --dump-logprobs: greedy steps whose selected token is the top alternative, logprobs <= 0.
"$ds4" -m "$model" -p "hello" -n 5 --dump-logprobs "$tmp/lp.json" --logprobs-top-k 3 2>/dev/null
/usr/bin/python3 - "$tmp/lp.json" <<'PY' && ok || bad "dump-logprobs json"
import json, sys, math
d = json.load(open(sys.argv[1]))
assert d["source"] == "ds4" and d["top_k"] == 3 and 1 <= len(d["steps"]) <= 5
for s in d["steps"]:
    tops = s["top_logprobs"]
    assert len(tops) == 3 and s["selected"]["id"] == tops[0]["token"]["id"]
    assert all(t["logprob"] <= 1e-6 for t in tops)
    assert tops[0]["logit"] >= tops[1]["logit"] >= tops[2]["logit"]
    assert abs(sum(math.exp(t["logprob"]) for t in tops)) <= 1.0 + 1e-6
PY
expect 0 "layers: 7" -- "$ds4" -m "$model" --inspect
# Seeded: unseeded, the random-weight model ends its turn before 24 tokens in ~1 % of runs.
expect 0 "context of 24 tokens is full" -- "$ds4" -m "$model" -p hi -c 24 -n 50 --seed 1
expect 0 "Think Max needs --ctx" -- "$ds4" --render-chat "$shared/testdata/encoding/case_2.input.json" --think-mode max
expect 1 "cannot allocate .* use a smaller --ctx" -- "$ds4" -m "$model" -c 1000000000 -p hi -n 2

# The REPL read from a pipe: two turns (the second reuses the first's KV), commands, bad commands.
out=$(printf 'ciao\n/nothink\ncome stai?\n/read %s/bad_utf8.txt\n/ctx 64\n/read %s/none\n/bogus\n/help\n/quit\n' "$tmp" "$tmp" \
      | timeout 120 "$ds4" -m "$model" -n 4 --seed 3 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^prefill: ' <<<"$out")" -eq 2 ] && grep -q "new session, ctx 64" <<<"$out" \
  && grep -q "cannot read" <<<"$out" && grep -q "not valid UTF-8 (byte 3); nothing was sent" <<<"$out" \
  && [ ! -e "$tmp/.ds4_history" ] && grep -q "unknown command /bogus" <<<"$out" && grep -q "/think-max" <<<"$out" \
  && ok || bad "repl (rc $rc): ${out:0:600}"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
