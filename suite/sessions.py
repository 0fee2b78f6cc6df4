"""Inner pytest sessions: how ``suite bugs``, ``suite gate`` and ``suite bisect``
run a selection of cases at one build and read back what each case came to.

Each session gets its own results folder (``pytest.log``, ``junit.xml``, the
run folder with every case's ``verdict.json``) and a deadline
(``OZFS_VMCI_SESSION_TIMEOUT`` seconds, default 3 h; ``OZFS_VMCI_BUGS_TIMEOUT``
is still read).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from suite import paths
from suite.symptoms import CaseVerdict

SESSION_TIMEOUT = float(os.environ.get("OZFS_VMCI_SESSION_TIMEOUT",
                                       os.environ.get("OZFS_VMCI_BUGS_TIMEOUT", str(3 * 3600))))


def count(junit: Path) -> tuple[int, int, int, int]:
    """(passed, failed, errors, skipped) of the pytest cases in a JUnit XML file
    (the ZTS tests folded into it are counted by ``suite/report/zts.py``)."""
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    t = f = e = s = 0
    for su in suites:
        if (su.get("name") or "").startswith("zts-"):   # ZTS tests: no verdict.json
            continue
        cases = list(su.iter("testcase"))
        if not cases:                       # totals only
            t += int(su.get("tests", 0))
            f += int(su.get("failures", 0))
            e += int(su.get("errors", 0))
            s += int(su.get("skipped", 0))
            continue
        # One per case: pytest's totals count a case that passed and then failed in
        # its teardown (the guest judged after it) twice, as a pass and an error.
        for tc in cases:
            tags = {c.tag for c in tc}
            t += 1
            if "failure" in tags:
                f += 1
            elif "error" in tags:
                e += 1
            elif "skipped" in tags:
                s += 1
    return t - f - e - s, f, e, s


def skip_reasons(junit: Path) -> list[str]:
    """The messages of the skipped pytest cases in a JUnit XML file, e.g. a ZTS
    tag the build does not have."""
    if not junit.exists():
        return []
    return [sk.get("message", "").removeprefix("Skipped: ")
            for sk in ET.parse(junit).getroot().iter("skipped")]


def failure_messages(junit: Path) -> list[str]:
    """The messages of the failed and errored cases in a JUnit XML file (a lane's case
    that never reached its tests: no guest, a setup error)."""
    if not junit.exists():
        return []
    return [el.get("message", "") for el in ET.parse(junit).getroot().iter()
            if el.tag in ("error", "failure")]


def sessions_newest_first(roots: list[Path], rel: str) -> list[Path]:
    """Every session folder ``rel`` (e.g. ``<bug>/bad``, ``zts/<commit>``) with a JUnit
    report under ``roots``, each a ``bugs-*`` folder or a results folder holding them,
    newest first: how a table is put together from runs made at different times."""
    found = {d for r in roots for pat in (rel, f"bugs-*/{rel}")
             for d in r.glob(pat) if (d / "junit.xml").exists()}
    return sorted(found, key=lambda d: (d / "junit.xml").stat().st_mtime, reverse=True)


def newest_session(roots: list[Path], rel: str) -> Path | None:
    found = sessions_newest_first(roots, rel)
    return found[0] if found else None


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to ``proc``'s process group (its guests with it), SIGKILL after 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


@contextlib.contextmanager
def terminated_as_exit():
    """SIGTERM raises SystemExit meanwhile (in the main thread), so a ``kill`` of the
    caller unwinds through ``except``/``finally`` instead of leaving its children."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum, _frame):
        raise SystemExit(128 + signum)
    before = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


GATE_SESSION = "gate"       # OZFS_VMCI_INNER_SESSION in a gate's sides (plugin/tiers.py)


def run_cases(args: list[str], results: Path, extra: list[str] = (),
              timeout: float = SESSION_TIMEOUT,
              targets: list[str] | None = None,
              inner: str = "1") -> tuple[int | None, str, float]:
    """One inner pytest session over ``targets`` (default: every case) with
    ``args`` (e.g. ``-k EXPR --series S``); ``inner``: what the session is told it is
    (``gate``: a gate's side, whose quick tier keeps each variant's stock sibling too);
    returns (JUnit test count, problem, seconds)."""
    results.mkdir(parents=True, exist_ok=True)
    junit = results / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", *(targets or [str(paths.PROJECT_ROOT / "cases")]),
           *args, "--results", str(results), f"--junitxml={junit}",
           "-p", "no:cacheprovider", "-q", *extra]
    t = time.monotonic()
    problem = ""
    with open(results / "pytest.log", "w") as log:
        # An inner session's report stays in its folder: the caller's report (gate,
        # bugs) is what goes to a CI job's step summary.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                cwd=paths.PROJECT_ROOT, start_new_session=True,
                                env={**os.environ, "OZFS_VMCI_INNER_SESSION": inner})
        try:
            with terminated_as_exit():
                proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            problem = f"the pytest session ran past its {timeout:.0f}s deadline and was killed"
        except BaseException:
            # Ctrl-C or a kill of the caller (gate, bugs): the session is in a process
            # group of its own, so it would go on booting guests unseen; it goes too.
            stop_group(proc)
            raise
    secs = time.monotonic() - t
    tests = sum(count(junit)) if junit.exists() else None
    return tests, problem, secs




def load_verdicts(results: Path) -> dict[str, CaseVerdict]:
    """nodeid -> what the case came to, for every case of a session's results."""
    out = {}
    for p in sorted(results.glob("*/cases/*/verdict.json")):
        v = CaseVerdict.load(p)
        out[v.nodeid] = v
    return out
