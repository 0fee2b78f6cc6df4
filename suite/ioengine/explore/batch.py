"""Explore, appends submitted together (``append_batch``): ``segs`` O_DIRECT writes of
``len`` bytes each, every one ``RWF_APPEND``, handed to the kernel in one
``io_submit`` (libaio) or one ``io_uring_enter`` (io_uring), then reaped.

First the file's size is rounded up to ``size`` (the dataset's record, drawn by the
host: ``ftruncate``, the model the same) so every append starts on a record and
Direct I/O may serve it. With ``limit=fsize`` the process's ``RLIMIT_FSIZE`` leaves
room for exactly one append while the batch is in flight (``SIGXFSZ`` ignored).

Judged (the order the appends land in is the kernel's: any is allowed):

- each append returns its length, or ``EFBIG`` under the limit (nothing else);
- the file grew by the sum of the counts returned (``size`` otherwise: an append
  that was admitted and landed where another did, or a count for bytes that never
  landed);
- under the limit the file never grows past it (``past-limit``: the review's
  async-dio 917a434a1a, every append judged at the end of file of submission time,
  so two in one ``io_submit`` were both admitted under room for one);
- the bytes past the old end are the accepted appends' whole, one after another in
  some order (``wrong-bytes`` otherwise).
"""
from __future__ import annotations

import contextlib
import errno as errno_mod
import itertools
import os

from .flags import RWF
from .limits import rlimit_fsize
from .model import Ctx, Outcome, check_bytes, error, failed
from .requests import IoBuffer
from .step import Step

BATCH_IFACES = ("libaio", "io_uring")
MAX_BATCH = 4           # the target's queues hold four requests


def _pad(ctx: Ctx, unit: int) -> None:
    """The file's size rounded up to ``unit`` (a record): appends start on one."""
    size = ctx.model.size
    if unit > 0 and size % unit:
        padded = size + unit - size % unit
        os.ftruncate(ctx.target.fd, padded)
        ctx.model.resize(padded)


def op_append_batch(ctx: Ctx, s: Step) -> Outcome:
    if ctx.target.blockdev or ctx.target.dfd is None:
        return Outcome("unsupported", why="appends need a regular file opened O_DIRECT")
    if s.iface not in BATCH_IFACES or not 2 <= s.segs <= MAX_BATCH or s.len <= 0:
        return Outcome("unsupported", why=f"a batch is {'/'.join(BATCH_IFACES)}, 2-{MAX_BATCH} "
                       f"appends of a positive length (got {s.iface}, {s.segs}, {s.len})")
    try:
        ctx.target.queue(s.iface)
    except OSError as e:
        return Outcome("unsupported", why=f"no {s.iface} queue: {e}")
    _pad(ctx, s.size)
    start = ctx.model.size
    datas = [ctx.data(s.data, i * s.len, s.len) for i in range(s.segs)]
    bufs = [IoBuffer("heap", s.len, 0, 1, ctx.target.shm_path, for_read=False)
            for _ in datas]
    limit = start + s.len if s.limit == "fsize" else None
    try:
        for b, d in zip(bufs, datas):
            b.fill(d)
        try:
            with rlimit_fsize(limit) if limit is not None else contextlib.nullcontext():
                got = ctx.target.issue_together(s.iface, bufs, RWF["append"])
        except OSError as e:
            return error(e.errno, f"{s.iface} submit of {s.segs} appends")
        return judge(ctx, s, start, limit, datas, got)
    finally:
        if not ctx.target.hung:
            for b in bufs:
                b.close()


def judge(ctx: Ctx, s: Step, start: int, limit: int | None, datas: list[bytes],
          got: list[tuple[int | None, int]]) -> Outcome:
    note = {"appends": [r if r is not None else "none" for r, _ in got], "start": start,
            "iface": s.iface, **({"rlimit_fsize": limit} if limit is not None else {})}
    if any(r is None for r, _ in got):
        return failed("hang", f"{sum(r is None for r, _ in got)} of {len(got)} appends not "
                      f"reaped within {ctx.target.timeout_s}s", extra=note)
    for i, (res, err) in enumerate(got):
        if err and not (err == errno_mod.EFBIG and limit is not None):
            o = error(err, f"append {i} of {len(got)} (one {s.iface} submit)", res)
            o.extra.update(note)
            return o
        if not err and res != s.len:
            return failed("short", f"append {i} returned {res} of {s.len} bytes", res=res,
                          extra=note)
    accepted = [i for i, (res, err) in enumerate(got) if not err]
    size = os.fstat(ctx.target.fd).st_size
    if limit is not None and size > limit:
        return failed("past-limit", f"{len(accepted)} of {len(got)} appends of {s.len} "
                      f"bytes admitted in one {s.iface} submit under RLIMIT_FSIZE {limit} "
                      f"(room for one from {start}): the file grew to {size}", extra=note)
    want_size = start + s.len * len(accepted)
    if size != want_size:
        return failed("size", f"{len(accepted)} appends of {s.len} bytes returned their "
                      f"length, yet the file grew from {start} to {size} (not {want_size})",
                      extra=note)
    tail = os.pread(ctx.target.fd, size - start, start) if size > start else b""
    for order in itertools.permutations(accepted):
        if tail == b"".join(datas[i] for i in order):
            ctx.model.write(start, tail)
            return Outcome(res=sum(r for r, err in got if r and not err),
                           extra={**note, "order": list(order)})
    ctx.model.write(start, b"".join(datas[i] for i in accepted))
    bad = check_bytes(tail, ctx.model, start, f"the {len(accepted)} appends")
    return failed("wrong-bytes", bad.why if bad else "the appended bytes are no order of "
                  "the appends' own", extra=note)
