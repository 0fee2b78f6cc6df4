"""Explore, the ops: the byte model of the target, one small function per op
kind (registered in :data:`OPS`), and the rule each outcome is judged by.

Every op leaves an :class:`Outcome`: ``ok`` (done, and what it read equals the
model), ``einval`` (a misaligned O_DIRECT request refused with EINVAL: allowed),
``unsupported`` (the filesystem or kernel lacks it: EOPNOTSUPP and kin; O_DIRECT
refused at open), ``refused`` (declined in a way the op allows: a write from a
racing buffer failing Direct I/O write verification with EIO, a clone of blocks
that cannot be shared with EINVAL), ``skipped``
(nothing to do: an mmap past EOF) or ``failed`` with a ``kind``:
``wrong-bytes``, ``short`` (a count short of EOF), ``overrun`` (the kernel wrote
past the buffer), ``size`` (st_size is not the model's), ``paths-disagree``
(O_DIRECT, buffered and mmap reads differ), ``hang`` (an async request or a
ZFS command never returned), ``zfs-command`` (one failed) or ``error:<ERRNO>``.

An op whose buffer races (``buf: "racing"``) says in its line which ereports it
may leave (``leaves``), so the host declares them for the case's after-case
judges (``suite/judges/expect.py``): nothing else, and never a checksum error.
"""
from __future__ import annotations

import contextlib
import errno as errno_mod
import mmap
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ContextManager

from .content import compare, pattern
from .explore_io import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE,
                         SOURCES, UNSUPPORTED, IoBuffer, Target, fallocate, syncfs)
from .explore_race import RACING_LEAVES, Racer, landed
from .explore_xfer import clone_range, copy_range, sendfile_into, splice_into
from .explore_zfs import Snap, ZfsTools
from .plan import DIO_ALIGN, PAGE, errno_name

IFACES = ("sync", "libaio", "io_uring", "io_uring_fixed")
SOURCE_OPS = ("copy_range", "clone_range", "sendfile", "splice")    # read the scratch source
ZFS_OPS = ("snapshot", "rollback", "txg_sync")                      # run the guest's commands
TAMPER_BYTE = 0x5A


@dataclass(frozen=True)
class Step:
    """One op of a sequence, as the host's ``suite.explore.ops.Op`` writes it."""
    op: str
    iface: str = "sync"
    direct: bool = False
    off: int = 0
    len: int = 0
    size: int = 0
    buf: str = "heap"
    buf_off: int = 0
    segs: int = 0
    data: int = 0
    src_off: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Step":
        known = {f.name for f in fields(cls)}
        extra = sorted(set(d) - known)
        if extra:
            raise ValueError(f"op {d.get('op')!r} has unknown fields {extra}")
        s = cls(**d)
        if s.op not in OPS:
            raise ValueError(f"unknown op {s.op!r} (known: {', '.join(OPS)})")
        if s.iface not in IFACES or s.buf not in SOURCES:
            raise ValueError(f"op {s.op!r}: iface must be one of {IFACES} and buf one of "
                             f"{SOURCES}, not {s.iface!r} / {s.buf!r}")
        if min(s.off, s.len, s.size, s.buf_off, s.segs, s.src_off) < 0:
            raise ValueError(f"op {s.op!r}: negative field in {d}")
        return s

    def may_leave(self) -> tuple[str, ...]:
        """The ereports this op may leave with nothing wrong: those of a buffer
        changed in flight (one definition for the engine's line and the host's
        declaration)."""
        if self.buf != "racing":
            return ()
        if self.op in ("pwrite", "pwritev"):
            return RACING_LEAVES["write"]
        return RACING_LEAVES["read"] if self.op in ("pread", "preadv") else ()


