"""Explore, a write cut by a limit reached mid-request (``Step.limit``):

- ``fsize``: ``RLIMIT_FSIZE`` set (``SIGXFSZ`` ignored) so the write may lay down
  only :func:`fsize_cut` bytes, a page multiple, before the limit; the kernel
  clamps the count at submission, so the write must return exactly that count
  (none at all: ``EFBIG``), land those bytes and leave the rest old. Both series'
  pin bugs and the upstream pin-count finding are cut writes (an array pinned for
  the uncut length);
- ``quota``: the dataset's ``refquota`` set a page above what it references, so
  a write of more than one record runs out of room part way: a full count, a short count whose
  bytes landed and no others, or ``EDQUOT``/``ENOSPC`` with the file as it was
  are all correct. An error after some bytes landed (the file changed) is the
  review's "short write reported as an error".

The limit is in place only while the request is in flight (the async
submitters' workers share the process's limits) and lifted before the op's line
is written (a line is a write to a regular file: ``RLIMIT_FSIZE`` applies).
"""
from __future__ import annotations

import contextlib
import errno as errno_mod
import resource
import signal
from typing import Iterator

from .model import Ctx, Outcome, changed, error, failed

LIMITS = ("fsize", "quota")
PAGE = 4096
QUOTA_ERRORS = (errno_mod.EDQUOT, errno_mod.ENOSPC)


def fsize_cut(length: int) -> int:
    """The bytes a write of ``length`` may lay down under its ``fsize`` limit: half,
    rounded down to a page (0 for a page or less: the write is refused whole)."""
    return (length // 2) // PAGE * PAGE


@contextlib.contextmanager
def rlimit_fsize(limit: int) -> Iterator[None]:
    """``RLIMIT_FSIZE`` at ``limit`` bytes (soft), ``SIGXFSZ`` ignored, both restored."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def _referenced(ctx: Ctx) -> int | None:
    assert ctx.zfs is not None
    ctx.zfs.run("zpool", "sync", ctx.zfs.pool)      # the dirty data counted first
    r = ctx.zfs.run("zfs", "get", "-Hp", "-o", "value", "referenced", ctx.zfs.dataset)
    return int(r.out.strip()) if r.rc == 0 and r.out.strip().isdigit() else None


@contextlib.contextmanager
def refquota(ctx: Ctx, headroom: int) -> Iterator[str | None]:
    """The dataset's ``refquota`` at what it references plus ``headroom``, lifted
    after; yields why it could not be set (the write then runs unlimited), or None."""
    if ctx.zfs is None or ctx.target.blockdev:
        yield "no dataset of the target's own (a block device, or no ZFS commands)"
        return
    used = _referenced(ctx)
    if used is None:
        yield "zfs get referenced failed"
        return
    r = ctx.zfs.run("zfs", "set", f"refquota={used + headroom}", ctx.zfs.dataset)
    if r.rc != 0:
        yield f"zfs set refquota: {'hang' if r.rc is None else r.err.strip()[-200:]}"
        return
    try:
        yield None
    finally:
        ctx.zfs.run("zfs", "set", "refquota=none", ctx.zfs.dataset)


def limited(ctx: Ctx, limit: str, off: int, length: int) -> contextlib.AbstractContextManager:
    """The limit of a ``limit`` write at ``off`` of ``length`` bytes, in place
    while the request is in flight."""
    if limit == "fsize":
        return rlimit_fsize(off + fsize_cut(length))
    if limit == "quota":
        # A page of room: the first chunk (a record) of the write fits, the next waits
        # for the txg that holds it and then finds the quota reached (OpenZFS checks a
        # refquota against what is referenced and in flight, not the chunk it assigns).
        return refquota(ctx, PAGE)
    raise ValueError(f"unknown limit {limit!r} (known: {', '.join(LIMITS)})")


def judge_fsize(ctx: Ctx, off: int, data: bytes, res: int | None, err: int,
                stage: str | None) -> Outcome:
    """A write cut by ``RLIMIT_FSIZE``: exactly the cut count, or ``EFBIG`` for none."""
    cut = fsize_cut(len(data))
    note = {"limit": "fsize", "limit_at": off + cut}
    if err:
        if err == errno_mod.EFBIG and cut == 0:
            if how := changed(ctx, off, len(data)):
                return failed("past-limit", f"refused with EFBIG, yet the file changed: "
                              f"{how}", errname="EFBIG", extra=note)
            return Outcome(extra={**note, "cut": 0, "errname": "EFBIG"})
        o = error(err, f"{stage or 'write'} under RLIMIT_FSIZE {off + cut}", res)
        o.extra.update(note)
        return o
    if res is None or res > cut:
        return failed("past-limit", f"wrote {res} bytes past RLIMIT_FSIZE {off + cut} "
                      f"(at most {cut} of {len(data)} may land)", res=res, extra=note)
    if res < cut:
        return failed("short", f"wrote {res} of the {cut} bytes RLIMIT_FSIZE {off + cut} "
                      f"allows ({len(data)} asked)", res=res, extra=note)
    ctx.model.write(off, data[:cut])
    return Outcome(res=res, extra={**note, "cut": cut})


def judge_quota(ctx: Ctx, off: int, data: bytes, res: int | None, err: int,
                stage: str | None, unset: str | None) -> Outcome:
    """A write under a ``refquota`` it may reach: full, short with its bytes, or
    refused whole with the file as it was."""
    note = {"limit": "quota", **({"limit_unset": unset} if unset else {})}
    if err in QUOTA_ERRORS and stage in ("syscall", "complete", None):
        name = errno_mod.errorcode[err]
        if how := changed(ctx, off, len(data)):
            return failed(f"error:{name}", f"a write under refquota returned {name}, yet "
                          f"some of it landed: {how}", res=res, errname=name, extra=note)
        return Outcome(extra={**note, "cut": 0, "errname": name})
    if err:
        o = error(err, stage or "write", res)
        o.extra.update(note)
        return o
    if res is None or res > len(data):
        return failed("short", f"wrote {res} of {len(data)} bytes", res=res, extra=note)
    ctx.model.write(off, data[:res])
    return Outcome(res=res, extra={**note, "cut": res})
