"""On-disk consistency when a case's pool is let go (``--thorough``).

A scrub must find nothing, and ``zdb`` block accounting of the exported pool
must balance: ``zdb -bcc`` walks every block pointer, verifies every checksum
and compares what it reached with what the space maps say is allocated. A
leaked block (allocated, unreachable) or one allocated twice shows there even
when every read of the case came back right. While the pool is exported, the
gauges that must come back with no pool imported are compared with the guest's
load-time baseline (``[[returns]]`` of ``vmimages/kstat-rules.toml``). Costly (a scrub and a full walk,
minutes under TCG), so the gate and the nightly lane turn it on.
"""
from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from suite.judges import kstats, pools
from suite.judges.judge import Finding
from suite.judges.snapshot import Snapshot, kstat_script

LEAK = re.compile(r"leaked space|block traversal size \d+ != alloc \d+|"
                  r"(?:leaked|unreachable) \d+|space map refcount mismatch|"
                  r"checksum mismatch|error\(s\) found|\bzdb_blkptr_cb\b.*error",
                  re.IGNORECASE)


@dataclass
class OnDisk:
    findings: list[Finding]
    notes: list[str]
    seconds: float = 0.0
    zdb: bool = False                   # zdb -bcc walked the pool


RECORD = "ondisk.json"