class Model:
    """What the target must hold: its bytes (holes are zeros) and so its size."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)

    @property
    def size(self) -> int:
        return len(self.data)

    def write(self, offset: int, data: bytes) -> None:
        if offset > self.size:
            self.data.extend(bytes(offset - self.size))
        self.data[offset:offset + len(data)] = data

    def resize(self, size: int) -> None:
        if size < self.size:
            del self.data[size:]
        else:
            self.data.extend(bytes(size - self.size))

    def zero(self, offset: int, length: int) -> None:
        end = min(self.size, offset + length)
        if offset < end:
            self.data[offset:end] = bytes(end - offset)

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.data[offset:offset + length])


@dataclass
class Outcome:
    outcome: str = "ok"             # ok | einval | unsupported | refused | skipped | failed
    kind: str | None = None         # for failed: wrong-bytes, short, error:EIO, ...
    why: str | None = None
    res: int | None = None
    errname: str | None = None
    first_wrong_byte: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome != "failed"


def failed(kind: str, why: str, **kw: Any) -> Outcome:
    return Outcome("failed", kind, why, **kw)


def error(err: int, where: str, res: int | None = None) -> Outcome:
    name = errno_name(err) or str(err)
    return failed(f"error:{name}", f"{where}: {name} ({os.strerror(err)})", res=res,
                  errname=name)


@dataclass
class Ctx:
    target: Target
    model: Model
    seed: int
    source: bytes                   # the scratch source file's bytes (SOURCE_OPS)
    zfs: ZfsTools | None = None     # the guest's ZFS commands (ZFS_OPS), if given
    snaps: list[Snap] = field(default_factory=list)     # this run's, oldest first

    def data(self, token: int, offset: int, length: int) -> bytes:
        """What a write with data token ``token`` lays down at ``offset``."""
        return pattern(f"{self.seed}:w{token}", offset, length)

    def race_data(self, token: int, offset: int, length: int) -> bytes:
        """The other content a racing buffer of data token ``token`` flips to."""
        return pattern(f"{self.seed}:r{token}", offset, length)


def check_bytes(got: bytes, model: Model, offset: int, where: str) -> Outcome | None:
    """None when ``got`` equals the model at ``offset``; else the failure."""
    c = compare(got, model.read(offset, len(got)), offset)
    if not c.wrong_bytes:
        return None
    sample = c.wrong_sample or {}
    return failed("wrong-bytes", f"{where}: {c.wrong_bytes} wrong bytes, the first at "
                  f"{c.first_wrong_byte} ({c.wrong_kind}: got {sample.get('got')} expected "
                  f"{sample.get('expected')})", first_wrong_byte=c.first_wrong_byte)


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
    buf = IoBuffer(s.buf, s.len, s.buf_off, _segs(s), ctx.target.shm_path, for_read=True)
    try:
        with _racer(ctx, s, buf) as racer:
            res, err, stage = ctx.target.issue(False, s.iface, s.direct, s.off, buf,
                                               s.op == "preadv")
        o = _judge_read(ctx, s, buf, res, err, stage)
        o.extra.update(_buffer_note(s, buf, racer))
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


def op_write(ctx: Ctx, s: Step) -> Outcome:
    if (o := _direct_fd_missing(ctx, s)) is not None:
        return o
    data = ctx.data(s.data, s.off, s.len)
    buf = IoBuffer(s.buf, s.len, s.buf_off, _segs(s), ctx.target.shm_path, for_read=False)
    try:
        buf.fill(data)
        with _racer(ctx, s, buf) as racer:
            res, err, stage = ctx.target.issue(True, s.iface, s.direct, s.off, buf,
                                               s.op == "pwritev")
        o = _judge_write(ctx, s, buf, data, res, err, stage)
        o.extra.update(_buffer_note(s, buf, racer))
        return o
    finally:
        if not ctx.target.hung:
            buf.close()


def _judge_write(ctx: Ctx, s: Step, buf: IoBuffer, data: bytes, res: int | None, err: int,
                 stage: str | None) -> Outcome:
    """A write's result, and the model after it: its data when it returned its
    length; from a racing buffer, whatever every read path agrees landed (also
    after EIO, which only a racing write may get: write verify refused it)."""
    if stage == "timeout":
        return failed("hang", f"no completion within {ctx.target.timeout_s}s")
    racing = s.buf == "racing"
    if err == errno_mod.EIO and racing and stage in ("syscall", "complete"):
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


def settle_racing_write(ctx: Ctx, s: Step, refused: bool) -> Outcome:
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
    if refused:
        allowed["old"] = old.read(s.off, end - s.off)
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


def _size_mismatch(ctx: Ctx, where: str) -> Outcome | None:
    """A file whose st_size is not the model's (checked before mapping it: a
    page past the real EOF would kill the engine with SIGBUS)."""
    if ctx.target.blockdev:
        return None
    size = os.fstat(ctx.target.fd).st_size
    if size != ctx.model.size:
        return failed("size", f"{where}: st_size {size}, the model says {ctx.model.size}")
    return None


def _mapped_range(ctx: Ctx, s: Step) -> tuple[int, int] | None:
    """The op's range cut at EOF (an mmap cannot reach past it), or None."""
    if s.off >= ctx.model.size:
        return None
    return s.off, min(s.len, ctx.model.size - s.off)


