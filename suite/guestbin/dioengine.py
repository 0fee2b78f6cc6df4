#!/usr/bin/env python3
"""dioengine: issue exactly the Direct I/O request shape asked for, report what happened.

Runs INSIDE a virtme-ng guest with the host's Python (the guest sees the host
root fs read-only), standard library only, and runs many trials in one process
so that a trial costs milliseconds rather than an SSH round trip. The host
imports this module (``suite.guestbin.dioengine``) for :func:`pattern` and the
plan dataclasses; nothing here runs at import time.

Request shapes
--------------
A request is a list of segments ``{len, page_offset}``: each segment has its
own page-aligned ``mmap`` allocation and its buffer starts ``page_offset``
bytes into it (0 = page aligned), so alignment is exactly what the plan says.
Which kernel path a request takes depends on how it is issued:

* non-vectored (``vectored: false``, exactly one segment): ``pread(2)``,
  ``IOCB_CMD_PREAD``, ``IORING_OP_READ`` (and the write twins). The kernel
  builds an ``ITER_UBUF`` iov_iter: one contiguous user buffer.
* vectored, 1 segment: ``preadv(2)`` / ``IOCB_CMD_PREADV`` /
  ``IORING_OP_READV`` with ``nr_segs == 1``. A distinct syscall/opcode path;
  since Linux 6.4 ``__import_iovec`` turns it into ``ITER_UBUF`` too.
* vectored, 2..8 segments: ``ITER_IOVEC`` whose iovec array is copied into the
  caller's on-stack ``inline_vecs[UIO_FASTIOV]`` (``UIO_FASTIOV == 8``).
* vectored, 9+ segments: ``ITER_IOVEC`` with a kmalloc'd iovec array.

Direct I/O eligibility checks that walk the iov_iter differ between these
shapes; the vectored PREADV eligibility bugs fixed in OpenZFS PR #18902
depended on exactly this, so every shape must be expressible here.

Interfaces: ``sync`` (``pread64`` through libc for the one-buffer shape, since
``os.pread`` allocates its own buffer; ``os.preadv``/``os.pwrite``/
``os.pwritev`` otherwise), ``libaio`` (raw ``io_setup``/``io_submit``/
``io_getevents``/``io_cancel``/``io_destroy`` syscalls) and ``io_uring`` (raw
``io_uring_setup``/``io_uring_enter`` with the SQ/CQ rings mmapped).

Expected content
----------------
Files are written by the engine (``write-file`` or a plan file with
``create``) from :func:`pattern`, where the byte at absolute offset ``o``
depends only on ``(seed, o)``. Writes in a plan lay down ``pattern`` of their
own ``write_seed`` (default ``"<file seed>@<trial id>"``), so a write that
silently did not land is caught; the engine keeps a model of which seed owns
which range. Expected content is never obtained by reading the file back.

Commands (JSON lines on stdout, each flushed)
--------------------------------------------
``run PLAN.json|-`` (exit 0 once the plan ran, 2 if it cannot be parsed):
one ``{"event": "write-file"|"file"}`` line per plan file, one
``{"event": "trial"}`` line per trial (:class:`Result`; ``res`` is bytes or
-errno, ``None`` on timeout; ``stage`` says where an error came from:
plan|setup|open|submit|syscall|complete|timeout), then ``{"event": "summary"}``.
Counters are deltas (``None``: file or field missing). Trial ``params`` apply
to that trial only (see :class:`ParamManager`); missing ones are listed in
``params_unavailable`` and the trial still runs.

``write-file PATH --size N --seed S``: one ``write-file`` line.
``hold``: ``submitted`` (printed as soon as the submit returns), optional
``probe``, then ``completed`` (exit 0) or ``timeout`` (exit 3).
``flood``: one ``flood`` line with per-submitter counts and counter samples
(exit 3 if a submitter hung or left requests in flight).
A FIFO given as a file opens O_RDWR and its reads never complete: that is how
the self-tests exercise the timeout paths without a fault injector.
"""
from __future__ import annotations

import argparse
import ctypes
import glob as glob_mod
import errno as errno_mod
import hashlib
import json
import mmap
import os
import platform
import random
import select
import stat
import struct
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import IO, Any, Sequence

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


# ---------------------------------------------------------------------------
# Deterministic content
# ---------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _pattern_block(seed_key: str, index: int) -> bytes:
    return hashlib.shake_256(f"{seed_key}:{index}".encode()).digest(PATTERN_BLOCK)


def _pattern_block_uncached(seed_key: str, index: int) -> bytes:
    return hashlib.shake_256(f"{seed_key}:{index}".encode()).digest(PATTERN_BLOCK)


def pattern(seed: Any, offset: int, length: int, *, cache: bool = True) -> bytes:
    """Bytes ``[offset, offset+length)`` of the file generated from ``seed``.

    The byte at absolute offset ``o`` depends only on ``(str(seed), o)``:
    4 KiB block ``o // 4096`` is ``shake_256(f"{seed}:{block}")`` squeezed to
    4096 bytes (SHAKE gives arbitrary-length output at C speed, ~0.5 GB/s;
    seeds ``1`` and ``"1"`` are the same seed). Data is incompressible, never
    all zeros, and differs between blocks, so zero fill, stale buffers and
    data from the wrong offset all show up as wrong bytes.
    """
    if offset < 0 or length < 0:
        raise ValueError(f"pattern: negative offset/length ({offset}, {length})")
    if length == 0:
        return b""
    key = str(seed)
    block = _pattern_block if cache else _pattern_block_uncached
    first = offset // PATTERN_BLOCK
    last = (offset + length - 1) // PATTERN_BLOCK
    blob = b"".join(block(key, i) for i in range(first, last + 1))
    start = offset - first * PATTERN_BLOCK
    return blob[start:start + length]


class _Zero:
    """Seed of a range that reads as zeros (hole left by an extending write)."""

    def __repr__(self) -> str:
        return "ZERO"


ZERO = _Zero()


