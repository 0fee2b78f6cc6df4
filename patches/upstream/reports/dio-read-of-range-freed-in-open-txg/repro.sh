#!/usr/bin/env bash
# dio-read-of-range-freed-in-open-txg
#
# An O_DIRECT read returns the old bytes of a record that a truncate freed in
# the open txg; buffered reads return zeros. dmu_read_abd() takes the level-0
# block pointer from the parent indirect block (which keeps the freed pointer
# until the txg syncs) and never asks dnode_block_freed().
#
# Shape: recordsize=16K, primarycache=metadata. 64 KiB written with O_DIRECT,
# zpool sync, truncate to 40000, truncate back up to 128 KiB, O_DIRECT read:
# bytes 40000.. must be zero; the bug returns the old bytes of 49152..65535.
#
# Needs: root, the zfs module loaded, zpool/zfs/xfs_io/dd on PATH. Any build.
# Usage: ./repro.sh [--disk /dev/X] [--pool NAME] [--rounds N]
#   default: a 1 GiB file-backed vdev in a mktemp -d directory, pool repro-<pid>.
#   --disk (or REPRO_DISK=) uses that disk instead: its contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}" ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) DISK="$2"; shift 2 ;;
    --pool) POOL="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "usage: $0 [--disk /dev/X] [--pool NAME] [--rounds N]"; exit 2 ;;
  esac
done
untested() { echo "NOT TESTED: $*"; exit 2; }
[ "$(id -u)" = 0 ] || untested "run as root"
for t in zpool zfs xfs_io dd; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
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
  -O recordsize=16K -O primarycache=metadata -O compression=off -O direct=standard \
  "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1

bad=0
for r in $(seq 1 "$ROUNDS"); do
  F="$DIR/mnt/f$r"
  xfs_io -f -d -c "pwrite -q -S 0x5a 0 64k" "$F"     # 64 KiB of 0x5a, O_DIRECT
  zpool sync "$POOL"                                   # the blocks are on disk
  xfs_io -c "truncate 40000" -c "truncate 131072" "$F"  # frees 49152..65535 in the open txg
  dio=$(dd if="$F" iflag=direct bs=128k count=1 status=none | tail -c +40001 | tr -d '\0' | wc -c)
  buf=$(dd if="$F" bs=128k count=1 status=none | tail -c +40001 | tr -d '\0' | wc -c)
  echo "round $r: non-zero bytes past 40000: O_DIRECT read $dio, buffered read $buf"
  [ "$dio" -gt 0 ] && bad=$((bad + 1))
done
if [ "$bad" -gt 0 ]; then
  echo "REPRODUCED: an O_DIRECT read returned old bytes of a range truncated away ($bad of $ROUNDS rounds)"
  exit 1
fi
echo "NOT REPRODUCED: every O_DIRECT read past the truncate returned zeros ($ROUNDS rounds)"
exit 0
