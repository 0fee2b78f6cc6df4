"""Which known bug did ZTS see, and which did this suite see, at each bad commit.

``python -m suite bugs SERIES --zts`` runs, beside each bug's cases, the ZTS lane
(``cases/test_zts.py``: the ``direct`` tag and the series' ``async`` tag where it
has one; ``--zts-tags`` narrows) at every bad commit; ``--zts-only`` runs the ZTS
lane alone. The table that answers a maintainer:

    bug | bad commit | this suite at bad | ZTS at bad (unexpected failures)

ZTS is credited with a bug only through a test that failed unexpectedly at the
bad commit; whether that failure is the bug's own symptom a human must read (the
test's log is in the results), so the table lists the tests, it does not claim.
Runs at one commit are shared by every bug that has it. ``--zts-from DIR`` reads
ZTS's side from earlier runs instead (``read_zts_at``), and ``--suite-from`` the
suite's, so the table can be put together from runs made at different times.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from suite import paths
from suite.campaign.lanes import Lane, chosen
from suite.report import zts
from suite.sessions import count, run_cases, sessions_newest_first, skip_reasons
from suite.source.series import KnownBug


@dataclass
class ZtsAt:
    commit: str
    ran: int = 0
    unexpected: list[str] = field(default_factory=list)   # "direct/dio_mmap FAIL"
    problem: str = ""
    absent: list[str] = field(default_factory=list)          # why a tag was skipped
    results: str = ""
    seconds: float = 0.0
    only: list[str] = field(default_factory=list)    # --zts-test narrowed the tag to these
    partial: bool = False                            # cut short: later tests never ran

    def describe(self) -> str:
        if self.problem:
            return f"INCONCLUSIVE: {self.problem}"
        if not self.ran and self.absent:
            return "no test here (saw nothing): " + "; ".join(self.absent)
        if not self.ran:
            return "INCONCLUSIVE: ZTS ran no test"
        scope = f" (only {', '.join(t.rsplit('/', 1)[-1] for t in self.only)})" if self.only else ""
        if self.unexpected:
            cut = ", then cut short" if self.partial else ""
            return f"{len(self.unexpected)} unexpected of {self.ran}{scope}{cut}: " + \
                ", ".join(self.unexpected)
        if self.partial:       # silence so far is not a pass: the rest never ran
            return f"INCONCLUSIVE: cut short after {self.ran}{scope}, all as expected so far"
        return f"all {self.ran}{scope} as expected (saw nothing)"


@dataclass
class Runs:
    """ZTS results of one or more sessions at one commit, a newer result per test winning."""
    results: dict[str, zts.ZtsResult] = field(default_factory=dict)
    only: list[str] = field(default_factory=list)    # [] once any of them ran whole tags
    partial: bool = False
    lbs: set[int] = field(default_factory=set)

    @property
    def unexpected(self) -> list[str]:
        return [f"{t.removeprefix('functional/')} {r.result}"
                for t, r in self.results.items() if r.failed]


def read_runs(dirs: list[Path]) -> Runs:
    """``dirs`` oldest first: a narrowed rerun (``--zts-test``) adds to or replaces
    what an earlier run said of the same tests."""
    out, whole = Runs(), False
    for d in dirs:
        for f in sorted(d.glob(f"*/cases/*/{zts.RESULTS_FILE}")):
            meta, res = zts.load(f)
            out.results.update({r.test: r for r in res})
            whole = whole or not meta.get("only")
            out.only += [t for t in meta.get("only") or [] if t not in out.only]
            out.partial = out.partial or bool(meta.get("partial"))
            out.lbs.add(int(meta.get("lbs") or 4096))
    if whole:
        out.only = []
    return out


def read_session(results: Path) -> tuple[int, list[str]]:
    """(tests ran, unexpected 'test RESULT') from one ZTS session's results."""
    r = read_runs([results])
    return len(r.results), r.unexpected


def _judge(out: ZtsAt, results: Path | list[Path], tests: int | None, problem: str) -> ZtsAt:
    dirs = results if isinstance(results, list) else [results]
    runs = read_runs(dirs)
    out.results = " + ".join(map(str, dirs))
    out.ran, out.unexpected = len(runs.results), runs.unexpected
    out.only, out.partial = runs.only, runs.partial
    out.absent = [a for d in dirs for a in skip_reasons(d / "junit.xml")]
    out.problem = problem or ("" if tests else "the ZTS session wrote no JUnit report "
                              "(see pytest.log)")
    return out


