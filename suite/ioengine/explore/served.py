"""Which path served an O_DIRECT request: OpenZFS's Direct I/O path, or the ARC.

An O_DIRECT request is not always Direct I/O: OpenZFS serves it through the ARC
when the range is in the page cache (a mapping read it), when it is misaligned,
or when the build declines (``direct=disabled``, a verify failure). Two sources
say which path took it, read right before and right after one op of the engine:

- kprobes on the Direct I/O entry points ``dmu_read_abd``/``dmu_write_abd``
  (armed by the host, ``suite/explore/conditions.py``; their hit counts in
  ``kprobe_profile``): every file and zvol request OpenZFS serves by Direct I/O
  passes there, including a read of a hole or of a record the dbuf cache holds,
  which that path serves without a disk read;
- the pool's ``iostats`` kstat (``spa_iostats_read_add``/``_write_add``:
  ``direct_*_count`` for Direct I/O disk reads and writes, ``arc_*_count`` for
  the ARC's), which counts no read served from memory, whichever path.

- ``dio``: a probe's hit count (or, without probes, a Direct I/O count) moved;
- ``arc``: only an ARC count moved (the request went the buffered way);
- ``memory``: neither (the buffered path served it from memory: the page cache,
  the ARC, a dirty record; without probes, a Direct I/O read of a hole or of a
  cached record lands here too);
- ``unmeasured``: no counters to read (no pool found, a kstat of another shape).

Only the engine's own ops are measured one at a time (an ``actors`` op runs
several requests at once: not measured).
"""
from __future__ import annotations

import os
from typing import Callable

from ..counters import parse_kprobe_profile

KSTAT = "/proc/spl/kstat/zfs/{pool}/iostats"
COUNTERS = ("direct_read_count", "direct_write_count", "arc_read_count", "arc_write_count")
PROFILE = "/sys/kernel/tracing/kprobe_profile"
PROBES = ("dmu_read_abd", "dmu_write_abd")      # the Direct I/O entry points (read, write)
PATHS = ("dio", "arc", "memory", "unmeasured")
MEASURED_OPS = ("pread", "preadv", "pwrite", "pwritev")


def dataset_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The ZFS dataset whose mount holds ``path`` (the deepest zfs mount over it)."""
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    try:
        with open(mountinfo, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for ln in lines:
        left, _, right = ln.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2 or tail[0] != "zfs":
            continue
        mnt = fields[4].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and \
                (best is None or len(mnt) > best[0]):
            best = (len(mnt), tail[1])
    return best[1] if best else None


def pool_of(path: str, zvol: str | None = None) -> str | None:
    """The pool a target lives in: a zvol's by its name, a file's by its mount."""
    name = zvol or dataset_of(path)
    return name.split("/", 1)[0] if name else None


def read_counters(file: str, profile: str = PROFILE) -> dict[str, int] | None:
    """The four counters of an iostats kstat and the Direct I/O probes' hit counts
    (``profile``), or None (no such kstat or counter)."""
    try:
        with open(file, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return None
    out: dict[str, int] = {}
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) == 3 and parts[0] in COUNTERS and parts[2].isdigit():
            out[parts[0]] = int(parts[2])
    if len(out) != len(COUNTERS):
        return None
    out.update(read_probes(profile))
    return out


def read_probes(file: str = PROFILE) -> dict[str, int]:
    """The Direct I/O probes' hit counts, keyed by symbol (none armed: empty)."""
    try:
        with open(file, encoding="ascii", errors="replace") as f:
            counts = parse_kprobe_profile(f.read())
    except OSError:
        return {}
    return {sym: counts[sym] for sym in PROBES if sym in counts}


def path_of(before: dict[str, int] | None, after: dict[str, int] | None, write: bool) -> str:
    """Which path the counters say served one request (see the module's text)."""
    if before is None or after is None:
        return "unmeasured"
    way = "write" if write else "read"
    probe = PROBES[1] if write else PROBES[0]
    if probe in before and probe in after:
        if after[probe] > before[probe]:
            return "dio"
    elif after[f"direct_{way}_count"] > before[f"direct_{way}_count"]:
        return "dio"
    if after[f"arc_{way}_count"] > before[f"arc_{way}_count"]:
        return "arc"
    return "memory"


class Meter:
    """The pool's iostats, read around one op (``read``: the file to read, for a
    self-test)."""

    def __init__(self, pool: str | None,
                 read: Callable[[str], dict[str, int] | None] = read_counters) -> None:
        self.file = KSTAT.format(pool=pool) if pool else ""
        self.read = read

    def sample(self) -> dict[str, int] | None:
        return self.read(self.file) if self.file else None


def wants_direct(direct: bool, props: dict[str, str]) -> bool:
    """A request asks for Direct I/O: O_DIRECT, or a dataset of ``direct=always``."""
    return direct or props.get("direct") == "always"


def asks_direct(op: str, direct: bool, props: dict[str, str]) -> bool:
    """A read or write of the engine's own that asked for Direct I/O."""
    return op in MEASURED_OPS and wants_direct(direct, props)
