"""One ``Page`` for each kind of run, and which kind a folder holds.

- **plain**: one pytest session (``<stamp>-<label>/``), or a folder of sessions with
  the run's ``junit.xml`` (``--results DIR --junitxml DIR/junit.xml``, an inner session
  of ``suite explore``);
- **gate**: ``gate.json`` with ``base/`` and ``series/`` sessions (``suite gate``);
- **merged**: ``verdict.json`` naming its shards, copied under ``shards/`` (``suite merge``);
- **bugs**: ``<bug>/<bad|fixed>/`` sessions (``suite bugs``), judged again against
  each bug's symptom from the manifests.

A run that tested nothing is inconclusive, never green.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from suite.errors import SuiteError
from suite.report import upstream
from suite.report.page.disk import (build_commits, build_row, case_from_junit,
                                    case_from_verdict, fill_from_folder, is_session,
                                    junit_cases, junit_seconds, minutes, read_json,
                                    session_label, sessions_under, trial_count, verdicts)
from suite.report.page.model import Case, Grid, Page, Section, SideResult, Verdict
from suite.report.page.sections import all_sections, phrase

if TYPE_CHECKING:
    from suite.report.outcomes import GateRun

SELECTION_FILE = "selection.json"


# -- verdicts -----------------------------------------------------------------------

def describe_counts(cases: list[Case]) -> str:
    n: dict[str, int] = {}
    for c in cases:
        n[c.label] = n.get(c.label, 0) + 1
    return ", ".join(f"{v} {k}" for k, v in sorted(n.items(), key=lambda kv: -kv[1]))


def known_split(fails: list[Case]) -> str:
    """What the headline adds about known upstream findings among ``fails``:
    ", all known upstream findings (ids): none new", " (K known ...: ids; M new)" or ""."""
    known = sorted({c.known for c in fails if c.known})
    n = sum(1 for c in fails if c.known)
    if not n:
        return ""
    if n == len(fails):
        return f", all known upstream findings ({', '.join(known)}): none new"
    return f" ({n} known upstream findings: {', '.join(known)}; {len(fails) - n} new)"


def run_verdict(cases: list[Case], problems: list[str]) -> Verdict:
    """A run's verdict: a part missing or a case that proved nothing is inconclusive,
    a case that failed with a finding fails it, and a run with no case is never green."""
    fails = [c for c in cases if c.status == "fail"]
    inconclusive = [c for c in cases if c.status == "inconclusive"]
    why = [f"{c.nodeid}{f' ({c.group})' if c.group else ''}: {c.label}: {c.why}"
           for c in sorted(cases, key=Case.order) if c.failing]
    if len(problems) == 1:
        return Verdict("inconclusive", problems[0], why)
    if problems:
        return Verdict("inconclusive", f"{len(problems)} parts of the run proved nothing",
                       problems + why)
    if fails:
        more = f", {len(inconclusive)} inconclusive" if inconclusive else ""
        return Verdict("fail", f"{len(fails)} case(s) failed{known_split(fails)}{more}", why)
    if inconclusive:
        return Verdict("inconclusive", f"{len(inconclusive)} case(s) proved nothing", why)
    if not cases:
        return Verdict("inconclusive", "no case ran: nothing was tested",
                       ["the run left no case verdict (selection empty, or the session "
                        "died before its first case)"])
    if not any(c.status in ("pass", "flaky", "known") for c in cases):
        return Verdict("inconclusive", f"none of {len(cases)} case(s) ran to a verdict",
                       [f"all skipped: {describe_counts(cases)}"])
    return Verdict("pass", describe_counts(cases) + known_note(cases),
                   [f"{c.nodeid}: {c.label}: {c.why}" for c in cases
                    if c.status == "known" or c.label == "xpassed"])


def known_note(cases: list[Case]) -> str:
    """What a passing run's headline adds: its known upstream findings (xfail), and
    the cases a finding names that passed (XPASS: fixed upstream?)."""
    known = sorted({c.known or "?" for c in cases if c.status == "known"})
    xpass = [c for c in cases if c.label == "xpassed"]
    out = f"; {len(known)} known upstream findings (xfail): {', '.join(known)}" if known else ""
    if xpass:
        out += f"; {len(xpass)} XPASS (fixed upstream? retire the finding)"
    return out


# -- plain runs ---------------------------------------------------------------------

def side_cases(sessions: list[Path], junit: Path | None, side: str = "",
               group: str = "") -> list[Case]:
    """Every case of a side: its verdict.json, else (a case outside the VM plugin's
    reach) its JUnit testcase."""
    cases = {n: case_from_verdict(v, folder, side, group)
             for n, (v, folder) in verdicts(sessions).items()}
    if junit is not None and junit.exists():
        for j in junit_cases(junit):
            if j.nodeid not in cases:
                cases[j.nodeid] = case_from_junit(j, side, group)
    return list(cases.values())


def selection_rows(sessions: list[Path]) -> tuple[list[tuple[str, str]], float]:
    """What the run selected (``selection.json``, written at its end), and how long
    it took."""
    data = next((d for d in (read_json(s / SELECTION_FILE) for s in sessions)
                 if isinstance(d, dict)), {})
    rows: list[tuple[str, str]] = []
    if "collected" in data:
        rows.append(("selected", f"{data['collected']} collected, "
                                 f"{data.get('deselected', 0)} deselected"))
    for key, label in (("k", "-k"), ("m", "-m"), ("tier", "tier"), ("shard", "shard"),
                       ("trials", "trials per condition"), ("build", "build under test"),
                       ("accel", "accelerator asked for")):
        if data.get(key):
            rows.append((label, phrase(data[key])))
    return rows, float(data.get("seconds") or 0)


def plain(root: Path, junit: Path | None = None) -> Page:
    sessions = sessions_under(root)
    junit = junit or (root / "junit.xml" if (root / "junit.xml").exists() else None)
    cases = side_cases(sessions, junit)
    upstream.mark(cases, lacks=upstream.git_lacks(build_commits(sessions)))
    label = session_label(sessions[0]) if len(sessions) == 1 else \
        f"{root.name} ({len(sessions)} sessions)"
    page = Page("plain", f"run {label}", root, run_verdict(cases, []), cases=cases)
    page.builds = [b for b in (build_row(s.name if len(sessions) > 1 else "run", [s])
                               for s in sessions) if b]
    rows, secs = selection_rows(sessions)
    secs = secs or (junit_seconds(junit) if junit else 0.0)
    trials = trial_count(sessions)
    page.selection = [("cases", f"{len(cases)}: {describe_counts(cases) or 'none'}"), *rows]
    if trials:
        page.selection.append(("trials in the tables", str(trials)))
    page.times = [("run", minutes(secs))] if secs else []
    page.sessions = [("run", sessions)]
    page.sections = all_sections(root, page.sessions)
    return page


# -- gates --------------------------------------------------------------------------

GATE_STATUS = {"regression": "fail", "inconclusive": "inconclusive", "flaky": "flaky",
               "still failing": "known"}


def gate(g: GateRun) -> Page:
    """The gate's page from its run (``suite.report.outcomes.GateRun``)."""
    from suite.report.outcomes import verdict
    code, text = verdict(g.classes)
    sides = {s: sessions_under(g.root / s) for s in ("base", *g.heads)}
    found = {s: verdicts(ss) for s, ss in sides.items()}
    cases = []
    for c in g.classes:
        case = Case(c.label, GATE_STATUS.get(c.cls, "pass"), c.cls, c.why,
                    [SideResult("base", c.base), SideResult("series", c.series)],
                    group=f"gate {g.name}")
        for side in (c.head, "base"):
            v, folder = found.get(side, {}).get(c.nodeid, (None, None))
            if v is None:
                continue
            if not case.symptoms:
                case.symptoms = [s.signed() for s in v.symptoms]
            fill_from_folder(case, folder, side, True)
        cases.append(case)
    status = {0: "pass", 1: "fail"}.get(code, "inconclusive")
    why = [f"{c.nodeid}: {c.label}: {c.why}" for c in sorted(cases, key=Case.order)
           if c.failing]
    page = Page("gate", f"gate {g.name} against {g.base[:11]}", g.root,
                Verdict(status, text, why + [f"{s}: {p}" for s, p in g.problems.items()]),
                sides=("base", "series"), cases=cases)
    page.builds = [b for b in (build_row(s, ss) for s, ss in sides.items()) if b]
    trials = {s: trial_count(ss) for s, ss in sides.items()}
    page.selection = [("selection", " ".join(g.selection) or "every case"),
                      ("cases", f"{len(cases)}: {describe_counts(cases) or 'none'}")]
    if any(trials.values()):
        page.selection.append(("trials in the tables",
                               ", ".join(f"{s} {n}" for s, n in trials.items())))
    page.times = [(s, minutes(secs)) for s, secs in g.seconds.items()]
    page.sessions = list(sides.items())
    page.sections = all_sections(g.root, page.sessions)
    return page