def _subtract(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in ranges:
        if e <= lo or s >= hi:
            out.append((s, e))
            continue
        if s < lo:
            out.append((s, lo))
        if e > hi:
            out.append((hi, e))
    return out


@dataclass
class FileModel:
    """What a file must contain: the base seed plus writes laid over it."""

    path: str
    seed: Any
    size: int
    overlays: list[tuple[int, int, Any]] = field(default_factory=list)

    def record_write(self, offset: int, nbytes: int, seed: Any) -> None:
        """A write of ``nbytes`` at ``offset`` landed with ``pattern(seed)``
        (``seed=None``: the range's content is unknown, e.g. failed write)."""
        if nbytes <= 0:
            return
        if offset > self.size and seed is not None:
            self.overlays.append((self.size, offset, ZERO))
        self.overlays.append((offset, offset + nbytes, seed))
        if seed is not None:
            self.size = max(self.size, offset + nbytes)

    def expected(self, offset: int, length: int) -> tuple[bytes, list[tuple[int, int]]]:
        """Expected bytes and the absolute ranges whose content is unknown."""
        buf = bytearray(pattern(self.seed, offset, length))
        unknown: list[tuple[int, int]] = []
        end = offset + length
        for s, e, sd in self.overlays:
            lo, hi = max(s, offset), min(e, end)
            if lo >= hi:
                continue
            if sd is None:
                unknown = _subtract(unknown, lo, hi) + [(lo, hi)]
                continue
            unknown = _subtract(unknown, lo, hi)
            fill = bytes(hi - lo) if sd is ZERO else pattern(sd, lo, hi - lo)
            buf[lo - offset:hi - offset] = fill
        return bytes(buf), unknown


@dataclass
class Comparison:
    wrong_bytes: int = 0
    first_wrong_byte: int | None = None
    unverified_bytes: int = 0
    wrong_kind: str | None = None
    wrong_sample: dict[str, str] | None = None


def compare(data: bytes, expected: bytes, base: int,
            unknown: Sequence[tuple[int, int]] = ()) -> Comparison:
    """Compare ``data`` with ``expected`` (both starting at file offset ``base``)
    over their common length; ranges in ``unknown`` are not judged."""
    n = min(len(data), len(expected))
    got = bytearray(data[:n])
    want = bytearray(expected[:n])
    cmp = Comparison()
    for lo, hi in unknown:
        a, b = max(lo - base, 0), min(hi - base, n)
        if a < b:
            got[a:b] = want[a:b]
            cmp.unverified_bytes += b - a
    if got == want:
        return cmp
    diff = (int.from_bytes(got, "little") ^ int.from_bytes(want, "little")).to_bytes(n, "little")
    first = n - len(diff.lstrip(b"\x00"))
    cmp.wrong_bytes = n - diff.count(0)
    cmp.first_wrong_byte = base + first
    window = bytes(got[first:first + 64])
    if window == bytes(len(window)):
        cmp.wrong_kind = "zeros"
    elif window == bytes([CANARY]) * len(window):
        cmp.wrong_kind = "untouched"  # buffer still holds the engine's canary
    else:
        cmp.wrong_kind = "other"
    cmp.wrong_sample = {"got": bytes(got[first:first + 16]).hex(),
                        "expected": bytes(want[first:first + 16]).hex()}
    return cmp


# ---------------------------------------------------------------------------
# Counters (kstat / single-value files) and module parameters
# ---------------------------------------------------------------------------

def _to_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return int(text, 16) if text.lower().startswith("0x") else None
    except ValueError:
        return None


def parse_kstat(text: str) -> dict[str, int | str]:
    """Parse a SPL kstat "named" file: header line(s), then ``name type data``.

    Rows after the ``name type data`` header are ``name type value``; numeric
    values become ints, anything else stays a string. Without that header,
    every line ``name <digits> value`` is taken as a row.
    """
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.split()[:3] == ["name", "type", "data"]:
            start = i + 1
            break
    rows = lines[start:] if start is not None else lines
    out: dict[str, int | str] = {}
    for line in rows:
        parts = line.split(None, 2)
        if start is None and len(parts) == 2 and _to_int(parts[1]) is not None:
            out[parts[0]] = _to_int(parts[1])      # /proc/vmstat style: name value
            continue
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        value = _to_int(parts[2])
        out[parts[0]] = value if value is not None else parts[2].strip()
    return out


def _counter_spec(spec: Any) -> dict[str, Any]:
    if isinstance(spec, str):
        return {"path": spec}
    if isinstance(spec, dict) and ("path" in spec or "glob" in spec):
        return spec
    raise ValueError(f"counter spec needs a path or a glob: {spec!r}")


def read_counter(spec: Any) -> int | None:
    """Current value of a counter; None when the file or field is missing.

    ``{"glob": pattern, "field": f}`` sums ``f`` over every file that matches
    (kstats of objects created on demand, e.g. a pool's taskqs): no match is 0.
    """
    spec = _counter_spec(spec)
    if "glob" in spec:
        total = 0
        for path in sorted(glob_mod.glob(spec["glob"])):
            v = read_counter({"path": path, "field": spec.get("field")})
            if v is None:
                return None
            total += v
        return total
    try:
        with open(spec["path"], encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    fld = spec.get("field")
    if fld:
        rows = parse_kstat(text)
        if fld not in rows and "-" in fld:        # "a-b": difference of two fields
            a, b = (_to_int(rows.get(x)) for x in fld.split("-", 1))
            return None if a is None or b is None else a - b
        return _to_int(rows.get(fld))
    return _to_int(text)


def snapshot_counters(specs: dict[str, Any]) -> dict[str, int | None]:
    return {name: read_counter(spec) for name, spec in specs.items()}


def counter_deltas(before: dict[str, int | None],
                   after: dict[str, int | None]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for name, b in before.items():
        a = after.get(name)
        out[name] = a - b if a is not None and b is not None else None
    return out


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _param_value(text: str) -> Any:
    value = _to_int(text)
    return value if value is not None else text.strip()


class ParamManager:
    """Per-trial module parameters.

    Each trial runs with the original values plus its own ``params``: a value a
    previous trial set and this one does not mention is put back first.
    :meth:`restore_all` puts every touched parameter back (done at exit unless
    ``--keep-params``).
    """

    def __init__(self, param_dir: str = DEFAULT_PARAM_DIR) -> None:
        self.param_dir = param_dir
        self.original: dict[str, str] = {}
        self.active: set[str] = set()

    def _path(self, name: str) -> str:
        return os.path.join(self.param_dir, name)

    @staticmethod
    def _read(path: str) -> str:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()

    @staticmethod
    def _write(path: str, text: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # as `echo v > param` does
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def apply(self, params: dict[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
        """Set ``params``; returns (applied {name: value read back},
        unavailable [names], errors {name: why})."""
        applied: dict[str, Any] = {}
        unavailable: list[str] = []
        errors: dict[str, str] = {}
        for name in sorted(self.active - set(params)):
            try:
                self._write(self._path(name), self.original[name])
            except OSError as e:
                errors[name] = f"restore failed: {_errname(e.errno)}"
            self.active.discard(name)
        for name, value in params.items():
            path = self._path(name)
            if "/" in name or not os.path.isfile(path):
                unavailable.append(name)
                continue
            try:
                if name not in self.original:
                    self.original[name] = self._read(path)
                self._write(path, _param_text(value))
                self.active.add(name)
                applied[name] = _param_value(self._read(path))
            except OSError as e:
                unavailable.append(name)
                errors[name] = f"{_errname(e.errno)}: {e.strerror}"
        return applied, unavailable, errors

    def restore_all(self) -> dict[str, Any]:
        restored: dict[str, Any] = {}
        for name, text in self.original.items():
            try:
                self._write(self._path(name), text)
                restored[name] = _param_value(text)
            except OSError as e:
                restored[name] = f"restore failed: {_errname(e.errno)}"
        self.active.clear()
        return restored


# ---------------------------------------------------------------------------
# Plan dataclasses
# ---------------------------------------------------------------------------

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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FileSpec":
        return cls(str(d["path"]), int(d["size"]), d["seed"], bool(d.get("create", True)))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "seed": self.seed, "create": self.create}


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
    correct: bool = False
    latency_us: float | None = None
    counters: dict[str, int | None] = field(default_factory=dict)
    params_applied: dict[str, Any] = field(default_factory=dict)
    params_unavailable: list[str] = field(default_factory=list)
    params_errors: dict[str, str] = field(default_factory=dict)

    def set_error(self, err: int, stage: str, message: str | None = None) -> None:
        self.res = -err if err else self.res
        self.errno = err
        self.errname = _errname(err)
        self.stage = stage
        self.error = message or os.strerror(err)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"event": "trial"}
        d.update(self.__dict__)
        return d


# ---------------------------------------------------------------------------
# Buffers
# ---------------------------------------------------------------------------

def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _errname(err: int | None) -> str | None:
    if err is None:
        return None
    return errno_mod.errorcode.get(err, f"E{err}")


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class SegmentBuffers:
    """One page-aligned anonymous mmap per segment, pre-filled with a canary."""

    def __init__(self, segments: Sequence[Segment], fill: int = CANARY) -> None:
        self.segments = list(segments)
        self.maps: list[mmap.mmap] = []
        self.addrs: list[int] = []
        self._anchors: list[Any] = []
        for seg in self.segments:
            size = max(PAGE, _round_up(seg.page_offset + seg.len, PAGE))
            m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                          prot=mmap.PROT_READ | mmap.PROT_WRITE)
            m[:] = bytes([fill]) * size
            anchor = ctypes.c_char.from_buffer(m)
            self.maps.append(m)
            self._anchors.append(anchor)
            self.addrs.append(ctypes.addressof(anchor) + seg.page_offset)
        self.iov = (IoVec * max(1, len(self.segments)))()
        for i, seg in enumerate(self.segments):
            self.iov[i].iov_base = self.addrs[i]
            self.iov[i].iov_len = seg.len

    @property
    def nr_segs(self) -> int:
        return len(self.segments)

    @property
    def iov_addr(self) -> int:
        return ctypes.addressof(self.iov)

    def views(self) -> list[memoryview]:
        return [memoryview(m)[s.page_offset:s.page_offset + s.len]
                for m, s in zip(self.maps, self.segments)]

    def fill(self, data: bytes) -> None:
        pos = 0
        for m, s in zip(self.maps, self.segments):
            m[s.page_offset:s.page_offset + s.len] = data[pos:pos + s.len]
            pos += s.len

    def gather(self, nbytes: int) -> bytes:
        parts, left = [], nbytes
        for m, s in zip(self.maps, self.segments):
            if left <= 0:
                break
            take = min(left, s.len)
            parts.append(m[s.page_offset:s.page_offset + take])
            left -= take
        return b"".join(parts)

    def overrun_bytes(self) -> int:
        """Canary bytes changed outside the segments (kernel wrote past a buffer)."""
        bad = 0
        for m, s in zip(self.maps, self.segments):
            head = m[:s.page_offset]
            tail = m[s.page_offset + s.len:]
            bad += len(head) - head.count(CANARY) + len(tail) - tail.count(CANARY)
        return bad

    def close(self) -> None:
        self._anchors.clear()
        for m in self.maps:
            m.close()
        self.maps.clear()


# ---------------------------------------------------------------------------
# Raw syscalls
# ---------------------------------------------------------------------------

_SYSCALLS = {
    "x86_64": {"io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209,
               "io_cancel": 210, "io_uring_setup": 425, "io_uring_enter": 426},
    "aarch64": {"io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_cancel": 3,
                "io_getevents": 4, "io_uring_setup": 425, "io_uring_enter": 426},
}


class Sys:
    """libc ``syscall()`` with errno turned into OSError."""

    def __init__(self) -> None:
        machine = platform.machine()
        if machine not in _SYSCALLS:
            raise OSError(errno_mod.ENOSYS, f"no syscall table for {machine}")
        self.nr = _SYSCALLS[machine]
        self.libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = self.libc.syscall
        self._syscall.restype = ctypes.c_long
        self.pread64 = self.libc.pread64
        self.pread64.restype = ctypes.c_ssize_t
        self.pread64.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]

    def call(self, name: str, *args: Any) -> int:
        while True:
            r = self._syscall(ctypes.c_long(self.nr[name]), *args)
            if r != -1:
                return r
            err = ctypes.get_errno()
            if err != errno_mod.EINTR:
                raise OSError(err, f"{name}: {os.strerror(err)}")

    def pread(self, fd: int, addr: int, n: int, offset: int) -> int:
        r = self.pread64(fd, addr, n, offset)
        if r < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return r


_SYS: Sys | None = None


def sys_() -> Sys:
    global _SYS
    if _SYS is None:
        _SYS = Sys()
    return _SYS


@dataclass
class IoOp:
    """One async request: the buffers stay owned by the caller until reaped."""

    tag: int
    write: bool
    fd: int
    offset: int
    buffers: SegmentBuffers
    vectored: bool
    rw_flags: int = 0


# -- libaio ------------------------------------------------------------------

IOCB_CMD_PREAD, IOCB_CMD_PWRITE, IOCB_CMD_PREADV, IOCB_CMD_PWRITEV = 0, 1, 7, 8

if sys.byteorder == "little":
    _KEY_FIELDS = [("aio_key", ctypes.c_uint32), ("aio_rw_flags", ctypes.c_uint32)]
else:
    _KEY_FIELDS = [("aio_rw_flags", ctypes.c_uint32), ("aio_key", ctypes.c_uint32)]


class IoCb(ctypes.Structure):
    """struct iocb from linux/aio_abi.h (64 bytes)."""

    _fields_ = [("aio_data", ctypes.c_uint64)] + _KEY_FIELDS + [
        ("aio_lio_opcode", ctypes.c_uint16), ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32), ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64), ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64), ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32)]


class IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_int64)]

    @classmethod
    def of(cls, seconds: float) -> "Timespec":
        seconds = max(0.0, seconds)
        sec = int(seconds)
        return cls(sec, int((seconds - sec) * 1e9))


class LibaioQueue:
    name = "libaio"

    def __init__(self, depth: int = 64) -> None:
        self.sys = sys_()
        ctx = ctypes.c_ulong(0)
        self.sys.call("io_setup", ctypes.c_long(depth), ctypes.byref(ctx))
        self.ctx = ctx.value
        self.depth = depth
        self.inflight: dict[int, tuple[IoCb, IoOp]] = {}

    def submit(self, ops: Sequence[IoOp]) -> int:
        """Submit ``ops``; returns how many the kernel took (OSError if none)."""
        cbs = []
        for op in ops:
            cb = IoCb()
            cb.aio_data = op.tag
            cb.aio_fildes = op.fd
            cb.aio_offset = op.offset
            cb.aio_rw_flags = op.rw_flags
            if op.vectored:
                cb.aio_lio_opcode = IOCB_CMD_PWRITEV if op.write else IOCB_CMD_PREADV
                cb.aio_buf = op.buffers.iov_addr
                cb.aio_nbytes = op.buffers.nr_segs
            else:
                cb.aio_lio_opcode = IOCB_CMD_PWRITE if op.write else IOCB_CMD_PREAD
                cb.aio_buf = op.buffers.addrs[0]
                cb.aio_nbytes = op.buffers.segments[0].len
            cbs.append(cb)
        arr = (ctypes.POINTER(IoCb) * len(cbs))(*[ctypes.pointer(cb) for cb in cbs])
        done = self.sys.call("io_submit", ctypes.c_ulong(self.ctx), ctypes.c_long(len(cbs)), arr)
        for cb, op in zip(cbs[:done], ops[:done]):
            self.inflight[op.tag] = (cb, op)
        return done

    def reap(self, min_nr: int, max_nr: int, timeout_s: float | None) -> list[tuple[int, int]]:
        """Up to ``max_nr`` completions as (tag, res); waits for ``min_nr`` or timeout."""
        events = (IoEvent * max_nr)()
        ts = ctypes.byref(Timespec.of(timeout_s)) if timeout_s is not None else None
        n = self.sys.call("io_getevents", ctypes.c_ulong(self.ctx), ctypes.c_long(min_nr),
                          ctypes.c_long(max_nr), events, ts)
        out = []
        for ev in events[:n]:
            self.inflight.pop(ev.data, None)
            out.append((int(ev.data), int(ev.res)))
        return out

    def cancel(self, tag: int) -> bool:
        item = self.inflight.get(tag)
        if item is None:
            return False
        ev = IoEvent()
        try:
            self.sys.call("io_cancel", ctypes.c_ulong(self.ctx), ctypes.byref(item[0]),
                          ctypes.byref(ev))
            return True
        except OSError:
            return False

    def close(self) -> None:
        """io_destroy waits for outstanding requests: only call with none left."""
        if self.ctx:
            self.sys.call("io_destroy", ctypes.c_ulong(self.ctx))
            self.ctx = 0


