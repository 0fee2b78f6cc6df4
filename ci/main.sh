#!/usr/bin/env bash
# The main job on its defaults: set up, then run the VM cases of the chosen
# series (default async-dio) on the debian-6.1 kernel, two guests side by side
# (JOBS=2); build fetched, patched, built or taken from the cache; guests under
# KVM when it works, else TCG (and then the quick tier). Each series runs its own cases: the zvol cases
# for zvol-dio, the rest for async-dio (SELECTION overrides: a pytest -k). SERIES=none:
# stock OpenZFS at ZFS_REF (default master) with the async-dio selection, as ci/gh-job.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
series="${SERIES:-async-dio}"
case "$series" in
  zvol-dio) default_k="zvol" ;;
  *)        default_k="not zvol" ;;
esac
# TIER=auto: every variant where KVM works, the quick tier under TCG (one line says
# which, and how to get the other); TIER=full or TIER=quick to choose.
build=(--series "$series")
[ "$series" = "none" ] && build=(--zfs-ref "${ZFS_REF:-master}")
rc=0
python3 -m pytest cases "${build[@]}" -n "${JOBS:-2}" -k "${SELECTION:-$default_k}" \
  --tier "${TIER:-auto}" "$@" || rc=$?
# The run writes its report.html at its end; rendered again here so a run that died
# before its end leaves one too (python -m suite report: the newest run's folder).
python3 -m suite report "${OZFS_VMCI_RESULTS:-results}" || true
exit "$rc"
