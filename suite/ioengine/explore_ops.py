"""Explore, the ops: the byte model of the target, one small function per op
kind (registered in :data:`OPS`), and the rule each outcome is judged by.

Every op leaves an :class:`Outcome`: ``ok`` (done, and what it read equals the
model), ``einval`` (a misaligned O_DIRECT request refused with EINVAL: allowed),
``unsupported`` (the filesystem or kernel lacks it: EOPNOTSUPP and kin; O_DIRECT
refused at open), ``skipped`` (nothing to do: an mmap past EOF) or ``failed``
with a ``kind``: ``wrong-bytes``, ``short`` (a count short of EOF), ``overrun``
(the kernel wrote past the buffer), ``size`` (st_size is not the model's),
``paths-disagree`` (O_DIRECT, buffered and mmap reads differ), ``hang`` (an
async request never completed) or ``error:<ERRNO>``.
"""
from __future__ import annotations

import errno as errno_mod
import mmap
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from .content import compare, pattern
from .explore_io import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE,
                         SOURCES, UNSUPPORTED, IoBuffer, Target, fallocate, syncfs)
from .plan import DIO_ALIGN, PAGE, errno_name

IFACES = ("sync", "libaio", "io_uring")
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
    outcome: str = "ok"             # ok | einval | unsupported | skipped | failed
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
    source: bytes                   # the copy_file_range source file's bytes

    def data(self, token: int, offset: int, length: int) -> bytes:
        """What a write with data token ``token`` lays down at ``offset``."""
        return pattern(f"{self.seed}:w{token}", offset, length)


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
    async interface the host refuses to set up."""
    aligned = buf.aligned(s.off)
    if err == errno_mod.EINVAL and s.direct and not aligned:
        return Outcome("einval", why="misaligned O_DIRECT refused (allowed)",
                       errname="EINVAL", res=-err)
    if stage == "setup":
        return Outcome("unsupported", why=f"{s.iface} setup: {errno_name(err)}")
    return None


def _segs(s: Step) -> int:
    """iovec segments: ``segs`` for preadv/pwritev, one buffer otherwise."""
    return max(1, s.segs) if s.op in ("preadv", "pwritev") else 1


def op_read(ctx: Ctx, s: Step) -> Outcome:
    if (o := _direct_fd_missing(ctx, s)) is not None:
        return o
    buf = IoBuffer(s.buf, s.len, s.buf_off, _segs(s), ctx.target.shm_path, for_read=True)
    try:
        res, err, stage = ctx.target.issue(False, s.iface, s.direct, s.off, buf, s.op == "preadv")
        o = _judge_read(ctx, s, buf, res, err, stage)
        o.extra.update(buf=buf.used, aligned=buf.aligned(s.off))
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
    bad = check_bytes(buf.gather(res), ctx.model, s.off, "read")
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
        res, err, stage = ctx.target.issue(True, s.iface, s.direct, s.off, buf, s.op == "pwritev")
        extra = {"buf": buf.used, "aligned": buf.aligned(s.off)}
        if stage == "timeout":
            return failed("hang", f"no completion within {ctx.target.timeout_s}s", extra=extra)
        if err:
            o = _refused(err, stage, s, buf) or error(err, stage or "write", res)
        elif res != s.len:
            o = failed("short", f"wrote {res} of {s.len} bytes", res=res)
        else:
            ctx.model.write(s.off, data)
            o = Outcome(res=res)
        o.extra.update(extra)
        return o
    finally:
        if not ctx.target.hung:
            buf.close()


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


def op_copy_range(ctx: Ctx, s: Step) -> Outcome:
    """copy_file_range from the scratch source file into the target."""
    if s.src_off + s.len > len(ctx.source):
        return failed("error:EINVAL", f"the source holds {len(ctx.source)} bytes, the op asks "
                      f"for {s.len} at {s.src_off}: a malformed sequence")
    src = ctx.target.open_source(ctx.source)
    done = 0
    while done < s.len:
        try:
            n = os.copy_file_range(src, ctx.target.fd, s.len - done, s.src_off + done,
                                   s.off + done)
        except OSError as e:
            if e.errno in UNSUPPORTED and done == 0:
                return Outcome("unsupported", why=f"copy_file_range: {errno_name(e.errno)}")
            ctx.model.write(s.off, ctx.source[s.src_off:s.src_off + done])
            return error(e.errno, f"copy_file_range after {done} bytes")
        if n == 0:
            ctx.model.write(s.off, ctx.source[s.src_off:s.src_off + done])
            return failed("short", f"copy_file_range stopped at {done} of {s.len} bytes",
                          res=done)
        done += n
    ctx.model.write(s.off, ctx.source[s.src_off:s.src_off + s.len])
    return Outcome(res=done)


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
    "fsync": op_fsync, "fdatasync": op_fdatasync, "syncfs": op_syncfs, "evict": op_evict,
    "verify": op_verify, "tamper": op_tamper,
}
