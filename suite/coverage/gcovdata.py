"""Read counters: gcc's ``gcov`` over the build's ``.gcno`` and the merged ``.gcda``,
as line and function counts per source file of the build's tree.

Every ``.gcno`` under the tree's ``module/`` is read, with its merged ``.gcda`` when
a guest ran that object (one without is read as never executed: a file the cases
never reached still counts its lines). Both are staged side by side in a temporary
folder (the ``.gcno`` linked, never copied: the build stays as it is) and ``gcov
--json-format --stdout`` prints one JSON document per object. A header's inline
functions appear in every object that includes it: their counts are summed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from suite.coverage.merge import BUILD_TREE, CoverageError

TOOL = "gcov"
BATCH = 200                 # objects per gcov call


@dataclass
class Function:
    name: str
    start: int
    end: int
    count: int = 0


@dataclass
class FileCounts:
    path: str                                   # relative to the build's tree
    source: str                                 # absolute, as compiled
    lines: dict[int, int] = field(default_factory=dict)         # line -> executions
    functions: dict[tuple[str, int], Function] = field(default_factory=dict)

    def function_at(self, line: int) -> Function | None:
        """The innermost function whose lines hold ``line``."""
        best = None
        for f in self.functions.values():
            if f.start <= line <= f.end and (best is None or f.start >= best.start):
                best = f
        return best


@dataclass
class Counts:
    files: dict[str, FileCounts] = field(default_factory=dict)
    objects: int = 0                # .gcno read
    with_data: int = 0              # of them, with counters from a guest
    warnings: list[str] = field(default_factory=list)

    def add(self, doc: dict, src_dir: str) -> None:
        cwd = doc.get("current_working_directory", "")
        for f in doc.get("files", []):
            name = f["file"]
            source = name if os.path.isabs(name) else os.path.normpath(os.path.join(cwd, name))
            rel = source_relative(source, src_dir)
            if rel is None:
                continue                    # a kernel or system header: not the build's
            fc = self.files.setdefault(rel, FileCounts(rel, source))
            for ln in f.get("lines", []):
                n = int(ln["line_number"])
                fc.lines[n] = fc.lines.get(n, 0) + int(ln["count"])
            for fn in f.get("functions", []):
                key = (fn["name"], int(fn["start_line"]))
                have = fc.functions.get(key)
                if have is None:
                    fc.functions[key] = Function(fn.get("demangled_name") or fn["name"],
                                                 int(fn["start_line"]), int(fn["end_line"]),
                                                 int(fn["execution_count"]))
                else:
                    have.count += int(fn["execution_count"])


def source_relative(source: str, src_dir: str) -> str | None:
    """A compiled source's path relative to the build's tree (this build's, or the
    sibling's a seeded build took unchanged objects from); None: not the build's."""
    root = src_dir.rstrip("/") + "/"
    if source.startswith(root):
        return source[len(root):]
    m = BUILD_TREE.search(source)
    return m.group(1) if m else None


def tool() -> str:
    exe = shutil.which(TOOL)
    if exe is None:
        raise CoverageError(f"{TOOL} not found (it reads the counters)",
                            fix="apt-get install -y --no-install-recommends gcc")
    return exe


def read(src_dir: Path, gcda_root: Path | None, under: str = "module") -> Counts:
    """Line and function counts of every instrumented object under ``src_dir/under``;
    counters from ``gcda_root/<relative>.gcda`` where a guest left them."""
    notes = sorted((src_dir / under).rglob("*.gcno"))
    if not notes:
        raise CoverageError(f"no .gcno under {src_dir / under}: the build was not "
                            "instrumented, or its tree is gone",
                            fix="build on a profile with [zfs] gcov = true (--kernel "
                                "debian-6.1-debug); a removed build is rebuilt by "
                                "`python -m suite build` with the run's options")
    counts = Counts()
    with tempfile.TemporaryDirectory(prefix="ozfs-gcov-read.") as tmp:
        staged: list[str] = []
        for gcno in notes:
            rel = gcno.relative_to(src_dir)
            stem = Path(tmp) / rel.with_suffix("")
            stem.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(gcno, stem.with_suffix(".gcno"))
            if gcda_root is not None and (gcda_root / rel.with_suffix(".gcda")).is_file():
                os.symlink((gcda_root / rel.with_suffix(".gcda")).resolve(),
                           stem.with_suffix(".gcda"))
                counts.with_data += 1
            staged.append(str(rel.with_suffix(".gcno")))
        counts.objects = len(staged)
        for i in range(0, len(staged), BATCH):
            p = subprocess.run([tool(), "--json-format", "--stdout", *staged[i:i + BATCH]],
                               cwd=tmp, capture_output=True, text=True, timeout=1800)
            docs = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            if p.returncode != 0 and not docs:
                raise CoverageError(f"gcov failed (exit {p.returncode})",
                                    fix="the .gcno and .gcda must come from the same build "
                                        "and the same gcc",
                                    detail=p.stderr[-1500:])
            for d in docs:
                counts.add(json.loads(d), str(src_dir))
            counts.warnings += [ln for ln in p.stderr.splitlines()
                                if ln and "cannot open data file" not in ln][:20]
    return counts
