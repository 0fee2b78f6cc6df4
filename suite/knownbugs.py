"""``python -m suite bugs SERIES``: show each case catching the bug it targets.

For every ``[[bugs]]`` entry of a series manifest, run the entry's cases at the
``bad`` commit (they must fail) and at the ``fixed`` commit (they must pass), in
separate pytest sessions, and print one verdict row per (bug, commit). This is
the "a case is worth what it catches" check, repeatable by anyone; the merge
gate's bisect will build on the same runs.
"""
from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from . import paths, series


@dataclass
class Outcome:
    bug: str
    commit: str
    role: str            # "bad" | "fixed"
    passed: int
    failed: int
    errors: int
    skipped: int
    results: str
    seconds: float

    @property
    def verdict(self) -> str:
        if self.passed + self.failed == 0:
            return "ERROR (nothing ran to a verdict; see pytest.log)"
        if self.role == "bad":
            return "caught" if self.failed else "MISSED (bug not caught)"
        if self.errors:
            return "ERROR on the fix (see pytest.log)"
        return "clean" if not self.failed else "FALSE ALARM on the fix"


def count(junit: Path) -> tuple[int, int, int, int]:
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    t = f = e = s = 0
    for su in suites:
        t += int(su.get("tests", 0))
        f += int(su.get("failures", 0))
        e += int(su.get("errors", 0))
        s += int(su.get("skipped", 0))
    return t - f - e - s, f, e, s


def run_cases(selection: str, k: str, results: Path, extra: list[str]) -> tuple[Outcome, Path]:
    results.mkdir(parents=True, exist_ok=True)
    junit = results / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", str(paths.PROJECT_ROOT / "cases"), "-k", k,
           "--series", selection, "--results", str(results), f"--junitxml={junit}",
           "-p", "no:cacheprovider", "-q", *extra]
    t = time.monotonic()
    with open(results / "pytest.log", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=paths.PROJECT_ROOT)
    secs = time.monotonic() - t
    p, f, e, s = count(junit) if junit.exists() else (0, 0, 1, 0)
    return Outcome("", "", "", p, f, e, s, str(results), secs), junit


def run_bugs(name: str, only: list[str], k_extra: str, extra: list[str]) -> int:
    m = series.available()[name]
    bugs = [b for b in m.bugs if not only or b.id in only]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out: list[Outcome] = []
    for b in bugs:
        k = " or ".join(b.cases)
        k = f"({k}) and ({k_extra})" if k_extra else k
        for role, commit in (("bad", b.bad), ("fixed", b.fixed)):
            sel = f"{name}@{commit[:11]}"
            print(f"==> {b.id}: cases -k '{k}' at {sel} ({role})", flush=True)
            o, _ = run_cases(sel, k, paths.results_root() / f"bugs-{stamp}" / b.id / role,
                             extra)
            o.bug, o.commit, o.role = b.id, commit[:11], role
            out.append(o)
            print(f"<== {o.verdict}: {o.passed} passed, {o.failed} failed, {o.errors} errors, "
                  f"{o.skipped} skipped in {o.seconds:.0f}s ({o.results})", flush=True)
    print(f"\n{'bug':26s} {'commit':12s} {'role':6s} {'pass':>4s} {'fail':>4s} {'err':>4s}  verdict")
    for o in out:
        print(f"{o.bug:26s} {o.commit:12s} {o.role:6s} {o.passed:4d} {o.failed:4d} "
              f"{o.errors:4d}  {o.verdict}")
    bad = [o for o in out if o.verdict not in ("caught", "clean")]
    return 1 if bad else 0