def op_mmap_read(ctx: Ctx, s: Step) -> Outcome:
    rng = _mapped_range(ctx, s)
    if rng is None:
        return Outcome("skipped", why=f"past EOF ({ctx.model.size})")
    if (bad := _size_mismatch(ctx, "before mmap")) is not None:
        return bad
    off, n = rng
    start = off - off % PAGE
    with mmap.mmap(ctx.target.fd, off + n - start, flags=mmap.MAP_SHARED,
                   prot=mmap.PROT_READ, offset=start) as m:
        got = m[off - start:off - start + n]
    return check_bytes(got, ctx.model, off, "mmap read") or Outcome(res=n)


def op_mmap_write(ctx: Ctx, s: Step) -> Outcome:
    rng = _mapped_range(ctx, s)
    if rng is None:
        return Outcome("skipped", why=f"past EOF ({ctx.model.size})")
    if (bad := _size_mismatch(ctx, "before mmap")) is not None:
        return bad
    off, n = rng
    start = off - off % PAGE
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
    if err:
        return error(err, "FICLONERANGE")
    ctx.model.write(s.off, ctx.source[s.src_off:s.src_off + s.len])
    return Outcome(res=s.len)


def _no_zfs(ctx: Ctx, s: Step) -> Outcome | None:
    if ctx.zfs is None:
        return Outcome("unsupported", why=f"{s.op}: no --zfs-dataset (the guest's ZFS "
                       "commands) given")
    if ctx.target.blockdev:
        return Outcome("unsupported", why=f"{s.op}: the target is a block device")
    return None


def _zfs_command(ctx: Ctx, tool: str, *args: str) -> Outcome | None:
    """Run a ZFS command: None when it succeeded, else the failure (a hang when
    it did not return: the target is then left alone, like a request in flight)."""
    assert ctx.zfs is not None
    r = ctx.zfs.run(tool, *args)
    if r.rc is None:
        ctx.target.hung = True
        return failed("hang", f"{r.line} did not return within {ctx.zfs.timeout_s}s")
    if r.rc:
        return failed("zfs-command", f"{r.line}: exit {r.rc}: {r.err.strip()[-300:]}")
    return None


def op_snapshot(ctx: Ctx, s: Step) -> Outcome:
    """Snapshot the target's dataset; the model now is what a rollback to it restores."""
    if (o := _no_zfs(ctx, s)) is not None:
        return o
    assert ctx.zfs is not None
    name = ctx.zfs.snapshot_name(len(ctx.snaps))
    if (o := _zfs_command(ctx, "zfs", "snapshot", name)) is not None:
        return o
    ctx.snaps.append(Snap(s.data, name, bytes(ctx.model.data)))
    return Outcome(extra={"snapshot": name})


