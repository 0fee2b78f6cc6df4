"""Builds x profiles: one table of what xfstests did in each, from any results folders.

``python -m suite xfstests --table DIR...`` reads every xfstests results file under the
folders (sessions, or folders of them), joins the parts of a ``--split`` run and the
shards of one build and profile, and prints one row per build and profile: how many
passed, failed, were excluded or did not run, the wall time (the longest part: the
parts run at once) and each failure with its message, so every failure can be named.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from suite.report import xfstests as xfs

DEPTHS = ("", "*/", "*/*/")


@dataclass
class Cell:
    build: str                 # the build's describe (commit and series)
    profile: str
    results: dict[str, xfs.XfsResult] = field(default_factory=dict)
    per_session: dict[str, float] = field(default_factory=dict)   # folder -> longest part
    parts: int = 0             # the most parts one session ran at once (--xfstests-split)
    stopped: bool = False

    @property
    def seconds(self) -> float:
        """Wall clock: each session's longest part (its parts run at once), summed."""
        return sum(self.per_session.values())

    def count(self, status: str) -> int:
        return sum(1 for r in self.results.values() if r.status == status)


def cells(roots: list[Path]) -> list[Cell]:
    """Every build x profile under ``roots``; a test seen twice keeps its newest result."""
    found: dict[tuple[str, str], Cell] = {}
    files = {f.resolve() for r in roots for d in DEPTHS
             for f in r.glob(f"{d}cases/*/{xfs.RESULTS_FILE}")}
    for f in sorted(files, key=lambda p: p.stat().st_mtime):
        meta, rs = xfs.load(f)
        key = (str(meta.get("describe") or meta.get("build") or "?"), str(meta.get("profile")))
        c = found.setdefault(key, Cell(*key))
        session = str(f.parent.parent.parent)
        c.per_session[session] = max(c.per_session.get(session, 0.0),
                                     float(meta.get("seconds") or 0))
        c.parts = max(c.parts, sum(1 for x in files if str(x.parent.parent.parent) == session
                                   and xfs.load(x)[0].get("profile") == key[1]))
        c.stopped = c.stopped or bool(meta.get("stopped"))
        for r in rs:
            old = c.results.get(r.test)
            if old is None or old.status in ("notrun", "excluded") or r.status in ("pass", "fail"):
                c.results[r.test] = r
    return sorted(found.values(), key=lambda c: (c.build, c.profile))


def minutes(s: float) -> str:
    return f"{int(s) // 60} min {int(s) % 60:02d} s"


def markdown(cs: list[Cell]) -> str:
    lines = ["| build | profile | passed | failed | excluded | not run | time | failures |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cs:
        fails = "; ".join(f"`{r.test}`: {r.reason[:80]}" for r in c.results.values() if r.failed)
        how = f" ({c.parts} parts at once)" if c.parts > 1 else ""
        how += f", {len(c.per_session)} runs" if len(c.per_session) > 1 else ""
        cut = " (stopped at the budget)" if c.stopped else ""
        lines.append(f"| {c.build} | {c.profile} | {c.count('pass')} | {c.count('fail')} | "
                     f"{c.count('excluded')} | {c.count('notrun')} | {minutes(c.seconds)}{how}"
                     f"{cut} | {fails.replace('|', '/') or '-'} |")
    return "\n".join(lines) + "\n"


def not_run(cs: list[Cell]) -> str:
    """Each test that did not run, once, with its reason (the same in most cells)."""
    seen: dict[str, str] = {}
    for c in cs:
        for r in c.results.values():
            if r.status in ("notrun", "excluded"):
                seen.setdefault(f"`{r.test}` ({r.status})", r.reason)
    return "\n".join(f"- {t}: {why}" for t, why in sorted(seen.items())) + "\n"
