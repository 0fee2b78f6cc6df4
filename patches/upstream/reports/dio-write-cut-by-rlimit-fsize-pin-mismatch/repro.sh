#!/usr/bin/env bash
# dio-write-cut-by-rlimit-fsize-pin-mismatch
#
# An O_DIRECT write cut short by RLIMIT_FSIZE pins pages for the uncut length:
# zfs_uio_pin_user_pages() pins every page of each segment while the page array
# is sized for the cut count. A build configured with --enable-debug panics:
#   VERIFY0(len) failed (-1048576) ... PANIC at zfs_uio.c:NNN:zfs_uio_pin_user_pages()
# and the writing thread hangs for good (reboot the machine afterwards). A build
# without --enable-debug writes past the page array (a kernel heap overflow; seen
# 2026-12-06 on a production build: "BUG: KFENCE: memory corruption in
# spl_kmem_free_impl", a kmalloc-2k object of zfs_uio_get_dio_pages_alloc): only a
# kernel with KFENCE, KASAN or slub_debug=FZP,kmalloc-2k says so.
#
# Shape: recordsize=4K, 2 MiB O_DIRECT write at 0 of an empty file under
# ulimit -f 1 MiB, submitted by libaio (repro.c; also "sync" pwrite and 16 x 128 KiB).
#
# Needs: root, the zfs module loaded (a build with Direct I/O, 2.3+), zpool/zfs,
# cc and libaio headers (libaio-dev) on the machine.
# Usage: ./repro.sh [--disk /dev/X] [--pool NAME] [--mode libaio|sync] [--segments 1|16]
#   default: a 1 GiB file-backed vdev in a mktemp -d directory, pool repro-<pid>.
#   --disk (or REPRO_DISK=) uses that disk instead: its contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}" MODE=libaio SEGS=1 WAIT=60
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) DISK="$2"; shift 2 ;;
    --pool) POOL="$2"; shift 2 ;;
    --mode) MODE="$2"; shift 2 ;;
    --segments) SEGS="$2"; shift 2 ;;
    *) echo "usage: $0 [--disk /dev/X] [--pool NAME] [--mode libaio|sync] [--segments 1|16]"; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
untested() { echo "NOT TESTED: $*"; exit 2; }
[ "$(id -u)" = 0 ] || untested "run as root"
for t in zpool zfs cc dmesg; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED="" PANICKED=""
cleanup() {
  if [ -n "$PANICKED" ]; then
    echo "left pool $POOL and $DIR in place: a thread hangs in the panic; reboot to clear them"
    return
  fi
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
cc -O2 -o "$DIR/repro" "$HERE/repro.c" -laio || untested "cc failed on repro.c (libaio-dev installed?)"
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=4K -O primarycache=metadata -O direct=standard -O compression=off \
  "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1

MARK="repro-$$: begin rlimit-fsize"
echo "$MARK" > /dev/kmsg
"$DIR/repro" "$DIR/mnt/rlimit.bin" "$MODE" "$SEGS" &
pid=$!
for _ in $(seq 1 "$WAIT"); do   # until it returns, or the kernel reports
  kill -0 "$pid" 2>/dev/null || break
  dmesg | sed -n "/$MARK/,\$p" | grep -qE "VERIFY|PANIC at" && break
  sleep 1
done
report="$(dmesg | sed -n "/$MARK/,\$p" | grep -E "VERIFY|PANIC at|BUG[: ]|Oops|KASAN|KFENCE|Redzone|Poison|general protection" | head -5)"
if [ -n "$report" ]; then
  kill -0 "$pid" 2>/dev/null && PANICKED=1
  echo "$report"
  echo "REPRODUCED: the kernel reported the pinned-page mismatch (zfs_uio_pin_user_pages)"
  [ -n "$PANICKED" ] && echo "the writing thread is stuck in the panic: reboot the machine"
  exit 1
fi
if kill -0 "$pid" 2>/dev/null; then
  PANICKED=1
  untested "the write did not return in ${WAIT}s and the kernel said nothing"
fi
wait "$pid"
rc=$?
[ "$rc" = 2 ] && untested "the trigger could not run"
[ "$rc" = 0 ] && { echo "NOT REPRODUCED: the write was cut to 1 MiB, no kernel report (on a build without --enable-debug only KFENCE, KASAN or slub_debug report the overrun)"; exit 0; }
echo "NOT REPRODUCED: no kernel report, but the write did not return 1 MiB (exit $rc): look at the line above"
exit 0
