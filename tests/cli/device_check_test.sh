#!/usr/bin/env bash
# scripts/device-check.sh on the dev machine (no GPU needed): its usage errors, and --stage from
# this build (the four binaries stripped, the non-runtime shared libraries they link).
# usage: device_check_test.sh SOURCE_DIR BUILD_DIR
set -u
src=$1; build=$2
script=$src/scripts/device-check.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

expect 2 "^usage: .* BIN_DIR \[STEPS\]" -- bash "$script"
expect 2 "nowhere/ds4-bench is missing: fill .* with .* --stage first" -- bash "$script" "$tmp/nowhere"
expect 0 "^usage: .* BIN_DIR \[STEPS\]" -- bash "$script" --help
expect 2 "unknown step nosuchstep" -- bash "$script" "$tmp/nowhere" nosuchstep  # before the folder
expect 2 "^usage: .* --stage BUILD_DIR BIN_DIR" -- bash "$script" --stage "$tmp/nowhere" "$tmp/bin"
expect 2 "^usage: .* --stage BUILD_DIR BIN_DIR" -- bash "$script" --stage "$build"
mkdir -p "$tmp/empty"
expect 2 "empty/ds4 is missing: build it first" -- bash "$script" --stage "$tmp/empty" "$tmp/bin"
if [ -x "$build/tests/cuda/test_cuda" ]; then  # a CUDA build: stage it for real
  expect 0 "$tmp/staged" -- bash "$script" --stage "$build" "$tmp/staged"
  for b in ds4 ds4-bench ds4-make-model test_cuda; do
    [ -x "$tmp/staged/$b" ] || bad "--stage left no $b"
    [ "$(stat -c %s "$tmp/staged/$b")" -le "$(stat -c %s "$build/$( [ $b = test_cuda ] && echo tests/cuda/)$b")" ] ||
      bad "--stage's $b is larger than the build's (not stripped)"
  done
  ls "$tmp/staged/lib" | grep -qE '^libfmt\.so' || bad "--stage did not carry libfmt"
  ls "$tmp/staged/lib" | grep -qE '^(libc|libm|libstdc\+\+|libgcc_s)\.so' && bad "--stage carried the C/C++ runtime"
  # A staged folder is a valid BIN_DIR: an unknown step is its error, after the usage check.
  expect 2 "unknown step nosuchstep" -- env OUT="$tmp/out" bash "$script" "$tmp/staged" nosuchstep
fi
# The decode step's AB entries, with stand-in ds4-bench scripts (no GPU): each entry runs its
# folder's binary with its variables, twice, and DECODE_CTX_MAX reaches the command line.
for d in fa fb; do
  mkdir -p "$tmp/$d"
  printf '#!/bin/sh\necho "%s X=${X:-} Y=${Y:-} $*"\nprintf "ctx,a,p,b,d\\n2048,0,1,0,%s\\n" >"$(echo "$*" | sed "s/.*--csv //")"\n' \
    "$d" "$d" >"$tmp/$d/ds4-bench"
  chmod +x "$tmp/$d/ds4-bench"
done
# An AB entry naming a folder without ds4-bench is refused before any step (with or without
# variables after it), as is a ROUNDS that is not a positive integer; a folder that holds one
# passes to the step check.
expect 2 "AB entry @$tmp/nowhere,X=1: $tmp/nowhere/ds4-bench is missing" -- \
  env OUT="$tmp/out" AB="- @$tmp/nowhere,X=1" bash "$script" "$tmp/fa" decode
expect 2 "AB entry @$tmp/empty: $tmp/empty/ds4-bench is missing" -- \
  env OUT="$tmp/out" AB="@$tmp/empty" bash "$script" "$tmp/fa" decode
