"""Explore, the ops: one small function per op kind (registered in
:data:`OPS`), the :class:`Step` each runs, and the rule each outcome is judged
by (the outcomes, the byte model and the shared checks: :mod:`.model`).
Here: reads and writes through an interface (sync, libaio, io_uring, io_uring
with registered files and buffers), the kernel moving the source file's bytes
into the target (``copy_range``, ``clone_range``, ``sendfile``, ``splice``) and
``verify``; the ops on the file itself are :mod:`.file`, those that run
the guest's ZFS commands :mod:`.zfs`.

An op whose buffer races (``buf: "racing"``) says in its line which ereports it
may leave (``leaves``), so the host declares them for the case's after-case
judges (``suite/judges/expect.py``): nothing else, and never a checksum error.
"""
from __future__ import annotations

import contextlib
import errno as errno_mod
from dataclasses import replace
import mmap
import os
from typing import Any, Callable, ContextManager

from ..content import compare
from .actors import op_actors
from .outward import OUTWARD_OPS
from .file import (evict, flush_arc, op_evict, op_fdatasync, op_fsync, op_mmap_read, op_mmap_write,
                           op_punch_hole, op_syncfs, op_tamper, op_truncate, op_zero_range)
from .origins import Want
from .requests import UNSUPPORTED, IoBuffer
from .mapread import read_mapped
from .model import Ctx, Model, Outcome, check_bytes, error, failed, size_mismatch
from . import flags, limits
from .race import Racer, landed
from .step import OPS, Step
from .xfer import clone_may_decline_dirty, clone_range, copy_range, sendfile_into, splice_into
from .powercut import op_power_cut
from .held import op_held
from .batch import op_append_batch
from .zfs import op_crash, op_freeze, op_rollback, op_snapshot, op_txg_sync
from ..plan import DIO_ALIGN, errno_name

def _direct_fd_missing(ctx: Ctx, s: Step) -> Outcome | None:
    if s.direct and ctx.target.dfd is None:
        return Outcome("unsupported", why=ctx.target.no_direct)
    return None


def _refused(err: int, stage: str | None, s: Step, buf: IoBuffer) -> Outcome | None:
    """The allowed non-results: EINVAL for a misaligned O_DIRECT request, an
    async interface the host refuses to set up (or a buffer it will not register)."""
    aligned = buf.aligned(s.off)
    if err == errno_mod.EINVAL and s.direct and not aligned:
        return Outcome("einval", why="misaligned O_DIRECT refused (allowed)",
                       errname="EINVAL", res=-err)
    if stage in ("setup", "register"):
        return Outcome("unsupported", why=f"{s.iface} {stage}: {errno_name(err)}")
    return None


def _issue(ctx: Ctx, s: Step, buf: IoBuffer,
           write: bool) -> tuple[int | None, int, str | None, Racer | None]:
    """The request, its buffer armed (a hole made) and raced where the op says, then
    disarmed unless the request never came back: (res, errno, stage, racer)."""
    buf.arm()
    with _racer(ctx, s, buf) as racer:
        res, err, stage = ctx.target.issue(write, s.iface, s.direct, s.off, buf,
                                           s.op in ("preadv", "pwritev"),
                                           flags.rw_flags(s.flags))
    if not ctx.target.hung:
        buf.disarm()
    return res, err, stage, racer


def _want(ctx: Ctx, s: Step, data: bytes | None) -> Want:
    """What a page origin needs: a write's bytes, the target's descriptor (a mapping
    of the request's own range), the request's offset and the target's size."""
    return Want(s.len, s.buf_off, ctx.target.shm_path, data, ctx.target.fd, s.off,
                ctx.model.size)


def _segs(s: Step) -> int:
    """iovec segments: ``segs`` for preadv/pwritev, one buffer otherwise."""
    return max(1, s.segs) if s.op in ("preadv", "pwritev") else 1