def op_rollback(ctx: Ctx, s: Step) -> Outcome:
    """Roll the dataset back to the snapshot of data token ``data`` (``-r``:
    the later ones go), the model with it; the target is opened again."""
    if (o := _no_zfs(ctx, s)) is not None:
        return o
    at = next((i for i in reversed(range(len(ctx.snaps))) if ctx.snaps[i].tag == s.data), None)
    if at is None:
        return Outcome("skipped", why=f"no snapshot of data {s.data} in this run")
    snap = ctx.snaps[at]
    if (o := _zfs_command(ctx, "zfs", "rollback", "-r", snap.name)) is not None:
        return o
    del ctx.snaps[at + 1:]
    ctx.model = Model(snap.model)
    ctx.target.reopen()
    return Outcome(extra={"snapshot": snap.name})


def op_txg_sync(ctx: Ctx, s: Step) -> Outcome:
    """``zpool sync``: the pool's open transaction group written out now."""
    if (o := _no_zfs(ctx, s)) is not None:
        return o
    assert ctx.zfs is not None
    return _zfs_command(ctx, "zpool", "sync", ctx.zfs.pool) or Outcome()


def destroy_snapshots(ctx: Ctx) -> list[str]:
    """Destroy the run's snapshots, newest first; the commands that failed."""
    problems: list[str] = []
    while ctx.zfs is not None and ctx.snaps and not ctx.target.hung:
        r = ctx.zfs.run("zfs", "destroy", ctx.snaps.pop().name)
        if r.rc is None:
            ctx.target.hung = True          # the next would hang too
        if r.rc != 0:
            problems.append(f"{r.line}: {'hang' if r.rc is None else r.err.strip()[-200:]}")
    return problems


def op_fsync(ctx: Ctx, s: Step) -> Outcome:
    os.fsync(ctx.target.fd)
    return Outcome()


def op_fdatasync(ctx: Ctx, s: Step) -> Outcome:
    os.fdatasync(ctx.target.fd)
    return Outcome()


def op_syncfs(ctx: Ctx, s: Step) -> Outcome:
    err = syncfs(ctx.target.fd)
    return error(err, "syncfs") if err else Outcome()


def op_evict(ctx: Ctx, s: Step) -> Outcome:
    """Drop the target's clean page cache (posix_fadvise DONTNEED)."""
    os.posix_fadvise(ctx.target.fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return Outcome()


def op_tamper(ctx: Ctx, s: Step) -> Outcome:
    """Self-test hook, never generated: overwrite bytes behind the model's back,
    so the next read that covers them must fail."""
    n = max(0, min(s.len, ctx.model.size - s.off))
    if n:
        os.pwrite(ctx.target.fd, bytes([TAMPER_BYTE]) * n, s.off)
        os.fsync(ctx.target.fd)
    return Outcome(res=n)


def _read_paths(ctx: Ctx, size: int) -> dict[str, bytes | OSError]:
    """The whole target read three ways: O_DIRECT (aligned buffer, one call),
    buffered, and through a shared mapping."""
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
        try:
            with mmap.mmap(t.fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) as m:
                out["mmap"] = m[:size]
        except OSError as e:
            out["mmap"] = e
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
    if (bad := _size_mismatch(ctx, "verify")) is not None:
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


OPS: dict[str, Callable[[Ctx, Step], Outcome]] = {
    "pread": op_read, "preadv": op_read, "pwrite": op_write, "pwritev": op_write,
    "mmap_read": op_mmap_read, "mmap_write": op_mmap_write, "truncate": op_truncate,
    "punch_hole": op_punch_hole, "zero_range": op_zero_range, "copy_range": op_copy_range,
    "clone_range": op_clone_range, "sendfile": op_sendfile, "splice": op_splice,
    "snapshot": op_snapshot, "rollback": op_rollback, "txg_sync": op_txg_sync,
    "fsync": op_fsync, "fdatasync": op_fdatasync, "syncfs": op_syncfs, "evict": op_evict,
    "verify": op_verify, "tamper": op_tamper,
}
