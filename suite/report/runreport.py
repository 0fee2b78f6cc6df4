"""The gate's reports, in the one report design (``suite/report/page``):
``gate.json`` (the classes, for tools), ``gate.md`` (verdict first, for
``$GITHUB_STEP_SUMMARY``), ``junit.xml`` (a testcase per case, each ZTS test under its
own id) and the self-contained ``report.html``.

Everything is read back from the sessions' results folders: each case folder
(``cases/<slug>/``: ``verdict.json``, ``table-*``, ``evidence/``, ``commands.log``,
``repro/``), each run's ``build/record-*.json`` and ``accel.json``.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from suite.paths import case_slug as slug  # noqa: F401  (the self-tests use it)
from suite.report import page as report_page
from suite.report.outcomes import CLASSES, CaseClass, GateRun, verdict

FAILING = ("regression", "inconclusive", "flaky")


def markdown(g: GateRun) -> str:
    return report_page.markdown(report_page.kinds.gate(g))


def junit(g: GateRun) -> ET.ElementTree:
    return report_page.junit(report_page.kinds.gate(g))


def html_page(g: GateRun) -> str:
    return report_page.page_html(report_page.kinds.gate(g))


def write_reports(g: GateRun) -> list[Path]:
    g.root.mkdir(parents=True, exist_ok=True)
    (g.root / "gate.json").write_text(g.to_json() + "\n")
    html, md, xml = report_page.write(report_page.kinds.gate(g), g.root)
    return [g.root / "gate.json", md, xml, html]


def print_verdict(g: GateRun, files: list[Path]) -> None:
    code, text = verdict(g.classes)
    print(f"\ngate {g.name} against {g.base[:11]}: {text}")
    for k in CLASSES:
        cs: list[CaseClass] = [c for c in g.classes if c.cls == k]
        print(f"  {k:24s} {len(cs)}")
        if k in FAILING:
            for c in cs:
                print(f"    {c.label}: {c.why}")
    for side, p in g.problems.items():
        print(f"  {side}: {p}")
    print("reports: " + " ".join(str(f) for f in files))
