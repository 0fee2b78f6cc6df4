"""``python -m suite coverage --series NAME [--results DIR ...]``: the series'
changed lines against what the cases of those runs executed.

Every ``coverage/gcda/<build key>/<guest>/`` under the results folders (sessions,
shards, a gate's sides) is gathered; the builds whose record applied the series
are kept, each build's guests merged (``merge``), read against the build's
``.gcno`` (``gcovdata``) and mapped onto ``git diff -U0 <base> <head> -- module/``
of that build (``diffmap``): base is the commit the series was applied to, head
the commit built (with several series stacked, the diff holds them all; the
output says so). Output per build in ``<out>/coverage/<key>/``.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from suite import paths
from suite.build.recipe import BuildRecord
from suite.coverage import diffmap, gcovdata, merge, report
from suite.coverage.merge import CoverageError
from suite.errors import SuiteError


@dataclass
class BuildData:
    key: str
    record: BuildRecord
    guests: list[Path]


def gcda_roots(folder: Path, depth: int = 5) -> list[Path]:
    """Every ``coverage/gcda`` folder under ``folder`` (a session, or a folder of them)."""
    out: list[Path] = []
    if depth < 0 or not folder.is_dir():
        return out
    here = folder / "coverage" / "gcda"
    if here.is_dir():
        out.append(here)
    for p in sorted(folder.iterdir()):
        if p.is_dir() and not p.is_symlink() and p.name not in ("coverage", "vms", "cases"):
            out += gcda_roots(p, depth - 1)
    return out


def find_record(key: str, near: Path) -> BuildRecord | None:
    """The build record of ``key``: the session's copy (``build/record-<key>.json``
    beside ``coverage/``), else the build cache's."""
    for p in (near / "build" / f"record-{key}.json", paths.builds_dir() / key / "record.json"):
        if p.is_file():
            try:
                return BuildRecord.load(p)
            except (ValueError, TypeError, KeyError):
                continue
    return None


def guest_dirs(kdir: Path) -> list[Path]:
    """The guests' copies of one build (``<key>/<guest>/``) that hold counters."""
    return sorted(g for g in kdir.iterdir() if g.is_dir() and any(g.rglob("*.gcda")))


def gather(results: list[Path], series: str) -> tuple[list[BuildData], list[str]]:
    """The builds of ``series`` with guest counters in ``results``; and notes on
    what was passed over."""
    builds: dict[str, BuildData] = {}
    notes: list[str] = []
    for folder in results:
        for root in gcda_roots(folder):
            session = root.parent.parent
            for kdir in sorted(p for p in root.iterdir() if p.is_dir()):
                guests = guest_dirs(kdir)
                if not guests:
                    continue
                rec = builds[kdir.name].record if kdir.name in builds else \
                    find_record(kdir.name, session)
                if rec is None:
                    notes.append(f"{kdir}: no build record for {kdir.name}")
                    continue
                names = [s["name"] for s in rec.source.get("series", [])]
                if series not in names:
                    notes.append(f"{kdir}: build {kdir.name} has series "
                                 f"{', '.join(names) or 'none'}, not {series}")
                    continue
                builds.setdefault(kdir.name, BuildData(kdir.name, rec, [])).guests += guests
    return list(builds.values()), notes


def newest_session() -> Path | None:
    root = paths.results_root()
    runs = sorted((p for p in root.glob("*/coverage/gcda") if p.is_dir()),
                  key=lambda p: p.stat().st_mtime) if root.is_dir() else []
    return runs[-1].parent.parent if runs else None


def one_build(b: BuildData, series: str, out: Path, git_dir: Path,
              pathspec: tuple[str, ...] = diffmap.PATHSPEC,
              html: bool = True) -> tuple[report.DiffCoverage, list[Path]]:
    src = b.record.source
    base, head = src["base_commit"], src["commit"]
    stacked = [s["name"] for s in src.get("series", [])]
    with tempfile.TemporaryDirectory(prefix="ozfs-gcov.") as tmp:
        merged = merge.merge(b.guests, Path(tmp) / "merged", b.record.src_dir)
        counts = gcovdata.read(Path(b.record.src_dir), merged.root)
    changes = diffmap.changes(git_dir, base, head, pathspec)
    title = (f"{series}: {base[:11]}..{head[:11]} ({src.get('describe', '')}), build {b.key}, "
             f"{merged.inputs} guest(s)")
    meta = {"series": series, "base": base, "head": head, "build": b.key,
            "guests": merged.inputs, "objects with counters": counts.with_data,
            "objects": counts.objects}
    if len(stacked) > 1:
        meta["note"] = f"the diff holds every stacked series: {', '.join(stacked)}"
    dc = report.diff_coverage(title, changes, counts, meta)
    files = report.write(dc, counts, out / "coverage" / b.key, html=html)
    return dc, files


def run(series: str, results: list[Path], out: Path | None = None,
        git_dir: Path | None = None, html: bool = True) -> int:
    """The CLI: print each build's table and where its files went. 0: mapped;
    2: nothing to map (no counters of the series in ``results``)."""
    if not results:
        newest = newest_session()
        if newest is None:
            raise CoverageError(f"no results folder under {paths.results_root()} holds guest "
                                "counters (coverage/gcda/)",
                                fix="run the cases with --kernel debian-6.1-debug (its OpenZFS "
                                    "build has gcov), or pass --results DIR")
        results = [newest]
    builds, notes = gather(results, series)
    if not builds:
        raise CoverageError(f"no guest counters of a build with series {series} in "
                            f"{', '.join(map(str, results))}",
                            fix="run the series' cases on a gcov kernel profile: "
                                f"pytest cases --series {series} --kernel debian-6.1-debug",
                            detail="\n".join(notes))
    out = out or results[0]
    for b in builds:
        dc, files = one_build(b, series, out, git_dir or paths.git_cache(), html=html)
        print(report.table(dc), end="")
        print("\n".join(f"wrote {f}" for f in files))
    for n in notes:
        print(f"note: {n}")
    return 0


def after_session(run_dir: Path, git_dir: Path | None = None) -> list[str]:
    """At the end of a run whose guests left counters: each build's diff coverage
    into ``<run>/coverage/<key>/`` (the run's report shows its one-line total), as
    lines for the terminal. Never raises: a map that cannot be made is a line."""
    root = run_dir / "coverage" / "gcda"
    if not root.is_dir():
        return []
    out: list[str] = []
    html = shutil.which(report.GENHTML) is not None
    for kdir in sorted(p for p in root.iterdir() if p.is_dir()):
        guests = guest_dirs(kdir)
        rec = find_record(kdir.name, run_dir)
        names = [s["name"] for s in rec.source.get("series", [])] if rec else []
        if not guests or rec is None or not names:
            why = ("no guest left counters" if not guests else
                   "no build record" if rec is None else "a build with no series")
            out.append(f"ozfs-vmci coverage of build {kdir.name}: nothing mapped ({why})")
            continue
        try:
            dc, files = one_build(BuildData(kdir.name, rec, guests), "+".join(names), run_dir,
                                  git_dir or paths.git_cache(), html=html)
        except (SuiteError, OSError) as e:
            out.append(f"ozfs-vmci coverage of build {kdir.name} could not be mapped: "
                       f"{str(e).splitlines()[0]}")
            continue
        out.append(f"ozfs-vmci coverage ({'+'.join(names)}): {dc.summary()}")
        out.append(f"  {files[0].parent}" + ("" if html else
                                            f"  (no HTML view: {report.GENHTML_FIX})"))
    return out
