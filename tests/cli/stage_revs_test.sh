#!/usr/bin/env bash
# scripts/stage-revs.sh on a throwaway git repository whose CMake project builds a stand-in
# ds4-bench (a C program printing its revision's text): usage errors, an unknown revision refused
# before any build, and two revisions built in one worktree into OUT_DIR/NAME, stripped, with the
# calling checkout left as it was.
# usage: stage_revs_test.sh SOURCE_DIR
set -u
script=$1/scripts/stage-revs.sh
tmp=$(mktemp -d); trap 'git -C "$tmp/repo" worktree prune 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

expect 2 "^usage: .* OUT_DIR REV\[=NAME\]" -- bash "$script"
expect 2 "^usage: .* OUT_DIR REV\[=NAME\]" -- bash "$script" "$tmp/out"
expect 2 "needs a path" -- bash "$script" --worktree
mkdir -p "$tmp/repo" && cd "$tmp/repo" || exit 1
git init -q && git config user.email t@t && git config user.name t
printf 'cmake_minimum_required(VERSION 3.16)\nproject(stand_in C)\nadd_executable(ds4-bench main.c)\n' >CMakeLists.txt
printf '#include <stdio.h>\nint main(void) { puts("one"); return 0; }\n' >main.c
git add -A && git commit -qm one && git tag one
sed -i 's/"one"/"two"/' main.c && git commit -qam two
expect 2 "unknown revision nosuch" -- bash "$script" --worktree "$tmp/wt" "$tmp/out" one nosuch
[ ! -e "$tmp/wt" ] || bad "an unknown revision still made the worktree"
expect 0 "ds4-bench" -- bash "$script" --worktree "$tmp/wt" "$tmp/out" one=first HEAD
[ "$("$tmp/out/first/ds4-bench")" = one ] || bad "first/ds4-bench is not revision one's"
[ "$("$tmp/out/HEAD/ds4-bench")" = two ] || bad "HEAD/ds4-bench is not HEAD's"
[ "$(stat -c %s "$tmp/out/HEAD/ds4-bench")" -le "$(stat -c %s "$tmp/wt/build/ds4-bench")" ] || bad "not stripped"
[ "$(git rev-parse --abbrev-ref HEAD)" != HEAD ] && git diff --quiet || bad "the calling checkout changed"
# A revision that does not build: its log's tail and a non-zero exit.
printf 'int main(void) { return syntax error; }\n' >main.c && git commit -qam broken
expect 1 "HEAD did not build" -- bash "$script" --worktree "$tmp/wt" "$tmp/out" HEAD=broken
echo "stage-revs script: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
