#!/usr/bin/env bash
# dio-write-refused-by-verify-zeroes-dirty-block
#
# A Direct I/O write that write verify refuses (EIO, a dio_verify_wr ereport)
# leaves its block reading zeros, neither the old bytes nor the write's, when
# the block was dirty in the open txg. The pool then counts checksum errors.
#
# Shape: recordsize=4K, direct=always, sync=always, checksum=fletcher4,
# zfs_vdev_direct_write_verify=1. A 1.5 MiB file written buffered and fsynced,
# then a 4 KiB write at 4096 from a buffer another thread flips while it is in
# flight (repro.c). Verify refuses about half such writes; rounds repeat until
# one is refused.
#
# Needs: root, the zfs module loaded (a build with Direct I/O, 2.3+), zpool/zfs
# and cc on PATH. Any build.
# Usage: ./repro.sh [--disk /dev/X] [--pool NAME] [--rounds N]
#   default: a 1 GiB file-backed vdev in a mktemp -d directory, pool repro-<pid>.
#   --disk (or REPRO_DISK=) uses that disk instead: its contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}" ROUNDS=20
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) DISK="$2"; shift 2 ;;
    --pool) POOL="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "usage: $0 [--disk /dev/X] [--pool NAME] [--rounds N]"; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
PARAM=/sys/module/zfs/parameters/zfs_vdev_direct_write_verify
untested() { echo "NOT TESTED: $*"; exit 2; }
[ "$(id -u)" = 0 ] || untested "run as root"
for t in zpool zfs cc; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
[ -e "$PARAM" ] || untested "this build has no zfs_vdev_direct_write_verify (no Direct I/O)"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED="" OLDPARAM="$(cat "$PARAM")"
cleanup() {
  echo "$OLDPARAM" > "$PARAM"
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
cc -O2 -pthread -o "$DIR/repro" "$HERE/repro.c" || untested "cc failed on repro.c"
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=4K -O direct=always -O sync=always -O checksum=fletcher4 \
  -O compression=off -O primarycache=all "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1
echo 1 > "$PARAM"

STATS="/proc/spl/kstat/zfs/$POOL/iostats"
count() { awk -v k="$1" '$1 == k { print $3 }' "$STATS" 2>/dev/null; }
dio0="$(count direct_write_count)"
"$DIR/repro" "$DIR/mnt" "$ROUNDS"
rc=$?
[ -n "$dio0" ] && echo "Direct I/O writes: $(( $(count direct_write_count) - dio0 )) (iostats)"
zpool status -v "$POOL" | sed -n '/config:/,$p'
case $rc in
  1) echo "REPRODUCED: a Direct I/O write refused by write verify left zeros in its block"; exit 1 ;;
  0) echo "NOT REPRODUCED: no round left zeros (if no write was refused, the race missed: try --rounds 100)"; exit 0 ;;
  *) untested "the trigger failed (exit $rc)" ;;
esac
