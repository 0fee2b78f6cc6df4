"""When an op has made no progress for too long: a hang noticed in a minute or two,
not at the command's deadline.

The engine prints a line when it starts an op and one when the op ends, each
with the time the op took in the guest (``ms``). An op that has run for more
than ``factor`` times the slowest op seen so far in this session (at least
``floor_s``, both scaled by the accelerator: a TCG guest is several times slower)
is a hang. Before the first op (interpreter start-up, the target's setup) the
allowance is ``setup_s`` instead: that part has no op to compare with.

A hang this session has found already (its signature in ``found_hangs``: the
OpenZFS frames its tasks wait in) is recognised sooner: once an op has been quiet
for ``early_s`` the host reads the stacks, and the same signature is that hang again
(async-dio 317cbaa578: its fsync hang, met again through msync, fsync, fdatasync,
copy_file_range and FICLONERANGE, each waited out for 90 s and more under TCG).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

FACTOR = 8.0            # x the slowest op seen
FLOOR_S = 15.0          # an op may always take this long (before scaling)
SETUP_S = 120.0         # before the first op (before scaling)


@dataclass
class Pace:
    scale: float = 1.0
    factor: float = FACTOR
    floor_s: float = FLOOR_S
    setup_s: float = SETUP_S
    slowest_s: float = 0.0              # the slowest finished op of the session (guest time)
    # signatures (``Trip.signature``) of the hangs the session found, shared by its guests
    found_hangs: set[tuple[str, ...]] = field(default_factory=set)

    def learn(self, lines: Iterable[dict[str, Any]]) -> None:
        """Take the finished ops' times of a run (its ``op`` lines' ``ms``)."""
        for ln in lines:
            if ln.get("event") == "op" and isinstance(ln.get("ms"), (int, float)):
                self.slowest_s = max(self.slowest_s, float(ln["ms"]) / 1000.0)

    def early_s(self) -> float:
        """How long an op goes quiet before its stacks are read for a hang found
        already: half the floor, or twice the slowest op."""
        return max(self.floor_s * self.scale / 2, 2 * self.slowest_s)

    def allowance_s(self, started_ops: bool) -> float:
        """How long the current op (or the setup) may go without progress."""
        if not started_ops:
            return self.setup_s * self.scale
        return max(self.floor_s * self.scale, self.factor * self.slowest_s)


@dataclass
class Progress:
    """The host's view of one run: when its last line arrived, and whether an op
    has started. ``stalled`` answers with the seconds of no progress once they
    pass the allowance, else None."""
    pace: Pace
    last_line_at: float
    lines_seen: int = 0
    started_ops: bool = False
    peeked_at: int = -1                 # lines_seen when the stacks were last read early

    def see(self, lines: list[dict[str, Any]], now: float) -> None:
        if len(lines) > self.lines_seen:
            self.pace.learn(lines[self.lines_seen:])
            self.started_ops = self.started_ops or any(
                ln.get("event") == "begin" for ln in lines[self.lines_seen:])
            self.lines_seen, self.last_line_at = len(lines), now

    def stalled(self, now: float) -> float | None:
        quiet = now - self.last_line_at
        return quiet if quiet > self.pace.allowance_s(self.started_ops) else None

    def peek_due(self, now: float) -> bool:
        """Read the stacks now: the session found a hang already, an op is in flight
        and has been quiet for ``early_s``, and they were not read in this quiet."""
        if not (self.pace.found_hangs and self.started_ops) or self.peeked_at == self.lines_seen:
            return False
        if now - self.last_line_at <= self.pace.early_s():
            return False
        self.peeked_at = self.lines_seen
        return True
