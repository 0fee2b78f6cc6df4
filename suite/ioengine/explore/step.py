"""Explore, one op of a sequence as the guest reads it (:class:`Step`; the host's
``suite.explore.ops.Op`` is the same record), the interfaces and op groups, and
the registry of op functions (:data:`OPS`), filled by :mod:`.ops`. Apart from the
ops themselves, so the modules of ops can name a step without importing the table
that imports them."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

from .race import RACING_LEAVES
from .requests import ALL_SOURCES

# Every op function by name (``ops.py`` registers them; a step naming another is refused).
OPS: dict[str, Callable[..., Any]] = {}

IFACES = ("sync", "libaio", "io_uring", "io_uring_fixed")
SOURCE_OPS = ("copy_range", "clone_range", "sendfile", "splice")    # read the scratch source
ZFS_OPS = ("snapshot", "rollback", "txg_sync")                      # run the guest's commands
CRASH_OPS = ("freeze", "crash")     # zpool freeze, then export + import: what survived
POWER_OPS = ("power_cut",)          # writes in flight, a barrier, the guest's power cut


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
    barrier: str = ""       # power_cut: fsync | fdatasync | syncfs | dsync (RWF_DSYNC) | ""
    slow_ms: int = 0        # power_cut: the pool's disks answer this late (zinject -D) meanwhile
    limit: str = ""         # pwrite/pwritev: cut by a limit mid-request (fsize | quota: .limits)
    flags: str = ""         # reads/writes: RWF_* of the call (append|dsync|nowait|hipri: .flags)
    then: str = ""          # held_read/held_write: what runs while it is held (.held)
    keep: bool = False      # held_read/held_write, async: the submitter reaps it (else exits)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Step":
        known = {f.name for f in fields(cls)}
        extra = sorted(set(d) - known)
        if extra:
            raise ValueError(f"op {d.get('op')!r} has unknown fields {extra}")
        s = cls(**d)
        if s.op not in OPS:
            raise ValueError(f"unknown op {s.op!r} (known: {', '.join(OPS)})")
        if s.iface not in IFACES or s.buf not in ALL_SOURCES:
            raise ValueError(f"op {s.op!r}: iface must be one of {IFACES} and buf one of "
                             f"{ALL_SOURCES}, not {s.iface!r} / {s.buf!r}")
        if s.barrier not in ("", "fsync", "fdatasync", "syncfs", "dsync"):
            raise ValueError(f"op {s.op!r}: barrier {s.barrier!r} is not fsync, fdatasync, "
                             "syncfs or dsync")
        if s.then not in ("", "rollback", "fsync", "syncfs", "later_write", "stream"):
            raise ValueError(f"op {s.op!r}: then {s.then!r} is not rollback, fsync, syncfs, "
                             "later_write or stream")
        if s.flags not in ("", "append", "dsync", "nowait", "hipri"):
            raise ValueError(f"op {s.op!r}: flags {s.flags!r} is not append, dsync, nowait "
                             "or hipri")
        if s.limit not in ("", "fsize", "quota"):
            raise ValueError(f"op {s.op!r}: limit {s.limit!r} is not fsize or quota")
        if min(s.off, s.len, s.size, s.buf_off, s.segs, s.src_off, s.slow_ms) < 0:
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
