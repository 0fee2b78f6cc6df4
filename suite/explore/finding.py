"""What explore found: one failing sequence, shrunk and confirmed (``Finding``), and
how a case names it (its symptom's one line, a hang's tasks in D state); what one
exploration came to (``ExploreResult``, written as ``summary.json``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.explore.failure import signature
from suite.explore.judge import Verdict
from suite.explore.ops import Sequence
from suite.explore.timing import time_split


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

    def frames(self) -> tuple[str, ...]:
        """A kernel report's top OpenZFS frames (a case's kernel symptom carries its
        stack the same way): what tells the write path's oops from the read path's."""
        trip = self.minimal_verdict.trip or self.verdict.trip
        if trip is None or not trip.kind.startswith("kernel:") or trip.blocked():
            return ()
        return trip.frames()

    def stuck(self) -> tuple[str, tuple[str, ...]] | None:
        """A hang's tasks in D state, or a hung-task report's (``"pid (comm), ..."``
        and the functions on their stacks), as a case's after-case judge names them
        (``D-state``); None when it left none (a task spinning, or none the watchdog
        saw)."""
        from suite.guest.evidence import parse_dstate, stuck_summary
        trip = self.minimal_verdict.trip or self.verdict.trip
        if trip is None or not (trip.kind == "hang" or trip.blocked()):
            return None
        tasks = [t for t in parse_dstate("\n".join(trip.lines)) if t.state.startswith("D")]
        return stuck_summary(tasks) if tasks else None


@dataclass
class ExploreResult:
    master_seed: int
    budget: str
    target: str = "file"
    runs: list[dict[str, Any]] = field(default_factory=list)   # one per generated sequence
    findings: list[Finding] = field(default_factory=list)
    no_result: list[tuple[int, Verdict]] = field(default_factory=list)   # (seed, verdict)
    replays: int = 0
    elapsed_s: float = 0.0          # wall clock, shrinking included
    shrinking_s: float = 0.0        # of it, shrinking and confirming findings (not the budget's)
    known: int = 0                  # sequences that failed as a known finding did
    boots: int = 0                  # fresh guests after one that tripped
    trips: list[dict[str, Any]] = field(default_factory=list)   # every run the kernel cut short
    avoided: list[dict[str, Any]] = field(default_factory=list)  # ops given up, and why
    cover: dict[str, Any] = field(default_factory=dict)   # --explore-cover: cells left
    aside: list[dict[str, Any]] = field(default_factory=list)   # met while shrinking

    def summary(self) -> dict[str, Any]:
        return {"master_seed": self.master_seed, "budget": self.budget, "target": self.target,
                "sequences": len(self.runs), "replays": self.replays,
                "elapsed_s": round(self.elapsed_s, 1),
                "shrinking_s": round(self.shrinking_s, 1), "known": self.known,
                "boots": self.boots, "trips": self.trips, "avoided": self.avoided,
                "cover": self.cover, "aside": self.aside,
                "time_split": time_split(self.runs), "runs": self.runs,
                "findings": [{"seed": f.original.seed, "kind": f.kind, "confirmed": f.confirmed,
                              "signature": list(signature(f.original, f.verdict)),
                              "ops": len(f.minimal.ops), "original_ops": len(f.original.ops),
                              "tries": f.tries, "failed_at": f.minimal_verdict.failed_at,
                              "trip": f.minimal_verdict.trip.to_dict()
                              if f.minimal_verdict.trip else None,
                              "json": str(f.json_path), "txt": str(f.txt_path)}
                             for f in self.findings],
                "no_result": [{"seed": s, **v.to_dict()} for s, v in self.no_result]}


@dataclass
class Aside:
    """Failures a shrink candidate met that are not the one being shrunk (syzkaller
    keeps the other crashes its minimisation sees): each signature once, its candidate
    saved as ``aside-<seed>-<n>.json`` to replay. At 30582e2f4c (2026-12-07) shrinking
    an oops met ``crash-lost`` after a power cut twice, the symptom of the very bug
    of that commit, and nothing kept it."""
    out_dir: Path
    seen: list[dict[str, Any]] = field(default_factory=list)

    def keep(self, seq: Sequence, v: Verdict, sig: tuple[str, ...]) -> None:
        if any(a["signature"] == list(sig) for a in self.seen):
            return
        path = self.out_dir / f"aside-{seq.seed}-{len(self.seen) + 1}.json"
        path.write_text(seq.to_json())
        op = seq.ops[v.failed_at].render() if v.failed_at is not None and \
            0 <= v.failed_at < len(seq.ops) else ""
        self.seen.append({"seed": seq.seed, "kind": v.kind, "why": (v.why or "")[:300], "op": op,
                          "failed_at": v.failed_at, "ops": len(seq.ops),
                          "signature": list(sig), "json": str(path)})
