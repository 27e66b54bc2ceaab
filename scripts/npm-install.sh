#!/usr/bin/env bash
# ctest fixture: installs pinned npm packages into the build tree (never committed).
# Exits 0 with a marker file <prefix>/REGISTRY_UNREACHABLE when the npm registry cannot be
# reached (the tests that need the packages then skip, saying why); any other failure exits
# non-zero so those tests fail loudly.
#   usage: npm-install.sh <prefix> [--npm-option...] NAME@VERSION...
#   e.g.   npm-install.sh build/npm openai@6.49.0
#          npm-install.sh build/npm-llama --omit=optional node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1
# Arguments starting with "--" are passed to `npm install` (e.g. --omit=optional, which keeps
# npm from fetching every optional prebuilt binary package of the platform).
set -uo pipefail
prefix=$1; shift
pkgs=(); opts=()
for a in "$@"; do
  case $a in --*) opts+=("$a") ;; *) pkgs+=("$a") ;; esac
done
[ ${#pkgs[@]} -gt 0 ] || { echo "usage: npm-install.sh <prefix> [--npm-option...] NAME@VERSION..." >&2; exit 2; }
marker=$prefix/REGISTRY_UNREACHABLE
mkdir -p "$prefix"
rm -f "$marker"
have_all() {  # every NAME@VERSION is installed at exactly that version
  local spec name ver f
  for spec in "${pkgs[@]}"; do
    name=${spec%@*}; ver=${spec##*@}
    f=$prefix/node_modules/$name/package.json
    [ -f "$f" ] && grep -q "\"version\": \"$ver\"" "$f" || return 1
  done
}
if have_all; then
  echo "npm-install: ${pkgs[*]} already in $prefix"
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "npm-install: node and npm are required (scripts/install-deps.sh installs them)" >&2
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
if ! npm install --prefix "$prefix" --no-audit --no-fund --fetch-retries=2 ${opts[@]+"${opts[@]}"} "${pkgs[@]}"; then
  echo "npm-install: 'npm install ${pkgs[*]}' failed although the registry answers ping" >&2
  exit 1
fi
have_all || { echo "npm-install: packages missing from $prefix after install" >&2; exit 1; }
echo "npm-install: installed ${pkgs[*]} into $prefix"
