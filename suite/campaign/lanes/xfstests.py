"""What xfstests saw at each known bug's bad commit, beside the series' base.

``python -m suite bugs SERIES --xfstests SEL`` runs the xfstests lane
(``cases/test_xfstests.py``) once at every distinct bad commit of the series' bugs
and once at the series' base, the control: a test that fails at the bad commit and
on the base too is the base's (upstream's), not the bug's. ``--xfstests-profile``
picks the profiles (default: every one the build can run but ``plain``, so every
aligned request goes through Direct I/O); ``--xfstests-only`` leaves the suite's
cases out; ``--xfstests-from DIR`` reads earlier runs instead (with ``--xfstests``, runs only
the commits they lack: a sweep resumed). The table:

    bug | bad commit | xfstests at bad

xfstests is credited, as ZTS is, only through a test that failed at the bad commit
and not on the base. The cell says CAUGHT only when such a failure's ``.out.bad``
names one of the bug's own symptom kinds (``suite/report/xfsymptoms.py``: an errno,
EFAULT for ``eof-tail-efault``); otherwise it lists the tests and a human reads their
``.out.bad`` and ``.full`` in the results.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from suite import paths
from suite.build import xfstests as xbuild
from suite.campaign.lanes import Lane, chosen, escaped
from suite.casekit.xfstests import check_args
from suite.report import xfstests as xfs
from suite.report import xfsymptoms
from suite.sessions import failure_messages, run_cases, sessions_newest_first, skip_reasons
from suite.source.series import KnownBug

LANE = str(paths.PROJECT_ROOT / "cases" / "test_xfstests.py")


@dataclass
class XfstestsAt:
    commit: str
    ran: int = 0
    failed: dict[str, str] = field(default_factory=dict)      # "generic/299[async]" -> reason
    kinds: dict[str, list[str]] = field(default_factory=dict)  # a failure's errno kinds
    passed: set[str] = field(default_factory=set)
    profiles: list[str] = field(default_factory=list)
    stopped: bool = False           # the budget ended ./check: later tests never ran
    absent: list[str] = field(default_factory=list)           # why a profile was skipped
    problem: str = ""
    results: str = ""
    seconds: float = 0.0

    def new_failures(self, base: "XfstestsAt | None") -> dict[str, str]:
        """Failures here that the base did not also fail, in any profile (the base
        cannot run a series' own profile: its control is ``direct``); all, without one."""
        if base is None or base.problem:
            return dict(self.failed)
        old = {t.split("[")[0] for t in base.failed}
        return {t: r for t, r in self.failed.items() if t.split("[")[0] not in old}

    def describe(self, base: "XfstestsAt | None" = None, compared: bool = True) -> str:
        """The cell's text; ``compared=False``: a lane's own line, before the table
        holds it against the base (so no "no base run" is said)."""
        if self.problem:
            return f"INCONCLUSIVE: {self.problem}"
        if not self.ran:
            why = "; ".join(dict.fromkeys(self.absent)) or "the lane ran no test"
            return f"INCONCLUSIVE: no xfstests test ran ({why})"
        on = f" [{', '.join(self.profiles)}]"
        new = self.new_failures(base)
        old = sorted(set(self.failed) - set(new))
        cut = " (cut short at the budget: later tests never ran)" if self.stopped else ""
        also = f"; failing on the base too: {', '.join(old)}" if old else ""
        control = "" if not compared or (base and not base.problem) \
            else " (no base run to compare)"
        if new:
            listed = "; ".join(f"{t}: {r[:90]}" for t, r in sorted(new.items()))
            return f"{len(new)} failed of {self.ran}{on}{control}: {listed}{also}{cut}"
        if self.stopped:
            return f"INCONCLUSIVE: cut short after {self.ran}{on}, none new so far{also}"
        return f"none of {self.ran} failed that passes on the base{on} (saw nothing){also}"


def older_kinds(results_file: Path, meta: dict, test: str) -> list[str]:
    """A failure's kinds read again from its ``.out.bad`` beside ``results_file``: a
    results file written before failures carried them (the golden output from the
    cached tree of the xfstests commit it names, when there)."""
    tree = xbuild.built(str(meta.get("xfstests", "")))
    return xfsymptoms.of_test(results_file.parent / "xfstests" / "results", test,
                              tree.path if tree else None)


def read_session(results: Path, commit: str, seconds: float = 0.0) -> XfstestsAt:
    """Every profile's results file under one session folder."""
    out = XfstestsAt(commit[:11], results=str(results), seconds=seconds)
    files = sorted(results.glob(f"*/cases/*/{xfs.RESULTS_FILE}"))
    for f in files:
        meta, rs = xfs.load(f)
        prof = str(meta.get("profile", "plain"))
        out.profiles.append(prof)
        out.stopped = out.stopped or bool(meta.get("stopped"))
        for r in rs:
            key = f"{r.test}[{prof}]"
            if r.failed:
                out.failed[key] = r.reason or "failed"
                out.kinds[key] = list(r.kinds) or older_kinds(f, meta, r.test)
            elif r.status == "pass":
                out.passed.add(key)
    out.ran = len(out.failed) + len(out.passed)
    out.absent = skip_reasons(results / "junit.xml")
    broken = failure_messages(results / "junit.xml")
    if not files and broken:        # no results written: no guest, a setup, or the kernel
        during = "while running" in broken[0] and "xfstests" in broken[0]    # in ./check
        out.problem = (f"the kernel stopped ./check: {broken[0][:300]}" if during else
                       f"the lane's case failed before ./check: {broken[0][:200]}")
    elif not out.ran and broken:    # ./check ran and gave no result (refused its arguments)
        out.problem = f"the lane ran no test: {broken[0][:200]}"
    elif not files and not out.absent:
        out.problem = "the xfstests session left no results (see pytest.log)"
    return out


@dataclass
class XfstestsLane(Lane):
    """``bugs --xfstests``: what to run at each bad commit and the base, or where to read it."""
    name, label, column = "xfstests", "xfstests", "xfstests at bad"
    file, title = "xfstests-at-bad.md", "xfstests at each bad commit"
    on_base = True
    select: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    only: bool = False
    read_from: list[Path] = field(default_factory=list)

    def lane_args(self, base: bool = False) -> list[str]:
        """The lane's options; on the base, whose build lacks the series' features, the
        profiles it can run of those asked, else ``direct`` (every aligned request
        through Direct I/O: the nearest control of ``async`` and ``zvol``)."""
        profiles = list(self.profiles or ("direct", "async", "zvol"))
        if base:
            profiles = [p for p in profiles if p in ("plain", "direct")] or ["direct"]
        return [*[x for s in self.select for x in ("--xfstests", s)],
                *[x for p in profiles for x in ("--xfstests-profile", p)]]

    def at(self, name: str, commit: str, root: Path, extra: list[str],
           base: bool = False) -> XfstestsAt:
        """The lane at ``name@commit`` (``base``: the commit alone, no series)."""
        rel = f"xfstests/{commit[:11]}"
        found = sessions_newest_first(self.read_from, rel) if self.read_from else []
        if found:
            out = read_session(found[0], commit)
            print(f"<== xfstests at {commit[:11]}: {out.describe(compared=False)}, read from "
                  f"{found[0]}", flush=True)
            if not (out.problem and self.select):   # resuming: a lane that never reached
                return out                          # ./check (no guest) runs again
        if not self.select:         # --xfstests-from alone: read, never run
            return XfstestsAt(commit[:11], problem="no earlier xfstests run under "
                              "--xfstests-from: run it with --xfstests SEL")
        results = root / rel
        build = ["--zfs-ref", commit] if base else ["--series", f"{name}@{commit[:11]}"]
        lane = self.lane_args(base)
        print(f"==> xfstests at {' '.join(build)} ({' '.join(lane)})", flush=True)
        tests, problem, secs = run_cases(["-m", "xfstests", *build, *lane], results, extra,
                                         targets=[LANE])
        out = read_session(results, commit, secs)
        out.problem = problem or out.problem
        if tests is None and not out.problem:
            out.problem = "the pytest session wrote no JUnit report (see pytest.log)"
        print(f"<== xfstests at {commit[:11]}: {out.describe(compared=False)} in {secs:.0f}s; "
              f"{results}",
              flush=True)
        return out

    def cell(self, b: KnownBug) -> str:
        """What xfstests failed at ``b``'s bad commit that passes on the base."""
        return escaped(cell(b, self.run(b), self.base_run))

    def proved(self, run: XfstestsAt) -> bool:
        return bool(run.ran) and not run.problem

    def head(self) -> list[str]:
        base = self.base_run
        return [f"xfstests on the series' "
                f"{f'base {base.commit}: {base.describe()}' if base else 'base not run'}", ""]


def own_symptom(b: KnownBug, x: XfstestsAt, base: XfstestsAt | None) -> str:
    """The new failures whose ``.out.bad`` names one of the bug's own kinds (EFAULT for
    ``eof-tail-efault``): "generic/210[async]: EFAULT"; "" when none does."""
    hits = [f"{t}: {k}" for t in sorted(x.new_failures(base))
            for k in x.kinds.get(t, []) if k in b.symptom.kinds]
    return "; ".join(hits)


def cell(b: KnownBug, x: XfstestsAt | None, base: XfstestsAt | None) -> str:
    if x is None:
        return "not run"
    seen = x.describe(base)
    own = own_symptom(b, x, base) if not x.problem else ""
    seen = f"CAUGHT by its own symptom ({own}); {seen}" if own else seen
    return f"deferred in the manifest ({b.deferred}); xfstests here: {seen}" if b.deferred \
        else seen


def add_options(kb: argparse.ArgumentParser) -> None:
    """``bugs``' xfstests options."""
    kb.add_argument("--xfstests", action="append", default=[], metavar="SEL",
                    help="also run the xfstests lane (dio, quick, g:GROUP, a test) at each "
                         "distinct bad commit and at the series' base, and print what "
                         "failed at the bad commit that passes on the base (repeatable)")
    kb.add_argument("--xfstests-profile", action="append", default=[], metavar="P",
                    help="--xfstests: profiles (default direct, async, zvol: those the build "
                         "can run)")
    kb.add_argument("--xfstests-only", action="store_true",
                    help="run only the xfstests lane (no suite cases)")
    kb.add_argument("--xfstests-from", action="append", default=[], metavar="DIR",
                    help="read xfstests' side from earlier `bugs --xfstests` results folders "
                         "(the newest session per commit wins); with --xfstests, run only "
                         "the commits they lack (an interrupted sweep resumed)")


def from_args(args: argparse.Namespace) -> XfstestsLane | None:
    """``--xfstests SEL`` / ``--xfstests-from DIR`` / ``--lane xfstests`` (the ``dio``
    selection unless told): the lane, or None."""
    picked, alone = chosen(args, "xfstests")
    if not (args.xfstests or args.xfstests_from or picked):
        return None
    select = list(args.xfstests) or (["dio"] if picked and not args.xfstests_from else [])
    try:
        check_args(select)              # a misspelt selection stops here, not in each guest
    except ValueError as e:
        raise SystemExit(f"suite bugs: {e}") from None
    return XfstestsLane(select, list(args.xfstests_profile),
                        only=args.xfstests_only or not select or alone,
                        read_from=[Path(d) for d in args.xfstests_from])
