"""Diff map: the lines a series adds or changes, from git.

``git diff -U0 <base> <head> -- module/`` in the object cache (where every build's
commits are; ``suite/source/objects.py``) gives hunks ``@@ -a,b +c,d @@``: lines
``c .. c+d-1`` of the new file are the series'. A hunk with ``d = 0`` only deletes:
it has no line to execute and is counted apart. Which of the changed lines can
run at all, and in which function, comes from gcov (``gcovdata``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from suite.source.objects import git

HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
PATHSPEC = ("module/",)


@dataclass
class Changes:
    """Per file of the new tree: the line numbers the diff adds or changes."""
    lines: dict[str, set[int]] = field(default_factory=dict)
    deletions: dict[str, int] = field(default_factory=dict)     # hunks that only delete
    removed: list[str] = field(default_factory=list)            # files the series deletes

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.lines.values())


def parse(diff: str) -> Changes:
    """A ``git diff -U0`` as :class:`Changes`."""
    out = Changes()
    path: str | None = None
    old: str | None = None
    for ln in diff.splitlines():
        if ln.startswith("--- "):
            old = ln[4:].removeprefix("a/")
            continue
        if ln.startswith("+++ "):
            new = ln[4:]
            path = None if new == "/dev/null" else new.removeprefix("b/")
            if path is None and old and old != "/dev/null":
                out.removed.append(old)
            continue
        m = HUNK.match(ln)
        if m and path is not None:
            start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
            if count == 0:
                out.deletions[path] = out.deletions.get(path, 0) + 1
                continue
            out.lines.setdefault(path, set()).update(range(start, start + count))
    return out


def series_diff(git_dir: Path, base: str, head: str,
                pathspec: tuple[str, ...] = PATHSPEC) -> str:
    """``git diff -U0 base head -- pathspec`` (renames followed: a moved file's
    unchanged lines are not the series')."""
    return git("diff", "-U0", "--no-color", "--no-ext-diff", "-M", base, head, "--",
               *pathspec, git_dir=git_dir).stdout


def changes(git_dir: Path, base: str, head: str,
            pathspec: tuple[str, ...] = PATHSPEC) -> Changes:
    return parse(series_diff(git_dir, base, head, pathspec))
