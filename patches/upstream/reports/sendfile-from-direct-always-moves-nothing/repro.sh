#!/usr/bin/env bash
# sendfile-from-direct-always-moves-nothing
#
# On Linux before 6.5, sendfile()/splice() out of a file whose reads are
# Direct I/O (direct=always, or O_DIRECT) moves nothing: sendfile returns 0,
# splice into a pipe returns a count but the pipe stays empty. The splice path
# hands ZFS an ITER_PIPE iterator; zfs_uio_get_dio_pages_iov_iter() takes its
# pages (iov_iter_get_pages2 appends pipe buffers) and then iov_iter_revert()s,
# which on a pipe releases those buffers: the read fills pages no buffer holds.
# Linux 6.5+ reads into a bvec of its own (copy_splice_read): not affected.
#
# Shape: direct=always, recordsize=128K; a 3 MiB source file (synced); sendfile
# of 4 KiB from offset 1744896 of it (opened O_DIRECT) into another file.
#
# Needs: root, the zfs module loaded (a build with Direct I/O, 2.3+),
# zpool/zfs/python3 on PATH, a kernel older than 6.5 to reproduce.
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
for t in zpool zfs python3 dd; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"
echo "kernel $(uname -r) (affected: before 6.5)"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED=""
cleanup() {
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=128K -O direct=always -O compression=off "$POOL" "$VDEV" \
  || untested "zpool create failed"
CREATED=1
dd if=/dev/urandom of="$DIR/mnt/src" bs=1M count=3 conv=fsync status=none
head -c 4196 /dev/urandom > "$DIR/mnt/dst"
zpool sync "$POOL"

python3 - "$DIR/mnt/src" "$DIR/mnt/dst" <<'PY'
import os, sys
src = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
dst = os.open(sys.argv[2], os.O_WRONLY)
os.lseek(dst, 2711552, os.SEEK_SET)
moved = os.sendfile(dst, src, 1744896, 4096)
print(f"sendfile of 4096 bytes from offset 1744896 moved {moved}")
want = open(sys.argv[1], "rb").read()[1744896:1744896 + 4096]
got = open(sys.argv[2], "rb").read()[2711552:2711552 + 4096]
print("the copied bytes", "match" if got == want else "DIFFER", "the source")
sys.exit(0 if moved == 4096 and got == want else 1)
PY
case $? in
  0) echo "NOT REPRODUCED: sendfile moved all 4096 bytes"; exit 0 ;;
  1) echo "REPRODUCED: sendfile out of a direct=always file moved nothing (or wrong bytes)"; exit 1 ;;
  *) untested "the sendfile step failed" ;;
esac
