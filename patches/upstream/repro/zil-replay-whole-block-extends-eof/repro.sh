#!/usr/bin/env bash
# zil-replay-whole-block-extends-eof
#
# After a crash, ZIL replay grows a file to the end of its last record: a size
# the file never had, zeros past the old end. zfs_replay_write() replays a
# WR_INDIRECT record (a dmu_sync()'d block) shorter than its block as the whole
# block, and keeps the end of file (z_replay_eof) only when the file is shorter
# than the record's end; when the file is already longer, z_replay_eof stays 0
# and zfs_write() moves the size to the block's end.
#
# Shape: recordsize=16K. A 40000-byte file on disk (zpool sync), the pool
# frozen (no txg syncs from here: a crash), one 32 KiB write at 4096 (>= 32 KiB:
# logged WR_INDIRECT, a record per block; its last record is 4 KiB of the
# record 32768..49151), fsync, export, import (the ZIL replayed). The size must
# be 40000; the bug gives 49152. A control write that ends in an earlier
# record leaves the size right.
#
# Needs: root, the zfs module loaded, zpool/zfs/xfs_io/stat on PATH. Any build.
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
for t in zpool zfs xfs_io stat; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED=""
cleanup() {
  [ -n "$CREATED" ] && zpool list "$POOL" >/dev/null 2>&1 && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK" SEARCH="$DIR"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; else SEARCH="$(dirname "$DISK")"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=16K -O compression=off -O sync=standard -O logbias=latency \
  -O primarycache="${REPRO_CACHE:-metadata}" "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1

# f: its last write's last record ends inside the file's last record (the bug);
# g: the control, its last write's records all end before the last record.
# fsync: the log's header must be on disk before the freeze, or nothing logged
# after it is found at import (ZTS's slog_replay tests do the same)
xfs_io -f -c "pwrite -q -S 0x5a 0 40000" -c fsync "$DIR/mnt/f"
xfs_io -f -c "pwrite -q -S 0x5a 0 40000" -c fsync "$DIR/mnt/g"
zpool sync "$POOL"
zpool freeze "$POOL" || untested "zpool freeze failed"
xfs_io -c "pwrite -q -S 0x61 4096 32768" -c fsync "$DIR/mnt/f"    # 4096..36863
xfs_io -c "pwrite -q -S 0x61 0 32768" -c fsync "$DIR/mnt/g"       # 0..32767
zpool export "$POOL" || untested "zpool export failed"
zpool import -d "$SEARCH" "$POOL" || { CREATED=""; untested "zpool import failed"; }
f=$(stat -c %s "$DIR/mnt/f") g=$(stat -c %s "$DIR/mnt/g")
tail=$(tail -c +40001 "$DIR/mnt/f" | tr -d '\0' | wc -c)
echo "after replay: f is $f bytes (written up to 40000; $tail non-zero bytes past it), control g is $g bytes"
if [ "$f" != 40000 ]; then
  echo "REPRODUCED: ZIL replay left the file $f bytes long, a size it never had (expected 40000)"
  exit 1
fi
[ "$g" = 40000 ] || untested "the control is $g bytes: the replay lost or grew it another way"
[ "$(tail -c +1 "$DIR/mnt/g" | head -c 32768 | tr -d 'a' | wc -c)" = 0 ] ||
  untested "the control's write was not replayed: the log held nothing (no test)"
echo "NOT REPRODUCED: both files 40000 bytes after replay"
exit 0