expect 2 "unknown step nosuchstep" -- env OUT="$tmp/out" AB="- @$tmp/fb,X=0" bash "$script" "$tmp/fa" nosuchstep
expect 2 "ROUNDS must be a positive integer, not 'x'" -- env OUT="$tmp/out" ROUNDS=x bash "$script" "$tmp/fa" decode
expect 2 "ROUNDS must be a positive integer, not '0'" -- env OUT="$tmp/out" ROUNDS=0 bash "$script" "$tmp/fa" decode
(cd "$tmp" && env OUT="$tmp/fo" DECODE_CTX_MAX=2048 AB="- X=1,Y=2 @fb @fb,Y=3" bash "$script" fa decode) >/dev/null 2>&1
tar xzf "$tmp/fo/logs.tar.gz" -C "$tmp/fo" 2>/dev/null || bad "decode step left no logs.tar.gz"
for want in "_:fa X= Y= " "X_1_Y_2:fa X=1 Y=2 " "_fb:fb X= Y= " "_fb_Y_3:fb X= Y=3 "; do
  for round in 1 2; do
    f=$tmp/fo/decode.$round.${want%%:*}.log
    grep -q -- "^${want#*:}.*--ctx-max 2048 .*--repeat 2 " "$f" 2>/dev/null || bad "decode entry $f: $(cat "$f" 2>&1)"
  done
done
grep -q "^decode.2._fb_Y_3: 2048: prefill 1 decode fb; " "$tmp/fo/summary.txt" ||
  bad "summary lacks the @DIR,VAR entry: $(cat "$tmp/fo/summary.txt")"
# Even rounds run the entries in reverse (ABBA).
order=$(grep -o '^decode\.[12]\.[^:]*' "$tmp/fo/summary.txt" | tr '\n' ' ')
[ "$order" = "decode.1._ decode.1.X_1_Y_2 decode.1._fb decode.1._fb_Y_3 decode.2._fb_Y_3 decode.2._fb decode.2.X_1_Y_2 decode.2._ " ] ||
  bad "rounds not in ABBA order: $order"
# The per-entry means over the rounds: a stand-in whose decode value is V plus its call count
# (round 1 runs V=10 then V=20, round 2 in reverse: 11, 12, 13, 14), at two contexts; an entry
# without results says so.
mkdir -p "$tmp/fm"
printf '#!/bin/sh\nn=$(( $(cat "%s" 2>/dev/null || echo 0) + 1 )); echo $n >"%s"\nprintf "ctx,a,p,b,d\\n2048,0,1,0,%%s\\n8192,0,1,0,%%s\\n" $((V + n)) $((V + n + 100)) >"$(echo "$*" | sed "s/.*--csv //")"\n' \
  "$tmp/fm/count" "$tmp/fm/count" >"$tmp/fm/ds4-bench"
chmod +x "$tmp/fm/ds4-bench"
env OUT="$tmp/fo5" ROUNDS=2 AB="V=10 V=20" bash "$script" "$tmp/fm" decode >/dev/null 2>&1
grep -qx "decode mean V_10: 2048: 12.50 (2); 8192: 112.50 (2); " "$tmp/fo5/summary.txt" &&
  grep -qx "decode mean V_20: 2048: 22.50 (2); 8192: 122.50 (2); " "$tmp/fo5/summary.txt" ||
  bad "decode means wrong: $(grep mean "$tmp/fo5/summary.txt" 2>&1)"
# An "@DIR" entry whose DIR has lib/ (scripts/stage-revs.sh) runs with DIR/lib first on the
# library path.
mkdir -p "$tmp/fl/lib"
printf '#!/bin/sh\necho "LD=${LD_LIBRARY_PATH%%%%:*}"\nprintf "ctx,a,p,b,d\\n2048,0,1,0,1\\n" >"$(echo "$*" | sed "s/.*--csv //")"\n' \
  >"$tmp/fl/ds4-bench"
chmod +x "$tmp/fl/ds4-bench"
env OUT="$tmp/fo4" DECODE_CTX_MAX=2048 ROUNDS=1 AB="@$tmp/fl" bash "$script" "$tmp/fa" decode >/dev/null 2>&1
tar xzf "$tmp/fo4/logs.tar.gz" -C "$tmp/fo4" 2>/dev/null
grep -q "^LD=$tmp/fl/lib\$" "$tmp"/fo4/decode.1.*.log 2>/dev/null ||
  bad "@DIR's lib/ is not first on the library path: $(cat "$tmp"/fo4/decode.1.*.log 2>&1)"
