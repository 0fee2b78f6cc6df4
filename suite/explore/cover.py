"""``--explore-cover``: run only the sequences that reach a cell of the reach table no
run has executed yet, and stop once every cell was executed (or given up: drawn by
``GIVE_UP`` runs and executed by none, so the guest cannot give it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from suite.explore.ops import Sequence
from suite.explore.reach import REWRITE_CELL, from_runs, seq_cells, seq_tunables

SKIP = 400              # seeds looked at in a row for one that reaches a missing cell
GIVE_UP = 3             # runs that drew a cell and never executed it: not here


@dataclass
class Cover:
    """Which cells are still to execute (those the session can draw at all)."""
    params: tuple[str, ...]
    asked: tuple[str, ...]     # crash points and a zvol's synced rewrite, where drawn
    skipped: int = 0
    given_up: list[str] = field(default_factory=list)
    _left: tuple[int, set[str]] = (-1, set())     # (runs it was worked out for, cells)

    @classmethod
    def of(cls, choices: Any, target: str) -> "Cover":
        """The cells of a session that draws from ``choices`` on ``target``."""
        asked = tuple(c for c, op in (("crash:freeze", "freeze"), ("crash:power", "power_cut"),
                                      ("crash:power-slow", "power_cut"))
                      if op in choices.ops and choices.zfs_ops and target == "file")
        if target == "zvol" and choices.zfs_ops and "txg_sync" in choices.ops:
            asked += (REWRITE_CELL,)      # drawn where the pool can be synced
        return cls(tuple(choices.params), asked)

    def missing(self, runs: list[dict[str, Any]]) -> set[str]:
        """The cells left; worked out once per run added (runs only grow), not once per
        seed looked at."""
        if self._left[0] != len(runs):
            self._left = (len(runs), self._work_out(runs))
        return set(self._left[1])

    def _work_out(self, runs: list[dict[str, Any]]) -> set[str]:
        done = from_runs(runs, "executed")
        drawn = from_runs(runs)
        left = set(done.missing(self.params, self.asked))
        for c in sorted(left):
            if drawn.cells.get(c, 0) + drawn.tunables.get(c, 0) >= GIVE_UP and \
                    c not in self.given_up:
                self.given_up.append(c)
        return left - set(self.given_up)

    def give_up(self, cell: str) -> None:
        """``cell`` cannot be executed here (its op is avoided: it hangs this kernel)."""
        if cell not in self.given_up:
            self.given_up.append(cell)
            self._left = (-1, set())

    def admits(self, seq: Sequence, runs: list[dict[str, Any]]) -> bool:
        """``seq`` reaches a cell no run executed yet (else it is skipped, counted)."""
        missing = self.missing(runs)
        if missing and (set(seq_cells(seq)) | set(seq_tunables(seq))) & missing:
            self.skipped = 0
            return True
        self.skipped += 1
        return False

    def done(self, runs: list[dict[str, Any]]) -> bool:
        """Nothing left to reach, or no seed reaches what is left."""
        return not self.missing(runs) or self.skipped >= SKIP

    def state(self, runs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"missing": sorted(self.missing(runs)), "given_up": list(self.given_up),
                "skipped": self.skipped}