def gate_from_folder(root: Path) -> Page:
    from suite.report.outcomes import CaseClass, GateRun
    data = read_json(root / "gate.json")
    if not isinstance(data, dict):
        data = {}
    g = GateRun(data.get("series", "?"), data.get("base", "?"), root,
                list(data.get("selection") or []),
                [CaseClass(**c) for c in data.get("cases") or []],
                dict(data.get("seconds") or {}), dict(data.get("problems") or {}),
                list(data.get("heads") or ["series"]), str(data.get("label") or ""))
    return gate(g)


# -- merged shards ------------------------------------------------------------------

SHARDS_DIR = "shards"


def shard_problem(folder: Path, cases: list[Case]) -> str:
    if not folder.is_dir():
        return "its results never arrived (no folder)"
    if not (folder / "junit.xml").exists() and not list(folder.glob("*/junit.xml")):
        return "it left no junit.xml (the runner died, or its upload failed)"
    if not any(c.status in ("pass", "fail", "inconclusive") for c in cases):
        return f"it ran no case to a verdict ({len(cases)} collected)"
    return ""


def read_shard(folder: Path) -> tuple[list[Case], str, list[Path], Path | None]:
    """A shard's cases, why it proves nothing (or ""), its sessions and JUnit file."""
    xml = next(iter([*folder.glob("junit.xml"), *sorted(folder.glob("*/junit.xml"))]), None)
    sessions = sessions_under(folder) or (sessions_under(xml.parent) if xml else [])
    try:
        cases = side_cases(sessions, xml, group=folder.name)
    except ET.ParseError as e:
        return [], f"its {xml.name if xml else 'junit.xml'} does not parse: {e}", sessions, None
    for c in cases:
        c.sides = [SideResult("shard", folder.name)]
    return cases, shard_problem(folder, cases), sessions, xml


