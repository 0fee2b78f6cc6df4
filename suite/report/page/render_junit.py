"""The page as JUnit XML: a testcase per case (grouped in a testsuite per shard, bug
session or gate), failing and inconclusive cases as failures, flaky as skipped with
the reason, a known upstream finding (xfail) as ``skipped`` of type ``pytest.xfail``
(as pytest's own ``--junitxml`` writes it: docs/findings.md), and each case's
tables, evidence and files in its ``system-out``, so a CI's test view shows what the
HTML page shows."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from suite.report.page.disk import tail
from suite.report.page.model import Case, Page

FAILURE = ("fail", "inconclusive")
SKIPPED = ("flaky", "skip", "known")        # known: an expected failure (xfail)


def system_out(c: Case, out_dir: Path) -> str:
    parts = [f"{c.label}: {c.why}".rstrip(": ")]
    if c.sides:
        parts.append("  ".join(f"{s.side}: {s.result}" for s in c.sides))
    parts += [f"symptom: {s}" for s in c.symptoms]
    parts += [f"--- {t.side + ' ' if t.side else ''}{t.source.name}\n{t.text or t.markdown}"
              for t in c.tables]
    if c.evidence:
        parts.append(f"--- evidence/summary.txt\n{c.evidence}")
    if c.failing:
        console = next((x.path for x in c.links if x.path.name == "console-tail.txt"), None)
        if console is not None:
            parts.append(f"--- {console.name}\n{tail(console, 3000)}")
    if c.output:
        parts.append(c.output)
    if c.links:
        parts.append("files: " + " ".join(Path(os.path.relpath(x.path, out_dir)).as_posix()
                                          for x in c.links))
    return "\n".join(parts)


def testcase(parent: ET.Element, c: Case, out_dir: Path) -> None:
    file, _, name = c.nodeid.partition("::")
    tc = ET.SubElement(parent, "testcase",
                       classname=file.replace("/", ".").removesuffix(".py") if name else "",
                       name=name or file, time=f"{c.seconds:.3f}")
    props = ET.SubElement(tc, "properties")
    props.append(ET.Element("property", name="class", value=c.label))
    if c.status in FAILURE:
        ET.SubElement(tc, "failure", message=f"{c.label}: {c.why}"[:1000], type=c.status)
    elif c.status in SKIPPED:
        kind = {"known": {"type": "pytest.xfail"}}.get(c.status, {})
        ET.SubElement(tc, "skipped", message=f"{c.label}: {c.why}"[:1000], **kind)
    ET.SubElement(tc, "system-out").text = system_out(c, out_dir)


def junit(page: Page, out_dir: Path | None = None) -> ET.ElementTree:
    out_dir = out_dir or page.root
    suites = ET.Element("testsuites", name=f"ozfs-vmci {page.subject}")
    groups: dict[str, list[Case]] = {}
    for c in page.ordered_cases():
        groups.setdefault(c.group or page.subject, []).append(c)
    for name, cases in groups.items() or [(page.subject, [])]:
        label = f"pytest [{name}]" if page.kind == "merged" else name
        s = ET.SubElement(suites, "testsuite", name=label, tests=str(len(cases)),
                          failures=str(sum(c.status in FAILURE for c in cases)), errors="0",
                          skipped=str(sum(c.status in SKIPPED for c in cases)),
                          time=f"{sum(c.seconds for c in cases):.3f}")
        props = ET.SubElement(s, "properties")
        ET.SubElement(props, "property", name="verdict",
                      value=f"{page.verdict.word}: {page.verdict.headline}")
        for c in cases:
            testcase(s, c, out_dir)
    return ET.ElementTree(suites)
