#!/usr/bin/env bash
# remap-lock-two-no-lockdep-nesting
#
# NEEDS A KERNEL WITH LOCKDEP (CONFIG_PROVE_LOCKING): on any other kernel the
# script cannot see it and says NOT TESTED.
#
# zpl_remap_lock_two() takes the second inode's lock (the same lock class as
# the first) without a nesting annotation. Lockdep reports at the first clone
# between two files, and then turns itself off for the rest of the boot:
#   WARNING: possible recursive locking detected
#   ... acquiring &sb->s_type->i_mutex_key#N at zpl_remap_lock_two
#   ... while holding &sb->s_type->i_mutex_key#N at zpl_remap_lock_two
# (inode_lock_nested(.., I_MUTEX_NONDIR2) as lock_two_nondirectories() does
# silences it.) Lockdep reports once a boot: run it on a fresh boot.
#
# Shape: two files, one FICLONERANGE of 128 KiB from one into the other.
#
# Needs: root, the zfs module loaded with block cloning, zpool/zfs/xfs_io on PATH.
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
PARAM=/sys/module/zfs/parameters/zfs_bclone_enabled
untested() { echo "NOT TESTED: $*"; exit 2; }
[ "$(id -u)" = 0 ] || untested "run as root"
for t in zpool zfs xfs_io dmesg; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
[ -e "$PARAM" ] || untested "this build has no block cloning (zfs_bclone_enabled)"
[ -e /proc/lockdep_stats ] || untested "the kernel has no lockdep (needs CONFIG_PROVE_LOCKING)"
grep -q 'debug_locks: *1' /proc/lockdep_stats || untested "lockdep is already off this boot (an earlier report): reboot"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED="" OLDPARAM="$(cat "$PARAM")"
cleanup() {
  echo "$OLDPARAM" > "$PARAM"
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK"
if [ -z "$VDEV" ]; then VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"; fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O recordsize=128K "$POOL" "$VDEV" || untested "zpool create failed"
CREATED=1
echo 1 > "$PARAM"
xfs_io -f -c "pwrite -q -S 0x61 0 256k" "$DIR/mnt/a"
xfs_io -f -c "pwrite -q -S 0x62 0 256k" "$DIR/mnt/b"
zpool sync "$POOL"
MARK="repro-$$: begin clone"
echo "$MARK" > /dev/kmsg
xfs_io -c "reflink $DIR/mnt/a 0 131072 131072" "$DIR/mnt/b" >/dev/null \
  || untested "FICLONERANGE refused: block cloning off?"
sleep 1
report="$(dmesg | sed -n "/$MARK/,\$p" | grep -A12 "possible recursive locking")"
if echo "$report" | grep -q "zpl_remap_lock_two\|zpl_clone_file_range"; then
  echo "$report"
  echo "REPRODUCED: lockdep: possible recursive locking in zpl_remap_lock_two (lockdep is now off for this boot)"
  exit 1
fi
echo "NOT REPRODUCED: a clone between two files drew no lockdep report"
exit 0
