#!/usr/bin/env bash
# The main job on its defaults: set up, then run the VM cases against the
# async-dio series on the debian-6.1 kernel, two guests side by side (JOBS=2)
# (build fetched, patched, built or
# taken from the cache; guests under KVM when it works, else TCG).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
exec python3 -m pytest cases --series "${SERIES:-async-dio}" -n "${JOBS:-2}" "$@"