def merged(root: Path, shards: list[Path], expected: int) -> Page:
    """Shards' results folders (``--shard i/N``) as one run; a shard missing, silent
    or empty makes it inconclusive."""
    cases, problems, times, sides = [], [], [], []
    shard_rows = Grid(("shard", "passed", "failed", "inconclusive", "skipped", "note"))
    for folder in shards:
        mine, problem, sessions, xml = read_shard(folder)
        cases += mine
        if problem:
            problems.append(f"{folder.name}: {problem}")
        shard_rows.rows.append((folder.name, *(str(sum(c.status == s for c in mine))
                                               for s in ("pass", "fail", "inconclusive",
                                                         "skip")), problem))
        sides.append((folder.name, sessions))
        if xml is not None:
            times.append((folder.name, minutes(junit_seconds(xml))))
    if len(shards) < expected:
        problems.append(f"{expected - len(shards)} of {expected} shards are missing")
    upstream.mark(cases, lacks=upstream.git_lacks(
        [c for _, ss in sides for c in build_commits(ss)]))
    page = Page("merged", f"{len(shards)} shards merged", root, run_verdict(cases, problems),
                sides=("shard",), cases=cases, times=times, sessions=sides)
    page.builds = [b for b in (build_row(s, ss) for s, ss in sides) if b]
    page.selection = [("cases", f"{len(cases)}: {describe_counts(cases) or 'none'}"),
                      ("shards", f"{len(shards)} of {expected or len(shards)}")]
    page.sections = [Section("Shards", "shards", grids=[shard_rows], lead=True),
                     *all_sections(root, sides)]
    return page