def _racer(ctx: Ctx, s: Step, buf: IoBuffer) -> ContextManager[Racer | None]:
    """The thread changing a racing buffer while the request is in flight
    (flipping between the op's data and its second pattern); none for the others."""
    if s.buf != "racing":
        return contextlib.nullcontext()
    return Racer(buf.region.addr, ctx.data(s.data, s.off, s.len),
                 ctx.race_data(s.data, s.off, s.len))


def _buffer_note(s: Step, buf: IoBuffer, racer: Racer | None) -> dict[str, Any]:
    """What the op's line says about its buffer (a racing one: its flips, and
    the ereports it may leave)."""
    note: dict[str, Any] = {"buf": buf.used, "aligned": buf.aligned(s.off)}
    if racer is not None:
        note.update(flips=racer.flips, leaves=list(s.may_leave()))
    return note


def op_read(ctx: Ctx, s: Step) -> Outcome:
    if (o := _direct_fd_missing(ctx, s)) is not None:
        return o
    buf = IoBuffer(s.buf, s.len, s.buf_off, _segs(s), ctx.target.shm_path, for_read=True,
                   want=_want(ctx, s, None))
    try:
        res, err, stage, racer = _issue(ctx, s, buf, write=False)
        judge = _judge_holed_read if buf.hole is not None else _judge_read
        o = flags.judge(ctx, s, buf, res, err, stage, False, None) if s.flags \
            else None
        o = o or judge(ctx, s, buf, res, err, stage)
        o.extra.update(_buffer_note(s, buf, racer), **({"flags": s.flags} if s.flags else {}))
        return o
    finally:
        if not ctx.target.hung:
            buf.close()


def _judge_read(ctx: Ctx, s: Step, buf: IoBuffer, res: int | None, err: int,
                stage: str | None) -> Outcome:
    if stage == "timeout":
        return failed("hang", f"no completion within {ctx.target.timeout_s}s")
    if err:
        return _refused(err, stage, s, buf) or error(err, stage or "read", res)
    assert res is not None
    size = ctx.model.size
    want = max(0, min(s.len, size - s.off))
    if res < want:
        return failed("short", f"read {res} of {want} bytes (EOF at {size})", res=res)
    if res > want:
        return failed("wrong-bytes", f"read {res} bytes, {res - want} past EOF at {size}",
                      res=res, first_wrong_byte=s.off + want)
    # A racing buffer's bytes are whatever the racer left last: only the count,
    # the canary around it and, later, the file's bytes are checked.
    bad = None if s.buf == "racing" else check_bytes(buf.gather(res), ctx.model, s.off, "read")
    if bad is None and (n := buf.overrun_bytes()):
        bad = failed("overrun", f"{n} bytes around the buffer were written")
    if bad is not None:
        bad.res = res
        return bad
    return Outcome(res=res)


def _judge_holed_read(ctx: Ctx, s: Step, buf: IoBuffer, res: int | None, err: int,
                      stage: str | None) -> Outcome:
    """A read into a buffer with a ``PROT_NONE`` page: EFAULT, or a count that stops
    at the hole with the model's bytes ahead of it; never a byte in the hole."""
    assert buf.hole is not None
    if stage == "timeout":
        return failed("hang", f"no completion within {ctx.target.timeout_s}s")
    if err == errno_mod.EFAULT:
        return Outcome("refused", why=f"EFAULT: the buffer's page at byte {buf.hole} is "
                       "PROT_NONE (allowed)", res=-err, errname="EFAULT")
    if err:
        return _refused(err, stage, s, buf) or error(err, stage or "read", res)
    assert res is not None
    want = max(0, min(s.len, ctx.model.size - s.off))
    if res > min(want, buf.hole):
        return failed("overrun", f"read {res} bytes into a buffer whose page at byte "
                      f"{buf.hole} is PROT_NONE (of {want} due)", res=res)
    bad = check_bytes(buf.gather(res), ctx.model, s.off, "read")
    if bad is not None:
        bad.res = res
        return bad
    return Outcome(res=res)


