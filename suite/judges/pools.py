"""Pool health after a case: ``zpool status -pvP`` and ``zpool events -v``.

Every vdev's READ/WRITE/CKSUM count (exact, ``-p``), its state, the pool's
"errors:" line and its permanent-error list; and every ereport the pools
posted since the case began (the event log is cleared when a case begins).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

ERRORS = ("read", "write", "cksum")
HEALTHY = frozenset({"ONLINE", "AVAIL", "INUSE"})   # spares show AVAIL/INUSE


@dataclass(frozen=True)
class Vdev:
    pool: str
    name: str                       # as printed (-P: the device path)
    state: str
    read: int = 0
    write: int = 0
    cksum: int = 0


@dataclass
class PoolStatus:
    name: str
    state: str = ""
    vdevs: list[Vdev] = field(default_factory=list)
    errors: str = ""                # the "errors:" line
    permanent: list[str] = field(default_factory=list)

    @property
    def data_errors(self) -> bool:
        return bool(self.errors) and not self.errors.startswith("No known data errors")


_VDEV = re.compile(r"^\s+(\S+)\s+([A-Z]+)\s+(\d+)\s+(\d+)\s+(\d+)\b")


def parse_status(text: str) -> list[PoolStatus]:
    pools: list[PoolStatus] = []
    cur: PoolStatus | None = None
    in_config = in_errors = False
    for ln in text.splitlines():
        s = ln.strip()
        if s.startswith("pool:"):
            cur = PoolStatus(s.split(":", 1)[1].strip())
            pools.append(cur)
            in_config = in_errors = False
            continue
        if cur is None:
            continue
        if s.startswith("state:") and not in_config:
            cur.state = s.split(":", 1)[1].strip()
        elif s.startswith("config:"):
            in_config = True
        elif s.startswith("errors:"):
            in_config, in_errors = False, True
            cur.errors = s.split(":", 1)[1].strip()
        elif in_config:
            m = _VDEV.match(ln)
            if m and m[1] != "NAME":
                cur.vdevs.append(Vdev(cur.name, m[1], m[2], int(m[3]), int(m[4]), int(m[5])))
        elif in_errors and s and not s.startswith("Permanent errors"):
            cur.permanent.append(s)
    return pools


@dataclass(frozen=True)
class Event:
    cls: str                        # ereport.fs.zfs.checksum, sysevent.fs.zfs.pool_create
    fields: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str:
        return next((v for k, v in self.fields if k == key), "")

    @property
    def ereport(self) -> str:
        """``checksum`` for ``ereport.fs.zfs.checksum``; '' for other events."""
        return self.cls.rsplit(".", 1)[-1] if self.cls.startswith("ereport.") else ""


_EVENT = re.compile(r"^\S.*?\s((?:ereport|sysevent|resource)\.\S+)\s*$")
_FIELD = re.compile(r"^\s+(\w+) = (.*)$")


def parse_events(text: str) -> list[Event]:
    """Events and their top-level fields (an embedded nvlist's, such as the
    detector's ``pool = <guid>``, are skipped)."""
    out: list[tuple[str, list[tuple[str, str]]]] = []
    depth = 0
    for ln in text.splitlines():
        m = _EVENT.match(ln)
        if m:
            out.append((m[1], []))
            depth = 0
            continue
        if "(embedded nvlist)" in ln:
            depth += 1
        elif ln.strip().startswith("(end "):
            depth = max(0, depth - 1)
        elif depth == 0 and out and (f := _FIELD.match(ln)):
            out[-1][1].append((f[1], f[2].strip().strip('"')))
    return [Event(c, tuple(fs)) for c, fs in out]