def merged_from_folder(root: Path) -> Page:
    data = read_json(root / "verdict.json")
    data = data if isinstance(data, dict) else {}
    names = [str(s.get("name")) for s in data.get("shards") or [] if isinstance(s, dict)]
    return merged(root, [root / SHARDS_DIR / n for n in names],
                  int(data.get("expected") or len(names)))


# -- known bugs ---------------------------------------------------------------------

def bug_case_status(role: str, judged: str, session_ok: bool) -> str:
    """A targeted case's status in its session: at the bad commit a case that passed
    is only wrong when no case caught the bug (a control passes there); at the fix a
    case with the bug's symptom means it is not fixed."""
    if judged in ("skipped", "inconclusive"):
        return {"skipped": "skip"}.get(judged, "inconclusive")
    if role == "bad":
        return "pass" if judged == "caught" or session_ok else "fail"
    return "fail" if judged == "caught" else "pass"


def known_bugs() -> dict[str, object]:
    """Bug id -> its manifest entry, over every series manifest."""
    from suite.source import series
    try:
        return {b.id: b for m in series.available().values() for b in m.bugs}
    except (SuiteError, OSError, ValueError, KeyError):
        return {}


def bugs(root: Path) -> Page:
    """``suite bugs``: each bug at its bad commit (must be caught) and at its fix
    (must be clean), judged again against the bug's symptom."""
    from suite.report.outcomes import Outcome, judge_session
    from suite.sessions import count
    specs = known_bugs()
    outcomes, cases, sides = [], [], []
    table = Grid(("bug", "commit", "role", "caught", "passed", "inconclusive", "verdict"))
    for role_dir in sorted(p for p in root.glob("*/*") if p.name in ("bad", "fixed")):
        bug, role = role_dir.parent.name, role_dir.name
        b = specs.get(bug)
        commit = str(getattr(b, role, "") or "?")[:11]
        o = Outcome(bug, commit, role, results=str(role_dir))
        junit = role_dir / "junit.xml"
        sessions = sessions_under(role_dir)
        if b is None or getattr(b, "symptom", None) is None:
            o.problem = f"{bug} is in no manifest with a [bugs.symptom]: nothing to judge by"
        elif not junit.exists():
            o.problem = "the session wrote no JUnit report (see pytest.log)"
        else:
            o.cases, o.problem = judge_session(b.symptom, role_dir, sum(count(junit)))
        outcomes.append(o)
        folders = {n: f for n, (_, f) in verdicts(sessions).items()}
        for cr in o.cases:
            status = bug_case_status(role, cr.status, o.ok)
            why = cr.why or ("passed at the bad commit: the bug's symptom did not show"
                             if status == "fail" else "")
            c = Case(cr.nodeid, status, cr.status, why,
                     [SideResult("bug", f"{bug} {role} {commit}")], group=f"{bug} {role}")
            if cr.nodeid in folders:
                fill_from_folder(c, folders[cr.nodeid], f"{bug} {role}", False)
            cases.append(c)
        table.rows.append((bug, commit, role, str(o.count("caught")), str(o.count("passed")),
                           str(o.count("inconclusive")), o.verdict))
        sides.append((f"{bug} {role}", sessions))
    page = Page("bugs", f"known bugs ({root.name})", root, bugs_verdict(outcomes),
                sides=("bug",), cases=cases, sessions=sides)
    page.builds = [b for b in (build_row(s, ss) for s, ss in sides) if b]
    page.selection = [("bugs", str(len({o.bug for o in outcomes}))),
                      ("sessions", str(len(outcomes))),
                      ("cases", f"{len(cases)}: {describe_counts(cases) or 'none'}")]
    page.times = [(f"{o.bug} {o.role}", minutes(junit_seconds(Path(o.results) /
                                                                       "junit.xml")))
                  for o in outcomes if (Path(o.results) / "junit.xml").exists()]
    known = Section("Known bugs", "bugs", ["caught: a targeted case failed at the bad commit "
                                          "with the bug's own symptom and nothing else; "
                                          "clean: every targeted case passed at the fix"],
                    grids=[table], lead=True)
    zvs = root / "zts-vs-suite.md"
    if zvs.exists():
        known.markdown.append(zvs.read_text(errors="replace"))
    page.sections = [known, *all_sections(root, sides)]
    return page


