"""All the after-case checks as findings: a symptom name and its evidence each.

Symptom kinds (``verdict.json``):

- ``taint:<L>``: a new taint bit, by its letter (``taint:W`` a warning);
- ``pool:<read|write|cksum>``: a vdev error count the case did not declare;
  ``pool:state``: a vdev or pool not ONLINE; ``pool:data-errors``: permanent errors;
- ``ereport:<class>``: an ereport the case did not declare (``ereport:checksum``);
- ``kstat:wrap``, ``kstat:limit``: accounting that did not balance; ``kstat:leak``: a
  gauge still up with every pool exported (``--thorough``, ``ondisk.py``);
- ``ondisk:scrub``, ``ondisk:zdb``: the thorough on-disk checks (``ondisk.py``);
- ``pins:leak`` / ``pins:overrelease``: user pages Direct I/O pinned during the case
  and not unpinned after it, or unpinned once too often (``pins.py``);
- ``kmemleak:<module>``: an object allocated with an OpenZFS frame on its stack that
  nothing references any more (kernels booted with ``kmemleak=on``: ``kmemleak.py``).

Checks that could not run (a kstat the build lacks, lockdep turned off by an
earlier report in the same guest: ``lockdep.py``) are listed as not checked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from suite.judges import kmemleak, kstats, lockdep, pins, pools, taint
from suite.judges.expect import Leaves
from suite.judges.snapshot import Snapshot


@dataclass(frozen=True)
class Finding:
    kind: str
    detail: str


@dataclass
class Judgement:
    findings: list[Finding] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    def text(self) -> str:
        out = [f"checked: {', '.join(self.checked) or 'nothing'}"]
        out += [f"not checked: {u}" for u in self.unchecked]
        out += [f"FINDING {f.kind}: {f.detail}" for f in self.findings] or ["no findings"]
        return "\n".join(out)


def judge_taint(before: Snapshot, after: Snapshot, j: Judgement) -> None:
    if before.tainted is None or after.tainted is None:
        j.unchecked.append("taint: /proc/sys/kernel/tainted not read")
        return
    j.checked.append(f"taint ({taint.letters(after.tainted) or 'none'})")
    for letter, meaning in taint.new_bits(before.tainted, after.tainted):
        j.findings.append(Finding(f"taint:{letter}", f"the kernel became tainted '{letter}' "
                                  f"({meaning}) during the case: {before.tainted} -> "
                                  f"{after.tainted}"))


def judge_pools(after: Snapshot, leaves: Leaves, j: Judgement) -> None:
    if after.status is None:
        j.unchecked.append("pool health: zpool status not read")
        return
    states = pools.parse_status(after.status)
    j.checked.append(f"pool health ({len(states)} pool(s))")
    for p in states:
        for v in p.vdevs:
            if v.state not in pools.HEALTHY:
                j.findings.append(Finding("pool:state", f"{p.name}: {v.name} is {v.state}"))
            for kind in pools.ERRORS:
                n = getattr(v, kind)
                if n and not leaves.allows_errors(v.name, kind):
                    j.findings.append(Finding(f"pool:{kind}", f"{p.name}: {v.name} has {n} "
                                              f"{kind.upper()} error(s) the case did not declare"))
        if p.data_errors and not leaves.data_errors:
            listed = "; ".join(p.permanent[:3])
            j.findings.append(Finding("pool:data-errors", f"{p.name}: errors: {p.errors}"
                                      + (f" ({listed})" if listed else "")))
    if after.events is None:
        j.unchecked.append("ereports: zpool events not read")
        return
    events = pools.parse_events(after.events)
    j.checked.append(f"ereports ({sum(1 for e in events if e.ereport)})")
    seen: dict[str, int] = {}
    for e in events:
        if e.ereport and e.ereport not in leaves.ereports:
            seen[e.ereport] = seen.get(e.ereport, 0) + 1
    for cls, n in seen.items():
        e = next(ev for ev in events if ev.ereport == cls)
        where = ", ".join(x for x in (e.get("pool"), e.get("vdev_path"),
                                      e.get("zio_objset") and f"objset {e.get('zio_objset')}"
                                      f" object {e.get('zio_object')}") if x)
        j.findings.append(Finding(f"ereport:{cls}", f"{n} x {e.cls} the case did not declare"
                                  + (f" ({where})" if where else "")))


# A wrapped counter is read again this many times before it is a finding: most of
# these gauges are per-CPU sums (wmsum), and a sum read while an ABD allocated on one
# CPU is freed on another can come out below zero for that one read.
REREADS = 3
Reread = Callable[[tuple[str, ...]], dict[str, kstats.Kstat]]


def judge_kstats(rules: kstats.Rules, before: Snapshot, after: Snapshot, j: Judgement,
                 reread: Reread | None = None) -> None:
    if not after.kstats:
        j.unchecked.append("accounting: no kstats read")
        return
    j.checked.append(f"accounting ({len(after.kstats)} kstat files)")
    breaches = kstats.check(rules, before.kstats, after.kstats)
    wraps = [b for b in breaches if b.kind == "wrap"]
    if wraps and reread is not None:
        files = tuple(sorted({b.file for b in wraps}))
        again = [reread(files) for _ in range(REREADS)]
        for b in wraps:
            back = kstats.unwrapped(b, again)
            if back is not None:
                breaches.remove(b)
                j.checked.append(f"{b.detail}; read again: {back} (a per-CPU sum read "
                                 f"mid-update, not a wrap)")
    for b in breaches:
        if b.kind == "missing":
            j.unchecked.append(b.detail)
        else:
            j.findings.append(Finding(f"kstat:{b.kind}", b.detail))


def judge_kmemleak(after: Snapshot, j: Judgement) -> None:
    """Only where kmemleak runs: its absence is not a check that was skipped (the
    distribution kernels lack it), so it is not listed as unchecked either."""
    if after.kmemleak is None:
        return
    leaks = kmemleak.parse(after.kmemleak)
    ours = [lk for lk in leaks if lk.module]
    j.checked.append(f"kmemleak ({len(ours)} OpenZFS, {len(leaks) - len(ours)} other)")
    by_module: dict[str, list[kmemleak.Leak]] = {}
    for lk in ours:
        by_module.setdefault(str(lk.module), []).append(lk)
    for module, group in by_module.items():
        first = group[0]
        j.findings.append(Finding(
            f"kmemleak:{module}", f"{len(group)} unreferenced object(s), "
            f"{sum(lk.size for lk in group)} bytes; first: {first.size} bytes at "
            f"{first.address} (comm {first.comm}, age {first.age or '?'}) allocated "
            f"from {first.where()}"))


def judge_lockdep(after: Snapshot, j: Judgement) -> None:
    """Only where lockdep is built in; off means every later case is blind to it."""
    if after.lockdep is None:
        return
    on = lockdep.watching(after.lockdep)
    if on:
        j.checked.append("lockdep (validating)")
    else:
        j.unchecked.append("lockdep: turned off in this guest (debug_locks 0) by an earlier "
                           "report or a taint: lock-order bugs from then on are not seen; the "
                           "report that turned it off is the kernel:lockdep finding of its case")


def judge_pins(before: Snapshot, after: Snapshot, j: Judgement) -> None:
    """Pages the case pinned and did not unpin (``pins.py``)."""
    was, now = pins.held(before.pins), pins.held(after.pins)
    if was is None or now is None:
        j.unchecked.append("pinned pages: /proc/vmstat's nr_foll_pin_* not read")
        return
    j.checked.append(f"pinned pages ({now} held, {was} before)")
    if now > was:
        j.findings.append(Finding("pins:leak", f"{now - was} page(s) pinned during the case "
                                  f"are still pinned after it ({pins.ACQUIRED} - "
                                  f"{pins.RELEASED}: {was} before, {now} after)"))
    elif now < was:
        j.findings.append(Finding("pins:overrelease", f"{was - now} more page(s) unpinned than "
                                  f"pinned during the case ({was} held before, {now} after)"))


def judge(before: Snapshot, after: Snapshot, leaves: Leaves, rules: kstats.Rules,
          reread: Reread | None = None) -> Judgement:
    """Every after-case check; ``reread(files)``: those kstat files read again in the
    guest (a wrapped counter is confirmed by reading it again)."""
    j = Judgement()
    judge_taint(before, after, j)
    judge_pools(after, leaves, j)
    judge_kstats(rules, before, after, j, reread)
    judge_kmemleak(after, j)
    judge_lockdep(after, j)
    judge_pins(before, after, j)
    return j
