"""Explore, what every op is judged against: the byte model of the target
(:class:`Model`), the run's state (:class:`Ctx`), the op's :class:`Outcome` and
the checks the ops share (:func:`check_bytes`, :func:`size_mismatch`).

Every op leaves an :class:`Outcome`: ``ok`` (done, and what it read equals the
model), ``einval`` (a misaligned O_DIRECT request refused with EINVAL: allowed),
``unsupported`` (the filesystem or kernel lacks it: EOPNOTSUPP and kin; O_DIRECT
refused at open), ``refused`` (declined in a way the op allows: a write from a
racing buffer to a file failing Direct I/O write verification with EIO, a clone of blocks
that cannot be shared with EINVAL), ``skipped``
(nothing to do: an mmap past EOF) or ``failed`` with a ``kind``:
``wrong-bytes``, ``short`` (a count short of EOF), ``overrun`` (the kernel wrote
past the buffer), ``size`` (st_size is not the model's), ``paths-disagree``
(O_DIRECT, buffered and mmap reads differ), ``hang`` (an async request or a
ZFS command never returned), ``zfs-command`` (one failed) or ``error:<ERRNO>``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..content import compare, pattern
from ..plan import errno_name

if TYPE_CHECKING:
    from .requests import Target
    from .zfs import Snap, ZfsTools


class Model:
    """What the target must hold: its bytes (holes are zeros) and so its size."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)

    @property
    def size(self) -> int:
        return len(self.data)

    def write(self, offset: int, data: bytes) -> None:
        if not data:        # nothing moved (a copy refused with EXDEV): nothing changes
            return
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
    # What must survive a crash (suite/ioengine/explore/durable.py), tracked where a
    # crash can be made (a file on a dataset, the ZFS commands given); the pool frozen
    # (``zpool freeze``: from now on only the ZIL keeps what is synced).
    durable: Any = None
    frozen: bool = False
    sync_always: bool = False
    power_wait_s: float = 0.0       # how long power_cut waits for the host to cut (0: none)
    step_index: int = 0             # the op running now
    zvol: str | None = None         # the target is this zvol (a power cut finds it by name)
    # Eviction may drop the guest's clean page cache (``--drop-caches``: a guest of
    # its own; posix_fadvise DONTNEED evicts nothing on OpenZFS before April 2026).
    drop_caches: bool = False

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


def changed(ctx: Ctx, off: int, length: int) -> str | None:
    """How the file differs from the model after a request that should have laid
    down nothing (its size, the range's bytes), or None."""
    size = os.fstat(ctx.target.fd).st_size
    wrong = check_bytes(os.pread(ctx.target.fd, length, off) if length else b"", ctx.model,
                        off, "the range")
    if size == ctx.model.size and wrong is None:
        return None
    sizes = f"st_size {size} (the model: {ctx.model.size})"
    return f"{sizes}; {wrong.why}" if wrong else sizes


def size_mismatch(ctx: Ctx, where: str) -> Outcome | None:
    """A file whose st_size is not the model's (checked before mapping it: a
    page past the real EOF would kill the engine with SIGBUS)."""
    if ctx.target.blockdev:
        return None
    size = os.fstat(ctx.target.fd).st_size
    if size != ctx.model.size:
        return failed("size", f"{where}: st_size {size}, the model says {ctx.model.size}")
    return None
