"""How long to explore: a wall clock (``15m``, ``90s``, ``1h``) or a number of
sequences (``20x``), as the explore options and ``python -m suite explore`` take it."""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|x)?\s*$")


@dataclass(frozen=True)
class Budget:
    """How long to explore: ``seconds`` of wall clock, or a number of ``sequences``."""
    seconds: float | None = None
    sequences: int | None = None

    def allows(self, done: int, elapsed_s: float) -> bool:
        if self.sequences is not None:
            return done < self.sequences
        return elapsed_s < (self.seconds or 0.0)

    def __str__(self) -> str:
        return f"{self.sequences}x" if self.sequences is not None else f"{self.seconds:g}s"

    def explore_s(self, per_sequence_s: float) -> float:
        """The exploring part's length, before any shrinking."""
        return self.sequences * per_sequence_s if self.sequences is not None \
            else float(self.seconds or 0.0)


def parse_budget(text: str) -> Budget:
    """``15m``, ``90s``, ``1h``, ``600`` (seconds) or ``20x`` (20 sequences)."""
    m = _BUDGET.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"budget {text!r}: give a time (90s, 15m, 1h) or a number of sequences (20x)")
    n, unit = float(m.group(1)), m.group(2) or "s"
    if unit == "x":
        return Budget(sequences=max(1, int(n)))
    return Budget(seconds=n * {"s": 1, "m": 60, "h": 3600}[unit])


def budget_arg(text: str) -> str:
    """argparse/pytest option type: the text itself, once it parses (an option's
    value must stay a string: xdist sends the options to its workers as data)."""
    parse_budget(text)
    return str(text)