def bugs_verdict(outcomes: list) -> Verdict:
    if not outcomes:
        return Verdict("inconclusive", "no bug session in this folder: nothing was tested")
    bad = [o for o in outcomes if not o.ok]
    why = [f"{o.bug} at {o.role} ({o.commit}): {o.verdict}" for o in bad]
    if not bad:
        return Verdict("pass", f"{len(outcomes)} session(s): every bug caught at its bad "
                               "commit and clean at its fix")
    if any(o.verdict.startswith(("MISSED", "NOT FIXED")) for o in bad):
        return Verdict("fail", f"{len(bad)} of {len(outcomes)} session(s) not as the "
                               "manifest says", why)
    return Verdict("inconclusive", f"{len(bad)} of {len(outcomes)} session(s) proved nothing",
                   why)


# -- which kind -----------------------------------------------------------------------

def kind_of(folder: Path) -> str:
    """The kind of run a folder holds, or "" (not a run: maybe a folder of runs)."""
    if (folder / "gate.json").exists() or ((folder / "base").is_dir()
                                           and (folder / "series").is_dir()):
        return "gate"
    v = read_json(folder / "verdict.json")
    if isinstance(v, dict) and "shards" in v:
        return "merged"
    if any(folder.glob("*/bad/junit.xml")) or any(folder.glob("*/fixed/junit.xml")) \
            or any(folder.glob("*/bad/*/cases")):
        return "bugs"
    if is_session(folder):
        return "plain"
    if sessions_under(folder) and any((folder / f).exists()
                                           for f in ("junit.xml", "pytest.log")):
        return "plain"
    return ""


def resolve(folder: Path) -> tuple[Path, str]:
    """The run a folder is, or (a folder of runs, like ``results/``) its newest run."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise SuiteError(f"{folder} is not a folder", fix="give a results folder")
    kind = kind_of(folder)
    if kind:
        return folder, kind
    runs = [(d, k) for d in folder.iterdir() if d.is_dir() for k in [kind_of(d)] if k]
    if not runs:
        raise SuiteError(f"{folder} holds no run this suite wrote",
                         fix="give a session folder (<stamp>-<label>/), a gate-*, bugs-* or "
                             "merged folder, or a folder holding them")
    return max(runs, key=lambda r: (r[0].stat().st_mtime, r[0].name))


def load(folder: Path) -> Page:
    """The page of any results folder."""
    run, kind = resolve(folder)
    return {"gate": gate_from_folder, "merged": merged_from_folder, "bugs": bugs,
            "plain": plain}[kind](run)


def selection_record(**values: object) -> str:
    """``selection.json``: what a plain run selected, kept for its report."""
    return json.dumps({k: v for k, v in values.items() if v not in (None, "", [])},
                      indent=1) + "\n"
