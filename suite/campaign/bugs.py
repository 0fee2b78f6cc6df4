"""``python -m suite bugs SERIES``: show each case catching the bug it targets.

For every ``[[bugs]]`` entry of a series manifest, run the entry's cases at the
``bad`` commit and at the ``fixed`` commit, in separate pytest sessions, and
judge each targeted case from its ``verdict.json`` against the bug's declared
symptom (``[bugs.symptom]``):

- at ``bad``: **caught** only when a targeted case failed with that symptom and
  nothing else; a case that failed for another reason (guest lost, SSH error,
  ``NotArmed``, a failing control row, setup) makes the row **inconclusive**;
- at ``fixed``: **clean** when every targeted case that ran passed; a failure
  with the bug's symptom is **not fixed**, any other failure inconclusive.

An entry with ``deferred = "..."`` (a bug no userspace symptom can show on this
kernel, e.g. a use-after-free that leaves the bytes right) is listed as
**deferred** with its reason and not run; it is for a later kernel profile
(KASAN) to catch. Anything but caught / clean / deferred exits non-zero. Each inner session has a deadline
(``OZFS_VMCI_BUGS_TIMEOUT`` seconds, default 3 h). With ``--zts``, OpenZFS's own
tests run at each bad commit too, and a table says what each saw
(``suite/campaign/lanes/zts.py``). ``--suite-from DIR`` takes the suite's side from an
earlier run's sessions, judged again, so ``--zts-only`` can still fill both columns;
``--zts-from DIR`` reads ZTS's side from earlier runs the same way. With
``--explore BUDGET`` the exerciser runs once at each bad commit and a table says
what it met there (``suite/campaign/lanes/explore.py``); ``--explore-only`` runs it
alone, ``--explore-from DIR`` reads earlier explore runs instead. With ``--xfstests
SEL`` the xfstests lane runs at each bad commit and at the base
(``suite/campaign/lanes/xfstests.py``), the same way.
"""
from __future__ import annotations

import os
from pathlib import Path

from suite import paths
from suite.campaign.lanes import explore as explorebugs
from suite.campaign.lanes import xfstests as xfstestsbugs
from suite.campaign.lanes.explore import ExploreAt, ExplorePlan
from suite.campaign.lanes.xfstests import XfstestsAt, XfstestsPlan
from suite.campaign.lanes.zts import ZtsAt, read_zts_at, run_zts_at, table as ztsbugs_table
from suite.report.outcomes import Outcome, judge_session
from suite.sessions import count, newest_session, run_cases
from suite.symptoms import SymptomSpec
from suite.source import series


def judge_earlier(o: Outcome, spec: SymptomSpec | None, roots: list[Path]) -> None:
    """Fill ``o`` from an earlier ``suite bugs`` session instead of running one."""
    d = newest_session(roots, f"{o.bug}/{o.role}")
    if d is None:
        o.problem = "no earlier run under --suite-from"
        return
    if spec is None:
        o.problem = "the bug declares no [bugs.symptom]: nothing to judge by"
        return
    total = sum(count(d / "junit.xml"))
    o.cases, o.problem = judge_session(spec, d, total)
    o.results = str(d)
    print(f"<== {o.bug} ({o.role}): {o.verdict}, judged from {d}", flush=True)


def write_report(root: Path) -> None:
    """The run's report.html and summary.md (``suite/report/page``); the summary also
    goes to a CI job's step summary, which the inner sessions leave to this."""
    from suite.report import page
    p = page.kinds.bugs(root)
    html, md = page.write(p, root, with_junit=False)
    print(f"report: {html} ({page.verdict_line(p)})")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(md.read_text())