def _judge_holed_write(ctx: Ctx, s: Step, buf: IoBuffer, data: bytes, res: int | None,
                       err: int, stage: str | None) -> Outcome:
    """A write from a buffer with a ``PROT_NONE`` page: EFAULT, or a count that stops
    at the hole. What it reported is the op's data; past that each byte is the old
    one or the op's (a failed write may leave pages ahead of the fault written)."""
    assert buf.hole is not None
    if stage == "timeout":
        return failed("hang", f"no completion within {ctx.target.timeout_s}s")
    if err and err != errno_mod.EFAULT:
        return _refused(err, stage, s, buf) or error(err, stage or "write", res)
    done = 0 if err else (res or 0)
    if done > buf.hole:
        return failed("overrun", f"wrote {done} bytes from a buffer whose page at byte "
                      f"{buf.hole} is PROT_NONE", res=done)
    o = settle_racing_write(ctx, s, refused=True, kinds=("first", "old"), reported=done)
    if o.outcome == "refused":
        o.why = f"{errno_name(err) if err else 'short'} at the buffer's PROT_NONE page (allowed)"
        o.res, o.errname = (-err, errno_name(err)) if err else (done, None)
    return o


def op_write(ctx: Ctx, s: Step) -> Outcome:
    if (o := _direct_fd_missing(ctx, s)) is not None:
        return o
    data = ctx.data(s.data, s.off, s.len)
    buf = IoBuffer(s.buf, s.len, s.buf_off, _segs(s), ctx.target.shm_path, for_read=False,
                   want=_want(ctx, s, data))
    try:
        data = buf.load(data)       # an origin with bytes of its own writes those
        if buf.used == "map_target" and (bad := check_bytes(data, ctx.model, s.off,
                                                           "the target's own mapping")):
            return bad              # the page cache disagrees before the write
        if s.limit:
            return _limited_write(ctx, s, buf, data)
        at = flags.where(ctx, s.flags, s.off)      # an append lands at the end of the file
        res, err, stage, racer = _issue(ctx, s, buf, write=True)
        judge = _judge_holed_write if buf.hole is not None else _judge_write
        o = flags.judge(ctx, replace(s, off=at), buf, res, err, stage, True, data) if s.flags \
            else None
        o = o or judge(ctx, replace(s, off=at), buf, data, res, err, stage)
        o.extra.update(_buffer_note(s, buf, racer), **({"flags": s.flags} if s.flags else {}))
        return o
    finally:
        if not ctx.target.hung:
            buf.close()


def _limited_write(ctx: Ctx, s: Step, buf: IoBuffer, data: bytes) -> Outcome:
    """A write cut by a limit (``suite/ioengine/explore/limits.py``): the limit in
    place while the request is in flight, then judged by what the limit allows."""
    if buf.hole is not None or s.buf == "racing":
        return Outcome("unsupported", why=f"a {s.limit} limit with a {buf.used} buffer "
                       "(its bytes are not the op's alone)")
    unset = None
    with limits.limited(ctx, s.limit, s.off, s.len) as why:
        unset = why
        res, err, stage, racer = _issue(ctx, s, buf, write=True)
    if stage == "timeout":
        return failed("hang", f"no completion within {ctx.target.timeout_s}s")
    if err and (o := _refused(err, stage, s, buf)) is not None:
        return o
    if s.limit == "fsize":
        o = limits.judge_fsize(ctx, s.off, data, res, err, stage)
    else:
        o = limits.judge_quota(ctx, s.off, data, res, err, stage, unset)
    o.extra.update(_buffer_note(s, buf, racer))
    return o


def _judge_write(ctx: Ctx, s: Step, buf: IoBuffer, data: bytes, res: int | None, err: int,
                 stage: str | None) -> Outcome:
    """A write's result, and the model after it: its data when it returned its
    length; from a racing buffer, whatever every read path agrees landed (also
    after EIO, which only a racing write to a file may get: write verify refused
    it. A zvol retries such a write through the ARC (zvol-dio 68e961e25; stock
    zvols copy, never verify): EIO from a block device is a finding)."""
    if stage == "timeout":
        return failed("hang", f"no completion within {ctx.target.timeout_s}s")
    racing = s.buf == "racing"
    if err == errno_mod.EIO and racing and stage in ("syscall", "complete") and \
            not ctx.target.blockdev:
        return settle_racing_write(ctx, s, refused=True)
    if err:
        return _refused(err, stage, s, buf) or error(err, stage or "write", res)
    if res != s.len:
        return failed("short", f"wrote {res} of {s.len} bytes", res=res)
    if racing:
        return settle_racing_write(ctx, s, refused=False)
    ctx.model.write(s.off, data)
    return Outcome(res=res)


