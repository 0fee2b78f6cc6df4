"""On-disk consistency when a case's pool is let go (``--thorough``).

A scrub must find nothing, and ``zdb`` block accounting of the exported pool
must balance: ``zdb -bcc`` walks every block pointer, verifies every checksum
and compares what it reached with what the space maps say is allocated. A
leaked block (allocated, unreachable) or one allocated twice shows there even
when every read of the case came back right. Costly (a scrub and a full walk,
minutes under TCG), so the gate and the nightly lane turn it on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from suite.judges import pools
from suite.judges.judge import Finding

LEAK = re.compile(r"leaked space|block traversal size \d+ != alloc \d+|"
                  r"(?:leaked|unreachable) \d+|space map refcount mismatch|"
                  r"checksum mismatch|error\(s\) found|\bzdb_blkptr_cb\b.*error",
                  re.IGNORECASE)


@dataclass
class OnDisk:
    findings: list[Finding]
    notes: list[str]
    seconds: float = 0.0


def scrub_findings(pool: str, status: str) -> list[Finding]:
    out = []
    for p in pools.parse_status(status):
        if p.name != pool:
            continue
        bad = [f"{v.name} {k.upper()}={getattr(v, k)}" for v in p.vdevs
               for k in pools.ERRORS if getattr(v, k)]
        if bad or p.data_errors:
            out.append(Finding("ondisk:scrub", f"{pool}: a scrub after the case found "
                               + ", ".join(bad + ([f"errors: {p.errors}"] if p.data_errors
                                                  else []))))
    return out


def zdb_findings(pool: str, rc: int, output: str) -> list[Finding]:
    lines = [ln.strip() for ln in output.splitlines() if LEAK.search(ln)]
    if rc == 0 and not lines:
        return []
    tail = output.strip().splitlines()[-1:] or ["no output"]
    return [Finding("ondisk:zdb", f"{pool}: zdb -bcc exited {rc}: "
                    + "; ".join(lines[:4] or tail))]


def check(zfs, pool: str, timeout: float) -> OnDisk:
    """Scrub ``pool``, export it, ``zdb -e -bcc`` it, import it again."""
    import time
    t = time.monotonic()
    notes: list[str] = []
    zfs.zpool("scrub", "-w", pool, timeout=timeout)
    found = scrub_findings(pool, zfs.zpool("status", "-pvP", pool, check=False).stdout)
    if "zdb" not in zfs.record.commands:
        notes.append("zdb block accounting: the build has no zdb, not checked")
        return OnDisk(found, notes, time.monotonic() - t)
    zfs.zpool("export", pool, timeout=timeout)
    try:
        r = zfs.run("zdb", "-e", "-p", "/dev", "-bcc", pool, timeout=timeout, check=False)
        found += zdb_findings(pool, r.rc, r.stdout + r.stderr)
    finally:
        zfs.zpool("import", "-d", "/dev", pool, timeout=timeout)
    return OnDisk(found, notes, time.monotonic() - t)
