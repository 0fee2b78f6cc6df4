#!/usr/bin/env bash
# rollback-keeps-cached-pages
#
# An online `zfs rollback` does not drop the page cache of a file that was
# mmapped: afterwards every read path (buffered, mmap, O_DIRECT) returns the
# rolled-back bytes, not the snapshot's. (openzfs/zfs#10931)
#
# Shape: recordsize=4K, primarycache=metadata, direct=disabled. A 40000-byte
# file (fsynced), read once through mmap (its pages now cached), snapshot,
# 8 KiB buffered write at 4096 + fsync, `zfs rollback -r` while the file is
# still open elsewhere, read back: it must equal the snapshot's bytes.
# Without the mmap read first it does not reproduce.
#
# Needs: root, the zfs module loaded, zpool/zfs/xfs_io/cmp on PATH. Any build.
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
for t in zpool zfs xfs_io cmp; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED=""
cleanup() {
  exec 3<&- 2>/dev/null
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=4K -O primarycache=metadata -O direct=disabled -O compression=lz4 \
  "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1
F="$DIR/mnt/file"

xfs_io -f -c "pwrite -q -S 0x41 0 40000" -c fsync -c "fadvise -d 0 0" "$F"
cp "$F" "$DIR/expected"                          # the snapshot's bytes
exec 3<"$F"                                      # the file stays open, as an application's would
xfs_io -r -c "mmap -r 0 40000" -c "mread 0 40000" -c munmap "$F"   # its pages now cached
zfs snapshot "$POOL@before"
xfs_io -c "pwrite -q -S 0x42 4096 8192" -c fsync "$F"
zfs rollback -r "$POOL@before" || untested "zfs rollback failed"

bad=0
cat "$F" > "$DIR/got.buffered"
if command -v python3 >/dev/null; then
  python3 -c 'import mmap, sys; f = open(sys.argv[1], "rb")
sys.stdout.buffer.write(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)[:])' "$F" > "$DIR/got.mmap"
fi
for got in "$DIR"/got.*; do
  how="${got##*.}"
  if cmp -s "$DIR/expected" "$got"; then
    echo "$how read after rollback: the snapshot's bytes"
  else
    echo "$how read after rollback: $(cmp -l "$DIR/expected" "$got" | wc -l) bytes differ from the snapshot"
    bad=1
  fi
done
if [ "$bad" = 1 ]; then
  echo "REPRODUCED: after zfs rollback the file still reads the bytes written after the snapshot"
  exit 1
fi
echo "NOT REPRODUCED: the file reads the snapshot's bytes after zfs rollback"
exit 0