def _racing_size(ctx: Ctx, s: Step, refused: bool) -> int | Outcome:
    """The target's size after a racing write: grown to its end when the write
    returned its length; when refused (EIO), anywhere from the old size to there
    (the records before the refused one may have landed)."""
    old = ctx.model.size
    if ctx.target.blockdev:
        return old
    size, grown = os.fstat(ctx.target.fd).st_size, max(old, s.off + s.len)
    if size == grown or (refused and old <= size <= grown):
        return size
    want = f"{grown}" if not refused else f"{old}..{grown}"
    return failed("size", f"after a racing write: st_size {size}, expected {want}")


def _read_back(ctx: Ctx, size: int, where: str) -> bytes | Outcome:
    """The target's first ``size`` bytes, read through O_DIRECT, buffered and
    mmap, which must agree with each other (what they should hold is not known)."""
    paths = _read_paths(ctx, size)
    for name, got in paths.items():
        if isinstance(got, OSError):
            return error(got.errno or 0, f"{where}: {name} read")
    (ref_name, ref), *others = paths.items()
    notes = {name: _path_note(got, ref) for name, got in others if got != ref}
    if not notes:
        return bytes(ref)
    why = "; ".join(f"{name}: {note} against {ref_name}" for name, (_, note) in notes.items())
    return failed("paths-disagree", f"{where}: {why}",
                  first_wrong_byte=min(first for first, _ in notes.values()))


def settle_racing_write(ctx: Ctx, s: Step, refused: bool,
                        kinds: tuple[str, ...] = ("first", "second"),
                        reported: int = 0) -> Outcome:
    """After a write from a racing buffer the model cannot know which bytes
    landed: read the target back through every path (they must agree); outside
    the range it must hold the model's bytes, inside each byte must be the op's
    data, its second pattern or, when the write was refused with EIO (write
    verify failed and that record was not written), the old byte. What was read
    becomes the model."""
    size = _racing_size(ctx, s, refused)
    if isinstance(size, Outcome):
        return size
    got = _read_back(ctx, size, "after a racing write")
    if isinstance(got, Outcome):
        return got
    end = max(s.off, min(s.off + s.len, size))
    old = Model(bytes(ctx.model.data))
    old.resize(size)
    allowed = {"first": ctx.data(s.data, s.off, end - s.off),
               "second": ctx.race_data(s.data, s.off, end - s.off)}
    allowed = {k: v for k, v in allowed.items() if k in kinds}
    if refused:
        allowed["old"] = old.read(s.off, end - s.off)
    if reported and got[s.off:s.off + reported] != allowed["first"][:reported]:
        b = s.off + next(i for i, (x, y) in enumerate(zip(got[s.off:], allowed["first"]))
                         if x != y)
        return failed("wrong-bytes", f"the write reported {reported} bytes; the byte at "
                      f"{b} is not its data", first_wrong_byte=b)
    land = landed(got[s.off:end], allowed, s.off)
    outside = Model(bytes(old.data))
    outside.write(s.off, got[s.off:end])
    bad = check_bytes(got, outside, 0, "outside a racing write's range")
    if bad is None and land.first_wrong_byte is not None:
        b = land.first_wrong_byte
        each = ", ".join(f"{k} {c[b - s.off]:#04x}" for k, c in allowed.items())
        bad = failed("wrong-bytes", f"racing write: the byte at {b} is {got[b]:#04x}, none of "
                     f"the contents it may hold ({each})", first_wrong_byte=b)
    if bad is not None:
        bad.extra["landed"] = land.pieces
        return bad
    ctx.model = Model(got)
    if refused:
        return Outcome("refused", why="EIO: Direct I/O write verify refused it (allowed)",
                       res=-errno_mod.EIO, errname="EIO", extra={"landed": land.pieces})
    return Outcome(res=s.len, extra={"landed": land.pieces})


