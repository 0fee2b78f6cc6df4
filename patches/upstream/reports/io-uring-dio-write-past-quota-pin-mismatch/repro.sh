#!/usr/bin/env bash
# io-uring-dio-write-past-quota-pin-mismatch
#
# An io_uring O_DIRECT write cut by a quota, retried from io-wq, pins a
# different page count than the uio's residual. A build configured with
# --enable-debug panics:
#   VERIFY0(len) failed (-131072) ... PANIC at zfs_uio.c:NNN:zfs_uio_pin_user_pages()
# and the io-wq worker hangs for good (reboot the machine afterwards).
#
# Shape: a dataset with recordsize=128K and quota = its used + 64 KiB; one
# 1 MiB O_DIRECT write at 0 of a new file through io_uring (repro.c). With
# recordsize=4K, or through libaio, the write is cut cleanly.
#
# Needs: root, the zfs module loaded (a build with Direct I/O, 2.3+), zpool/zfs,
# cc and liburing headers (liburing-dev) on the machine.
# Usage: ./repro.sh [--disk /dev/X] [--pool NAME] [--rounds N]
#   default: a 1 GiB file-backed vdev in a mktemp -d directory, pool repro-<pid>.
#   --disk (or REPRO_DISK=) uses that disk instead: its contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}" ROUNDS=3 WAIT=60
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) DISK="$2"; shift 2 ;;
    --pool) POOL="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "usage: $0 [--disk /dev/X] [--pool NAME] [--rounds N]"; exit 2 ;;
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
cc -O2 -o "$DIR/repro" "$HERE/repro.c" -luring || untested "cc failed on repro.c (liburing-dev installed?)"
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=128K -O primarycache=metadata -O direct=standard -O compression=off \
  "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1

for r in $(seq 1 "$ROUNDS"); do
  ds="$POOL/q$r"
  zfs create "$ds" || untested "zfs create $ds failed"
  used="$(zfs get -Hp -o value used "$ds")"
  zfs set quota=$((used + 65536)) "$ds"
  MARK="repro-$$: begin quota round $r"
  echo "$MARK" > /dev/kmsg
  "$DIR/repro" "$DIR/mnt/q$r/short.bin" &
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
    echo "REPRODUCED: the kernel reported the pinned-page mismatch after a write cut by the quota"
    [ -n "$PANICKED" ] && echo "the io_uring write is stuck in the panic: reboot the machine"
    exit 1
  fi
  if kill -0 "$pid" 2>/dev/null; then
    PANICKED=1
    untested "the write did not return in ${WAIT}s and the kernel said nothing"
  fi
  wait "$pid" || untested "the trigger could not run"
done
echo "NOT REPRODUCED: $ROUNDS writes cut by the quota, no kernel report"
exit 0
