#!/usr/bin/env bash
# sendfile-from-direct-always-moves-nothing, as an NFS client meets it
#
# The kernel NFS server reads a file with splice (nfsd_splice_read). On Linux
# before 6.5 a splice read of a file whose reads are Direct I/O (direct=always)
# fills pages no pipe buffer holds (see repro.sh beside this script), so an NFS
# client reading a file of a direct=always dataset gets zeros with success; with
# O_DIRECT on the client, 0 bytes (EOF). The same export with direct=standard
# reads right (the control).
#
# Shape: direct=always, recordsize=128K; a 4 MiB file (random, synced) exported
# over NFSv4.2 to 127.0.0.1 and mounted back; cmp, then dd iflag=direct.
#
# Needs: root, the zfs module loaded (a build with Direct I/O, 2.3+), zpool/zfs,
# nfs-kernel-server (exportfs, rpc.nfsd, rpc.mountd) and mount.nfs; a kernel
# older than 6.5 to reproduce. An NFS server this script finds running is used
# and left running; one it starts it stops. Its export is to 127.0.0.1 alone.
# Usage: ./nfs.sh [--disk /dev/X] [--pool NAME]
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
for t in zpool zfs exportfs rpc.nfsd rpc.mountd mount.nfs cmp dd; do
  command -v "$t" >/dev/null || untested "$t is not on PATH (apt-get install nfs-kernel-server)"
done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"
exportfs -v 2>/dev/null | grep -q 'fsid=0' && untested "an export with fsid=0 exists (this script's export is the NFSv4 root)"
echo "kernel $(uname -r) (affected: before 6.5)"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED="" EXPORTED="" MOUNTED="" STARTED="" MOUNTD=""
cleanup() {
  [ -n "$MOUNTED" ] && umount -f "$DIR/nfs"
  [ -n "$EXPORTED" ] && exportfs -u "127.0.0.1:$DIR/mnt"
  [ -n "$MOUNTD" ] && kill "$MOUNTD" 2>/dev/null
  [ -n "$STARTED" ] && rpc.nfsd 0
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
dd if=/dev/urandom of="$DIR/mnt/file" bs=1M count=4 conv=fsync status=none
zpool sync "$POOL"

# The NFS server: the running one, else started here with a short grace period.
[ -e /proc/fs/nfsd/threads ] || { modprobe nfsd && mount -t nfsd nfsd /proc/fs/nfsd; } \
  || untested "no nfsd (modprobe nfsd)"
if [ "$(cat /proc/fs/nfsd/threads)" = 0 ]; then
  echo 10 > /proc/fs/nfsd/nfsv4gracetime 2>/dev/null
  echo 10 > /proc/fs/nfsd/nfsv4leasetime 2>/dev/null
  rpc.nfsd -N 3 --no-udp 2 || untested "rpc.nfsd could not start the server"
  STARTED=1
fi
if ! pgrep -x rpc.mountd >/dev/null; then
  rpc.mountd -N 2 -N 3 -F & MOUNTD=$!
fi
mkdir -p /var/lib/nfs/v4recovery 2>/dev/null
exportfs -o rw,no_root_squash,fsid=0,insecure,no_subtree_check "127.0.0.1:$DIR/mnt" \
  || untested "exportfs failed"
EXPORTED=1
mkdir "$DIR/nfs"
mount_back() {
  for _ in $(seq 30); do      # a fresh server refuses opens for its grace period
    mount -t nfs -o vers=4.2 127.0.0.1:/ "$DIR/nfs" 2>/dev/null && { MOUNTED=1; return 0; }
    sleep 2
  done
  return 1
}
read_back() {   # $1: what to call the read; prints the result, returns 1 if wrong
  local bad=0 n
  timeout 300 cmp -s "$DIR/mnt/file" "$DIR/nfs/file" || bad=1
  n=$(timeout 300 dd if="$DIR/nfs/file" bs=1M iflag=direct status=none | wc -c)
  echo "$1: buffered read $( [ $bad = 0 ] && echo matches || echo DIFFERS ); O_DIRECT read got $n of 4194304 bytes"
  [ $bad = 0 ] && [ "$n" = 4194304 ]
}
mount_back || untested "mount -t nfs 127.0.0.1:/ failed"
read_back "direct=always"
always=$?
umount "$DIR/nfs"; MOUNTED=""
zfs set direct=standard "$POOL"
mount_back || untested "the second mount failed"
read_back "direct=standard (control)"
control=$?
if [ $control != 0 ]; then untested "the control read wrong too: something else is broken"; fi
if [ $always != 0 ]; then
  echo "REPRODUCED: an NFS client reads a direct=always file wrong (zeros, or nothing)"; exit 1
fi
echo "NOT REPRODUCED: the NFS client read the direct=always file right"; exit 0
