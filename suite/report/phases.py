"""Where a run's time went: the per-case ``phases.json`` (suite/plugin/fixtures.py
``PhaseClock``) summed over the run, printed at its end and kept as ``phases.txt``."""
from __future__ import annotations

import json
from pathlib import Path

ORDER = ("boot", "acquire", "begin", "fixtures", "call", "end")


def collect(run_dir: Path) -> list[dict[str, float]]:
    out = []
    for p in sorted(run_dir.glob("cases/*/phases.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def totals(rows: list[dict[str, float]]) -> list[tuple[str, int, float, float, float]]:
    """(phase, cases that had it, mean s, total s, % of all) for each phase, in order."""
    total = sum(v for r in rows for k, v in r.items() if k in ORDER)
    out = []
    for k in ORDER:
        vals = [r[k] for r in rows if k in r]
        if vals:
            s = sum(vals)
            out.append((k, len(vals), s / len(vals), s, 100 * s / total if total else 0.0))
    return out


def summarize(rows: list[dict[str, float]]) -> str:
    """One line per phase: how many cases had it, total and mean seconds, share."""
    if not rows:
        return ""
    total = sum(v for r in rows for k, v in r.items() if k in ORDER)
    lines = [f"{len(rows)} cases, {total:.0f} s in guests' phases"
             f" ({total / len(rows):.1f} s a case)"]
    lines += [f"  {k:9s} {n:4d} x {mean:6.1f} s = {s:7.0f} s  {share:4.0f}%"
              for k, n, mean, s, share in totals(rows)]
    return "\n".join(lines)
