"""Explore, the ops on the file itself rather than a request through an
interface: reads and writes through a shared mapping (``mmap_read``,
``mmap_write``), ``truncate``, ``punch_hole`` and ``zero_range`` (fallocate),
``fsync``, ``fdatasync``, ``syncfs``, ``evict`` (the clean page cache dropped)
and ``tamper`` (the self-test hook).
"""
from __future__ import annotations

import mmap
import os
from typing import TYPE_CHECKING

from .requests import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE,
                         UNSUPPORTED, fallocate, syncfs)
from .model import Ctx, Outcome, check_bytes, error, size_mismatch
from ..plan import PAGE, errno_name
from .mapread import read_mapped

if TYPE_CHECKING:
    from .step import Step

TAMPER_BYTE = 0x5A


def _mapped_range(ctx: Ctx, s: Step) -> tuple[int, int] | None:
    """The op's range cut at EOF (an mmap cannot reach past it), or None."""
    if s.off >= ctx.model.size:
        return None
    return s.off, min(s.len, ctx.model.size - s.off)


def _mappable(ctx: Ctx, s: Step) -> Outcome | tuple[int, int, int]:
    """(offset, length, page-aligned start) of the op's mapping, or why it cannot map."""
    rng = _mapped_range(ctx, s)
    if rng is None:
        return Outcome("skipped", why=f"past EOF ({ctx.model.size})")
    if (bad := size_mismatch(ctx, "before mmap")) is not None:
        return bad
    off, n = rng
    return off, n, off - off % PAGE


def op_mmap_read(ctx: Ctx, s: Step) -> Outcome:
    if isinstance(where := _mappable(ctx, s), Outcome):
        return where
    off, n, start = where
    got = read_mapped(ctx.target.fd, off + n - start, start)
    if isinstance(got, OSError):
        return error(got.errno or 0, f"mmap read: {got.strerror}")
    got = got[off - start:off - start + n]
    return check_bytes(got, ctx.model, off, "mmap read") or Outcome(res=n)


def op_mmap_write(ctx: Ctx, s: Step) -> Outcome:
    if isinstance(where := _mappable(ctx, s), Outcome):
        return where
    off, n, start = where
    data = ctx.data(s.data, off, n)
    with mmap.mmap(ctx.target.fd, off + n - start, flags=mmap.MAP_SHARED,
                   prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=start) as m:
        m[off - start:off - start + n] = data
        m.flush()                               # msync(MS_SYNC)
    ctx.model.write(off, data)
    return Outcome(res=n)


def op_truncate(ctx: Ctx, s: Step) -> Outcome:
    os.ftruncate(ctx.target.fd, s.size)
    ctx.model.resize(s.size)
    return Outcome()


def _fallocate(ctx: Ctx, s: Step, mode: int, name: str) -> Outcome | None:
    err = fallocate(ctx.target.fd, mode, s.off, s.len)
    if err in UNSUPPORTED:
        return Outcome("unsupported", why=f"fallocate {name}: {errno_name(err)}")
    return error(err, f"fallocate {name}") if err else None


def op_punch_hole(ctx: Ctx, s: Step) -> Outcome:
    o = _fallocate(ctx, s, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "PUNCH_HOLE")
    if o is None:
        ctx.model.zero(s.off, s.len)
    return o or Outcome()


def op_zero_range(ctx: Ctx, s: Step) -> Outcome:
    o = _fallocate(ctx, s, FALLOC_FL_ZERO_RANGE, "ZERO_RANGE")
    if o is None:
        ctx.model.resize(max(ctx.model.size, s.off + s.len))
        ctx.model.zero(s.off, s.len)
    return o or Outcome()


def op_fsync(ctx: Ctx, s: Step) -> Outcome:
    os.fsync(ctx.target.fd)
    return Outcome()


def op_fdatasync(ctx: Ctx, s: Step) -> Outcome:
    os.fdatasync(ctx.target.fd)
    return Outcome()


def op_syncfs(ctx: Ctx, s: Step) -> Outcome:
    err = syncfs(ctx.target.fd)
    return error(err, "syncfs") if err else Outcome()


DROP_CACHES = "/proc/sys/vm/drop_caches"


def evict(fd: int, drop_caches: bool) -> None:
    """Drop a file's clean page cache: POSIX_FADV_DONTNEED (OpenZFS honours it
    since April 2026) and, where the engine has a guest of its own, the kernel's
    clean page cache and what its shrinkers give back (``drop_caches`` 3: works at
    every OpenZFS commit, and asks the ARC's shrinker too, so a later O_DIRECT read
    is less often served from the ARC). A page still mapped or dirty stays (no
    barrier is added: the sequence's durability is its own)."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if drop_caches:
        with open(DROP_CACHES, "w", encoding="ascii") as f:
            f.write("3\n")


def flush_arc(ctx: Ctx) -> None:
    """In a guest of its own with the build's commands, empty the ARC of its clean
    buffers (``zinject -a``): an O_DIRECT read of a block the ARC holds is served
    from memory, not by Direct I/O (dirty buffers stay: the txg's are its own)."""
    if ctx.drop_caches and ctx.zfs is not None:
        ctx.zfs.run("zinject", "-a")


def op_evict(ctx: Ctx, s: Step) -> Outcome:
    """Drop the target's page cache (:func:`evict`) and, in a guest, the ARC's clean
    buffers (:func:`flush_arc`)."""
    evict(ctx.target.fd, ctx.drop_caches)
    flush_arc(ctx)
    return Outcome()


def op_tamper(ctx: Ctx, s: Step) -> Outcome:
    """Self-test hook, never generated: overwrite bytes behind the model's back,
    so the next read that covers them must fail."""
    n = max(0, min(s.len, ctx.model.size - s.off))
    if n:
        os.pwrite(ctx.target.fd, bytes([TAMPER_BYTE]) * n, s.off)
        os.fsync(ctx.target.fd)
    return Outcome(res=n)
