#!/usr/bin/env bash
# Installs ds4's build and test dependencies from Debian 12 packages (apt), only when missing.
# Runs as root or through sudo. Pinned versions: cmake/Ds4Dependencies.cmake (chosen from the
# project's shared list, ../shared/docs/dependencies.md).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git clang libfuzzer-14-dev
      libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
      libcli11-dev libcpp-httplib-dev libpcre2-dev libzstd-dev libxxhash-dev libedit-dev
      libssl-dev python3-numpy nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs/npm may come from elsewhere (nodesource, nvm): accept working binaries.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