def run_zts_at(name: str, commit: str, root: Path, extra: list[str],
               tags: tuple[str, ...] = ()) -> ZtsAt:
    out = ZtsAt(commit[:11])
    results = root / "zts" / commit[:11]
    k = ["-k", " or ".join(tags)] if tags else []
    print(f"==> ZTS at {name}@{commit[:11]} (-m zts {' '.join(k)})", flush=True)
    tests, problem, out.seconds = run_cases(
        ["-m", "zts", *k, "--series", f"{name}@{commit[:11]}"], results, extra,
        targets=[str(paths.PROJECT_ROOT / "cases" / "test_zts.py")])
    _judge(out, results, tests, problem)
    print(f"<== ZTS at {commit[:11]}: {out.describe()} in {out.seconds:.0f}s; {results}",
          flush=True)
    return out


def read_zts_at(commit: str, roots: list[Path]) -> ZtsAt:
    """What ZTS saw at ``commit`` in earlier ``bugs --zts`` sessions under ``roots``
    (each a ``bugs-*`` folder or a results folder holding them): the newest, plus the
    ones before it back to the newest that ran its tags whole, on the newest's sector
    size. So a test rerun alone (``--zts-test``) updates the whole run's row."""
    c = commit[:11]
    found = sessions_newest_first(roots, f"zts/{c}")
    if not found:
        return ZtsAt(c, problem="no earlier ZTS run under --zts-from")
    runs = {d: read_runs([d]) for d in found}      # each session read once
    dirs: list[Path] = []
    for d in found:             # narrowed reruns back to the newest whole run, one sector size
        if runs[d].lbs != runs[found[0]].lbs:
            continue
        dirs.insert(0, d)
        if not runs[d].only:
            break
    out = _judge(ZtsAt(c), dirs, sum(count(dirs[-1] / "junit.xml")), "")
    print(f"<== ZTS at {c}: {out.describe()}, read from {out.results}", flush=True)
    return out


@dataclass
class ZtsLane(Lane):
    """``bugs --zts``: ZTS at each bad commit (``tags``: the tags to run; none: the
    lane's own choice), or read from earlier runs (``read_from``)."""
    name, label, column = "zts", "ZTS", "ZTS at bad"
    file, title = "zts-vs-suite.md", "ZTS and this suite at each bad commit"
    with_suite = True
    tags: tuple[str, ...] = ()
    only: bool = False
    read_from: list[Path] = field(default_factory=list)

    def at(self, series: str, commit: str, root: Path, extra: list[str],
           base: bool = False) -> ZtsAt:
        if self.read_from:
            return read_zts_at(commit, list(self.read_from))
        return run_zts_at(series, commit, root, extra, self.tags)

    def cell(self, bug: KnownBug) -> str:
        z = self.run(bug)
        return z.describe() if z else "not run"

    def proved(self, run: ZtsAt) -> bool:
        return bool(run.ran) and not run.problem


def add_options(kb: argparse.ArgumentParser) -> None:
    """``bugs``' ZTS options."""
    kb.add_argument("--zts", action="store_true",
                    help="also run OpenZFS's own tests (ZTS lane) at each bad commit and "
                         "print what ZTS saw beside what the suite saw")
    kb.add_argument("--zts-only", action="store_true",
                    help="run only the ZTS lane at each bad commit (no suite cases)")
    kb.add_argument("--zts-tags", default="", help="ZTS tags to run, comma-separated "
                    "(default: direct and async, where the build has it)")
    kb.add_argument("--zts-from", action="append", default=[], metavar="DIR",
                    help="read ZTS's side from an earlier `suite bugs --zts` results folder "
                         "instead of running it (repeatable; per commit the newest run, with "
                         "the narrowed --zts-test reruns back to the newest whole one)")


def from_args(args: argparse.Namespace) -> ZtsLane | None:
    """``--zts`` / ``--zts-only`` / ``--zts-from`` / ``--lane zts``: the lane, or None.
    ``--zts-from`` alone reads ZTS's side, the suite's cases left out."""
    picked, alone = chosen(args, "zts")
    how = "only" if args.zts_only else ("also" if args.zts else "")
    how = how or ("only" if alone else "also" if picked else "")
    how = how or ("only" if args.zts_from else "")
    if not how:
        return None
    return ZtsLane(tuple(t for t in (args.zts_tags or "").split(",") if t), only=how == "only",
                   read_from=[Path(d) for d in args.zts_from])
