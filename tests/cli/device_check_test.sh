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
echo "device-check script: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
