#!/usr/bin/env bash
# dbufs-mtx-ms-lock-lockdep-class
#
# NEEDS A KERNEL WITH LOCKDEP (CONFIG_PROVE_LOCKING) AND A BUILD CONFIGURED
# WITH --enable-debug: on any other kernel the script says NOT TESTED; on a
# build without --enable-debug the free check that takes ms_lock is off.
#
# Lockdep: possible circular locking dependency between ms_lock and
# dn_dbufs_mtx. spa_sync frees a space map object under ms_lock
# (metaslab_flush -> spa_cleanup_old_sm_logs -> dmu_object_free ->
# dbuf_free_range), while a truncate frees an overridden (Direct I/O) dirty
# record under a file's dn_dbufs_mtx and the debug build's free check takes
# ms_lock (dbuf_free_range -> dbuf_undirty -> dbuf_unoverride -> zio_free ->
# metaslab_check_free_impl). Two different dnodes share one lock class.
# Lockdep reports once a boot: run it on a fresh boot.
#
# Shape (best effort: lockdep must see both orders; the spa_sync side comes
# when the log space maps are cleaned up, which takes txgs): for --seconds,
# O_DIRECT writes of 128 KiB followed by an open with O_TRUNC of the same file,
# with txgs synced in between.
#
# Needs: root, the zfs module loaded (Direct I/O, 2.3+), zpool/zfs/dd on PATH.
# Usage: ./repro.sh [--disk /dev/X] [--pool NAME] [--seconds N]
#   default: a 1 GiB file-backed vdev in a mktemp -d directory, pool repro-<pid>.
#   --disk (or REPRO_DISK=) uses that disk instead: its contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}" SECS=60
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) DISK="$2"; shift 2 ;;
    --pool) POOL="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    *) echo "usage: $0 [--disk /dev/X] [--pool NAME] [--seconds N]"; exit 2 ;;
  esac
done
untested() { echo "NOT TESTED: $*"; exit 2; }
[ "$(id -u)" = 0 ] || untested "run as root"
for t in zpool zfs dd dmesg; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
[ -e /proc/lockdep_stats ] || untested "the kernel has no lockdep (needs CONFIG_PROVE_LOCKING)"
grep -q 'debug_locks: *1' /proc/lockdep_stats || untested "lockdep is already off this boot (an earlier report): reboot"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"
echo "note: the free check that takes ms_lock runs only in a build configured with --enable-debug"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED=""
cleanup() {
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=128K -O primarycache=metadata -O direct=standard -O compression=off \
  "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1
MARK="repro-$$: begin dio writes and truncates"
echo "$MARK" > /dev/kmsg
end=$((SECONDS + SECS)) n=0
while [ $SECONDS -lt $end ]; do
  for i in 1 2 3 4; do
    F="$DIR/mnt/f$i"
    dd if=/dev/urandom of="$F" bs=128k count=8 oflag=direct status=none   # dirty Direct I/O records
    : > "$F"                                                              # O_TRUNC frees them
  done
  n=$((n + 1))
  [ $((n % 5)) = 0 ] && zpool sync "$POOL"
  if dmesg | sed -n "/$MARK/,\$p" | grep -q "circular locking dependency"; then break; fi
done
report="$(dmesg | sed -n "/$MARK/,\$p" | grep -A30 "circular locking dependency")"
if echo "$report" | grep -q "ms_lock" && echo "$report" | grep -q "dn_dbufs_mtx"; then
  echo "$report" | head -30
  echo "REPRODUCED: lockdep: circular locking dependency between ms_lock and dn_dbufs_mtx"
  exit 1
fi
echo "NOT REPRODUCED: ${SECS}s of Direct I/O writes and truncates drew no ms_lock/dn_dbufs_mtx report"
exit 0
