"""The host/guest data format: a plan (files, requests) in, a result per trial
out (JSON lines). The host imports this module and ``content``; nothing else.
"""
from __future__ import annotations

import errno as errno_mod
import json
import mmap
import os
from dataclasses import dataclass, field
from typing import Any

PAGE = mmap.PAGESIZE
PATTERN_BLOCK = 4096
DIO_ALIGN = max(PAGE, 4096)
CANARY = 0xA5
DEFAULT_PARAM_DIR = "/sys/module/zfs/parameters"
DEFAULT_TIMEOUT_S = 30.0
INTERFACES = ("sync", "libaio", "io_uring")
OPS = ("read", "write")

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_TIMEOUT = 3
EXIT_FAILED = 4


@dataclass
class Segment:
    len: int
    page_offset: int = 0

    @classmethod
    def from_any(cls, obj: Any) -> "Segment":
        if isinstance(obj, Segment):
            return obj
        if isinstance(obj, int):
            return cls(obj, 0)
        if isinstance(obj, (list, tuple)) and len(obj) == 2:
            return cls(int(obj[0]), int(obj[1]))
        if isinstance(obj, dict):
            return cls(int(obj["len"]), int(obj.get("page_offset", 0)))
        raise ValueError(f"bad segment {obj!r}")

    def to_dict(self) -> dict[str, int]:
        return {"len": self.len, "page_offset": self.page_offset}


@dataclass
class FileSpec:
    path: str
    size: int
    seed: Any
    create: bool = True
    # Writes known to have landed on an existing file (create=False), as
    # (offset, length, seed): how a file is checked after export/import or a crash.
    overlays: list[tuple[int, int, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FileSpec":
        return cls(str(d["path"]), int(d["size"]), d["seed"], bool(d.get("create", True)),
                   [(int(o), int(n), s) for o, n, s in d.get("overlays") or []])

    def to_dict(self) -> dict[str, Any]:
        d = {"path": self.path, "size": self.size, "seed": self.seed, "create": self.create}
        if self.overlays:
            d["overlays"] = [list(x) for x in self.overlays]
        return d


@dataclass
class Request:
    """One trial: one I/O request of an exact shape, plus its condition."""

    id: str
    file: str
    segments: list[Segment]
    interface: str = "sync"
    op: str = "read"
    vectored: bool = False
    offset: int = 0
    o_direct: bool = True
    condition: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    rw_flags: int = 0
    write_seed: Any = None
    rlimit_fsize: int = 0           # >0: RLIMIT_FSIZE for this trial (SIGXFSZ ignored)
    # Buffered trials: drop the range's page cache before a read, fdatasync after a
    # write, so the device I/O happens inside the trial (and its counters).
    flush: bool = False

    @property
    def total_len(self) -> int:
        return sum(s.len for s in self.segments)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Request":
        return cls(
            id=str(d["id"]), file=str(d["file"]),
            segments=[Segment.from_any(s) for s in d["segments"]],
            interface=str(d.get("interface", "sync")), op=str(d.get("op", "read")),
            vectored=bool(d.get("vectored", False)), offset=int(d.get("offset", 0)),
            o_direct=bool(d.get("o_direct", True)), condition=str(d.get("condition", "")),
            params=dict(d.get("params") or {}), counters=dict(d.get("counters") or {}),
            timeout_s=float(d.get("timeout_s", DEFAULT_TIMEOUT_S)),
            rw_flags=int(d.get("rw_flags", 0)), write_seed=d.get("write_seed"),
            rlimit_fsize=int(d.get("rlimit_fsize", 0)), flush=bool(d.get("flush", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id, "condition": self.condition, "file": self.file,
            "interface": self.interface, "op": self.op, "vectored": self.vectored,
            "segments": [s.to_dict() for s in self.segments], "offset": self.offset,
            "o_direct": self.o_direct, "params": self.params, "counters": self.counters,
            "timeout_s": self.timeout_s,
        }
        if self.rw_flags:
            d["rw_flags"] = self.rw_flags
        if self.write_seed is not None:
            d["write_seed"] = self.write_seed
        if self.rlimit_fsize:
            d["rlimit_fsize"] = self.rlimit_fsize
        if self.flush:
            d["flush"] = True
        return d

    def problems(self) -> list[str]:
        """Why this request cannot be issued as asked (empty: it can)."""
        out = []
        if self.interface not in INTERFACES:
            out.append(f"interface must be one of {INTERFACES}, not {self.interface!r}")
        if self.op not in OPS:
            out.append(f"op must be one of {OPS}, not {self.op!r}")
        if not self.vectored and len(self.segments) != 1:
            out.append(f"non-vectored request needs exactly 1 segment, has {len(self.segments)}")
        for s in self.segments:
            if s.len < 0 or s.page_offset < 0:
                out.append(f"segment {s} has a negative len/page_offset")
        if self.rw_flags and self.interface == "sync" and not self.vectored:
            out.append("rw_flags with sync needs vectored (preadv2/pwritev2)")
        return out


@dataclass
class Plan:
    files: list[FileSpec]
    trials: list[Request]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Plan":
        return cls([FileSpec.from_dict(f) for f in d.get("files", [])],
                   [Request.from_dict(t) for t in d.get("trials", [])])

    def to_dict(self) -> dict[str, Any]:
        return {"files": [f.to_dict() for f in self.files],
                "trials": [t.to_dict() for t in self.trials]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


@dataclass
class Result:
    """What one trial did (one JSON line, ``event: "trial"``)."""

    id: str
    condition: str = ""
    interface: str = ""
    op: str = ""
    vectored: bool = False
    nr_segs: int = 0
    total_len: int = 0
    offset: int = 0
    o_direct: bool = True
    res: int | None = None          # bytes, or -errno (kernel convention); None: no completion
    errno: int | None = None
    errname: str | None = None
    stage: str | None = None        # plan|setup|open|submit|syscall|complete|timeout on error
    error: str | None = None
    expected_len: int | None = None
    len_ok: bool | None = None
    first_wrong_byte: int | None = None
    wrong_bytes: int = 0
    wrong_kind: str | None = None
    wrong_sample: dict[str, str] | None = None
    unverified_bytes: int = 0
    overrun_bytes: int = 0
    verify: str | None = None       # reads: "buffer"; writes: readback-direct|readback-buffered
    size_before: int | None = None  # writes: st_size before and after the trial
    size_after: int | None = None
    beyond_bytes: int = 0           # writes: nonzero bytes found past what res says was written
    correct: bool = False
    latency_us: float | None = None
    counters: dict[str, int | None] = field(default_factory=dict)
    params_applied: dict[str, Any] = field(default_factory=dict)
    params_unavailable: list[str] = field(default_factory=list)
    params_errors: dict[str, str] = field(default_factory=dict)

    def set_error(self, err: int, stage: str, message: str | None = None) -> None:
        self.res = -err if err else self.res
        self.errno = err
        self.errname = errno_name(err)
        self.stage = stage
        self.error = message or os.strerror(err)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"event": "trial"}
        d.update(self.__dict__)
        return d


# ---------------------------------------------------------------------------
def errno_name(err: int | None) -> str | None:
    if err is None:
        return None
    return errno_mod.errorcode.get(err, f"E{err}")


