"""Release lines side by side: one pytest run per line (2.3.x, 2.4.x, master), each
case's outcome per line, the cases whose outcome differs first.

Input is each run's results folder (``--results DIR --junitxml DIR/junit.xml``);
the line's label is the OpenZFS ``describe`` of the build it ran (from the
session's ``build/record-*.json``), else the folder's name. A difference between
lines is what a maintainer triages: a bug fixed on master but not backported, a
case the older line cannot run (and why), a regression of a release.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass
class LineRun:
    label: str
    folder: Path
    cases: dict[str, tuple[str, str]] = field(default_factory=dict)   # id -> (outcome, why)

    def count(self, outcome: str) -> int:
        return sum(o == outcome for o, _ in self.cases.values())


def case_id(tc: ET.Element) -> str:
    cls, name = tc.get("classname", ""), tc.get("name", "")
    return f"{cls.replace('.', '/')}.py::{name}" if cls else name


def outcome(tc: ET.Element) -> tuple[str, str]:
    for tag, what in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        el = tc.find(tag)
        if el is not None:
            why = (el.get("message") or el.text or "").strip().splitlines()
            return what, (why[0] if why else "")[:200]
    return "passed", ""


def label_of(folder: Path) -> str:
    rec = next(iter(sorted(folder.glob("*/build/record-*.json"))), None)
    if rec:
        src = json.loads(rec.read_text()).get("source", {})
        if src.get("describe"):
            return str(src["describe"])
    return folder.name


def read_run(folder: Path, label: str | None = None) -> LineRun:
    """A line's run from its results folder (its ``junit.xml``, at the top or one
    level down)."""
    xml = next(iter([*folder.glob("junit.xml"), *sorted(folder.glob("*/junit.xml"))]), None)
    run = LineRun(label or label_of(folder), folder)
    if xml is None:
        return run
    for tc in ET.parse(xml).getroot().iter("testcase"):
        run.cases[case_id(tc)] = outcome(tc)
    return run


def differing(runs: list[LineRun]) -> list[str]:
    """Cases whose outcome is not the same on every line (absent counts)."""
    ids = sorted({c for r in runs for c in r.cases})
    return [c for c in ids if len({r.cases.get(c, ("absent", ""))[0] for r in runs}) > 1]


def cell(run: LineRun, case: str) -> str:
    o, why = run.cases.get(case, ("absent", ""))
    return f"{o}: {why}" if why and o != "passed" else o


def markdown(runs: list[LineRun], every_case: bool = False) -> str:
    """Counts per line, then the cases that differ (all cases with ``every_case``),
    then each line's failures with their first line."""
    head = "| " + " | ".join(["", *(f"`{r.label}`" for r in runs)]) + " |"
    sep = "|---" * (len(runs) + 1) + "|"
    out = ["## Release lines side by side", "", head, sep]
    for o in OUTCOMES:
        out.append(f"| {o} | " + " | ".join(str(r.count(o)) for r in runs) + " |")
    out.append("| cases | " + " | ".join(str(len(r.cases)) for r in runs) + " |")
    if any(not r.cases for r in runs):
        out += ["", "**Inconclusive:** no results from " +
                ", ".join(f"`{r.label}` ({r.folder})" for r in runs if not r.cases)]
    rows = sorted({c for r in runs for c in r.cases}) if every_case else differing(runs)
    title = "Every case" if every_case else "Cases whose outcome differs between lines"
    out += ["", f"### {title} ({len(rows)})", ""]
    if rows:
        out += [head.replace("|  |", "| case |", 1), sep]
        out += [f"| `{c}` | " + " | ".join(cell(r, c).replace("|", "\\|") for r in runs) + " |"
                for c in rows]
    else:
        out.append("none: every case has the same outcome on every line")
    for r in runs:
        bad = [c for c, (o, _) in r.cases.items() if o in ("failed", "error")]
        if bad:
            out += ["", f"### Failed on `{r.label}`", ""]
            out += [f"- `{c}`: {r.cases[c][1]}" for c in bad]
    return "\n".join(out) + "\n"


def exit_code(runs: list[LineRun]) -> int:
    """0 every line passed, 1 a failure on some line, 2 a line with no results."""
    if any(not r.cases for r in runs):
        return 2
    return 1 if any(r.count("failed") or r.count("error") for r in runs) else 0