# -- io_uring ----------------------------------------------------------------

IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_READ, IORING_OP_WRITE = 1, 2, 22, 23
IORING_OFF_SQ_RING, IORING_OFF_CQ_RING, IORING_OFF_SQES = 0, 0x8000000, 0x10000000
IORING_ENTER_GETEVENTS, IORING_ENTER_EXT_ARG = 1, 8
IORING_FEAT_SINGLE_MMAP, IORING_FEAT_EXT_ARG = 1, 1 << 8
_SQE = struct.Struct("<BBHiQQIIQHHiQQ")   # 64 bytes
_CQE = struct.Struct("<QiI")              # 16 bytes
_U32 = struct.Struct("<I")


class SqringOffsets(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in (
        "head", "tail", "ring_mask", "ring_entries", "flags", "dropped", "array", "resv1")] + [
        ("user_addr", ctypes.c_uint64)]


class CqringOffsets(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in (
        "head", "tail", "ring_mask", "ring_entries", "overflow", "cqes", "flags", "resv1")] + [
        ("user_addr", ctypes.c_uint64)]


class IoUringParams(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in (
        "sq_entries", "cq_entries", "flags", "sq_thread_cpu", "sq_thread_idle", "features",
        "wq_fd")] + [("resv", ctypes.c_uint32 * 3), ("sq_off", SqringOffsets),
                     ("cq_off", CqringOffsets)]


class GetEventsArg(ctypes.Structure):
    _fields_ = [("sigmask", ctypes.c_uint64), ("sigmask_sz", ctypes.c_uint32),
                ("min_wait_usec", ctypes.c_uint32), ("ts", ctypes.c_uint64)]


class IoUringQueue:
    name = "io_uring"

    def __init__(self, entries: int = 64) -> None:
        self.sys = sys_()
        p = IoUringParams()
        self.fd = self.sys.call("io_uring_setup", ctypes.c_ulong(entries), ctypes.byref(p))
        self.p = p
        try:
            self._map(p)
        except Exception:
            os.close(self.fd)
            raise
        self.inflight: dict[int, IoOp] = {}

    def _map(self, p: IoUringParams) -> None:
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        sq_size = p.sq_off.array + p.sq_entries * 4
        cq_size = p.cq_off.cqes + p.cq_entries * _CQE.size
        if p.features & IORING_FEAT_SINGLE_MMAP:
            self.sq = mmap.mmap(self.fd, max(sq_size, cq_size), flags=flags, prot=prot,
                                offset=IORING_OFF_SQ_RING)
            self.cq = self.sq
        else:
            self.sq = mmap.mmap(self.fd, sq_size, flags=flags, prot=prot, offset=IORING_OFF_SQ_RING)
            self.cq = mmap.mmap(self.fd, cq_size, flags=flags, prot=prot, offset=IORING_OFF_CQ_RING)
        self.sqes = mmap.mmap(self.fd, p.sq_entries * _SQE.size, flags=flags, prot=prot,
                              offset=IORING_OFF_SQES)
        self.sq_mask = _U32.unpack_from(self.sq, p.sq_off.ring_mask)[0]
        self.cq_mask = _U32.unpack_from(self.cq, p.cq_off.ring_mask)[0]

    def _enter(self, to_submit: int, min_complete: int, flags: int,
               arg: Any = None, argsz: int = 0) -> int:
        return self.sys.call("io_uring_enter", ctypes.c_uint(self.fd), ctypes.c_uint(to_submit),
                             ctypes.c_uint(min_complete), ctypes.c_uint(flags),
                             arg, ctypes.c_size_t(argsz))

    def submit(self, ops: Sequence[IoOp]) -> int:
        off = self.p.sq_off
        head = _U32.unpack_from(self.sq, off.head)[0]
        tail = _U32.unpack_from(self.sq, off.tail)[0]
        queued = 0
        for op in ops:
            if (tail - head) & 0xFFFFFFFF >= self.p.sq_entries:
                break
            idx = tail & self.sq_mask
            if op.vectored:
                opcode = IORING_OP_WRITEV if op.write else IORING_OP_READV
                addr, length = op.buffers.iov_addr, op.buffers.nr_segs
            else:
                opcode = IORING_OP_WRITE if op.write else IORING_OP_READ
                addr, length = op.buffers.addrs[0], op.buffers.segments[0].len
            _SQE.pack_into(self.sqes, idx * _SQE.size, opcode, 0, 0, op.fd,
                           op.offset & 0xFFFFFFFFFFFFFFFF, addr, length, op.rw_flags, op.tag,
                           0, 0, 0, 0, 0)
            _U32.pack_into(self.sq, off.array + idx * 4, idx)
            tail = (tail + 1) & 0xFFFFFFFF
            queued += 1
        _U32.pack_into(self.sq, off.tail, tail)
        done = 0
        while done < queued:
            n = self._enter(queued - done, 0, 0)
            if n == 0:
                break
            done += n
        for op in ops[:done]:
            self.inflight[op.tag] = op
        return done

    def _peek(self, max_nr: int) -> list[tuple[int, int]]:
        off = self.p.cq_off
        head = _U32.unpack_from(self.cq, off.head)[0]
        tail = _U32.unpack_from(self.cq, off.tail)[0]
        out = []
        while head != tail and len(out) < max_nr:
            user_data, res, _flags = _CQE.unpack_from(self.cq, off.cqes + (head & self.cq_mask) * _CQE.size)
            out.append((int(user_data), int(res)))
            self.inflight.pop(user_data, None)
            head = (head + 1) & 0xFFFFFFFF
        _U32.pack_into(self.cq, off.head, head)
        return out

    def reap(self, min_nr: int, max_nr: int, timeout_s: float | None) -> list[tuple[int, int]]:
        out = self._peek(max_nr)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(out) < min_nr:
            want = min_nr - len(out)
            if deadline is None:
                self._enter(0, want, IORING_ENTER_GETEVENTS)
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not self._wait(want, left):
                    out += self._peek(max_nr - len(out))
                    break
            out += self._peek(max_nr - len(out))
        return out

    def _wait(self, want: int, seconds: float) -> bool:
        """Wait for ``want`` CQEs up to ``seconds``; False on timeout."""
        if self.p.features & IORING_FEAT_EXT_ARG:
            ts = Timespec.of(seconds)
            arg = GetEventsArg(0, 0, 0, ctypes.addressof(ts))
            try:
                self._enter(0, want, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
                            ctypes.byref(arg), ctypes.sizeof(arg))
            except OSError as e:
                if e.errno == errno_mod.ETIME:
                    return False
                raise
            return True
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        return bool(poller.poll(seconds * 1000))

    def close(self) -> None:
        for m in {id(x): x for x in (self.sqes, self.cq, self.sq)}.values():
            m.close()
        os.close(self.fd)


