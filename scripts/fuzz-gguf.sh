#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer (ASan + UBSan) for a bounded time.
#   scripts/fuzz-gguf.sh [BUILD_DIR=build-fuzz] [SECONDS=60]
# Configures BUILD_DIR with clang and -DDS4_FUZZ=ON (tests, benchmarks and CUDA off), builds only
# the fuzzer and its seed generator, writes a fresh seed corpus with gguf::Writer, then runs the
# fuzzer for SECONDS on BUILD_DIR/fuzz/gguf-corpus (kept between runs) plus the seeds.
# Crashing inputs are saved under BUILD_DIR/fuzz/artifacts/. Exit status non-zero on a crash.
# Registered as the ctest test fuzz_gguf_reader_60s (label "fuzz") from tests/gguf.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-fuzz}
seconds=${2:-60}
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
if [[ -z $cxx || -z $cc ]]; then
  echo "fuzz-gguf: clang is not installed" >&2
  exit 1
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS4_FUZZ=ON -DDS4_TESTS=OFF -DDS4_BENCH=OFF -DDS4_CUDA=OFF >/dev/null
cmake --build "$build" -j "${DS4_FUZZ_JOBS:-2}" --target gguf_reader_fuzz gguf_fuzz_seeds
seeds=$build/fuzz/gguf-seeds
corpus=$build/fuzz/gguf-corpus
artifacts=$build/fuzz/artifacts/
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"
"$build/fuzz/gguf_fuzz_seeds" "$seeds"
exec "$build/fuzz/gguf_reader_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=1024 -dict="$root/fuzz/gguf.dict" -artifact_prefix="$artifacts" \
  -print_final_stats=1 "$corpus" "$seeds"
