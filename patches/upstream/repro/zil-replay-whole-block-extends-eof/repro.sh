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
# frozen (no txg syncs from here: a crash), one 32 KiB pwrite call at 4096
# (>= 32 KiB: logged WR_INDIRECT, a record per block; its last record is 4 KiB
# of the record 32768..49151), fsync, export, import (the ZIL replayed). The
# size must be 40000; the bug gives 49152. Three control files beside it (below)
# must come back right.
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
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/pool" "$POOL" "$VDEV" ||
  untested "zpool create failed"
CREATED=1
zfs create -o mountpoint="$DIR/mnt" -o recordsize=16K -o compression=off -o sync=standard \
  -o logbias=latency -o primarycache="${REPRO_CACHE:-metadata}" "$POOL/fs" ||
  untested "zfs create failed"

# Four files of 40000 bytes (the case's rows, cases/test_zil_replay.py); each then
# gets one write and an fsync under the freeze:
#   last-record-inside 4096..36863: its last record is 4 KiB of the record
#                      32768..49151, below the end of the file (the bug: 49152);
#   whole-records      0..32767 (two whole records), control;
#   extends-file       24576..57343 (past the end: the replay resets the end), control;
#   copied-small       1 KiB at 36864 (under 32 KiB: copied into the log), control.
ROWS="last-record-inside:4096:32768:40000 whole-records:0:32768:40000
extends-file:24576:32768:57344 copied-small:36864:1024:40000"
for r in $ROWS; do
  # fsync: the log's header must be on disk before the freeze, or nothing logged
  # after it is found at import (ZTS's slog_replay tests do the same)
  xfs_io -f -c "pwrite -q -S 0x5a 0 40000" -c fsync "$DIR/mnt/${r%%:*}"
done
zpool sync "$POOL"
zpool freeze "$POOL" || untested "zpool freeze failed"
for r in $ROWS; do
  IFS=: read -r name off len _ <<<"$r"
  # -b: one pwrite call (xfs_io writes 4 KiB a call by default: each under 32 KiB,
  # copied into the log, and the bug is not met)
  xfs_io -c "pwrite -q -b $len -S 0x61 $off $len" -c fsync "$DIR/mnt/$name"
done
zpool export "$POOL" || untested "zpool export failed"
zpool import -d "$SEARCH" "$POOL" || { CREATED=""; untested "zpool import failed"; }
bad="" lost=""
for r in $ROWS; do
  IFS=: read -r name off len want <<<"$r"
  got=$(stat -c %s "$DIR/mnt/$name")
  new=$(dd if="$DIR/mnt/$name" bs=1 skip="$off" count="$len" status=none | tr -d 'a' | wc -c)
  echo "$name: $got bytes after replay (expected $want); $new of its $len written bytes not replayed"
  [ "$new" = 0 ] || lost="$lost $name"
  [ "$got" = "$want" ] || bad="$bad $name"
done
if [ "$bad" = " last-record-inside" ]; then
  echo "REPRODUCED: ZIL replay left last-record-inside at a size it never had (the end of its record)"
  exit 1
fi
[ -z "$lost" ] || untested "writes not replayed:$lost (the log held nothing to test)"
[ -z "$bad" ] || untested "sizes wrong in other rows:$bad (another problem than this one)"
echo "NOT REPRODUCED: every file at its size after replay"
exit 0
