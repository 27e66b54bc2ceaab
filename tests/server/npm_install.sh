#!/usr/bin/env bash
# ctest fixture: installs the official API clients (npm openai and @anthropic-ai/sdk, pinned) into
# the build tree. Exit 0 with a marker file when the npm registry cannot be reached (the client
# tests then skip, saying why); any other failure exits non-zero so those tests fail loudly.
#   usage: npm_install.sh <prefix>      (prefix = <build>/npm-server)
set -uo pipefail
prefix=$1
pkgs=("openai@6.49.0" "@anthropic-ai/sdk@1.14.0")
marker=$prefix/REGISTRY_UNREACHABLE
mkdir -p "$prefix"
rm -f "$marker"
have() {  # have NAME VERSION
  local f=$prefix/node_modules/$1/package.json
  [ -f "$f" ] && grep -q "\"version\": \"$2\"" "$f"
}
if have openai 6.49.0 && have @anthropic-ai/sdk 1.14.0; then
  echo "npm_install: ${pkgs[*]} already in $prefix"
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "npm_install: node and npm are required (scripts/install-deps.sh installs them)" >&2
  exit 1
fi
if ! npm ping --fetch-retries=1 --fetch-timeout=20000 >"$prefix/ping.log" 2>&1; then
  {
    echo "the npm registry ($(npm config get registry)) is unreachable, so ${pkgs[*]} could not be installed:"
    grep -E -m 2 "error code|reason:" "$prefix/ping.log" || tail -n 3 "$prefix/ping.log"
  } >"$marker"
  cat "$marker"
  exit 0
fi
if ! npm install --prefix "$prefix" --no-audit --no-fund --fetch-retries=2 "${pkgs[@]}"; then
  echo "npm_install: 'npm install ${pkgs[*]}' failed although the registry answers ping" >&2
  exit 1
fi
have openai 6.49.0 && have @anthropic-ai/sdk 1.14.0 || { echo "npm_install: packages missing after install" >&2; exit 1; }
echo "npm_install: installed ${pkgs[*]} into $prefix"