def make_queue(interface: str, depth: int) -> LibaioQueue | IoUringQueue:
    if interface == "libaio":
        return LibaioQueue(depth)
    if interface == "io_uring":
        return IoUringQueue(_round_pow2(depth))
    raise ValueError(f"no async queue for interface {interface!r}")


def _round_pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


# Objects the kernel may still DMA into after a timeout: never freed.
_ABANDONED: list[Any] = []


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------

def open_flags(op: str, o_direct: bool) -> int:
    flags = os.O_RDONLY if op == "read" else os.O_RDWR
    if o_direct:
        flags |= os.O_DIRECT
    return flags


def open_trial_file(path: str, op: str, o_direct: bool) -> int:
    """Open for a trial. A FIFO opens O_RDWR without O_DIRECT: the open does
    not block and a read stays in flight forever (the self-tests' timeout)."""
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            return os.open(path, os.O_RDWR)
    except OSError:
        pass
    return os.open(path, open_flags(op, o_direct))


def write_file(path: str, size: int, seed: Any, *, direct: bool = True,
               chunk: int = 1 << 20) -> dict[str, Any]:
    """Create ``path`` with exactly ``size`` bytes of ``pattern(seed)``.

    The aligned body is written with O_DIRECT where the fs allows it, the
    unaligned tail (or everything, on fallback) without, then fsync and
    ``posix_fadvise(DONTNEED)`` so no page cache stays behind.
    """
    t0 = time.monotonic()
    info: dict[str, Any] = {"event": "write-file", "path": path, "size": size, "seed": seed,
                            "o_direct": False, "direct_bytes": 0, "buffered_bytes": 0,
                            "fallback": None}
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    chunk = max(DIO_ALIGN, chunk - chunk % DIO_ALIGN)
    body = size - size % DIO_ALIGN if direct else 0
    done = 0
    if body:
        try:
            dfd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        except OSError as e:
            info["fallback"] = f"open O_DIRECT: {_errname(e.errno)}"
        else:
            info["o_direct"] = True
            buf = mmap.mmap(-1, chunk)
            try:
                with memoryview(buf) as mv:
                    while done < body:
                        n = min(chunk, body - done)
                        buf[:n] = pattern(seed, done, n, cache=False)
                        try:
                            w = os.pwrite(dfd, mv[:n], done)
                        except OSError as e:
                            info["fallback"] = f"O_DIRECT write at {done}: {_errname(e.errno)}"
                            break
                        if w <= 0:
                            break
                        done += w
                        if w % DIO_ALIGN:
                            info["fallback"] = f"short O_DIRECT write ({w}) at {done - w}"
                            break
                os.fsync(dfd)
            finally:
                buf.close()
                os.close(dfd)
    info["direct_bytes"] = done
    fd = os.open(path, os.O_WRONLY)
    try:
        pos = done
        while pos < size:
            n = min(chunk, size - pos)
            data = pattern(seed, pos, n, cache=False)
            view = memoryview(data)
            while view:
                w = os.pwrite(fd, view, pos)
                pos += w
                view = view[w:]
        info["buffered_bytes"] = size - done
        os.fsync(fd)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            info["fadvise"] = "dontneed"
        except OSError as e:
            info["fadvise"] = _errname(e.errno)
    finally:
        os.close(fd)
    info["fsync"] = True
    info["actual_size"] = os.stat(path).st_size
    info["elapsed_s"] = round(time.monotonic() - t0, 4)
    return info


def readback(path: str, offset: int, length: int) -> tuple[bytes, str]:
    """File bytes ``[offset, offset+length)`` read with O_DIRECT into an aligned
    buffer (buffered if the fs refuses O_DIRECT); returns (data, how)."""
    lo = offset - offset % DIO_ALIGN
    hi = _round_up(offset + length, DIO_ALIGN)
    buf = mmap.mmap(-1, max(hi - lo, PAGE))
    how = "readback-direct"
    try:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError:
            fd, how = os.open(path, os.O_RDONLY), "readback-buffered"
        try:
            with memoryview(buf) as mv:
                try:
                    got = os.preadv(fd, [mv[:hi - lo]], lo)
                except OSError as e:
                    if e.errno != errno_mod.EINVAL or how != "readback-direct":
                        raise
                    os.close(fd)
                    fd, how = os.open(path, os.O_RDONLY), "readback-buffered"
                    got = os.preadv(fd, [mv[:hi - lo]], lo)
        finally:
            os.close(fd)
        start = offset - lo
        return bytes(buf[start:min(got, start + length)]) if got > start else b"", how
    finally:
        buf.close()


# ---------------------------------------------------------------------------
# Trials
# ---------------------------------------------------------------------------

