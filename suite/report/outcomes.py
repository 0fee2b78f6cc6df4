"""What a campaign's sessions came to, as a report reads it back: the records the
multi-session commands (``suite/campaign/``) leave and the page (``page/``) renders.

- a case's **state** on one side of a gate or a bisection step (``state``: pass, fail,
  skip, feature-skip, inconclusive, missing);
- the gate's **classes** and its verdict from them (``CaseClass``, ``GateRun``,
  ``verdict``; how each case is put in its class: ``suite/campaign/gate.py``);
- a known bug's **outcome** at its bad or fixed commit, each targeted case judged
  against the bug's own symptom (``CaseResult``, ``Outcome``, ``judge_session``; the
  runs: ``suite/campaign/bugs.py``).

Nothing here runs a session: it reads ``verdict.json`` files and what they say.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from suite.source import series
from suite.symptoms import INFRASTRUCTURE, PASSED, CaseVerdict, SymptomSpec, judge_case

CLASSES = ("regression", "inconclusive", "flaky", "fixed", "still failing",
           "not applicable on base", "unchanged pass", "not applicable")
FEATURE_SKIP = ("build has no", "use --series", "nothing but the control", "the loaded build has no")
EXIT_PASS, EXIT_REGRESSION, EXIT_INCONCLUSIVE = 0, 1, 2


def state(v: CaseVerdict | None) -> tuple[str, str]:
    """(pass | fail | skip | feature-skip | inconclusive | missing, why) of one side."""
    if v is None:
        return "missing", "no verdict.json (the session did not reach the case)"
    if v.outcome in PASSED:
        return "pass", ""
    if v.outcome == "skipped":
        return ("feature-skip" if any(s in v.reason for s in FEATURE_SKIP) else "skip"), v.reason
    kinds = [s.kind for s in v.symptoms]
    if not kinds or all(k in INFRASTRUCTURE for k in kinds):
        return "inconclusive", (str(v.symptoms[0]) if v.symptoms else v.reason)
    # What the kernel reported is the root of what followed it (a task stuck in D
    # state under spl_panic): it names the failure first.
    real = [s for s in v.symptoms if s.kind not in INFRASTRUCTURE]
    first = min(real, key=lambda s: 0 if s.kind.startswith("kernel:") else 1)
    return "fail", str(first)


@dataclass
class CaseClass:
    nodeid: str
    cls: str
    why: str
    base: str = ""
    series: str = ""
    reruns: dict[str, list[str]] = field(default_factory=dict)   # side -> states
    # side -> every signature a rerun failed by (a new signature is checked against both)
    rerun_signatures: dict[str, list[str]] = field(default_factory=dict)
    head: str = "series"    # the head side compared with base (``series+NAME=VALUE``: a tunable)

    @property
    def label(self) -> str:
        """The case as the reports name it: its node id, and the head's tunable if any."""
        return self.nodeid if self.head == "series" else f"{self.nodeid} [{self.head[7:]}]"


def verdict(classes: list[CaseClass]) -> tuple[int, str]:
    n = {k: sum(1 for c in classes if c.cls == k) for k in CLASSES}
    if not classes:
        return EXIT_INCONCLUSIVE, "INCONCLUSIVE: no case was selected"
    if n["regression"]:
        return EXIT_REGRESSION, f"FAIL: {n['regression']} regression(s)"
    if n["inconclusive"]:
        return EXIT_INCONCLUSIVE, f"INCONCLUSIVE: {n['inconclusive']} case(s) proved nothing"
    if not any(n[k] for k in ("unchanged pass", "not applicable on base", "fixed",
                              "still failing", "flaky")):
        return EXIT_INCONCLUSIVE, "INCONCLUSIVE: nothing ran to a verdict"
    extra = f" ({n['flaky']} flaky)" if n["flaky"] else ""
    return EXIT_PASS, f"PASS{extra}"


@dataclass
class GateRun:
    series: str
    base: str
    root: Path
    selection: list[str]
    classes: list[CaseClass] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    heads: list[str] = field(default_factory=lambda: ["series"])   # series, series+NAME=V
    label: str = ""         # what a person calls the change (openzfs/zfs#18844), if not ``series``

    @property
    def name(self) -> str:
        """The change, as the reports' titles name it: ``--pr``'s number, not the folder
        of patches exported into the cache."""
        return self.label or self.series

    def to_json(self) -> str:
        code, text = verdict(self.classes)
        return json.dumps({"series": self.series, "label": self.label, "base": self.base,
                           "verdict": text,
                           "exit": code, "selection": self.selection, "heads": self.heads,
                           "seconds": self.seconds, "problems": self.problems,
                           "cases": [asdict(c) for c in self.classes]}, indent=1)


@dataclass
class CaseResult:
    nodeid: str
    status: str            # caught | passed | skipped | inconclusive
    why: str = ""


@dataclass
class Outcome:
    bug: str
    commit: str
    role: str              # "bad" | "fixed"
    cases: list[CaseResult] = field(default_factory=list)
    problem: str = ""      # the session itself went wrong (timeout, no verdicts)
    results: str = ""
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for c in self.cases if c.status == status)

    @property
    def verdict(self) -> str:
        if self.problem:
            return f"INCONCLUSIVE: {self.problem}"
        odd = next((c for c in self.cases if c.status == "inconclusive"), None)
        if self.role == "bad":
            if odd is not None:
                return f"INCONCLUSIVE: {odd.nodeid.split('::')[-1]}: {odd.why}"
            if self.count("caught"):
                return "caught"
            if self.count("passed"):
                return "MISSED (no targeted case failed with the bug's symptom)"
            return "INCONCLUSIVE: no targeted case ran to a verdict"
        hit = next((c for c in self.cases if c.status == "caught"), None)
        if hit is not None:
            return f"NOT FIXED: {hit.nodeid.split('::')[-1]} still fails with {hit.why}"
        if odd is not None:
            return f"INCONCLUSIVE: {odd.nodeid.split('::')[-1]}: {odd.why}"
        if self.count("passed"):
            return "clean"
        return "INCONCLUSIVE: no targeted case ran to a verdict"

    @property
    def ok(self) -> bool:
        return self.verdict in ("caught", "clean")


def judge_session(spec: SymptomSpec, results: Path, junit_tests: int | None,
                  neighbours: tuple[series.KnownBug, ...] = ()) -> tuple[list[CaseResult], str]:
    """Judge every case's verdict.json under ``results`` against ``spec``.
    ``neighbours``: the other known bugs of the same commit; an inconclusive case that
    failed with one of their symptoms says which (a commit with two bugs may show
    either first: a rerun may show the other)."""
    verdicts = [CaseVerdict.load(p) for p in sorted(results.glob("*/cases/*/verdict.json"))]
    cases = [CaseResult(v.nodeid, *judge_case(spec, v)) for v in verdicts]
    for c, v in zip(cases, verdicts):
        if c.status != "inconclusive":
            continue
        hit = next((n for n in neighbours if n.symptom is not None
                    and judge_case(n.symptom, v)[0] == "caught"), None)
        if hit is not None:
            c.why = (f"{c.why}: that is {hit.id}'s symptom, a bug of the same commit that "
                     f"showed first (run again to see this one)")
    problem = ""
    if junit_tests is None:
        problem = "the pytest session wrote no JUnit report (see pytest.log)"
    elif len(verdicts) < junit_tests:
        problem = (f"{junit_tests - len(verdicts)} of {junit_tests} cases left no verdict.json "
                   f"(see pytest.log)")
    return cases, problem
