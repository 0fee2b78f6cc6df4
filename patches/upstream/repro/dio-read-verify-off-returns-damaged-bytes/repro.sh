#!/usr/bin/env bash
# dio-read-verify-off-returns-damaged-bytes (openzfs/zfs#18794, not on master)
#
# With the pull request's zfs_vdev_direct_read_verify=0, zio_checksum_error()
# returns 0 for any checksum error of a Direct I/O read into user pages. The
# tunable is meant for an application that changes its buffer while the read is
# in flight; but a checksum error of damaged data on disk is then suppressed
# too: the O_DIRECT read returns the damaged bytes with success, no checksum
# error is counted, and a mirror never reads (or repairs from) its good copy.
#
# Shape: a two-way mirror of file vdevs, primarycache=metadata, a 4 MiB file
# written and synced; zinject corrupts every read of one side (-e corrupt);
# O_DIRECT reads of the file with the tunable at 1, then at 0. At 1 every read
# returns the written bytes (the mirror heals); at 0 the reads the damaged
# side served return its damaged bytes.
#
# Needs: root, the zfs module of #18794 loaded (zfs_vdev_direct_read_verify),
# zpool/zfs/zinject/dd/cmp on PATH.
# Usage: ./repro.sh [--disk /dev/X --disk2 /dev/Y] [--pool NAME] [--rounds N]
#   default: two 1 GiB file-backed vdevs in a mktemp -d directory, pool repro-<pid>.
#   --disk/--disk2 (or REPRO_DISK=/REPRO_DISK2=) use those disks: their contents are lost.
# Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test.
set -u
POOL="repro-$$" DISK="${REPRO_DISK:-}" DISK2="${REPRO_DISK2:-}" ROUNDS=8
PARAM=/sys/module/zfs/parameters/zfs_vdev_direct_read_verify
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) DISK="$2"; shift 2 ;;
    --disk2) DISK2="$2"; shift 2 ;;
    --pool) POOL="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "usage: $0 [--disk /dev/X --disk2 /dev/Y] [--pool NAME] [--rounds N]"; exit 2 ;;
  esac
done
untested() { echo "NOT TESTED: $*"; exit 2; }
[ "$(id -u)" = 0 ] || untested "run as root"
for t in zpool zfs zinject dd cmp; do command -v "$t" >/dev/null || untested "$t is not on PATH"; done
[ -d /sys/module/zfs ] || untested "the zfs module is not loaded"
[ -e "$PARAM" ] || untested "this build has no zfs_vdev_direct_read_verify (not #18794)"
zpool list "$POOL" >/dev/null 2>&1 && untested "a pool named $POOL exists; give --pool NAME"
[ -n "$DISK" ] && [ -z "$DISK2" ] && untested "--disk needs --disk2 (a mirror)"

DIR="$(mktemp -d /tmp/repro.XXXXXX)" CREATED="" OLD="$(cat "$PARAM")"
cleanup() {
  echo "$OLD" > "$PARAM"
  [ -n "$CREATED" ] && zinject -c all >/dev/null 2>&1
  [ -n "$CREATED" ] && zpool destroy -f "$POOL"
  rm -rf "$DIR"
}
trap cleanup EXIT
VDEV="$DISK" VDEV2="$DISK2"
if [ -z "$VDEV" ]; then
  VDEV="$DIR/vdev0"; truncate -s 1G "$VDEV"
  VDEV2="$DIR/vdev1"; truncate -s 1G "$VDEV2"
fi
zpool create -o ashift=12 -o cachefile=none -O mountpoint="$DIR/mnt" \
  -O primarycache=metadata -O compression=off -O direct=standard \
  "$POOL" mirror "$VDEV" "$VDEV2" || untested "zpool create failed"
CREATED=1
F="$DIR/mnt/f"
dd if=/dev/urandom of="$DIR/want" bs=1M count=4 status=none
dd if="$DIR/want" of="$F" bs=1M oflag=direct conv=fsync status=none
zpool sync "$POOL"
zinject -d "$VDEV" -e corrupt -T read -f 100 "$POOL" >/dev/null || untested "zinject refused"

reads() {   # $1: the tunable; prints how many of ROUNDS O_DIRECT reads returned other bytes
  echo "$1" > "$PARAM"
  local bad=0 r
  for r in $(seq 1 "$ROUNDS"); do
    if ! dd if="$F" of="$DIR/got" iflag=direct bs=1M status=none; then
      echo "  verify=$1 round $r: the read failed (an error, not damaged bytes)"
    elif ! cmp -s "$DIR/want" "$DIR/got"; then
      bad=$((bad + 1))
      echo "  verify=$1 round $r: $(cmp -l "$DIR/want" "$DIR/got" | wc -l) bytes differ"
    fi
  done
  echo "$bad"
}
on="$(reads 1)"; echo "$on" | sed '$d'
off="$(reads 0)"; echo "$off" | sed '$d'
on="$(echo "$on" | tail -1)" off="$(echo "$off" | tail -1)"
echo "O_DIRECT reads returning damaged bytes: verify=1 $on of $ROUNDS, verify=0 $off of $ROUNDS"
zpool status "$POOL" | sed -n '/NAME/,/^$/p'
if [ "$off" -gt 0 ]; then
  echo "REPRODUCED: with zfs_vdev_direct_read_verify=0 an O_DIRECT read returned damaged bytes ($off of $ROUNDS reads)"
  exit 1
fi
echo "NOT REPRODUCED: every O_DIRECT read returned the written bytes"
exit 0
