"""The lanes of ``suite bugs``: each a way to look at a series' known bugs at their
commits, and one table built from any set of them.

A ``Lane`` says three things:

- what it runs at a commit (``at``: ``series@commit``, or the commit alone on the
  series' base, the control), or where it reads an earlier run instead;
- how its results read (its record's ``describe``: ``ZtsAt``, ``ExploreAt``,
  ``XfstestsAt``, the cases' ``Outcome``);
- how a failure there is credited to a bug, by the bug's own symptom (``cell``).

A run at a commit is shared by every bug that has it (``visit``: once per bad
commit; the suite's cases, per bug, at its bad and fixed commits). ``table`` makes
the markdown every lane's table is: a row per bug, a column per lane.

The four: ``cases`` (the suite's targeted cases), ``zts`` (OpenZFS's own tests),
``explore`` (the exerciser), ``xfstests``. A new lane is one module here: a
``Lane`` with its ``at`` and ``cell``, and ``add_options``/``from_args`` for its
flags; its name goes in ``suite/bugs_cmd.py``'s ``LANES``.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from suite.source.series import KnownBug, Manifest


class Lane:
    """One way to look at a known bug at its commits (see the module's text)."""
    name = ""          # its word on the command line: --lane NAME
    label = ""         # how messages name it: "not run here (ZTS only)"
    column = ""        # its column in the table: "ZTS at bad"
    file = ""          # its table in the bugs folder: "zts-vs-suite.md"
    title = ""         # the line above the table when printed
    with_suite = False     # its table has the suite's column before its own
    on_base = False        # it runs on the series' base too (the control)
    only = False           # it runs alone: the suite's cases are left out

    @property
    def runs(self) -> dict[Any, Any]:
        """What it saw, by commit (``commit[:11]``); one run shared by its bugs."""
        return self.__dict__.setdefault("_runs", {})

    @property
    def base_run(self) -> Any:
        return self.__dict__.get("_base")

    def at(self, series: str, commit: str, root: Path, extra: list[str],
           base: bool = False) -> Any:
        """Run the lane at ``series@commit`` (``base``: the commit alone), or read
        an earlier run; its record."""
        raise NotImplementedError

    def cell(self, bug: KnownBug) -> str | None:
        """The bug's cell: what the lane saw at its bad commit, credited to the bug
        only by the bug's own symptom; None leaves the bug's row out of the table."""
        raise NotImplementedError

    def proved(self, run: Any) -> bool:
        """The run proved something (ran, and was not cut short by the harness)."""
        return not getattr(run, "problem", "")

    def start(self, m: Manifest, root: Path, extra: list[str]) -> None:
        """Before any bug: the run on the series' base, for a lane that has one."""
        if self.on_base:
            self.__dict__["_base"] = self.at(m.name, m.base, root, extra, base=True)

    def visit(self, m: Manifest, bug: KnownBug, role: str, commit: str, root: Path,
              extra: list[str]) -> None:
        """At a bug's ``role`` commit: run once per bad commit."""
        if role == "bad" and commit[:11] not in self.runs:
            self.runs[commit[:11]] = self.at(m.name, commit, root, extra)

    def run(self, bug: KnownBug) -> Any:
        """What the lane saw at ``bug``'s bad commit (None: not run there)."""
        return self.runs.get(bug.bad[:11])

    def ok(self) -> bool:
        """Every run (the base's too) proved something."""
        return all(self.proved(r) for r in [*self.runs.values(),
                                            *filter(None, [self.base_run])])

    def head(self) -> list[str]:
        """Lines above the table (the base the lane compared against)."""
        return []


def escaped(text: str) -> str:
    """A cell's text that keeps the markdown row whole."""
    return text.replace("|", "\\|").replace("\n", " ")


def table(bugs: list[KnownBug], lanes: list[Lane]) -> str:
    """Markdown: a row per bug (bug, bad commit, each lane's cell), the lanes' own lines
    above it; a bug a lane has no cell for is left out."""
    lines = [*(ln for lane in lanes for ln in lane.head()),
             "| bug | bad commit | " + " | ".join(lane.column for lane in lanes) + " |",
             "|---" * (2 + len(lanes)) + "|"]
    for b in bugs:
        cells = [lane.cell(b) for lane in lanes]
        if None not in cells:
            lines.append(f"| `{b.id}` | {b.bad[:11]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def chosen(args: argparse.Namespace, name: str) -> tuple[bool, bool]:
    """(``--lane NAME`` was given, and without ``--lane cases``: the lane runs alone)."""
    picked = name in (getattr(args, "lane", None) or [])
    return picked, picked and "cases" not in args.lane
