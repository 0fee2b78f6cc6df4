"""A hang that is a known finding of the kernel under test is not worth a second
one: like syzkaller disabling a call that hangs the kernel it runs on, explore
avoids that op from then on (what ``--explore-avoid`` does by hand) and says so.

Which hangs are known comes from ``patches/upstream/findings.toml``: a finding's
``explore_hangs`` (op kinds), ``explore_hang_stack`` (what its tasks wait in: a
hang of the same op elsewhere is not this one), ``explore_direct`` and
``linux_before`` (a kernel version; the guest's release must be older). The caller
passes the findings in (data, read by the case). A failure that is not a hang is a
known finding the same way (:func:`known_failure`): its kind one of the finding's
``kinds``, its op one of its ``explore_ops``, the op that caused the wrong bytes one
of its ``explore_after``; a kernel report by the finding's signature
(:func:`known_report`: its title and frames, never its kind alone). Counted and
named, not shrunk again (the finding met in a new shape is not a new finding).
A known report raised in one of its finding's ``explore_report_ops`` comes again on
every fresh guest (lockdep reports once a boot): that op is avoided too
(:func:`report_op`), as a known hang's is. A stop with several reports is named by
the first no known finding claims (:func:`unclaimed`).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from suite.explore.crashes.trip import Trip


def version(release: str) -> tuple[int, ...]:
    """``6.1.0-57-amd64`` -> (6, 1, 0); an unreadable release -> ()."""
    m = re.match(r"(\d+(?:\.\d+)*)", release.strip())
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def older(release: str, than: str) -> bool:
    """The kernel ``release`` is older than version ``than`` (unknown: not older)."""
    have, limit = version(release), version(than)
    return bool(have) and bool(limit) and have < limit


def on_kernel(f: Any, release: str) -> bool:
    """The finding stands on this kernel (``linux_before``: older ones only)."""
    return not getattr(f, "linux_before", "") or older(release, f.linux_before)


def known_hang(trip: Trip, release: str, findings: Iterable[Any],
               direct: bool = True) -> Any | None:
    """The known finding (an ``UpstreamFinding``) this hang is on this kernel, or
    None: its op one of the finding's ``explore_hangs``, its tasks' stacks matching
    its ``explore_hang_stack``, and Direct I/O asked for where it says so."""
    if trip.kind != "hang" or not trip.op_kind:
        return None
    stacks = "\n".join(trip.lines)
    for f in findings:
        stack = getattr(f, "explore_hang_stack", "")
        if trip.op_kind in getattr(f, "explore_hangs", ()) and stack and \
                re.search(stack, stacks) and (direct or not getattr(f, "explore_direct", False)) \
                and on_kernel(f, release):
            return f
    return None


def known_report(trip: Trip, release: str, findings: Iterable[Any]) -> Any | None:
    """The known finding a kernel report is: one of its kinds, matching its
    signature (title, frames); a finding without a signature claims none."""
    if not trip.kind.startswith("kernel:"):
        return None
    text = trip.text()
    for f in findings:
        sig = f.signature_of(trip.kind) if trip.kind in f.kinds else ""
        if sig and re.search(sig, text) and on_kernel(f, release):
            return f
    return None


def known_failure(kind: str | None, op_kind: str | None, release: str,
                  findings: Iterable[Any], cause: str | None = None,
                  direct: bool = True, why: str = "", caller: str = "") -> Any | None:
    """The known finding (an ``UpstreamFinding``) a failure of ``kind`` in an op of
    ``op_kind`` is on this kernel, or None: its op one of the finding's ``explore_ops``
    (or any op, through a ``caller`` of its ``explore_callers``: nfsd reads by splice),
    the op that last changed the first wrong byte (``cause``, its kind) one of the
    finding's ``explore_after`` where it names any, Direct I/O asked for (``direct``)
    where its ``explore_direct`` says so, and what the engine said of it (``why``)
    matching its ``explore_why`` where it has one."""
    if not kind or not op_kind:
        return None
    for f in findings:
        after = getattr(f, "explore_after", ())
        by_op = op_kind in getattr(f, "explore_ops", ()) or \
            bool(caller and caller in getattr(f, "explore_callers", ()))
        if by_op and kind in f.kinds and \
                (not after or cause in after) and \
                (direct or not getattr(f, "explore_direct", False)) and on_kernel(f, release) \
                and (not getattr(f, "explore_why", "") or re.search(f.explore_why, why)):
            return f
    return None


def report_op(trip: Trip | None, finding: Any) -> str:
    """The op kind to avoid from now on for a known report (``finding``: what
    :func:`known_report` named), or "": it came in one of the finding's
    ``explore_report_ops``."""
    if trip is None or finding is None:
        return ""
    return trip.op_kind if trip.op_kind in getattr(finding, "explore_report_ops", ()) else ""


def unclaimed(trip: Trip, release: str, findings: Iterable[Any],
              known: Iterable[tuple[str, ...]] = ()) -> Trip:
    """The report that names a stop: ``trip`` itself, unless a known finding claims it
    (:func:`known_report`, or a signature in ``known``: the base's) and one of the
    stop's other reports (``Trip.also``) no known finding claims; then that one, the
    rest carried with it. A known lockdep report printed first must not hide a KASAN
    use-after-free (async-dio 30582e2f4c on debian-6.1-debug, 2026-12-07)."""
    findings, known = list(findings), set(known)

    def claimed(t: Trip) -> bool:
        return known_report(t, release, findings) is not None or t.signature() in known
    reports = trip.reports()
    if not trip.also or not claimed(reports[0]):
        return trip
    new = next((i for i, t in enumerate(reports) if i and not claimed(t)), None)
    return trip if new is None else trip.named_by(new)