def _source_missing(ctx: Ctx, s: Step) -> Outcome | None:
    """A range past the end of the source file: a malformed sequence."""
    if s.src_off + s.len <= len(ctx.source):
        return None
    return failed("error:EINVAL", f"the source holds {len(ctx.source)} bytes, the op asks "
                  f"for {s.len} at {s.src_off}: a malformed sequence")


Mover = Callable[[int, int, int, int, int], tuple[int, int]]    # (dst, src, dst_off, src_off, n)


def _transfer(ctx: Ctx, s: Step, name: str, move: Mover) -> Outcome:
    """``move`` the op's range of the source file into the target (through the
    O_DIRECT descriptor for a ``direct`` op): the model gets the source's bytes
    for what moved, also when it stopped early."""
    if (o := _source_missing(ctx, s) or _direct_fd_missing(ctx, s)) is not None:
        return o
    src = ctx.target.open_source(ctx.source)
    fd = ctx.target.dfd if s.direct else ctx.target.fd
    assert fd is not None
    done, err = move(fd, src, s.off, s.src_off, s.len)
    ctx.model.write(s.off, ctx.source[s.src_off:s.src_off + done])
    aligned = all(x % DIO_ALIGN == 0 for x in (s.off, s.len, s.src_off))
    if err in UNSUPPORTED and done == 0:
        return Outcome("unsupported", why=f"{name}: {errno_name(err)}")
    if err == errno_mod.EINVAL and s.direct and not aligned:
        return Outcome("einval", why=f"{name}: misaligned O_DIRECT refused after {done} "
                       "bytes (allowed)", errname="EINVAL", res=done)
    if err:
        return error(err, f"{name} after {done} bytes")
    if done < s.len:
        return failed("short", f"{name} stopped at {done} of {s.len} bytes", res=done)
    return Outcome(res=done)


def op_copy_range(ctx: Ctx, s: Step) -> Outcome:
    """copy_file_range from the scratch source file into the target."""
    return _transfer(ctx, s, "copy_file_range", copy_range)


def op_sendfile(ctx: Ctx, s: Step) -> Outcome:
    """sendfile from the scratch source file into the target."""
    return _transfer(ctx, s, "sendfile", sendfile_into)


def op_splice(ctx: Ctx, s: Step) -> Outcome:
    """splice from the scratch source file through a pipe into the target."""
    return _transfer(ctx, s, "splice", splice_into)


# What a clone may answer when it cannot share these blocks (the model unchanged):
# the filesystem cannot clone (EOPNOTSUPP), not across these files (EXDEV), or
# not this range (EINVAL: OpenZFS wants whole records of one block size).
CLONE_DECLINED = UNSUPPORTED + (errno_mod.EINVAL,)


def op_clone_range(ctx: Ctx, s: Step) -> Outcome:
    """FICLONERANGE from the scratch source file into the target: the target
    then shares the source's blocks (block cloning), and reads the source's bytes."""
    if (o := _source_missing(ctx, s)) is not None:
        return o
    src = ctx.target.open_source(ctx.source)
    err = clone_range(ctx.target.fd, src, s.off, s.src_off, s.len)
    if err in CLONE_DECLINED:
        kind = "refused" if err == errno_mod.EINVAL else "unsupported"
        return Outcome(kind, why=f"FICLONERANGE: {errno_name(err)} (allowed)",
                       errname=errno_name(err))
    if err == errno_mod.EAGAIN and clone_may_decline_dirty():
        return Outcome("refused", why="FICLONERANGE: EAGAIN (allowed: a dirty block, "
                       "zfs_bclone_wait_dirty=0)", errname="EAGAIN")
    if err:
        return error(err, "FICLONERANGE")
    ctx.model.write(s.off, ctx.source[s.src_off:s.src_off + s.len])
    return Outcome(res=s.len)


