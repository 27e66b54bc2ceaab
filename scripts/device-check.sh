#!/usr/bin/env bash
# One device call's work (docs/perf-notes.md): the CUDA tests, a ds4-nano GPU == CPU greedy check
# and the flash-q2 synthetic benchmarks, from binaries built on the dev machine and carried over
# (the device has no Debian packages: the shared libraries they link travel beside them).
#
#   scripts/device-check.sh --stage BUILD_DIR BIN_DIR   (on the dev machine, before the call)
#   scripts/device-check.sh BIN_DIR [STEPS]             (on the device)
#
# --stage fills BIN_DIR from a CUDA build (e.g. `cmake -S . -B build90 -G Ninja
# -DCMAKE_CUDA_ARCHITECTURES=90 && ninja -C build90 ds4 ds4-bench ds4-make-model test_cuda`):
# the four binaries stripped, and in BIN_DIR/lib every shared library they link except the C and
# C++ runtime the device has (libc, libm, libstdc++, libgcc_s, the loader). Carry BIN_DIR (a
# gitignored folder such as .device/bin, ~25 MB) with the call. STEPS (default
# "tests nano decode prefill") picks from:
#   tests    test_cuda on the tiny models (generated here)
#   nano     ds4-nano q2 greedy text, --cuda vs --cpu (must be equal)
#   decode   decode tok/s at 2K / 8K / 32K (--fill-state), once per entry of $AB (see below); each
#            the best of 2 runs of 32 tokens (the first captures the CUDA graphs, the second reuses them);
#            then a "decode mean ENTRY" line per entry: each context's mean over the rounds (and their count)
#   prefill  prefill tok/s at 2K / 8K, once per entry of $AB; then "prefill mean ENTRY" lines as decode's
#   kprof    ds4-bench --kernel-profile (per-matrix matvec rates), once per entry of $AB
#   sprof    DS4_CUDA_PROFILE=1 decode step profile at $PROFILE_CTX (default 2048), once per entry of $AB
#   ncu      Nsight Compute of $KERNEL (regex, default "rowslice"), $NCU_COUNT launches (4) after skipping
#            $NCU_SKIP launches of it (0; e.g. NCU_SKIP=4 to start past the first layers), at $PROFILE_CTX;
#            NCU_SOURCE=1: also the stall samples per SASS instruction (ncu-source.csv; summary:
#            scripts/ncu-source-summary.py); NCU_PREFILL=1: a prefill of $PROFILE_CTX tokens in place of
#            the decode step (e.g. KERNEL=predecode NCU_SKIP=9 NCU_COUNT=3: layer 3's routed experts)
#   timeline every kernel of the last 3 decode steps at $PROFILE_CTX (CUPTI: DS4_CUDA_TIMELINE), once per entry
#            of $AB, into $OUT/timeline.ENTRY.{kernels,graph}.csv; read them with scripts/timeline-report.py
#   ktime    every decode kernel's duration at $PROFILE_CTX (default 2048; ncu, graph nodes one by one, serialised):
#            per-kernel totals per step against the graph's step time (the launch gaps)
#   sass     the machine code of the kernels whose names match $KERNEL (regex, default "rowslice") in
#            ds4-bench, by the device toolkit's cuobjdump (this machine has none), into $OUT/sass.txt
# TEST_FILTER: a gtest filter for the tests step's test_cuda run (default: every test), e.g.
# TEST_FILTER='CudaVsCpu.*' to check a kernel change end to end in a few seconds.
# TEST_AB: environment settings under which the CudaKernels.* tests (TEST_AB_FILTER, when set)
# run again (as AB's, without "@DIR" entries).
# AB: space-separated environment settings to compare, "-" for none (default "-"); each entry's
# variables are comma-separated, e.g. AB="- DS4_CUDA_MATVEC_ROWSLICE=0" runs each benchmark with
# the defaults and with the row-slice kernel off, alternated twice. An entry "@DIR" runs the
# ds4-bench carried in DIR instead (another build: e.g. AB="- @.device/old" compares a branch's
# binaries with main's; DIR's binary uses DIR/lib, if any, then BIN_DIR's lib/;
# scripts/stage-revs.sh builds such folders from git revisions), "@DIR,VAR=value,..." with those
# variables set.
# ROUNDS: how many times decode / prefill alternate the entries (default 2; even rounds run them
# in reverse order, so that a drift along a round — clocks, temperature — cancels in pairs).
# SYNTH_LAYERS: generate only the synthetic model's first N layers (ds4-bench --synthetic-layers;
# on an H100, where flash-q2's 43 layers do not fit: 36 do); every "@DIR" binary must know the flag.
# DECODE_CTX_MAX: the decode step's largest context (default 32768; 2048: the 2K run only).
# Logs go to $OUT (the device tool's folder) or ./device-out.
set -uo pipefail
copy_libs() {  # copy_libs BINARY DIR: the shared libraries BINARY links but the device's C/C++ runtime
  mkdir -p "$2" || return 1
  ldd "$1" | awk '$3 ~ /^\// {print $3}' | { grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s)\.so|/ld-linux' || true; } |
    while read -r lib; do cp -L "$lib" "$2/" || exit 1; done
}
if [ "${1:-}" = --libs ]; then  # --libs BINARY DIR (scripts/stage-revs.sh): copy_libs alone
  [ $# -eq 3 ] && [ -x "$2" ] || { echo "usage: $0 --libs BINARY DIR" >&2; exit 2; }
  copy_libs "$2" "$3"
  exit
fi
if [ "${1:-}" = --stage ]; then
  [ $# -eq 3 ] && [ -d "$2" ] || { echo "usage: $0 --stage BUILD_DIR BIN_DIR" >&2; exit 2; }
  mkdir -p "$3/lib" || exit 1
  for b in ds4 ds4-bench ds4-make-model tests/cuda/test_cuda; do
    [ -x "$2/$b" ] || { echo "$0: $2/$b is missing: build it first (see above)" >&2; exit 2; }
    strip -o "$3/$(basename "$b")" "$2/$b" || exit 1
    copy_libs "$2/$b" "$3/lib" || exit 1
  done
  # The timeline step's CUPTI (loaded at run time, so ldd does not list it), when the toolkit has it.
  cupti=$(ls /usr/local/cuda/lib*/libcupti.so.1[0-9] /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.1[0-9] 2>/dev/null | head -1)
  [ -n "$cupti" ] && { cp -L "$cupti" "$3/lib/" || exit 1; }
  du -sh "$3"
  exit 0
fi
usage="usage: $0 BIN_DIR [STEPS] (BIN_DIR: ds4-bench and the rest, made by: $0 --stage BUILD_DIR BIN_DIR)"
case ${1:-} in -h|--help) echo "$usage (the steps and variables: this script's header)"; exit 0 ;; esac
[ -n "${1:-}" ] || { echo "$usage" >&2; exit 2; }
STEPS=${2:-tests nano decode prefill}
STEP_NAMES="tests nano decode prefill kprof sprof ncu ktime timeline sass"
for step in $STEPS; do  # a mistyped step is refused first, before the others spend device time
  [[ " $STEP_NAMES " == *" $step "* ]] || { echo "$0: unknown step $step (steps: $STEP_NAMES)" >&2; exit 2; }
done
[ -x "$1/ds4-bench" ] || { echo "$0: $1/ds4-bench is missing: fill $1 with $0 --stage first" >&2; exit 2; }
BIN=$(cd "$1" && pwd)
AB=${AB:--}
[[ ${ROUNDS:-2} =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS must be a positive integer, not '${ROUNDS}'" >&2; exit 2; }
[[ ${PROFILE_CTX:-2048} =~ ^[1-9][0-9]*$ ]] || { echo "$0: PROFILE_CTX must be a positive integer, not '${PROFILE_CTX}'" >&2; exit 2; }
# An AB entry is "-", "VAR=value,...", "@DIR" or "@DIR,VAR=value,...".
entry_dir() { local d=${1#@}; echo "${d%%,*}"; }  # DIR of an "@" entry
entry_vars() {  # the entry's comma-separated variables (empty for "-" and a bare "@DIR")
  case $1 in -|@*) [[ $1 == @*,* ]] && echo "${1#*,}" ;; *) echo "$1" ;; esac
}
for entry in $AB; do  # every "@DIR" must hold a ds4-bench before any step runs
  if [[ $entry == @* ]]; then
    dir=$(entry_dir "$entry")
    [ -x "$dir/ds4-bench" ] || { echo "$0: AB entry $entry: $dir/ds4-bench is missing" >&2; exit 2; }
  fi
done
OUT=${OUT:-$PWD/device-out}
SYNTH=(--synthetic flash-q2)
if [ -n "${SYNTH_LAYERS:-}" ]; then
  [[ $SYNTH_LAYERS =~ ^[1-9][0-9]*$ ]] || { echo "$0: SYNTH_LAYERS must be a positive integer, not '$SYNTH_LAYERS'" >&2; exit 2; }
  SYNTH+=(--synthetic-layers "$SYNTH_LAYERS")
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
MODELS=$BIN/models
VOCAB=$ROOT/models/deepseek-v3-tokenizer.json.zst
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"

with_env() {  # with_env ENTRY CMD...: runs CMD with ENTRY's variables set (and an "@DIR" entry's DIR/lib first)
  local vars libs=()
  vars=$(entry_vars "$1")
  case $1 in @*) [ -d "$(entry_dir "$1")/lib" ] && libs=("LD_LIBRARY_PATH=$(cd "$(entry_dir "$1")/lib" && pwd):$LD_LIBRARY_PATH") ;; esac
  shift
  env "${libs[@]}" ${vars//,/ } "$@"
}

bench_of() {  # bench_of ENTRY: the ds4-bench an AB entry runs ("@DIR[,...]": DIR's, else BIN_DIR's)
  case $1 in @*) echo "$(cd "$(entry_dir "$1")" && pwd)/ds4-bench" ;; *) echo "$BIN/ds4-bench" ;; esac
}

models() {
  mkdir -p "$MODELS"
  for r in q2 q4 f32; do
    [ -f "$MODELS/ds4-tiny-$r.gguf" ] ||
      "$BIN/ds4-make-model" --preset tiny --recipe "$r" --vocab "$VOCAB" --seed 1 -q -o "$MODELS/ds4-tiny-$r.gguf"
  done
  [ -f "$MODELS/ds4-nano-q2.gguf" ] ||
    "$BIN/ds4-make-model" --weights "$ROOT/models/ds4-nano-weights.gguf.zst" --recipe q2 --vocab "$VOCAB" \
      --name ds4-nano-q2 -q -o "$MODELS/ds4-nano-q2.gguf"
}

stall_metrics() {  # ncu: instructions and the average stall cycles per issue, by reason
  local m=smsp__inst_executed.sum r
  for r in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle barrier \
           not_selected selected dispatch_stall no_instruction branch_resolving; do
    m+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  echo "$m"
}

summary=()
for step in $STEPS; do
  case $step in
    tests)
      models
      DS4_TINY_MODELS=$MODELS "$BIN/test_cuda" ${TEST_FILTER:+"--gtest_filter=$TEST_FILTER"} >"$OUT/test_cuda.log" 2>&1
      summary+=("test_cuda: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/test_cuda.log" | tr '\n' ' ')")
      # TEST_AB: environment settings under which the CudaKernels tests run again (kernel variants)
      for entry in ${TEST_AB:-}; do
        with_env "$entry" env DS4_TINY_MODELS=$MODELS "$BIN/test_cuda" --gtest_filter="${TEST_AB_FILTER:-CudaKernels.*}" \
          >"$OUT/test_cuda.${entry//[^A-Za-z0-9_]/_}.log" 2>&1
        summary+=("test_cuda ${TEST_AB_FILTER:-CudaKernels.*} with $entry: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' \
          "$OUT/test_cuda.${entry//[^A-Za-z0-9_]/_}.log" | tr '\n' ' ')")
      done
      ;;
    nano)
      models
      p="Tell me a short story about a lighthouse keeper."
      "$BIN/ds4" -m "$MODELS/ds4-nano-q2.gguf" --nothink --temp 0 -n 96 -p "$p" --cuda >"$OUT/nano_gpu.txt" 2>"$OUT/nano_gpu.err"
      "$BIN/ds4" -m "$MODELS/ds4-nano-q2.gguf" --nothink --temp 0 -n 96 -p "$p" --cpu >"$OUT/nano_cpu.txt" 2>"$OUT/nano_cpu.err"
      if cmp -s "$OUT/nano_gpu.txt" "$OUT/nano_cpu.txt" && [ -s "$OUT/nano_gpu.txt" ]; then r=equal; else r=DIFFERENT; fi
      summary+=("nano q2 greedy GPU vs CPU: $r")
      ;;
    decode|prefill|kprof)
      for round in $(seq "${ROUNDS:-2}"); do
        order=$AB  # even rounds in reverse (ABBA): an entry's place in the round cancels out
        (( round % 2 == 0 )) && order=$(printf '%s\n' $AB | tac | tr '\n' ' ')
        for entry in $order; do
          tag="$step.$round.${entry//[^A-Za-z0-9_]/_}"
          case $step in
            decode) args=(--fill-state --ctx-start 2048 --ctx-max "${DECODE_CTX_MAX:-32768}" --step-mul 4 -n 32 --repeat 2) ;;
            prefill) args=(--ctx-start 2048 --ctx-max 8192 --step-mul 4 -n 4) ;;
            kprof) args=(--kernel-profile --ctx-start 2048 --ctx-max 2048 -n 1) ;;
          esac
          with_env "$entry" "$(bench_of "$entry")" --cuda "${SYNTH[@]}" "${args[@]}" \
            --csv "$OUT/$tag.csv" >"$OUT/$tag.log" 2>&1
          if [ "$step" = kprof ]; then
            summary+=("$tag: $(grep -iE 'total' "$OUT/$tag.log" | tail -1)")
          else
            if [ -s "$OUT/$tag.csv" ]; then
              summary+=("$tag: $(awk -F, 'NR>1 {printf "%s: prefill %s decode %s; ", $1, $3, $5}' "$OUT/$tag.csv")")
            else
              summary+=("$tag: FAILED (no results; see $tag.log)")
            fi
          fi
        done
        [ "$step" = kprof ] && break
      done
      # Per entry, the mean tok/s of each context over the rounds (decode's or prefill's column).
      if [ "$step" != kprof ]; then
        col=$([ "$step" = decode ] && echo 5 || echo 3)
        for entry in $AB; do
          e=${entry//[^A-Za-z0-9_]/_}
          m=$(awk -F, -v c="$col" 'FNR > 1 && $c != "" {
                if (!($1 in n)) key[++k] = $1
                s[$1] += $c; n[$1]++ }
              END { for (i = 1; i <= k; i++) printf "%s: %.2f (%d); ", key[i], s[key[i]] / n[key[i]], n[key[i]] }' \
              "$OUT/$step".*."$e".csv 2>/dev/null)
          summary+=("$step mean $e: ${m:-no results}")
        done
      fi
      ;;
    ncu)  # KERNEL=regex (default the routed-expert matvecs): a few launches of a decode step at $PROFILE_CTX
      # (NCU_PREFILL=1: of a prefill); NCU_SOURCE=1 also samples warp stalls per SASS instruction (ncu-source.csv)
      src=()
      [ "${NCU_SOURCE:-0}" = 1 ] && src=(--section SourceCounters --import-source no -o "$OUT/ncu" -f)
      fill=(--fill-state)
      [ "${NCU_PREFILL:-0}" = 1 ] && fill=()
      DS4_CUDA_GRAPH=0 DS4_CUDA_PDL=0 ncu --clock-control none -k "regex:${KERNEL:-rowslice}" -s "${NCU_SKIP:-0}" -c "${NCU_COUNT:-4}" \
        --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section SchedulerStats --metrics "$(stall_metrics)" "${src[@]}" \
        "$BIN/ds4-bench" --cuda "${SYNTH[@]}" "${fill[@]}" --ctx-start "${PROFILE_CTX:-2048}" \
        --ctx-max "${PROFILE_CTX:-2048}" -n 1 >"$OUT/ncu${src:+-run}.log" 2>&1  # with -o: the run's log apart
      if [ ${#src[@]} -gt 0 ]; then
        ncu --import "$OUT/ncu.ncu-rep" --print-details all >"$OUT/ncu.log" 2>&1
        ncu --import "$OUT/ncu.ncu-rep" --page source --print-source sass --csv >"$OUT/ncu-source.csv" 2>&1
        rm -f "$OUT/ncu.ncu-rep"
      fi
      summary+=("ncu: $(grep -c . "$OUT/ncu.log") lines in ncu.log")
      ;;
    ktime)  # one metric, no replay: each kernel of 2 decode steps timed alone (weight generation and layout excluded)
      ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
        -k 'regex:^(?!synth|split_rows)' "$BIN/ds4-bench" --cuda "${SYNTH[@]}" --fill-state \
        --ctx-start "${PROFILE_CTX:-2048}" --ctx-max "${PROFILE_CTX:-2048}" -n 2 >"$OUT/ktime.csv" 2>"$OUT/ktime.err"
      # Fields: ..., "Kernel Name" (5), ..., "Metric Value" (15); steps = embed launches.
      awk -F'","' '$13 == "gpu__time_duration.sum" {v = $15; gsub(/[",]/, "", v); n[$5]++; t[$5] += v; if ($5 ~ /embed/) steps++}
        END {for (k in n) {printf "%10.1f us/step %7.1f calls/step %8.2f us/call  %s\n", t[k] / 1e3 / steps,
             n[k] / steps, t[k] / 1e3 / n[k], k; tot += t[k]; cnt += n[k]}
             printf "%10.1f us/step %7.1f calls/step (total, %d steps)\n", tot / 1e3 / steps, cnt / steps, steps}' \
        "$OUT/ktime.csv" | sort -rn >"$OUT/ktime.txt"
      summary+=("ktime: $(grep total "$OUT/ktime.txt")")
      ;;
    sass)  # no GPU work: each "Function : NAME" block of cuobjdump's listing whose NAME matches $KERNEL
      cuobjdump -sass "$BIN/ds4-bench" 2>"$OUT/sass.err" |
        awk -v re="${KERNEL:-rowslice}" '/Function : /{keep = ($0 ~ re)} keep' >"$OUT/sass.txt"
      summary+=("sass: $(grep -c 'Function : ' "$OUT/sass.txt") kernels matching ${KERNEL:-rowslice} in sass.txt")
      ;;
    timeline)  # once per entry of $AB: the last 3 of 8 decode steps (graph launches) at PROFILE_CTX
      for entry in $AB; do
        tag="timeline.${entry//[^A-Za-z0-9_]/_}"
        with_env "$entry" env DS4_CUDA_TIMELINE="$OUT/$tag" DS4_CUPTI_LIBRARY="$(ls "$BIN"/lib/libcupti.so* 2>/dev/null | head -1)" \
          "$(bench_of "$entry")" --cuda "${SYNTH[@]}" --fill-state --ctx-start "${PROFILE_CTX:-2048}" \
          --ctx-max "${PROFILE_CTX:-2048}" -n 8 >"$OUT/$tag.log" 2>&1
        summary+=("$tag: $(grep -E 'DS4_CUDA_TIMELINE|decode' "$OUT/$tag.log" | tr -s ' ' | tr '\n' ';')")
      done
      ;;
    sprof)  # once per entry of $AB; the summary keeps the routed experts', the indexer's and the attention's lines
      for entry in $AB; do
        tag="sprof.${entry//[^A-Za-z0-9_]/_}"
        with_env "$entry" env DS4_CUDA_PROFILE=1 "$(bench_of "$entry")" --cuda "${SYNTH[@]}" --fill-state \
          --ctx-start "${PROFILE_CTX:-2048}" --ctx-max "${PROFILE_CTX:-2048}" -n 4 >"$OUT/$tag.log" 2>&1
        summary+=("$tag: $(grep -E '_exps|indexer|attention|step profile' "$OUT/$tag.log" | tr -s ' ' | tr '\n' ';')")
      done
      ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee -a "$OUT/summary.txt"
# The device tool returns at most 8 files: everything else travels in one archive, which an
# earlier run into the same $OUT started (its files join this run's; the summary is appended).
if [ -f "$OUT/logs.tar.gz" ]; then
  tar xzf "$OUT/logs.tar.gz" -C "$OUT" && rm "$OUT/logs.tar.gz"
fi
tar czf /tmp/ds4-logs.tar.gz -C "$OUT" --exclude=summary.txt . && find "$OUT" -type f ! -name summary.txt -delete &&
  mv /tmp/ds4-logs.tar.gz "$OUT/logs.tar.gz"
