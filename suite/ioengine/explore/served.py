"""Which path served an O_DIRECT request: OpenZFS's Direct I/O path, or the ARC.

An O_DIRECT request is not always Direct I/O: OpenZFS serves it through the ARC
when the range is in the page cache (a mapping read it), when it is misaligned,
or when the build declines (``direct=disabled``, a verify failure). The pool's
``iostats`` kstat counts each request by the path that moved it
(``spa_iostats_read_add``/``_write_add``: ``direct_*_count`` for Direct I/O,
``arc_*_count`` for the ARC's disk reads and buffered writes), in the calling
thread, so the counters read right before and right after one op of the engine
say which path served it:

- ``dio``: a Direct I/O count moved;
- ``arc``: only an ARC count moved (the request went the buffered way);
- ``memory``: neither (a read served from memory: the page cache, the ARC, a
  dirty record: no disk read was counted for it);
- ``unmeasured``: no counters to read (no pool found, a kstat of another shape).

Only the engine's own ops are measured one at a time (an ``actors`` op runs
several requests at once: not measured).
"""
from __future__ import annotations

import os
from typing import Callable

KSTAT = "/proc/spl/kstat/zfs/{pool}/iostats"
COUNTERS = ("direct_read_count", "direct_write_count", "arc_read_count", "arc_write_count")
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


def read_counters(file: str) -> dict[str, int] | None:
    """The four counters of an iostats kstat, or None (no such file or counter)."""
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
    return out if len(out) == len(COUNTERS) else None


def path_of(before: dict[str, int] | None, after: dict[str, int] | None, write: bool) -> str:
    """Which path the counters say served one request (see the module's text)."""
    if before is None or after is None:
        return "unmeasured"
    way = "write" if write else "read"
    if after[f"direct_{way}_count"] > before[f"direct_{way}_count"]:
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