class Engine:
    """State shared by the trials of one ``run``: file models, queues, params."""

    def __init__(self, param_dir: str = DEFAULT_PARAM_DIR) -> None:
        self.files: dict[str, FileModel] = {}
        self.queues: dict[str, LibaioQueue | IoUringQueue] = {}
        self.params = ParamManager(param_dir)
        self._tag = 0

    def next_tag(self) -> int:
        self._tag += 1
        return self._tag

    def add_file(self, spec: FileSpec) -> dict[str, Any]:
        if spec.create:
            info = write_file(spec.path, spec.size, spec.seed)
        else:
            info = {"event": "file", "path": spec.path, "size": spec.size, "seed": spec.seed}
            try:
                info["actual_size"] = os.stat(spec.path).st_size
            except OSError as e:
                info["actual_size"] = None
                info["error"] = _errname(e.errno)
        info["size_mismatch"] = info.get("actual_size") != spec.size
        self.files[spec.path] = FileModel(spec.path, spec.seed, spec.size)
        return info

    def queue(self, interface: str) -> LibaioQueue | IoUringQueue:
        q = self.queues.get(interface)
        if q is None:
            q = self.queues[interface] = make_queue(interface, 8)
        return q

    def abandon(self, interface: str, *keep: Any) -> None:
        """A request timed out: never reuse or free its queue or buffers."""
        q = self.queues.pop(interface, None)
        _ABANDONED.extend([q, *keep])

    def close(self) -> None:
        for q in self.queues.values():
            try:
                q.close()
            except OSError:
                pass
        self.queues.clear()

    # -- one trial ----------------------------------------------------------

    def run(self, req: Request) -> Result:
        r = Result(id=req.id, condition=req.condition, interface=req.interface, op=req.op,
                   vectored=req.vectored, nr_segs=len(req.segments), total_len=req.total_len,
                   offset=req.offset, o_direct=req.o_direct)
        model = self.files.get(req.file)
        problems = req.problems()
        if model is None:
            problems.append(f"file {req.file!r} is not in the plan's files")
        if problems:
            r.stage, r.error = "plan", "; ".join(problems)
            return r
        try:
            specs = {n: _counter_spec(s) for n, s in req.counters.items()}
        except ValueError as e:
            r.stage, r.error = "plan", str(e)
            return r
        r.params_applied, r.params_unavailable, r.params_errors = self.params.apply(req.params)
        if req.op == "read":
            r.expected_len = max(0, min(req.total_len, model.size - max(req.offset, 0)))
        else:
            r.expected_len = req.total_len
        try:
            fd = open_trial_file(req.file, req.op, req.o_direct)
        except OSError as e:
            r.set_error(e.errno, "open")
            return r
        bufs = SegmentBuffers(req.segments)
        abandoned = False
        try:
            wseed = req.write_seed if req.write_seed is not None else f"{model.seed}@{req.id}"
            if req.op == "write":
                bufs.fill(pattern(wseed, max(req.offset, 0), req.total_len))
            before = snapshot_counters(specs)
            t0 = time.perf_counter_ns()
            res, err, stage = self._issue(req, fd, bufs)
            r.latency_us = round((time.perf_counter_ns() - t0) / 1000, 1)
            r.counters = counter_deltas(before, snapshot_counters(specs))
            if stage == "timeout":
                abandoned = True
                self.abandon(req.interface, bufs, fd)
                r.stage, r.error = "timeout", f"no completion within {req.timeout_s}s"
                if req.op == "write":
                    model.record_write(req.offset, req.total_len, None)
                return r
            if err:
                r.set_error(err, stage)
                if req.op == "write" and err not in (errno_mod.EINVAL, errno_mod.EFAULT,
                                                     errno_mod.EBADF, errno_mod.EAGAIN,
                                                     errno_mod.EOPNOTSUPP):
                    model.record_write(req.offset, req.total_len, None)
            else:
                r.res = res
            r.len_ok = res is not None and res >= 0 and res == r.expected_len
            if res is not None and res > 0:
                self._verify(req, r, model, bufs, res, wseed)
            r.correct = bool(r.len_ok and not err and r.wrong_bytes == 0
                             and r.overrun_bytes == 0)
            return r
        finally:
            if not abandoned:
                bufs.close()
                os.close(fd)

    def _issue(self, req: Request, fd: int,
               bufs: SegmentBuffers) -> tuple[int | None, int, str | None]:
        """Issue the request; returns (res, errno, stage) with res=-errno on error."""
        write = req.op == "write"
        if req.interface == "sync":
            try:
                if req.vectored:
                    views = bufs.views()
                    try:
                        if write:
                            res = os.pwritev(fd, views, req.offset, req.rw_flags)
                        else:
                            res = os.preadv(fd, views, req.offset, req.rw_flags)
                    finally:
                        for v in views:
                            v.release()
                elif write:
                    with bufs.views()[0] as v:
                        res = os.pwrite(fd, v, req.offset)
                else:
                    res = sys_().pread(fd, bufs.addrs[0], req.segments[0].len, req.offset)
                return res, 0, None
            except OSError as e:
                return -e.errno, e.errno, "syscall"
        try:
            q = self.queue(req.interface)
        except OSError as e:
            return None, e.errno, "setup"
        op = IoOp(self.next_tag(), write, fd, req.offset, bufs, req.vectored, req.rw_flags)
        try:
            if q.submit([op]) != 1:
                return None, errno_mod.EAGAIN, "submit"
        except OSError as e:
            return -e.errno, e.errno, "submit"
        deadline = time.monotonic() + req.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if isinstance(q, LibaioQueue):
                    q.cancel(op.tag)
                return None, 0, "timeout"
            for tag, res in q.reap(1, 8, min(left, 1.0)):
                if tag == op.tag:
                    return (res, -res, "complete") if res < 0 else (res, 0, None)

    def _verify(self, req: Request, r: Result, model: FileModel, bufs: SegmentBuffers,
                res: int, wseed: Any) -> None:
        if req.op == "read":
            n = min(res, r.expected_len or 0)
            data = bufs.gather(n)
            r.verify = "buffer"
            r.overrun_bytes = bufs.overrun_bytes()
        else:
            model.record_write(req.offset, res, wseed)
            n = res
            data, r.verify = readback(req.file, req.offset, res)
            if len(data) < n:
                r.error = f"readback returned {len(data)} of {n} bytes"
                r.wrong_bytes += n - len(data)
                r.first_wrong_byte = req.offset + len(data)
        expected, unknown = model.expected(req.offset, n)
        c = compare(data, expected, req.offset, unknown)
        if c.wrong_bytes:
            r.wrong_bytes += c.wrong_bytes
            r.first_wrong_byte = c.first_wrong_byte
            r.wrong_kind, r.wrong_sample = c.wrong_kind, c.wrong_sample
        r.unverified_bytes = c.unverified_bytes


def load_plan(source: str) -> Plan:
    text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
    return Plan.from_dict(json.loads(text))


def emit(obj: dict[str, Any], out: IO[str] | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(obj, default=str) + "\n")
    out.flush()


def cmd_run(args: argparse.Namespace) -> int:
    try:
        plan = load_plan(args.plan)
    except (OSError, ValueError, KeyError, TypeError) as e:
        emit({"event": "error", "stage": "plan", "error": f"{type(e).__name__}: {e}"})
        return EXIT_USAGE
    engine = Engine(args.param_dir)
    t0 = time.monotonic()
    summary: dict[str, Any] = {"event": "summary", "trials": 0, "correct": 0, "wrong": 0,
                               "errors": {}, "timeouts": 0, "plan_errors": 0}
    try:
        for spec in plan.files:
            try:
                emit(engine.add_file(spec))
            except OSError as e:
                emit({"event": "file", "path": spec.path, "error": _errname(e.errno),
                      "message": str(e)})
                engine.files[spec.path] = FileModel(spec.path, spec.seed, spec.size)
        for req in plan.trials:
            r = engine.run(req)
            emit(r.to_dict())
            summary["trials"] += 1
            summary["correct"] += r.correct
            summary["wrong"] += r.wrong_bytes > 0
            summary["timeouts"] += r.stage == "timeout"
            summary["plan_errors"] += r.stage == "plan"
            if r.errname:
                summary["errors"][r.errname] = summary["errors"].get(r.errname, 0) + 1
    finally:
        if not args.keep_params:
            summary["params_restored"] = engine.params.restore_all()
        if not summary["timeouts"]:
            engine.close()
        summary["elapsed_s"] = round(time.monotonic() - t0, 4)
        emit(summary)
    return EXIT_OK


