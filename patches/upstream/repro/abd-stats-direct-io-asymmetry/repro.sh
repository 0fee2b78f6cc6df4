#!/usr/bin/env bash
# abd-stats-direct-io-asymmetry
#
# After Direct I/O, abdstats scatter_cnt and scatter_data_size read below zero
# (a u64 at or above 2^63): the ABDs built over user pages are counted out as if
# the ARC had allocated them, never counted in (openzfs/zfs#18390; fixed on
# master by a22b3f6700, 2026-04-01; zfs-2.4.0 and older carry it).
#
# Shape: 64 MiB written with O_DIRECT in 1 MiB requests (recordsize=1M), read
# back with O_DIRECT, then abdstats read three times a second apart (its
# counters are per-CPU sums: one read mid-update may dip below zero alone).
#
# Needs: root, the zfs module loaded, zpool/zfs/dd on PATH. Any build.
# Usage: ./repro.sh [--disk /dev/X] [--pool NAME]
#   default: a 1 GiB file-backed vdev in a mktemp -d directory, pool repro-<pid>.
#   --disk (or REPRO_DISK=) uses that disk instead: its contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) DISK="$2"; shift 2 ;;
    --pool) POOL="$2"; shift 2 ;;
    *) echo "usage: $0 [--disk /dev/X] [--pool NAME]"; exit 2 ;;
  esac
done
untested() { echo "NOT TESTED: $*"; exit 2; }
[ "$(id -u)" = 0 ] || untested "run as root"
for t in zpool zfs dd; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
STATS=/proc/spl/kstat/zfs/abdstats
[ -r "$STATS" ] || untested "no $STATS (is the zfs module loaded?)"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED=""
cleanup() {
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=1M -O compression=off -O direct=standard "$POOL" "$VDEV" ||
  untested "zpool create failed"
CREATED=1

dd if=/dev/urandom of="$DIR/src" bs=1M count=64 status=none
dd if="$DIR/src" of="$DIR/mnt/f" bs=1M oflag=direct status=none || untested "O_DIRECT write failed"
dd if="$DIR/mnt/f" of=/dev/null bs=1M iflag=direct status=none || untested "O_DIRECT read failed"
zpool sync "$POOL"
wrapped=0
for i in 1 2 3; do
  sleep 1
  line=$(awk '$1 == "scatter_cnt" || $1 == "scatter_data_size" {printf "%s=%s ", $1, $3}' "$STATS")
  echo "read $i: $line"
  # a u64 of 20 digits starting 18446744 is at or above 2^63: below zero as signed
  case "$line" in *=18446744*) wrapped=$((wrapped + 1)) ;; esac
done
if [ "$wrapped" = 3 ]; then
  echo "REPRODUCED: abdstats counted below zero in every read after Direct I/O"
  exit 1
fi
echo "NOT REPRODUCED: abdstats stayed at or above zero ($wrapped of 3 reads below)"
exit 0
