"""What explore found: one failing sequence, shrunk and confirmed (``Finding``), and
how a case names it (its symptom's one line, a hang's tasks in D state)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suite.explore.judge import Verdict
from suite.explore.ops import Sequence


@dataclass
class Finding:
    index: int                      # sequence k of the run
    original: Sequence
    verdict: Verdict                # how the generated sequence failed
    minimal: Sequence
    minimal_verdict: Verdict        # the confirming replay (else the last failing one)
    confirmed: bool
    tries: int
    exhausted: bool
    json_path: Path
    txt_path: Path
    text: str

    @property
    def kind(self) -> str:
        return self.verdict.kind or "no-result"

    def detail(self) -> str:
        """One line for the case's symptom (no word "trial": the reproducer's judge
        reads ``trial X:`` as an engine trial id)."""
        v = self.minimal_verdict
        if v.failed_at is None or not 0 <= v.failed_at < len(self.minimal.ops):
            where = v.trip.label() if v.trip is not None else f"no op: {v.why}"
            return f"explore seed {self.original.seed}: {where}"[:300]
        op = self.minimal.ops[v.failed_at].render()
        return (f"explore seed {self.original.seed} op {v.failed_at} ({op}): {v.why}")[:300]

    def stuck(self) -> tuple[str, tuple[str, ...]] | None:
        """A hang's tasks in D state (``"pid (comm), ..."`` and the functions on their
        stacks), as a case's after-case judge names them (``D-state``); None when the
        hang left none (a task spinning, or none the watchdog saw)."""
        from suite.guest.evidence import parse_dstate, stuck_summary
        trip = self.minimal_verdict.trip or self.verdict.trip
        if trip is None or trip.kind != "hang":
            return None
        tasks = [t for t in parse_dstate("\n".join(trip.lines)) if t.state.startswith("D")]
        return stuck_summary(tasks) if tasks else None