# A step name is checked before any step runs; a bench that leaves no results is marked FAILED.
expect 2 "unknown step bogus" -- env OUT="$tmp/out2" bash "$script" "$tmp/fa" "decode bogus"
[ ! -e "$tmp/out2" ] || bad "an unknown step still let the script start (made $tmp/out2)"
mkdir -p "$tmp/fc" && printf '#!/bin/sh\nexit 1\n' >"$tmp/fc/ds4-bench" && chmod +x "$tmp/fc/ds4-bench"
env OUT="$tmp/fo3" DECODE_CTX_MAX=2048 ROUNDS=1 bash "$script" "$tmp/fc" decode >/dev/null 2>&1
grep -q "^decode.1._: FAILED (no results; see decode.1._.log)" "$tmp/fo3/summary.txt" &&
  grep -qx "decode mean _: no results" "$tmp/fo3/summary.txt" ||
  bad "a bench without results is not marked: $(cat "$tmp/fo3/summary.txt" 2>&1)"
# The sass step keeps cuobjdump's blocks of the kernels matching KERNEL (a stand-in cuobjdump on
# PATH lists three kernels of ds4-bench, two of them combine kernels).
mkdir -p "$tmp/tools"
printf '#!/bin/sh\n[ "$1" = -sass ] || exit 9\necho "Fatbin elf code:"\nfor f in attn_combine_kernelILi768E rowslice attn_combine_kernelILi512E; do\n  printf "\\t\\tFunction : _Z%%s\\n        /*0000*/ MOV R1, c[0x0][0x28] ;\\n" "$f"\ndone\n' >"$tmp/tools/cuobjdump"
chmod +x "$tmp/tools/cuobjdump"
env PATH="$tmp/tools:$PATH" OUT="$tmp/fs" KERNEL=combine bash "$script" "$tmp/fa" sass >/dev/null 2>&1
grep -qx "sass: 2 kernels matching combine in sass.txt" "$tmp/fs/summary.txt" ||
  bad "sass summary: $(cat "$tmp/fs/summary.txt" 2>&1)"
tar xzf "$tmp/fs/logs.tar.gz" -C "$tmp/fs" 2>/dev/null
[ "$(grep -c 'MOV R1' "$tmp/fs/sass.txt" 2>/dev/null)" = 2 ] && ! grep -q rowslice "$tmp/fs/sass.txt" ||
  bad "sass.txt does not hold exactly the combine kernels: $(cat "$tmp/fs/sass.txt" 2>&1)"
# The ncu step profiles a decode step (--fill-state) or, with NCU_PREFILL=1, a prefill of
# PROFILE_CTX tokens (a stand-in ncu on PATH records its arguments).
printf '#!/bin/sh\necho "$*" >>"$NCU_ARGS"\n' >"$tmp/tools/ncu" && chmod +x "$tmp/tools/ncu"
env PATH="$tmp/tools:$PATH" NCU_ARGS="$tmp/ncu-decode" OUT="$tmp/fn1" KERNEL=predecode NCU_SKIP=9 NCU_COUNT=3 \
  bash "$script" "$tmp/fa" ncu >/dev/null 2>&1
grep -q -- "-k regex:predecode -s 9 -c 3 .*ds4-bench --cuda --synthetic flash-q2 --fill-state --ctx-start 2048 --ctx-max 2048 -n 1$" \
  "$tmp/ncu-decode" 2>/dev/null && ok || bad "ncu step (decode): $(cat "$tmp/ncu-decode" 2>&1)"
env PATH="$tmp/tools:$PATH" NCU_ARGS="$tmp/ncu-prefill" OUT="$tmp/fn2" NCU_PREFILL=1 PROFILE_CTX=4096 \
  bash "$script" "$tmp/fa" ncu >/dev/null 2>&1
grep -q -- "ds4-bench --cuda --synthetic flash-q2 --ctx-start 4096 --ctx-max 4096 -n 1$" "$tmp/ncu-prefill" 2>/dev/null &&
  ! grep -q -- "--fill-state" "$tmp/ncu-prefill" && ok || bad "ncu step (NCU_PREFILL=1): $(cat "$tmp/ncu-prefill" 2>&1)"
echo "device-check script: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
