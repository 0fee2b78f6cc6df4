"""``python -m suite bisect --series S --case NODEID``: the first commit of a
series at which a case fails.

Binary search over the series' commits (the base is taken as good: the case's
feature, or its bug, comes with the series; the head must fail, and is run
first to prove it). Each step builds ``S@commit`` (cached: a commit built once
is never built again, and ccache serves most objects of a neighbour) and runs
the one case with ``--trials`` per condition (default 29: a symptom present in 1
trial in 10 shows with 95% probability). A step that proves nothing (guest
lost, not armed, build failure) is retried once, then the search stops and
says so instead of guessing. The report names the first bad commit with its
table, symptoms and evidence, and the time of every step (build and case).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from suite import paths
from suite.paths import case_slug as slug
from suite.report.outcomes import state
from suite.sessions import load_verdicts, run_cases

DEFAULT_TRIALS = 29          # trials_needed(rate=0.1)


@dataclass
class Step:
    commit: str
    subject: str
    state: str                   # pass | fail | inconclusive | ...
    why: str
    build_s: float
    case_s: float
    results: str


@dataclass
class Bisection:
    series: str
    nodeid: str
    commits: list[str]
    steps: list[Step] = field(default_factory=list)
    first_bad: str = ""
    problem: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def search(commits: list[str], test) -> tuple[str | None, str]:
    """First commit for which ``test(c)`` is "fail", given the base passes and
    commits[-1] fails. ``test`` returns pass | fail | anything else (unknown,
    which stops the search). Returns (commit or None, problem)."""
    if not commits:
        return None, "the series has no commits"
    head = test(commits[-1])
    if head == "pass":
        return None, f"the case passes at the head {commits[-1][:11]}: nothing to bisect"
    if head != "fail":
        return None, f"the head {commits[-1][:11]} proved nothing ({head})"
    lo, hi = -1, len(commits) - 1           # commits[lo] good (base = -1), commits[hi] bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        s = test(commits[mid])
        if s == "pass":
            lo = mid
        elif s == "fail":
            hi = mid
        else:
            return None, f"{commits[mid][:11]} proved nothing ({s}): the search stops here"
    return commits[hi], ""


def timed_build(selection: str, extra_build: list[str], log: Path) -> tuple[float, str]:
    t = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.run([sys.executable, "-m", "suite", "build", "--series", selection,
                            *extra_build], stdout=f, stderr=subprocess.STDOUT,
                           cwd=paths.PROJECT_ROOT)
    return time.monotonic() - t, "" if p.returncode == 0 else f"build failed (see {log})"


def run_bisect(name: str, nodeid: str, commits: list[str], subjects: dict[str, str],
               trials: int, extra: list[str], extra_build: list[str],
               root: Path | None = None) -> Bisection:
    root = root or paths.stamped("bisect")
    b = Bisection(name, nodeid, commits)
    target = str(paths.PROJECT_ROOT / nodeid)

    def test(commit: str) -> str:
        for attempt in (1, 2):
            sel = f"{name}@{commit[:11]}"
            out = root / f"{len(b.steps) + 1:02d}-{commit[:11]}"
            out.mkdir(parents=True, exist_ok=True)
            print(f"==> bisect step {len(b.steps) + 1}: {sel} {subjects.get(commit, '')}",
                  flush=True)
            build_s, problem = timed_build(sel, extra_build, out / "build.log")
            case_s, st, why = 0.0, "inconclusive", problem
            if not problem:
                _, problem, case_s = run_cases(["--series", sel, "--trials", str(trials),
                                                *extra_build], out, extra, targets=[target])
                st, why = state(load_verdicts(out).get(nodeid))
                why = why or problem
            b.steps.append(Step(commit, subjects.get(commit, ""), st, why, round(build_s, 1),
                                round(case_s, 1), str(out)))
            print(f"<== {commit[:11]}: {st} (build {build_s:.0f}s, case {case_s:.0f}s) {why}",
                  flush=True)
            if st in ("pass", "fail"):
                return st
            if attempt == 1:
                print("    proved nothing: once more", flush=True)
        return st

    first, b.problem = search(commits, test)
    b.first_bad = first or ""
    root.mkdir(parents=True, exist_ok=True)
    (root / "bisect.json").write_text(b.to_json() + "\n")
    (root / "bisect.md").write_text(report(b, root))
    return b


def report(b: Bisection, root: Path) -> str:
    lines = [f"## bisect {b.series}: `{b.nodeid}`", ""]
    if b.first_bad:
        lines.append(f"**first bad commit: {b.first_bad[:11]}** "
                     f"{next((s.subject for s in b.steps if s.commit == b.first_bad), '')}")
    else:
        lines.append(f"**no verdict**: {b.problem}")
    lines += ["", "| step | commit | subject | verdict | build s | case s |", "|---|---|---|---|---|---|"]
    for i, s in enumerate(b.steps, 1):
        lines.append(f"| {i} | {s.commit[:11]} | {s.subject[:50]} | {s.state} | {s.build_s:.0f} "
                     f"| {s.case_s:.0f} |")
    bad = next((s for s in reversed(b.steps) if s.commit == b.first_bad), None)
    if bad:
        lines += ["", f"why: {bad.why}", ""]
        for d in sorted(Path(bad.results).glob(f"*/cases/{slug(b.nodeid)}")):
            for t in sorted(d.glob("table-*.txt")):
                lines += ["```", t.read_text().rstrip(), "```"]
            ev = d / "evidence" / "summary.txt"
            if ev.exists():
                lines += ["evidence:", "```", ev.read_text()[-3000:].rstrip(), "```"]
            lines.append(f"case folder: `{d}`")
    return "\n".join(lines) + "\n"
