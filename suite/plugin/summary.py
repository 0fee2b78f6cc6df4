"""What the session prints and leaves at its end: the tables, the guest evidence,
where the time went, the case times for the next shards, and the run's report
(``report.html``, ``summary.md``; the step summary of a CI job)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from suite.plugin.hooks import INNER_SESSION, RUN_DIR, WORKER_COLLECTION, _default_trials


def _collected(config: pytest.Config, terminalreporter) -> tuple[int | None, int]:
    """(collected, deselected): the terminal's, or under xdist the workers'."""
    n = getattr(terminalreporter, "_numcollected", None)
    deselected = len(terminalreporter.stats.get("deselected", []))
    if not n and config.pluginmanager.hasplugin("dsession"):
        try:
            w = json.loads((config.stash[RUN_DIR] / WORKER_COLLECTION).read_text())
            return int(w["collected"]), int(w["deselected"])
        except (OSError, ValueError, KeyError):
            pass
    return n, deselected


SESSION = pytest.StashKey[pytest.Session]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION] = session     # the run's verdict sets its exit status


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None:
        return
    run_dir = config.stash.get(RUN_DIR, None)
    if run_dir is None or not run_dir.exists():
        return
    tables = sorted((run_dir / "tables").glob("*.txt")) if (run_dir / "tables").exists() else []
    if tables:
        terminalreporter.section("ozfs-vmci tables")
        for t in tables:
            terminalreporter.write_line(t.read_text().rstrip())
            terminalreporter.write_line("")
    evidence = sorted(run_dir.glob("cases/*/evidence/summary.txt"))
    if evidence:
        terminalreporter.section("ozfs-vmci guest evidence")
        for ev in evidence:
            terminalreporter.write_line(f"[{ev.parent.parent.name}]")
            terminalreporter.write_line(ev.read_text().rstrip())
            terminalreporter.write_line("")
    from suite.plugin.shards import record_durations
    from suite.report import phases
    rows = phases.collect(run_dir)
    from suite.report import xfstests
    record_durations({**{r["nodeid"]: sum(v for k, v in r.items() if k in phases.ORDER)
                         for r in rows if "nodeid" in r},
                      **xfstests.seconds_of(run_dir)})     # each xfstests test: the next split
    spent = phases.summarize(rows)
    if spent:
        terminalreporter.section("ozfs-vmci where the time went")
        terminalreporter.write_line(spent)
        (run_dir / "phases.txt").write_text(spent + "\n")
    terminalreporter.write_line(f"ozfs-vmci results: {run_dir}")
    if (run_dir / "coverage" / "gcda").is_dir():    # a gcov build's guests left counters
        from suite.coverage.lane import after_session
        for line in after_session(run_dir):
            terminalreporter.write_line(line)
    _write_report(config, terminalreporter, run_dir)


def _selection(config: pytest.Config, terminalreporter) -> str:
    """What this run selected, for its report (``selection.json``)."""
    from suite.report.page.kinds import selection_record
    tier = config.pluginmanager.get_plugin("ozfs-vmci-tier")
    resolved = getattr(tier, "resolved", None)
    opt = config.getoption
    build = [*(f"--series {s}" for s in opt("series") or []),
             *(f"--{k.replace('_', '-')} {opt(k)}" for k in ("zfs_ref", "zfs_source", "kernel")
               if opt(k))]
    started = getattr(terminalreporter, "_sessionstarttime", None)
    collected, deselected = _collected(config, terminalreporter)
    return selection_record(
        collected=collected, deselected=deselected,
        k=opt("keyword"), m=opt("markexpr"), shard=opt("shard"),
        accel=opt("accel") if opt("accel") != "auto" else None,
        tier=f"{resolved[0]}: {resolved[1]}" if resolved else opt("tier"),
        trials=opt("trials") or f"default ({_default_trials()})", build=" ".join(build),
        seconds=round(time.time() - started, 1) if started else None)


def exit_as_verdict(config: pytest.Config, code: int) -> None:
    """The session exits as its report says: 2 (INCONCLUSIVE) where a case proved
    nothing (a harness no-result, a lost guest, a build that failed) and nothing
    failed for a reason of the build's own; pytest's own codes for what it says
    first (an interrupt, a usage error) stay."""
    session = config.stash.get(SESSION, None)
    if session is not None and code == 2 and session.exitstatus in (0, 1):
        session.exitstatus = 2


def _write_report(config: pytest.Config, terminalreporter, run_dir: Path) -> None:
    """report.html and summary.md in the run's folder (``suite/report/page``), the same
    page ``python -m suite report`` renders; the summary also goes to the step summary
    of a CI job, unless this is an inner session of a gate or ``suite bugs`` (their
    own report says it). A report that cannot be written never fails the run."""
    from suite.report import page
    try:
        (run_dir / "selection.json").write_text(_selection(config, terminalreporter))
        xml = getattr(config.option, "xmlpath", None)
        p = page.kinds.plain(run_dir, junit=Path(xml) if xml else None)
        html, md = page.write(p, run_dir, with_junit=False)
    except Exception as e:                          # noqa: BLE001  (reported, not raised)
        terminalreporter.write_line(f"ozfs-vmci: the report could not be written: "
                                    f"{type(e).__name__}: {e}", yellow=True)
        return
    terminalreporter.write_line(f"ozfs-vmci report: {html} ({page.verdict_line(p)})")
    exit_as_verdict(config, p.verdict.exit_code)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and not os.environ.get(INNER_SESSION):
        with open(summary, "a") as f:
            f.write(md.read_text())