def run_bugs(name: str, only: list[str], k_extra: str, extra: list[str],
             roles: list[str] | None = None, zts: str = "", zts_tags: tuple[str, ...] = (),
             suite_from: list[Path] = (), zts_from: list[Path] = (),
             explore: ExplorePlan | None = None, xfstests: XfstestsPlan | None = None) -> int:
    """``zts``: "" no ZTS; "also" ZTS at each bad commit too; "only" ZTS alone.
    ``suite_from``: earlier ``suite bugs`` results whose sessions give the suite's
    side (judged again against today's symptoms) instead of running them;
    ``zts_from`` the same for ZTS's side (implies the ZTS table). ``explore``:
    the exerciser at each bad commit too (``explore.only``: the lanes alone);
    ``xfstests`` the xfstests lane at each bad commit and at the base."""
    zts = zts or ("only" if zts_from else "")
    lanes_only = [w for w, on in (("ZTS", zts == "only"),
                                  ("explore", bool(explore and explore.only)),
                                  ("xfstests", bool(xfstests and xfstests.only))) if on]
    m = series.available()[name]
    bugs = [b for b in m.bugs if not only or b.id in only]
    root = paths.stamped("bugs")
    out: list[Outcome] = []
    ztsruns: dict[str, ZtsAt] = {}
    exploreruns: dict[str, ExploreAt] = {}
    xfsruns: dict[str, XfstestsAt] = {}
    xfsbase = xfstests.at(name, m.base, root, extra, base=True) if xfstests else None
    deferred = [b for b in bugs if b.deferred]
    for b in deferred:
        print(f"==> {b.id}: deferred ({b.bad[:11]} -> {b.fixed[:11]}): {b.deferred}", flush=True)
    for b in [b for b in bugs if not b.deferred]:
        k = " or ".join(f"({c})" for c in b.cases)
        k = f"({k}) and ({k_extra})" if k_extra else k
        for role, commit in (("bad", b.bad), ("fixed", b.fixed)):
            if roles and role not in roles:
                continue
            o = Outcome(b.id, commit[:11], role)
            out.append(o)
            if zts and role == "bad" and o.commit not in ztsruns:    # once per commit
                ztsruns[o.commit] = (read_zts_at(commit, list(zts_from)) if zts_from else
                                     run_zts_at(name, commit, root, extra, zts_tags))
            if explore and role == "bad" and o.commit not in exploreruns:    # once per commit
                exploreruns[o.commit] = explore.at(name, commit, root, extra)
            if xfstests and role == "bad" and o.commit not in xfsruns:      # once per commit
                xfsruns[o.commit] = xfstests.at(name, commit, root, extra)
            if suite_from:
                judge_earlier(o, b.symptom, list(suite_from))
                continue
            if lanes_only:
                o.problem = f"not run here ({' and '.join(lanes_only)} only)"
                continue
            if b.symptom is None:
                o.problem = f"{b.id} declares no [bugs.symptom] in {m.path}: nothing to judge by"
                continue
            sel = f"{name}@{commit[:11]}"
            results = root / b.id / role
            print(f"==> {b.id}: cases -k '{k}' at {sel} ({role})"
                  f"{' on ' + b.kernel if b.kernel else ''}; counts: "
                  f"{b.symptom.describe()}", flush=True)
            # A bug that needs its own kernel (KASAN) gets it after the caller's options,
            # so a run on another profile still judges it where it can be seen.
            kernel = ["--kernel", b.kernel] if b.kernel else []
            tests, problem, o.seconds = run_cases(["-k", k, "--series", sel], results,
                                                  [*extra, *kernel])
            same = tuple(n for n in m.bugs if n.id != b.id and n.bad == commit)
            o.cases, judged = judge_session(b.symptom, results, tests, same)
            o.problem, o.results = problem or judged, str(results)
            print(f"<== {o.verdict} ({o.count('caught')} caught, {o.count('passed')} passed, "
                  f"{o.count('inconclusive')} inconclusive, {o.count('skipped')} skipped "
                  f"in {o.seconds:.0f}s; {results})", flush=True)
    print(f"\n{'bug':26s} {'commit':12s} {'role':6s} {'caught':>6s} {'pass':>4s} {'inc':>4s}  verdict")
    for o in out:
        print(f"{o.bug:26s} {o.commit:12s} {o.role:6s} {o.count('caught'):6d} "
              f"{o.count('passed'):4d} {o.count('inconclusive'):4d}  {o.verdict}")
    for b in deferred:
        print(f"{b.id:26s} {b.bad[:11]:12s} {'-':6s} {'-':>6s} {'-':>4s} {'-':>4s}  "
              f"deferred: {b.deferred.split(':')[0]}")
    if zts:
        rows = [(o.bug, o.commit, o.verdict, ztsruns.get(o.commit))
                for o in out if o.role == "bad"]
        md = ztsbugs_table(rows)
        root.mkdir(parents=True, exist_ok=True)
        (root / "zts-vs-suite.md").write_text(md)
        print("\nZTS and this suite at each bad commit (" + str(root / "zts-vs-suite.md") +
              "):\n" + md)
    if explore:
        md = explorebugs.table([(b, exploreruns.get(b.bad[:11])) for b in bugs])
        root.mkdir(parents=True, exist_ok=True)
        (root / "explore-at-bad.md").write_text(md)
        print("\nexplore at each bad commit (" + str(root / "explore-at-bad.md") + "):\n" + md)
    if xfstests:
        md = xfstestsbugs.table([(b, xfsruns.get(b.bad[:11])) for b in bugs], xfsbase)
        root.mkdir(parents=True, exist_ok=True)
        (root / "xfstests-at-bad.md").write_text(md)
        print("\nxfstests at each bad commit (" + str(root / "xfstests-at-bad.md") + "):\n" + md)
    if root.is_dir() and not suite_from and not lanes_only:
        write_report(root)
    lanes_ok = all(z.ran and not z.problem for z in ztsruns.values()) and \
        all(not e.problem for e in exploreruns.values()) and \
        all(x.ran and not x.problem for x in [*xfsruns.values(), *filter(None, [xfsbase])])
    suite_ok = all(o.ok for o in out)
    if lanes_only:                  # the suite's side counts only when it was read
        return 0 if lanes_ok and (suite_ok or not suite_from) else 1
    return 0 if suite_ok else 1
