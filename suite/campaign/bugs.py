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
(``suite/campaign/lanes/xfstests.py``), the same way. ``--lane NAME`` names the
lanes to run (``cases``, ``zts``, ``explore``, ``xfstests``; a lane without ``cases``
runs alone); the flags above are the same by their old names.

Every lane is a ``Lane`` (``suite/campaign/lanes/``): what it runs at a commit, how
its results read, how a failure is credited to a bug by the bug's own symptom; its
table comes from the one builder, ``lanes.table``.
"""
from __future__ import annotations

import os
from pathlib import Path

from suite import paths
from suite.campaign.lanes import Lane, table
from suite.campaign.lanes.cases import CasesLane
from suite.source import series


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
             roles: list[str] | None = None, lanes: list[Lane] = (),
             suite_from: list[Path] = ()) -> int:
    """Each bug of series ``name`` (``only``: these ids) through the suite's cases
    (narrowed by ``k_extra``) and ``lanes`` (ZTS, explore, xfstests, ...; a lane with
    ``only`` leaves the cases out). ``suite_from``: earlier ``suite bugs`` results
    whose sessions give the suite's side (judged again against today's symptoms)
    instead of running them. Each lane's table goes to its file in the run's folder."""
    m = series.available()[name]
    bugs = [b for b in m.bugs if not only or b.id in only]
    root = paths.stamped("bugs")
    alone = [lane.label for lane in lanes if lane.only]
    cases = CasesLane(k_extra, list(suite_from), alone)
    for lane in lanes:
        lane.start(m, root, extra)
    deferred = [b for b in bugs if b.deferred]
    for b in deferred:
        print(f"==> {b.id}: deferred ({b.bad[:11]} -> {b.fixed[:11]}): {b.deferred}", flush=True)
    for b in [b for b in bugs if not b.deferred]:
        for role, commit in (("bad", b.bad), ("fixed", b.fixed)):
            if roles and role not in roles:
                continue
            for lane in [*lanes, cases]:        # the lanes' runs are once per commit
                lane.visit(m, b, role, commit, root, extra)
    cases.print_table(deferred)
    for lane in lanes:
        md = table(bugs, [cases, lane] if lane.with_suite else [lane])
        root.mkdir(parents=True, exist_ok=True)
        (root / lane.file).write_text(md)
        print(f"\n{lane.title} ({root / lane.file}):\n" + md)
    if root.is_dir() and not suite_from and not alone:
        write_report(root)
    if alone:                       # the suite's side counts only when it was read
        return 0 if all(lane.ok() for lane in lanes) and (cases.ok() or not suite_from) else 1
    return 0 if cases.ok() else 1
