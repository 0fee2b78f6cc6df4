#!/usr/bin/env bash
# zvol-suspend-lock-released-by-taskq
#
# NEEDS A KERNEL WITH LOCKDEP (CONFIG_PROVE_LOCKING): on any other kernel the
# script cannot see it and says NOT TESTED.
#
# A zvol read takes zv_suspend_lock (rw_enter in zvol_request_impl) in the
# submitting task and releases it (rw_exit in zvol_read) in the zvol_tq taskq
# thread. Lockdep reports at the first read dispatched to the taskq, and then
# turns itself off for the rest of the boot:
#   WARNING: bad unlock balance detected!
#   zvol_tq-N is trying to release lock (&zv->zv_suspend_lock) at: zvol_read+0x...
#   but there are no more locks to release!
# Lockdep reports once a boot: run it on a fresh boot.
#
# Shape: a 4 MiB zvol created (the kernel's partition scan reads it through the
# zvol_tq taskq), written, then read back with dd.
#
# Needs: root, the zfs module loaded, zpool/zfs/dd on PATH (python3 only where
# /dev/zvol links are missing).
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
for t in zpool zfs dd dmesg; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
[ -e /proc/lockdep_stats ] || untested "the kernel has no lockdep (needs CONFIG_PROVE_LOCKING)"
grep -q 'debug_locks: *1' /proc/lockdep_stats || untested "lockdep is already off this boot (an earlier report): reboot"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED=""
cleanup() {
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" "$POOL" "$VDEV" \
  || untested "zpool create failed"
CREATED=1
# The mark goes before the zvol exists: its first read is the kernel's partition
# scan when the device appears, and lockdep reports only that first one.
MARK="repro-$$: begin zvol"
echo "$MARK" > /dev/kmsg
zfs create -V 4M "$POOL/vol" || untested "zfs create -V failed"
DEV=""
for _ in $(seq 1 50); do
  [ -e "/dev/zvol/$POOL/vol" ] && { DEV="$(readlink -f "/dev/zvol/$POOL/vol")"; break; }
  if command -v python3 >/dev/null; then       # no udev: the /dev/zdN that serves it (BLKZNAME)
    DEV="$(python3 -c '
import fcntl, glob, re, sys
for d in sorted(glob.glob("/dev/zd*")):
    b = bytearray(256)
    try:
        fcntl.ioctl(open(d, "rb"), 0x8100127d, b)   # BLKZNAME
    except OSError:
        continue
    if re.fullmatch(r"/dev/zd\d+", d) and b.split(b"\0")[0].decode() == sys.argv[1]:
        print(d)' "$POOL/vol")"
    [ -n "$DEV" ] && break
  fi
  sleep 0.2
done
[ -n "$DEV" ] || untested "no device node for $POOL/vol"
dd if=/dev/urandom of="$DEV" bs=1M count=4 conv=fsync status=none
echo 3 > /proc/sys/vm/drop_caches
dd if="$DEV" of=/dev/null bs=128k status=none
sleep 1
report="$(dmesg | sed -n "/$MARK/,\$p" | grep -A8 "bad unlock balance")"
if echo "$report" | grep -q "zv_suspend_lock"; then
  echo "$report"
  echo "REPRODUCED: lockdep: bad unlock balance, zv_suspend_lock released by the zvol_tq taskq (lockdep is now off for this boot)"
  exit 1
fi
echo "NOT REPRODUCED: zvol reads drew no lockdep report"
exit 0
