#!/usr/bin/env bash
# zvol-freeze-reopen-lr-seq
#
# A zvol reopened under `zpool freeze` numbers its ZIL records from 1 again
# (its last close evicted the objset and the zilog; the next open's zilog
# starts at lr_seq 1 and continues the same on-disk chain). The next import
# walks the chain and a build configured with --enable-debug panics:
#   VERIFY3U(max_lr_seq, <, lr->lrc_seq) failed (2 < 1)
#   PANIC at zil.c:NNN:zil_parse()
# and `zpool import` hangs for good (reboot the machine afterwards). A build
# without --enable-debug may instead cut the replay short (acknowledged writes
# lost); this script then only reports NOT REPRODUCED.
#
# Shape: a 1 MiB zvol (volblocksize=128K) written whole and closed, zpool sync,
# zpool freeze, four 256 KiB O_DIRECT|O_DSYNC writes (dd: one open and close
# each), zpool export, zpool import.
#
# Needs: root, the zfs module loaded, zpool/zfs/dd on PATH (python3 only where
# /dev/zvol links are missing). Any OpenZFS with zpool freeze.
# Usage: ./repro.sh [--disk /dev/X] [--pool NAME]
#   default: a 1 GiB file-backed vdev in a mktemp -d directory, pool repro-<pid>.
#   --disk (or REPRO_DISK=) uses that disk instead: its contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}" WAIT=120
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
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED="" PANICKED=""
cleanup() {
  if [ -n "$PANICKED" ]; then
    echo "left pool $POOL and $DIR in place: zpool import hangs in the panic; reboot to clear them"
    return
  fi
  if [ -n "$CREATED" ]; then
    zpool list "$POOL" >/dev/null 2>&1 || zpool import -d "$SCAN" "$POOL" 2>/dev/null
    zpool destroy -f "$POOL"
  fi
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK" SCAN="$DISK"      # where zpool import looks: the disk, or the vdev's folder
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0" SCAN="$DIR"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" "$POOL" "$VDEV" \
  || untested "zpool create failed"
CREATED=1
zfs create -V 1M -o volblocksize=128K "$POOL/vol" || untested "zfs create -V failed"

zvol_dev() {  # /dev/zvol/POOL/vol, or the /dev/zdN that says it serves it (BLKZNAME)
  for _ in $(seq 1 50); do
    [ -e "/dev/zvol/$POOL/vol" ] && { readlink -f "/dev/zvol/$POOL/vol"; return; }
    command -v python3 >/dev/null && python3 -c '
import fcntl, glob, re, sys
for d in sorted(glob.glob("/dev/zd*")):
    if re.fullmatch(r"/dev/zd\d+", d):
        b = bytearray(256)
        try:
            fcntl.ioctl(open(d, "rb"), 0x8100127d, b)   # BLKZNAME, _IOR(0x12, 125, char[256])
        except OSError:
            continue
        if b.split(b"\0")[0].decode() == sys.argv[1]:
            print(d); sys.exit(0)
sys.exit(1)' "$POOL/vol" && return
    sleep 0.2
  done
}
DEV="$(zvol_dev)"
[ -n "$DEV" ] || untested "no device node for $POOL/vol"
echo "zvol $POOL/vol is $DEV"

dd if=/dev/urandom of="$DEV" bs=1M count=1 conv=fsync status=none   # written whole, closed
zpool sync "$POOL"
zpool freeze "$POOL" || untested "zpool freeze failed"
for i in 0 1 2 3; do                                  # reopened: an open and a close each
  dd if=/dev/urandom of="$DEV" bs=256K count=1 seek="$i" oflag=direct,dsync conv=notrunc status=none \
    || untested "write $i to $DEV failed"
done
zpool export "$POOL" || untested "zpool export failed"

MARK="repro-$$: begin import after freeze"
echo "$MARK" > /dev/kmsg
zpool import -d "$SCAN" "$POOL" &
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
  echo "REPRODUCED: the import panicked parsing the zvol's log chain (lr_seq numbered from 1 again)"
  [ -n "$PANICKED" ] && echo "zpool import is stuck in the panic: reboot the machine"
  exit 1
fi
if kill -0 "$pid" 2>/dev/null; then
  PANICKED=1
  untested "zpool import did not return in ${WAIT}s and the kernel said nothing"
fi
wait "$pid" || untested "zpool import failed"
echo "NOT REPRODUCED: the pool imported with its zvol's log replayed, no kernel report"
exit 0
