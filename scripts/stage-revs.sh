#!/usr/bin/env bash
# Builds ds4-bench at git revisions (branches, commits) for the device's A/B runs: each one
# stripped into OUT_DIR/NAME/ds4-bench with the shared libraries it links in OUT_DIR/NAME/lib
# (device-check.sh --libs: older revisions may link others, e.g. OpenMP's), an "@OUT_DIR/NAME"
# entry of scripts/device-check.sh's AB.
#
#   scripts/stage-revs.sh [--worktree PATH] OUT_DIR REV[=NAME]...
#
# The revisions are built one after another in one detached git worktree (default
# /tmp/ds4-stage-worktree) with its own build folder: the first build is a full one (~10 minutes
# on 2 cores), later revisions rebuild only what differs (about a minute for a kernel file). The
# checkout this runs from is not touched: no stash, no branch switch. NAME defaults to REV with
# every character other than letters, digits, '.', '_' and '-' made '_'.
# Example: scripts/stage-revs.sh .device main=base cuda-attn-q8-out=q8
set -euo pipefail
wt=/tmp/ds4-stage-worktree
if [ "${1:-}" = --worktree ]; then
  [ $# -ge 2 ] || { echo "$0: --worktree needs a path" >&2; exit 2; }
  wt=$2
  shift 2
fi
[ $# -ge 2 ] || { echo "usage: $0 [--worktree PATH] OUT_DIR REV[=NAME]..." >&2; exit 2; }
out=$1
shift
repo=$(git rev-parse --show-toplevel)
for spec in "$@"; do  # every revision resolves before anything is built
  git -C "$repo" rev-parse --verify -q "${spec%%=*}^{commit}" >/dev/null ||
    { echo "$0: unknown revision ${spec%%=*}" >&2; exit 2; }
done
if [ ! -e "$wt/.git" ]; then
  git -C "$repo" worktree add -q --detach "$wt" "${1%%=*}"
fi
mkdir -p "$out"
for spec in "$@"; do
  rev=${spec%%=*}
  name=${spec#*=}
  [ "$spec" = "$rev" ] && name=$(printf '%s' "$rev" | tr -c 'A-Za-z0-9._-' '_')
  git -C "$wt" checkout -q --detach "$(git -C "$repo" rev-parse "$rev^{commit}")"
  if [ ! -f "$wt/build/build.ninja" ]; then
    cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  fi
  echo "$0: building $rev ($(git -C "$wt" log --oneline -1 | cut -c1-60)) -> $out/$name" >&2
  ninja -C "$wt/build" ds4-bench >"$wt/build/stage-revs.log" 2>&1 ||
    { tail -n 30 "$wt/build/stage-revs.log" >&2; echo "$0: $rev did not build (log: $wt/build/stage-revs.log)" >&2; exit 1; }
  mkdir -p "$out/$name"
  strip -o "$out/$name/ds4-bench" "$wt/build/ds4-bench"
  bash "$(dirname "$0")/device-check.sh" --libs "$wt/build/ds4-bench" "$out/$name/lib"
done
du -sh "$out"/*/ds4-bench