def _read_paths(ctx: Ctx, size: int) -> dict[str, bytes | OSError]:
    """The whole target read three ways: O_DIRECT (aligned buffer, one call),
    buffered, and through a shared mapping; then, with ``drop_caches``, the pages the
    mapping cached dropped again, so the O_DIRECT requests after it go as they would
    have (OpenZFS serves a cached range through the ARC)."""
    out: dict[str, bytes | OSError] = {}
    t = ctx.target
    if t.dfd is not None:
        n = max(DIO_ALIGN, -(-size // DIO_ALIGN) * DIO_ALIGN)
        with mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as m:
            try:
                with memoryview(m) as mv:
                    got = os.preadv(t.dfd, [mv], 0)
                out["O_DIRECT"] = m[:min(got, size) if t.blockdev else got]
            except OSError as e:
                out["O_DIRECT"] = e
    parts, pos = [], 0
    try:
        while pos < size and (chunk := os.pread(t.fd, size - pos, pos)):
            parts.append(chunk)
            pos += len(chunk)
        out["buffered"] = b"".join(parts)
    except OSError as e:
        out["buffered"] = e
    if size:
        out["mmap"] = read_mapped(t.fd, size)      # a fault there is an error, not a SIGBUS
        if ctx.drop_caches:
            evict(t.fd, True)
            flush_arc(ctx)      # the buffered read filled the ARC too
    return out


def _path_note(got: bytes, want: bytes) -> tuple[int, str]:
    """(first wrong byte, what is wrong) of one path's bytes."""
    if len(got) != len(want):
        first = compare(got, want, 0).first_wrong_byte
        return (min(len(got), len(want)) if first is None else first,
                f"{len(got)} of {len(want)} bytes")
    c = compare(got, want, 0)
    return c.first_wrong_byte or 0, f"{c.wrong_bytes} wrong bytes from {c.first_wrong_byte} " \
        f"({c.wrong_kind})"


def op_verify(ctx: Ctx, s: Step) -> Outcome:
    """The whole target through O_DIRECT, buffered and mmap: each must equal the
    model. All wrong alike is ``wrong-bytes``; differing among themselves is
    ``paths-disagree``."""
    if (bad := size_mismatch(ctx, "verify")) is not None:
        return bad
    want = bytes(ctx.model.data)
    paths = _read_paths(ctx, len(want))
    notes: dict[str, str] = {"O_DIRECT": ctx.target.no_direct} if ctx.target.no_direct else {}
    firsts = []
    for name, got in paths.items():
        if isinstance(got, OSError):
            return error(got.errno or 0, f"verify {name} read")
        if got == want:
            notes[name] = "equal"
            continue
        first, notes[name] = _path_note(got, want)
        firsts.append(first)
    if not firsts:
        return Outcome(res=len(want), extra={"paths": notes})
    kind = "wrong-bytes" if len({bytes(g) for g in paths.values()}) == 1 else "paths-disagree"
    why = "; ".join(f"{k}: {v}" for k, v in notes.items())
    return failed(kind, f"verify of {len(want)} bytes: {why}", first_wrong_byte=min(firsts),
                  extra={"paths": notes})


OPS.update({
    "pread": op_read, "preadv": op_read, "pwrite": op_write, "pwritev": op_write,
    "mmap_read": op_mmap_read, "mmap_write": op_mmap_write, "truncate": op_truncate,
    "punch_hole": op_punch_hole, "zero_range": op_zero_range, "copy_range": op_copy_range,
    "clone_range": op_clone_range, "sendfile": op_sendfile, "splice": op_splice,
    "snapshot": op_snapshot, "rollback": op_rollback, "txg_sync": op_txg_sync,
    "fsync": op_fsync, "fdatasync": op_fdatasync, "syncfs": op_syncfs, "evict": op_evict,
    "verify": op_verify, "tamper": op_tamper, "actors": op_actors,
    "freeze": op_freeze, "crash": op_crash, "power_cut": op_power_cut, **OUTWARD_OPS,
    "held_read": op_held, "held_write": op_held, "append_batch": op_append_batch,
})
