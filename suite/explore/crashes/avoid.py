"""A hang that is a known finding of the kernel under test is not worth a second
one: like syzkaller disabling a call that hangs the kernel it runs on, explore
avoids that op from then on (what ``--explore-avoid`` does by hand) and says so.

Which hangs are known comes from ``patches/upstream/findings.toml``: a finding's
``explore_hangs`` (op kinds) and ``linux_before`` (a kernel version; the guest's
release must be older). The caller passes the findings in (data, read by the case).
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
