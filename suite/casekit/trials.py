"""Trials: how many, in which order, and what each outcome counts as.

Conditions are alternated trial by trial (A B C A B C ...), never run in blocks,
so drift (cache state, a background txg, thermal) cannot masquerade as a
difference between conditions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence, TypeVar

T = TypeVar("T")

# Outcome columns, in the order reviewers post them.
COLUMNS = ("trials", "correct", "EFAULT", "EINVAL", "other error", "short", "wrong bytes",
           "overrun", "no result", "served by DIO", "served by ARC")
# Engine stages at which a trial's I/O was never issued or never completed.
NOT_ISSUED = frozenset({"plan", "setup", "open", "timeout"})


def trials_needed(rate: float = 0.2, confidence: float = 0.95) -> int:
    """Smallest n such that a failure occurring at ``rate`` shows up at least once
    in n independent trials with probability >= ``confidence``."""
    if not 0 < rate < 1 or not 0 < confidence < 1:
        raise ValueError("rate and confidence must be in (0, 1)")
    return math.ceil(math.log(1 - confidence) / math.log(1 - rate))


DEFAULT_TRIALS = trials_needed()      # 14: a 1-in-5 failure is caught with >= 95%


def alternate(conditions: Sequence[T], n: int) -> list[T]:
    """Round-robin order: every condition once per round, ``n`` rounds."""
    return [c for _ in range(n) for c in conditions]


@dataclass(frozen=True)
class Served:
    """How a read was served, from counter deltas around it."""
    dio: bool
    arc: bool
    known: bool     # False when the counters are missing on this build

    @property
    def label(self) -> str:
        if not self.known:
            return "unknown"
        return {(True, False): "DIO", (False, True): "ARC", (True, True): "DIO+ARC",
                (False, False): "none"}[(self.dio, self.arc)]


def served(counters: dict[str, int | None]) -> Served:
    """Attribute one trial (a write: the ``_write_`` twins; a zvol: the kprobe
    hits ``dio_calls`` / ``arc_calls``). ``direct_read_count``
    moving means the Direct I/O path issued the read; ``arc_read_count`` or the series' pinned-copy debug counter
    moving means (part of) it went through the ARC. A DIO read of a block that
    was already cached moves neither: cases control caching before measuring."""
    def first(*keys: str) -> int | None:
        return next((counters[k] for k in keys if k in counters), None)

    # dio_calls / arc_calls: kprobe hits on each path's entry point (zvols).
    d = first("dio_calls", "direct_read_count", "direct_write_count")
    a = first("arc_calls", "arc_read_count", "arc_write_count")
    pinned = counters.get("pinned_copies")
    if d is None and a is None:
        return Served(False, False, False)
    return Served(bool(d), bool(a) or bool(pinned), True)


def outcome(result: dict) -> str:
    """The one outcome column a trial counts in.

    The engine's own verdicts decide: ``stage`` (where an error came from),
    ``overrun_bytes`` (bytes written past the end of a buffer) and ``correct``
    (full length, every byte right, nothing overrun). A trial that never issued
    its I/O, or never completed, is "no result" whatever ``res`` says.
    """
    if result.get("stage") in NOT_ISSUED or result.get("res") is None:
        return "no result"
    if result.get("errno"):
        err = result.get("errname")
        return err if err in ("EFAULT", "EINVAL") else "other error"
    if result.get("overrun_bytes"):
        return "overrun"
    if not result.get("correct"):
        res, want = result.get("res"), result.get("expected_len")
        if (isinstance(res, int) and isinstance(want, int) and 0 <= res < want
                and not result.get("wrong_bytes") and not result.get("beyond_bytes")):
            return "short"             # fewer bytes than asked, every one of them right
        return "wrong bytes"           # content not the generator's (or past the end)
    return "correct"


def classify(result: dict) -> set[str]:
    """The columns one engine result counts in."""
    cols = {"trials", outcome(result)}
    s = served(result.get("counters") or {})
    if s.known and s.dio:
        cols.add("served by DIO")
    if s.known and s.arc:
        cols.add("served by ARC")
    return cols


def tally(results: Iterable[dict]) -> dict[str, dict[str, int]]:
    """condition -> column -> count, conditions in first-seen order."""
    table: dict[str, dict[str, int]] = {}
    for r in results:
        row = table.setdefault(r["condition"], {c: 0 for c in COLUMNS})
        for col in classify(r):
            row[col] += 1
    return table
