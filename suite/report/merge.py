"""``python -m suite merge``: N shards' results, one verdict.

Each shard runner (``--shard i/N``) leaves a results folder with its
``junit.xml`` and its cases' folders. The merge reads every shard's JUnit, writes
one ``junit.xml``, one ``summary.md`` (verdict first, for the step summary), one
self-contained ``report.html`` and ``verdict.json``, and decides:

- **inconclusive** when a shard is missing, left no JUnit, or ran no case: the
  part of the selection it held was never tested, so it cannot be green;
- **fail** when any case failed or errored (a guest judge fails at teardown);
- **pass** otherwise.

Exit codes: 0 pass, 1 fail, 2 inconclusive.
"""
from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Case:
    shard: str
    nodeid: str
    outcome: str                    # passed | failed | error | skipped
    message: str = ""
    seconds: float = 0.0


@dataclass
class Shard:
    name: str
    folder: str
    cases: list[Case] = field(default_factory=list)
    problem: str = ""               # why this shard proves nothing

    def count(self, outcome: str) -> int:
        return sum(1 for c in self.cases if c.outcome == outcome)


def _outcome(tc: ET.Element) -> tuple[str, str]:
    for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        el = tc.find(tag)
        if el is not None:
            first = (el.get("message") or "").splitlines()[:1]
            return name, (first[0] if first else "")[:300]
    return "passed", ""


def read_shard(folder: Path) -> Shard:
    sh = Shard(folder.name, str(folder))
    xmls = sorted(folder.glob("junit.xml")) or sorted(folder.glob("*/junit.xml"))
    if not folder.is_dir():
        sh.problem = "its results never arrived (no folder)"
        return sh
    if not xmls:
        sh.problem = "it left no junit.xml (the runner died, or its upload failed)"
        return sh
    for x in xmls:
        try:
            root = ET.parse(x).getroot()
        except ET.ParseError as e:
            sh.problem = f"its {x.name} does not parse: {e}"
            return sh
        for tc in root.iter("testcase"):
            nodeid = f"{tc.get('classname', '').replace('.', '/')}.py::{tc.get('name')}"
            outcome, msg = _outcome(tc)
            sh.cases.append(Case(sh.name, nodeid, outcome, msg, float(tc.get("time") or 0)))
    if not any(c.outcome in ("passed", "failed", "error") for c in sh.cases):
        sh.problem = f"it ran no case to a verdict ({len(sh.cases)} collected)"
    return sh


def verdict(shards: list[Shard], expected: int) -> tuple[str, list[str]]:
    why = [f"{s.name}: {s.problem}" for s in shards if s.problem]
    if len(shards) < expected:
        why.append(f"{expected - len(shards)} of {expected} shards are missing")
    if why:
        return "inconclusive", why
    bad = [c for s in shards for c in s.cases if c.outcome in ("failed", "error")]
    if bad:
        return "fail", [f"{c.nodeid} ({c.shard}): {c.outcome}: {c.message}" for c in bad]
    return "pass", []


def write_junit(shards: list[Shard], sources: list[Path], out: Path) -> None:
    suites = ET.Element("testsuites", name="ozfs-vmci (merged shards)")
    for sh, src in zip(shards, sources):
        for x in sorted(src.glob("junit.xml")) or sorted(src.glob("*/junit.xml")):
            try:
                root = ET.parse(x).getroot()
            except ET.ParseError:
                continue
            for ts in ([root] if root.tag == "testsuite" else root.findall("testsuite")):
                ts.set("name", f"{ts.get('name', 'pytest')} [{sh.name}]")
                suites.append(ts)
    ET.ElementTree(suites).write(out, encoding="utf-8", xml_declaration=True)


def summary_md(v: str, why: list[str], shards: list[Shard]) -> str:
    lines = [f"## ozfs-vmci: {v.upper()} ({len(shards)} shards merged)", ""]
    lines += [f"- {w}" for w in why[:50]]
    lines += ["", "| shard | passed | failed | error | skipped | note |", "|---|---|---|---|---|---|"]
    for s in shards:
        lines.append(f"| {s.name} | {s.count('passed')} | {s.count('failed')} | "
                     f"{s.count('error')} | {s.count('skipped')} | {s.problem} |")
    return "\n".join(lines) + "\n"


def report_html(v: str, why: list[str], shards: list[Shard]) -> str:
    rows = "".join(f"<tr><td>{html.escape(c.shard)}</td><td>{html.escape(c.nodeid)}</td>"
                   f"<td class={c.outcome}>{c.outcome}</td><td>{html.escape(c.message)}</td></tr>"
                   for s in shards for c in sorted(s.cases, key=lambda c: (
                       c.outcome not in ("failed", "error"), c.nodeid)))
    items = "".join(f"<li>{html.escape(w)}</li>" for w in why)
    return (f"<!doctype html><meta charset=utf-8><title>ozfs-vmci {v}</title>"
            "<style>body{font:14px sans-serif;max-width:1100px;margin:auto;padding:1em}"
            "table{border-collapse:collapse;width:100%;table-layout:fixed}"
            "td{border:1px solid #ccc;padding:3px;overflow-wrap:anywhere}"
            ".failed,.error{color:#b00}.passed{color:#070}</style>"
            f"<h1>ozfs-vmci: {v.upper()}</h1><ul>{items}</ul>"
            f"<table><tr><th>shard</th><th>case</th><th>result</th><th>why</th></tr>{rows}"
            "</table>")


def merge(sources: list[Path], out: Path, expected: int = 0) -> int:
    out.mkdir(parents=True, exist_ok=True)
    shards = [read_shard(s) for s in sources]
    v, why = verdict(shards, expected or len(sources))
    write_junit(shards, sources, out / "junit.xml")
    (out / "summary.md").write_text(summary_md(v, why, shards))
    (out / "report.html").write_text(report_html(v, why, shards))
    (out / "verdict.json").write_text(json.dumps(
        {"verdict": v, "why": why, "shards": [
            {**{k: x for k, x in asdict(s).items() if k != "cases"},
             "counts": {o: s.count(o) for o in ("passed", "failed", "error", "skipped")}}
            for s in shards]}, indent=1) + "\n")
    print(summary_md(v, why, shards))
    return {"pass": 0, "fail": 1}.get(v, 2)
