"""Explore, bytes moved by the kernel from the source file into the target
without passing through a user buffer: ``copy_file_range``, ``FICLONERANGE``
(block cloning: the target shares the source's blocks), ``sendfile`` and
``splice`` through a pipe. The last two hand the target's ``write_iter`` the
source's page-cache pages as a bvec iterator; into the O_DIRECT descriptor,
Direct I/O then maps kernel pages, not user ones.

Each mover returns ``(bytes moved, errno)``: what moved before an error counts,
since it is in the file.
"""
from __future__ import annotations

import fcntl
import os
import struct

# linux/fs.h: _IOW(0x94, 13, struct file_clone_range {s64 src_fd; u64 src_offset,
# src_length, dest_offset}).
FICLONERANGE = 0x4020940D
_CLONE_RANGE = struct.Struct("=qQQQ")
F_SETPIPE_SZ = 1031
PIPE_MAX = 1 << 20      # /proc/sys/fs/pipe-max-size's default: a splice moves this much at most


def clone_range(dst: int, src: int, dst_off: int, src_off: int, length: int) -> int:
    """FICLONERANGE of ``length`` bytes: 0, or the errno (all or nothing to the caller)."""
    try:
        fcntl.ioctl(dst, FICLONERANGE, _CLONE_RANGE.pack(src, src_off, length, dst_off))
        return 0
    except OSError as e:
        return e.errno or 0


def copy_range(dst: int, src: int, dst_off: int, src_off: int, length: int) -> tuple[int, int]:
    """copy_file_range until ``length`` moved, it returns 0, or an error."""
    return _until(length, lambda done: os.copy_file_range(
        src, dst, length - done, src_off + done, dst_off + done))


def _until(length: int, step) -> tuple[int, int]:
    """Call ``step(done)`` (bytes moved this time) until ``length`` moved, it moves
    nothing, or it fails: ``(bytes moved, errno)``."""
    done = 0
    while done < length:
        try:
            n = step(done)
        except OSError as e:
            return done, e.errno or 0
        if n == 0:
            break
        done += n
    return done, 0


def sendfile_into(dst: int, src: int, dst_off: int, src_off: int,
                  length: int) -> tuple[int, int]:
    """sendfile from ``src`` at ``src_off`` to ``dst`` at ``dst_off`` (sendfile
    writes at the output's file position: set first)."""
    os.lseek(dst, dst_off, os.SEEK_SET)
    return _until(length, lambda done: os.sendfile(dst, src, src_off + done, length - done))


def splice_into(dst: int, src: int, dst_off: int, src_off: int, length: int) -> tuple[int, int]:
    """splice from ``src`` into a pipe, then from the pipe into ``dst``, a pipe's
    worth at a time (the pipe enlarged, so a request can reach a whole record)."""
    r, w = os.pipe()
    try:
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, min(PIPE_MAX, max(length, 4096)))
        except OSError:
            pass                # the default 64 KiB pipe then
        done = 0
        while done < length:
            try:
                n = os.splice(src, w, length - done, offset_src=src_off + done)
            except OSError as e:
                return done, e.errno or 0
            if n == 0:
                break
            moved, err = _drain(r, dst, dst_off + done, n)
            done += moved
            if err or moved < n:
                return done, err
        return done, 0
    finally:
        os.close(r)
        os.close(w)


def _drain(r: int, dst: int, dst_off: int, n: int) -> tuple[int, int]:
    """Splice ``n`` bytes from the pipe ``r`` into ``dst`` at ``dst_off``."""
    return _until(n, lambda moved: os.splice(r, dst, n - moved, offset_dst=dst_off + moved))


# zfs_bclone_wait_dirty=0 (the default before 2.4, cf146460c1): "a clone operation
# [fails] immediately when encountering a dirty block" (zfs(4)): EAGAIN, documented.
WAIT_DIRTY = "/sys/module/zfs/parameters/zfs_bclone_wait_dirty"


def clone_may_decline_dirty(path: str | None = None) -> bool:
    """This module documents EAGAIN for a clone of a dirty block: its
    ``zfs_bclone_wait_dirty`` reads 0 (a module without it: no such promise)."""
    try:
        with open(path or WAIT_DIRTY, encoding="ascii") as f:
            return f.read().strip() == "0"
    except OSError:
        return False
