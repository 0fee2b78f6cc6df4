"""A hang that is a known finding of the kernel under test is not worth a second
one: like syzkaller disabling a call that hangs the kernel it runs on, explore
avoids that op from then on (what ``--explore-avoid`` does by hand) and says so.

Which hangs are known comes from ``patches/upstream/findings.toml``: a finding's
``explore_hangs`` (op kinds) and ``linux_before`` (a kernel version; the guest's
release must be older). The caller passes the findings in (data, read by the case).
A failure that is not a hang is a known finding the same way (:func:`known_failure`):
its kind one of the finding's ``kinds``, its op one of its ``explore_ops``; counted and
named, not shrunk again (the finding met in a new shape is not a new finding).
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


def known_hang(trip: Trip, release: str, findings: Iterable[Any]) -> Any | None:
    """The known finding (an ``UpstreamFinding``) this hang is on this kernel, or None."""
    if trip.kind != "hang" or not trip.op_kind:
        return None
    for f in findings:
        hangs = getattr(f, "explore_hangs", ())
        if trip.op_kind in hangs and (not getattr(f, "linux_before", "")
                                      or older(release, f.linux_before)):
            return f
    return None


def known_failure(kind: str | None, op_kind: str | None, release: str,
                  findings: Iterable[Any], before: Iterable[str] = ()) -> Any | None:
    """The known finding (an ``UpstreamFinding``) a failure of ``kind`` in an op of
    ``op_kind``, after ops of the kinds ``before``, is on this kernel, or None (a
    finding's ``explore_after``: one of those ops must have come first)."""
    if not kind or not op_kind:
        return None
    earlier = set(before)
    for f in findings:
        after = getattr(f, "explore_after", ())
        if op_kind in getattr(f, "explore_ops", ()) and kind in f.kinds and \
                (not after or earlier & set(after)) and \
                (not getattr(f, "linux_before", "") or older(release, f.linux_before)):
            return f
    return None