@dataclass
class Done:
    """What ``--thorough`` did in one case (``ondisk.json`` beside the readable
    ``ondisk.txt``): how many of its pools were scrubbed, exported (gauges checked)
    and walked by zdb, or why none was. The report counts from this, not from prose."""
    scrubbed: int = 0
    exported: int = 0
    zdb: int = 0
    not_run: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def read(cls, case_dir: Path) -> "Done | None":
        try:
            data = json.loads((case_dir / RECORD).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def write(self, case_dir: Path) -> None:
        (case_dir / RECORD).write_text(json.dumps(asdict(self), indent=1) + "\n")


def scrub_findings(pool: str, status: str, before: str = "", leaves=None) -> list[Finding]:
    """What the scrub itself found: error counters that grew during it (``before``:
    ``zpool status -p`` right before; the case's own errors are already the
    after-case judges'), and permanent errors that appeared, except what the case
    declared it leaves (``Leaves``: a zinject case's vdev, its kind of error)."""
    was = [p for p in pools.parse_status(before) if p.name == pool]
    prior = {v.name: v for p in was for v in p.vdevs}
    had_data_errors = any(p.data_errors for p in was)
    out = []
    for p in pools.parse_status(status):
        if p.name != pool:
            continue
        bad = []
        for v in p.vdevs:
            for k in pools.ERRORS:
                grew = getattr(v, k) - getattr(prior.get(v.name), k, 0)
                if grew > 0 and not (leaves is not None and leaves.allows_errors(v.name, k)):
                    bad.append(f"{v.name} {k.upper()}+{grew}")
        new_data = p.data_errors and not had_data_errors and not (
            leaves is not None and leaves.data_errors)
        if bad or new_data:
            out.append(Finding("ondisk:scrub", f"{pool}: a scrub after the case found "
                               + ", ".join(bad + ([f"errors: {p.errors}"] if new_data
                                                  else []))))
    return out


def zdb_findings(pool: str, rc: int, output: str) -> list[Finding]:
    lines = [ln.strip() for ln in output.splitlines() if LEAK.search(ln)]
    if rc == 0 and not lines:
        return []
    tail = output.strip().splitlines()[-1:] or ["no output"]
    return [Finding("ondisk:zdb", f"{pool}: zdb -bcc exited {rc}: "
                    + "; ".join(lines[:4] or tail))]


def leak_findings(zfs, rules: kstats.Rules | None, baseline: dict[str, kstats.Kstat] | None,
                  notes: list[str], **settle) -> list[Finding]:
    """With every pool exported, the ``[[returns]]`` gauges against the guest's
    load-time baseline (``kstat:leak``)."""
    if rules is None or not rules.returns:
        return []
    if baseline is None:
        notes.append("gauges after export: no load-time baseline in this guest, not checked")
        return []
    others = zfs.pools()
    if others:
        notes.append(f"gauges after export: other pools imported ({', '.join(others)}), "
                     "not checked")
        return []
    found, missing, waited = settled_leaks(zfs, rules, baseline, **settle)
    notes.append(f"gauges after export: {sum(len(x.names) for x in rules.returns)} checked "
                 "against the load-time baseline"
                 + (f" (came back after {waited:.0f} s)" if waited >= 1 and not found else "")
                 + "".join(f"; {m}" for m in missing))
    return found


# Export flushes the pool's ARC buffers from a taskq (arc_flush_async, OpenZFS 2.3+),
# best effort: the gauges come back a moment later. So the judge polls, asks the
# kernel once to shrink its caches (the ARC's shrinker evicts what nobody holds, down
# to arc_c_min), and polls again; what the ARC still holds and could evict is allowed
# for by the rules (``evictable``), so only what someone holds is a leak.
SETTLE_SECONDS = 20.0
DROP_CACHES = "sync; echo 3 > /proc/sys/vm/drop_caches"


def settled_leaks(zfs, rules: kstats.Rules, baseline: dict[str, kstats.Kstat],
                  seconds: float = SETTLE_SECONDS, sleep=time.sleep, clock=time.monotonic):
    """(leak findings, missing notes, seconds waited) once the gauges settle."""
    t0, dropped = clock(), False
    while True:
        r = zfs.guest.run(kstat_script(rules.return_files()), timeout=30, check=False)
        now = Snapshot.parse(r.stdout).kstats
        found, missing = [], []
        for b in kstats.leaks(rules, baseline, now):
            if b.kind == "missing":
                missing.append(b.detail)
            else:
                found.append(Finding("kstat:leak", b.detail))
        waited = clock() - t0
        if not found or waited >= seconds:
            return found, missing, waited
        if not dropped and waited >= seconds / 4:
            zfs.guest.run(DROP_CACHES, timeout=60, check=False)
            dropped = True
        sleep(1.0)


def scrub(zfs, pool: str, timeout: float) -> list[Finding]:
    """Scrub ``pool`` while the case's files are still on it: a block the case wrote
    wrong but never read back is only reachable before its dataset is destroyed."""
    before = zfs.zpool("status", "-pvP", pool, check=False).stdout
    zfs.zpool("scrub", "-w", pool, timeout=timeout)
    return scrub_findings(pool, zfs.zpool("status", "-pvP", pool, check=False).stdout,
                          before, getattr(zfs, "leaves", None))


def exported(zfs, pool: str, timeout: float, rules: kstats.Rules | None = None,
             baseline: dict[str, kstats.Kstat] | None = None) -> OnDisk:
    """Export ``pool`` (after the case's dataset was destroyed, so the free path is
    in what is checked), check the gauges that must come back (when no other pool is
    imported), ``zdb -e -bcc`` it, import it again."""
    t = time.monotonic()
    notes: list[str] = []
    found: list[Finding] = []
    steps = Steps()
    with steps("export"):
        zfs.zpool("export", pool, timeout=timeout)
    try:
        with steps("gauges"):
            found += leak_findings(zfs, rules, baseline, notes)
        if "zdb" not in zfs.record.commands:
            notes.append("zdb block accounting: the build has no zdb, not checked")
        else:
            with steps("zdb"):
                r = zfs.run("zdb", "-e", "-p", "/dev", "-bcc", pool, timeout=timeout,
                            check=False)
            found += zdb_findings(pool, r.rc, r.stdout + r.stderr)
    finally:
        with steps("import"):
            zfs.zpool("import", "-d", "/dev", pool, timeout=timeout)
        notes.append(f"seconds: {steps}")
    return OnDisk(found, notes, time.monotonic() - t, zdb="zdb" in steps.seconds)


class Steps:
    """Seconds per named step, ``export 3.1, gauges 0.8, ...``: what --thorough's
    cost is made of, in each case's ``ondisk.txt``."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock, self.seconds = clock, {}

    @contextmanager
    def __call__(self, name: str):
        t = self.clock()
        try:
            yield
        finally:
            self.seconds[name] = self.clock() - t

    def __str__(self) -> str:
        return ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items())