def cmd_write_file(args: argparse.Namespace) -> int:
    try:
        emit(write_file(args.path, args.size, args.seed, direct=not args.no_direct,
                        chunk=args.chunk))
    except OSError as e:
        emit({"event": "error", "stage": "write-file", "errno": e.errno,
              "errname": _errname(e.errno), "error": str(e)})
        return EXIT_FAILED
    return EXIT_OK


# ---------------------------------------------------------------------------
# hold: K async reads held in flight
# ---------------------------------------------------------------------------

def _open_target(path: str, direct: bool) -> tuple[int, bool]:
    """Open for reading (see :func:`open_trial_file` for FIFOs); (fd, is_fifo)."""
    try:
        is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_fifo = False
    return open_trial_file(path, "read", direct), is_fifo


def _file_size(fd: int, given: int | None) -> int:
    return given if given is not None else os.fstat(fd).st_size


def _check_read(seed: Any, size: int, offset: int, length: int, res: int,
                bufs: SegmentBuffers) -> dict[str, Any]:
    expected_len = max(0, min(length, size - offset))
    out: dict[str, Any] = {"res": res, "errno": -res if res < 0 else None,
                           "errname": _errname(-res) if res < 0 else None,
                           "expected_len": expected_len, "first_wrong_byte": None,
                           "wrong_bytes": 0}
    if res > 0:
        n = min(res, expected_len)
        c = compare(bufs.gather(n), pattern(seed, offset, n), offset)
        out["first_wrong_byte"], out["wrong_bytes"] = c.first_wrong_byte, c.wrong_bytes
    out["correct"] = res == expected_len and out["wrong_bytes"] == 0
    return out


