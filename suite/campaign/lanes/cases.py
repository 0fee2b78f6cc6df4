"""The suite's own lane: each known bug's targeted cases at its bad and its fixed
commit, in a pytest session of their own, each case judged against the bug's declared
symptom (``suite/report/outcomes.py``: ``judge_session``, ``Outcome``): caught at the
bad commit, clean at the fix. ``--suite-from DIR`` judges an earlier run's sessions
again instead of running them (``judge_earlier``); when another lane runs alone the
cases are not run and each row says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from suite.campaign.lanes import Lane
from suite.report.outcomes import Outcome, judge_session
from suite.sessions import count, newest_session, run_cases
from suite.source.series import KnownBug, Manifest
from suite.symptoms import SymptomSpec


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


@dataclass
class CasesLane(Lane):
    """``k``: narrows every bug's cases further (``-k``); ``suite_from``: earlier
    results judged again instead of running; ``alone``: the labels of the lanes that
    run alone (the cases then do not run). Its runs are each bug's ``Outcome`` by
    (bug, role)."""
    name, label, column = "cases", "the suite", "this suite at bad"
    k: str = ""
    suite_from: list[Path] = field(default_factory=list)
    alone: list[str] = field(default_factory=list)

    def visit(self, m: Manifest, b: KnownBug, role: str, commit: str, root: Path,
              extra: list[str]) -> None:
        o = self.runs[(b.id, role)] = Outcome(b.id, commit[:11], role)
        if self.suite_from:
            judge_earlier(o, b.symptom, list(self.suite_from))
            return
        if self.alone:
            o.problem = f"not run here ({' and '.join(self.alone)} only)"
            return
        if b.symptom is None:
            o.problem = f"{b.id} declares no [bugs.symptom] in {m.path}: nothing to judge by"
            return
        k = " or ".join(f"({c})" for c in b.cases)
        k = f"({k}) and ({self.k})" if self.k else k
        sel = f"{m.name}@{commit[:11]}"
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

    def cell(self, b: KnownBug) -> str | None:
        """The suite's verdict at the bad commit; a bug it did not take there
        (deferred, or ``--role fixed``) has no row."""
        o = self.runs.get((b.id, "bad"))
        return o.verdict if o else None

    def proved(self, run: Outcome) -> bool:
        return run.ok

    def print_table(self, deferred: list[KnownBug]) -> None:
        """Each bug and role with its counts and verdict; the deferred bugs after."""
        print(f"\n{'bug':26s} {'commit':12s} {'role':6s} {'caught':>6s} {'pass':>4s} "
              f"{'inc':>4s}  verdict")
        for o in self.runs.values():
            print(f"{o.bug:26s} {o.commit:12s} {o.role:6s} {o.count('caught'):6d} "
                  f"{o.count('passed'):4d} {o.count('inconclusive'):4d}  {o.verdict}")
        for b in deferred:
            print(f"{b.id:26s} {b.bad[:11]:12s} {'-':6s} {'-':>6s} {'-':>4s} {'-':>4s}  "
                  f"deferred: {b.deferred.split(':')[0]}")
