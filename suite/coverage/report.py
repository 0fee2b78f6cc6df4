"""Report: the series' changed lines against what the cases executed.

A changed line counts when gcov knows it as a line that runs (a statement, not a
comment, declaration or brace); it was executed when its merged count is above 0.
Per file and per function (the innermost function whose lines hold it): changed,
executed, and the lines never reached. A changed file with no ``.gcno`` was not
built for this kernel (FreeBSD's, user space) and is listed apart.

Written: ``table.txt`` (what the CLI prints), ``coverage.json`` (what the run's
report page shows, its ``summary`` the one-line total), ``coverage.info`` (an
lcov tracefile of every instrumented file) and ``html/`` (genhtml's view of it).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from suite.coverage.diffmap import Changes
from suite.coverage.gcovdata import Counts, FileCounts
from suite.coverage.merge import CoverageError

GENHTML = "genhtml"
GENHTML_FIX = "apt-get install -y --no-install-recommends lcov  (Debian's lcov has genhtml)"
OUTSIDE = "(outside any function)"


@dataclass
class FunctionRow:
    name: str
    start: int
    changed: list[int] = field(default_factory=list)
    executed: list[int] = field(default_factory=list)

    @property
    def missed(self) -> list[int]:
        return sorted(set(self.changed) - set(self.executed))


@dataclass
class FileRow:
    path: str
    changed: list[int] = field(default_factory=list)    # changed lines that can run
    executed: list[int] = field(default_factory=list)
    functions: list[FunctionRow] = field(default_factory=list)
    other: int = 0                                      # changed lines that cannot run

    @property
    def missed(self) -> list[int]:
        return sorted(set(self.changed) - set(self.executed))


@dataclass
class DiffCoverage:
    title: str                                          # "async-dio base..head, build KEY"
    files: list[FileRow] = field(default_factory=list)
    not_built: list[str] = field(default_factory=list)  # changed files without a .gcno
    deleted_only: int = 0                               # hunks that only delete
    meta: dict = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(len(f.changed) for f in self.files)

    @property
    def executed(self) -> int:
        return sum(len(f.executed) for f in self.files)

    def never_reached(self) -> list[str]:
        """``file:function`` of every function with changed lines none of which ran."""
        return [f"{f.path}:{fn.name}" for f in self.files for fn in f.functions
                if fn.changed and not fn.executed]

    def summary(self, limit: int = 6) -> str:
        n, m = self.changed, self.executed
        pct = f" ({100 * m / n:.0f}%)" if n else ""
        line = f"the cases executed {m:,} of {n:,} changed lines{pct}"
        never = self.never_reached()
        if never:
            more = f" (+{len(never) - limit} more)" if len(never) > limit else ""
            line += "; never reached: " + ", ".join(never[:limit]) + more
        return line


def spans(lines: list[int]) -> str:
    """``[3, 4, 5, 9]`` as ``3-5, 9``."""
    out: list[str] = []
    for n in sorted(set(lines)):
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def build_rows(changes: Changes, counts: Counts) -> tuple[list[FileRow], list[str]]:
    rows, not_built = [], []
    for path in sorted(changes.lines):
        fc: FileCounts | None = counts.files.get(path)
        if fc is None:
            not_built.append(path)
            continue
        row = FileRow(path)
        funcs: dict[tuple[str, int], FunctionRow] = {}
        for n in sorted(changes.lines[path]):
            if n not in fc.lines:
                row.other += 1
                continue
            fn = fc.function_at(n)
            key = (fn.name, fn.start) if fn else (OUTSIDE, 0)
            fr = funcs.setdefault(key, FunctionRow(*key))
            row.changed.append(n)
            fr.changed.append(n)
            if fc.lines[n] > 0:
                row.executed.append(n)
                fr.executed.append(n)
        row.functions = sorted(funcs.values(), key=lambda f: f.start)
        rows.append(row)
    return rows, not_built


def diff_coverage(title: str, changes: Changes, counts: Counts, meta: dict | None = None
                  ) -> DiffCoverage:
    rows, not_built = build_rows(changes, counts)
    return DiffCoverage(title, rows, not_built, sum(changes.deletions.values()), meta or {})


def table(dc: DiffCoverage) -> str:
    w = max([len("file / function")] + [len(f.path) for f in dc.files]
            + [len(fn.name) + 2 for f in dc.files for fn in f.functions])
    w = min(w, 72)
    out = [dc.title, "",
           f"{'file / function':<{w}}  changed  executed  not reached"]
    for f in dc.files:
        out.append(f"{f.path:<{w}}  {len(f.changed):7d}  {len(f.executed):8d}  "
                   f"{spans(f.missed) or '-'}")
        for fn in f.functions:
            tag = "never reached: " if not fn.executed else ""
            out.append(f"  {fn.name[:w - 2]:<{w - 2}}  {len(fn.changed):7d}  "
                       f"{len(fn.executed):8d}  {tag}{spans(fn.missed) or '-'}")
    out.append(f"{'total':<{w}}  {dc.changed:7d}  {dc.executed:8d}")
    if dc.not_built:
        out.append("not built for this kernel (no .gcno): " + ", ".join(dc.not_built))
    if dc.deleted_only:
        out.append(f"{dc.deleted_only} hunk(s) only delete lines (nothing to execute)")
    out += ["", dc.summary(limit=1000)]
    return "\n".join(out) + "\n"


def to_json(dc: DiffCoverage) -> dict:
    """``coverage.json``: what the run's report page renders (a summary line, then
    a row per file and per function)."""
    return {
        "summary": dc.summary(),
        **dc.meta,
        "changed lines": dc.changed, "executed": dc.executed,
        "files": [{"file": f.path, "changed": len(f.changed), "executed": len(f.executed),
                   "not reached": spans(f.missed) or "-"} for f in dc.files],
        "functions": [{"file": f.path, "function": fn.name, "changed": len(fn.changed),
                       "executed": len(fn.executed), "not reached": spans(fn.missed) or "-"}
                      for f in dc.files for fn in f.functions],
        "not built": dc.not_built,
    }


def tracefile(counts: Counts, test: str = "ozfs-vmci") -> str:
    """An lcov tracefile (``TN/SF/FN/FNDA/DA``) of every file gcov read."""
    out: list[str] = []
    for rel in sorted(counts.files):
        fc = counts.files[rel]
        out += [f"TN:{test}", f"SF:{fc.source}"]
        funcs = sorted(fc.functions.values(), key=lambda f: f.start)
        out += [f"FN:{f.start},{f.name}" for f in funcs]
        out += [f"FNDA:{f.count},{f.name}" for f in funcs]
        out += [f"FNF:{len(funcs)}", f"FNH:{sum(1 for f in funcs if f.count)}"]
        out += [f"DA:{n},{c}" for n, c in sorted(fc.lines.items())]
        out += [f"LF:{len(fc.lines)}", f"LH:{sum(1 for c in fc.lines.values() if c)}",
                "end_of_record"]
    return "\n".join(out) + "\n"


def genhtml(info: Path, out: Path, title: str) -> Path:
    """genhtml's pages of ``info`` in ``out``; CoverageError naming the package
    when genhtml is not installed."""
    exe = shutil.which(GENHTML)
    if exe is None:
        raise CoverageError("genhtml not found (it renders the lcov tracefile as HTML)",
                            fix=GENHTML_FIX)
    if out.exists():
        shutil.rmtree(out)
    p = subprocess.run([exe, "--quiet", "--title", title[:60], "--ignore-errors", "source",
                        "--output-directory", str(out), str(info)],
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0 or not (out / "index.html").exists():
        raise CoverageError(f"genhtml failed (exit {p.returncode})", fix=f"tracefile: {info}",
                            detail=(p.stderr or p.stdout)[-1500:])
    return out / "index.html"


def write(dc: DiffCoverage, counts: Counts, out: Path, html: bool = True) -> list[Path]:
    """table.txt, coverage.json, coverage.info and html/ in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "table.txt", out / "coverage.json", out / "coverage.info"]
    files[0].write_text(table(dc))
    files[1].write_text(json.dumps(to_json(dc), indent=1) + "\n")
    files[2].write_text(tracefile(counts))
    if html:
        files.append(genhtml(files[2], out / "html", dc.title))
    return files