def cmd_hold(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    try:
        fd, is_fifo = _open_target(args.file, not args.no_direct)
        q = make_queue(args.interface, max(args.k, 1))
    except OSError as e:
        emit({"event": "error", "stage": "setup", "errno": e.errno,
              "errname": _errname(e.errno), "error": str(e)})
        return EXIT_FAILED
    size = _file_size(fd, args.size)
    stride = args.stride or args.len
    ops = []
    for i in range(args.k):
        bufs = SegmentBuffers([Segment(args.len, args.page_offset)])
        ops.append(IoOp(i + 1, False, fd, args.offset + i * stride, bufs, False))
    t0 = time.monotonic()
    try:
        submitted = q.submit(ops)
    except OSError as e:
        emit({"event": "error", "stage": "submit", "errno": e.errno,
              "errname": _errname(e.errno), "error": str(e)})
        return EXIT_FAILED
    submit_us = round((time.monotonic() - t0) * 1e6, 1)
    emit({"event": "submitted", "pid": os.getpid(), "pids": [os.getpid()], "t": time.time(),
          "interface": args.interface, "k": args.k, "submitted": submitted,
          "submit_us": submit_us, "fifo": is_fifo})
    results: dict[int, int] = {}
    want = submitted
    if args.probe_inflight is not None:
        time.sleep(args.probe_inflight / 1000.0)
        for tag, res in q.reap(0, max(want, 1), 0):
            results[tag] = res
        emit({"event": "probe", "after_ms": args.probe_inflight, "t": time.time(),
              "completed": len(results), "outstanding": want - len(results)})
    deadline = t0 + args.deadline_s
    while len(results) < want:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for tag, res in q.reap(1, want, min(left, 0.5)):
            results[tag] = res
    elapsed = round(time.monotonic() - t0, 4)
    reqs = []
    for op in ops[:submitted]:
        item: dict[str, Any] = {"i": op.tag - 1, "offset": op.offset, "len": args.len}
        if op.tag in results:
            item.update(_check_read(args.seed, size, op.offset, args.len, results[op.tag],
                                    op.buffers))
        else:
            item["outstanding"] = True
        reqs.append(item)
    if len(results) < want:
        _ABANDONED.extend([q, ops, fd])
        emit({"event": "timeout", "outstanding": want - len(results), "requests": reqs,
              "elapsed_s": elapsed, "deadline_s": args.deadline_s})
        return EXIT_TIMEOUT
    emit({"event": "completed", "requests": reqs, "elapsed_s": elapsed,
          "total_s": round(time.monotonic() - t_start, 4),
          "all_correct": all(x.get("correct") for x in reqs) and submitted == args.k})
    for op in ops:
        op.buffers.close()
    q.close()
    os.close(fd)
    return EXIT_OK


# ---------------------------------------------------------------------------
# flood: S submitters keeping D reads in flight
# ---------------------------------------------------------------------------

def _parse_sample(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=PATH[#FIELD]`` -> (name, counter spec)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"--sample wants NAME=PATH[#FIELD], got {text!r}")
    path, _, fld = rest.partition("#")
    spec: dict[str, Any] = {"path": path}
    if fld:
        spec["field"] = fld
    return name, spec


def split_segments(total: int, nsegs: int, align: int = DIO_ALIGN) -> list[Segment]:
    """``nsegs`` page-aligned segments covering ``total`` bytes: each a multiple
    of ``align`` where possible, the last one taking the remainder."""
    each = total // nsegs
    if each >= align:
        each -= each % align
    return [Segment(each)] * (nsegs - 1) + [Segment(total - each * (nsegs - 1))]


def _flood_submitter(index: int, args: argparse.Namespace) -> dict[str, Any]:
    stats: dict[str, Any] = {"index": index, "pid": os.getpid(), "submitted": 0,
                             "completed": 0, "correct": 0, "wrong": 0, "short": 0,
                             "errors": {}, "bytes": 0, "stuck": 0}
    fd, _ = _open_target(args.file, not args.no_direct)
    size = _file_size(fd, args.size)
    q = make_queue(args.interface, args.depth)
    segs = split_segments(args.len, args.nsegs)
    slots = [SegmentBuffers(segs) for _ in range(args.depth)]
    free = list(range(args.depth))
    inflight: dict[int, int] = {}          # slot -> offset
    rng = random.Random(f"{args.seed}:{index}")
    span = max(0, size - args.len) // args.align
    t0 = time.monotonic()
    stop_at = t0 + args.duration if args.duration else None

    def more() -> bool:
        if args.requests and stats["submitted"] >= args.requests:
            return False
        return stop_at is None or time.monotonic() < stop_at

    while True:
        batch = []
        while free and more() and len(batch) + len(inflight) < args.depth:
            slot = free.pop()
            off = rng.randint(0, span) * args.align
            batch.append(IoOp(slot, False, fd, off, slots[slot], args.nsegs > 1))
            if args.requests and stats["submitted"] + len(batch) >= args.requests:
                break
        if batch:
            try:
                n = q.submit(batch)
            except OSError as e:
                name = _errname(e.errno) or "?"
                stats["errors"][name] = stats["errors"].get(name, 0) + len(batch)
                n = 0
                if not inflight:
                    break
            for op in batch[:n]:
                inflight[op.tag] = op.offset
            free.extend(op.tag for op in batch[n:])
            stats["submitted"] += n
        if not inflight:
            if not more():
                break
            continue
        wait = 0.5 if more() else args.drain_s
        got = q.reap(1, args.depth, wait)
        if not got and not more():
            stats["stuck"] = len(inflight)
            break
        for slot, res in got:
            off = inflight.pop(slot)
            free.append(slot)
            stats["completed"] += 1
            if res < 0:
                name = _errname(-res) or "?"
                stats["errors"][name] = stats["errors"].get(name, 0) + 1
                continue
            chk = _check_read(args.seed, size, off, args.len, res, slots[slot])
            stats["bytes"] += res
            stats["correct"] += chk["correct"]
            stats["short"] += res != chk["expected_len"]
            if chk["wrong_bytes"]:
                stats["wrong"] += 1
                stats.setdefault("first_wrong", {"offset": off,
                                                 "first_wrong_byte": chk["first_wrong_byte"]})
    stats["elapsed_s"] = round(time.monotonic() - t0, 4)
    if not stats["stuck"]:
        q.close()
    return stats


def cmd_flood(args: argparse.Namespace) -> int:
    samples = dict(args.sample or [])
    children: dict[int, dict[str, Any]] = {}   # pid -> {index, rfd, buf}
    for index in range(args.submitters):
        rfd, wfd = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            code = 0
            try:
                res = _flood_submitter(index, args)
            except BaseException as e:  # report, never fall back into the parent's loop
                res = {"index": index, "pid": os.getpid(), "error": f"{type(e).__name__}: {e}"}
                code = 1
            data = json.dumps(res).encode()
            while data:
                data = data[os.write(wfd, data):]
            os._exit(code)
        os.close(wfd)
        children[pid] = {"index": index, "rfd": rfd, "buf": b"", "eof": False}
    stats: dict[str, dict[str, Any]] = {
        n: {"count": 0, "min": None, "max": None, "first": None, "last": None} for n in samples}

    def sample() -> None:
        for name, spec in samples.items():
            v = read_counter(spec)
            s = stats[name]
            if v is None:
                continue
            s["count"] += 1
            s["min"] = v if s["min"] is None else min(s["min"], v)
            s["max"] = v if s["max"] is None else max(s["max"], v)
            s["first"] = v if s["first"] is None else s["first"]
            s["last"] = v

    t0 = time.monotonic()
    deadline = t0 + (args.duration or 0) + args.drain_s + 60 + (0 if args.duration else 600)
    interval = args.sample_ms / 1000.0
    sample()
    while any(not c["eof"] for c in children.values()) and time.monotonic() < deadline:
        fds = [c["rfd"] for c in children.values() if not c["eof"]]
        ready, _, _ = select.select(fds, [], [], interval)
        for c in children.values():
            if c["rfd"] in ready:
                chunk = os.read(c["rfd"], 65536)
                if chunk:
                    c["buf"] += chunk
                else:
                    c["eof"] = True
        sample()
    hung = []
    subs = []
    for pid, c in children.items():
        if not c["eof"]:
            hung.append(c["index"])
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(c["rfd"])
        try:
            subs.append(json.loads(c["buf"]))
        except ValueError:
            subs.append({"index": c["index"], "pid": pid, "error": "no report"})
    subs.sort(key=lambda s: s["index"])
    totals = {k: sum(s.get(k, 0) for s in subs)
              for k in ("submitted", "completed", "correct", "wrong", "short", "bytes", "stuck")}
    errors: dict[str, int] = {}
    for s in subs:
        for k, v in s.get("errors", {}).items():
            errors[k] = errors.get(k, 0) + v
    totals["errors"] = errors
    emit({"event": "flood", "interface": args.interface, "submitters": subs, "totals": totals,
          "samples": stats, "hung": hung, "elapsed_s": round(time.monotonic() - t0, 4),
          "all_correct": not hung and all("error" not in s for s in subs)
          and totals["correct"] == totals["completed"] and not errors and totals["completed"] > 0})
    if hung or any(s.get("stuck") for s in subs):
        return EXIT_TIMEOUT
    return EXIT_FAILED if any("error" in s for s in subs) else EXIT_OK


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def _seed(text: str) -> Any:
    v = _to_int(text)
    return v if v is not None and not text.lower().startswith("0x") else text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dioengine.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run a plan of trials, one JSON line per trial")
    r.add_argument("plan", help="plan JSON file, or - for stdin")
    r.add_argument("--param-dir", default=DEFAULT_PARAM_DIR,
                   help=f"module parameter directory (default {DEFAULT_PARAM_DIR})")
    r.add_argument("--keep-params", action="store_true",
                   help="do not restore original parameter values at exit")
    r.set_defaults(func=cmd_run)

    w = sub.add_parser("write-file", help="create a pattern file of exact size")
    w.add_argument("path")
    w.add_argument("--size", type=int, required=True)
    w.add_argument("--seed", type=_seed, required=True)
    w.add_argument("--no-direct", action="store_true", help="never use O_DIRECT")
    w.add_argument("--chunk", type=int, default=1 << 20)
    w.set_defaults(func=cmd_write_file)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--file", required=True)
        sp.add_argument("--seed", type=_seed, required=True)
        sp.add_argument("--size", type=int, default=None,
                        help="file size the pattern was written with (default: fstat)")
        sp.add_argument("--interface", choices=("libaio", "io_uring"), default="libaio")
        sp.add_argument("--len", type=int, default=1 << 17, help="bytes per request")
        sp.add_argument("--no-direct", action="store_true", help="open without O_DIRECT")

    h = sub.add_parser("hold", help="submit K async reads, report when they complete")
    common(h)
    h.add_argument("-k", type=int, default=1, help="number of reads")
    h.add_argument("--offset", type=int, default=0)
    h.add_argument("--stride", type=int, default=0, help="offset step (default --len)")
    h.add_argument("--page-offset", type=int, default=0)
    h.add_argument("--deadline-s", type=float, default=60.0)
    h.add_argument("--probe-inflight", type=float, default=None, metavar="MS",
                   help="after MS ms, report how many reads are still outstanding")
    h.set_defaults(func=cmd_hold)

    f = sub.add_parser("flood", help="S submitters keep D reads in flight, all checked")
    common(f)
    f.add_argument("--submitters", type=int, default=2)
    f.add_argument("--depth", type=int, default=8)
    f.add_argument("--nsegs", type=int, default=1, help=">1: PREADV with that many segments")
    f.add_argument("--align", type=int, default=DIO_ALIGN, help="offset alignment")
    f.add_argument("--duration", type=float, default=0.0, help="seconds to keep submitting")
    f.add_argument("--requests", type=int, default=0, help="requests per submitter")
    f.add_argument("--drain-s", type=float, default=30.0, help="wait for in-flight at the end")
    f.add_argument("--sample", action="append", type=_parse_sample, metavar="NAME=PATH[#FIELD]")
    f.add_argument("--sample-ms", type=float, default=50.0)
    f.set_defaults(func=cmd_flood)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd == "flood":
        if not args.duration and not args.requests:
            parser.error("flood needs --duration or --requests")
        if args.nsegs < 1 or args.len < args.nsegs or args.depth < 1 or args.align < 1:
            parser.error("flood needs --nsegs >= 1, --len >= --nsegs, --depth >= 1, --align >= 1")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
