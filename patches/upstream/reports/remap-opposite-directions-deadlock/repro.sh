#!/usr/bin/env bash
# remap-opposite-directions-deadlock
#
# zpl_clone_file_range_impl() locks the source inode, then the destination, in
# the direction of the call: a clone A->B beside a clone B->A can each hold
# one inode and wait for the other. Both ioctls stay in D state for good
# (reboot the machine afterwards). Fixed on master by afb4010325 (the two locks
# ordered by inode address); zfs-2.4.x and zfs-2.3.x releases have it.
#
# Shape: two 1 MiB files (recordsize=128K, synced); for a few seconds one
# process clones A's first half over B's second half (FICLONERANGE, 128 KiB
# at a time) while another clones B's first half over A's second half.
#
# Needs: root, the zfs module loaded with block cloning (2.2+), zpool/zfs/xfs_io
# on PATH.
# Usage: ./repro.sh [--disk /dev/X] [--pool NAME] [--seconds N]
#   default: a 1 GiB file-backed vdev in a mktemp -d directory, pool repro-<pid>.
#   --disk (or REPRO_DISK=) uses that disk instead: its contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}" SECS=10 WAIT=60
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) DISK="$2"; shift 2 ;;
    --pool) POOL="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    *) echo "usage: $0 [--disk /dev/X] [--pool NAME] [--seconds N]"; exit 2 ;;
  esac
done
PARAM=/sys/module/zfs/parameters/zfs_bclone_enabled
untested() { echo "NOT TESTED: $*"; exit 2; }
[ "$(id -u)" = 0 ] || untested "run as root"
for t in zpool zfs xfs_io; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
[ -e "$PARAM" ] || untested "this build has no block cloning (zfs_bclone_enabled)"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED="" STUCK="" OLDPARAM="$(cat "$PARAM")"
cleanup() {
  echo "$OLDPARAM" > "$PARAM"
  if [ -n "$STUCK" ]; then
    echo "left pool $POOL and $DIR in place: the clones are stuck in D state; reboot to clear them"
    return
  fi
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=128K -O compression=off "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1
echo 1 > "$PARAM"
A="$DIR/mnt/a" B="$DIR/mnt/b" HALF=524288 REC=131072
xfs_io -f -c "pwrite -q -S 0x61 0 1m" "$A"
xfs_io -f -c "pwrite -q -S 0x62 0 1m" "$B"
sync; zpool sync "$POOL"
xfs_io -c "reflink $A 0 $HALF $REC" "$B" >/dev/null || untested "FICLONERANGE refused: block cloning off?"

clones() {  # clone SRC's first half over DST's second half, record by record, until the deadline
  local src=$1 dst=$2 args=() off i
  for i in $(seq 1 100); do           # 400 clones an xfs_io: the window is narrow
    for off in 0 $REC $((2 * REC)) $((3 * REC)); do
      args+=(-c "reflink $src $off $((HALF + off)) $REC")
    done
  done
  local end=$((SECONDS + SECS)) n=0
  while [ $SECONDS -lt $end ]; do xfs_io "${args[@]}" "$dst" >/dev/null || exit 3; n=$((n + 400)); done
  echo "$src -> $dst: $n clones"
}
clones "$A" "$B" & p1=$!
clones "$B" "$A" & p2=$!
for _ in $(seq 1 $((SECS + WAIT))); do
  kill -0 $p1 2>/dev/null || kill -0 $p2 2>/dev/null || break
  sleep 1
done
stuck=""
for p in $(pgrep -P $p1) $(pgrep -P $p2); do
  if grep -q '^State:.*D' /proc/$p/status 2>/dev/null; then
    stuck="$stuck $p"
    echo "pid $p in D state:"; sed 's/^/  /' /proc/$p/stack 2>/dev/null | head -8
  fi
done
if [ -n "$stuck" ]; then
  STUCK=1
  echo "REPRODUCED: clones in opposite directions deadlocked (pids$stuck in D state, zpl_clone_file_range_impl)"
  exit 1
fi
wait $p1; r1=$?; wait $p2; r2=$?
[ $r1 = 0 ] && [ $r2 = 0 ] || untested "a clone failed (exit $r1, $r2)"
echo "NOT REPRODUCED: ${SECS}s of clones A->B beside B->A, none stuck"
exit 0
