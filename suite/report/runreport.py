"""The gate's reports: markdown for ``$GITHUB_STEP_SUMMARY`` (verdict first),
JUnit XML (tables and evidence in each testcase's output), and one
self-contained HTML page with the tables and, for failed cases, the evidence.

Everything is read back from the sessions' results folders: each case folder
(``cases/<slug>/``: ``verdict.json``, ``table-*.txt``, ``evidence/``,
``commands.log``, ``repro/``), each run's ``build/record-*.json`` and
``accel.json``. Each failed case names the files to open.
"""
from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable

from suite.paths import case_slug as slug
from suite.report import zts
from suite.report.gate import CLASSES, CaseClass, GateRun, verdict

FAILING = ("regression", "inconclusive", "flaky")


def case_dirs(root: Path, side: str, nodeid: str) -> list[Path]:
    return sorted((root / side).glob(f"*/cases/{slug(nodeid)}"))


def artifacts(root: Path, side: str, nodeid: str) -> list[Path]:
    """The files a maintainer opens first for a case, relative to the gate folder."""
    out: list[Path] = []
    for d in case_dirs(root, side, nodeid):
        for pat in ("verdict.json", "table-*.txt", "evidence/summary.txt", "evidence/*stack*",
                    "evidence/console-tail.txt", "commands.log", "repro/repro.sh"):
            out += sorted(d.glob(pat))
    return out


def read(paths: Iterable[Path], limit: int = 6000) -> str:
    parts = []
    for p in paths:
        try:
            parts.append(f"--- {p.name}\n{p.read_text(errors='replace')[-limit:]}")
        except OSError:
            continue
    return "\n".join(parts)


def build_record(root: Path, side: str) -> dict:
    rec = next(iter(sorted((root / side).glob("*/build/record-*.json"))), None)
    acc = next(iter(sorted((root / side).glob("*/accel.json"))), None)
    out: dict = {}
    if rec:
        r = json.loads(rec.read_text())
        src = r.get("source", {})
        out = {"kernel": f"{r['kernel'].get('profile')} {r['kernel'].get('release')}",
               "openzfs": f"{src.get('describe')} ({src.get('commit', '')[:11]})",
               "series": [f"{s['name']}: {len(s['commits'])} commits, head "
                          f"{s['commits'][-1][:11]}" for s in src.get("series") or []],
               "srcversion": {m: v.get("srcversion") for m, v in r.get("modules", {}).items()},
               "build": r.get("key")}
    if acc:
        out["accelerator"] = json.loads(acc.read_text())
    return out


BUILD_COLUMNS = ("side", "kernel", "OpenZFS", "series", "zfs srcversion", "accelerator",
                 "trials", "session")


def build_rows(g: GateRun) -> list[tuple[str, ...]]:
    """Each side's build as a table row (never a raw record)."""
    rows = []
    for side in ("base", "series"):
        r = build_record(g.root, side)
        acc = r.get("accelerator") or {}
        why = str(acc.get("reason", "")).split(":", 1)[0][:40]
        rows.append((side, r.get("kernel", "?"), r.get("openzfs", "?"),
                     "; ".join(r.get("series") or []) or "(stock)",
                     str((r.get("srcversion") or {}).get("zfs") or "?"),
                     f"{acc.get('name', '?')} x{acc.get('scale', '?')}" + (f" ({why})" if why
                                                                          else ""),
                     str(trial_count(g.root, side)),
                     f"{round(g.seconds[side])} s" if side in g.seconds else "?"))
    return rows


def trial_count(root: Path, side: str) -> int:
    n = 0
    for t in (root / side).glob("*/tables/*.json"):
        try:
            n += sum(int(r.get("trials", 0)) for r in json.loads(t.read_text())["rows"].values())
        except (ValueError, KeyError, TypeError):
            continue
    return n


def markdown(g: GateRun) -> str:
    code, text = verdict(g.classes)
    counts = {k: [c for c in g.classes if c.cls == k] for k in CLASSES}
    lines = [f"## Gate: {g.series} against {g.base[:11]}: **{text}** (exit {code})", "",
             "| class | cases |", "|---|---|"]
    lines += [f"| {k} | {len(v)} |" for k, v in counts.items()]
    for k in FAILING:
        for c in counts[k]:
            lines += ["", f"### {k}: `{c.nodeid}`", "", c.why, ""]
            tables = [p for d in case_dirs(g.root, "series", c.nodeid)
                      for p in sorted(d.glob("table-*.md"))]
            lines += [p.read_text() for p in tables]
            lines += ["open: " + ", ".join(f"`{p.relative_to(g.root)}`"
                                           for p in artifacts(g.root, "series", c.nodeid))]
    rest = [c for c in g.classes if c.cls not in FAILING]
    if rest:                # what passed, and why a case ran on one side only
        lines += ["", "### The other cases", "", "| case | class | base | series | why |",
                  "|---|---|---|---|---|"]
        for c in sorted(rest, key=lambda c: (CLASSES.index(c.cls), c.nodeid)):
            why = c.why.replace("|", "\\|")
            lines.append(f"| `{c.nodeid}` | {c.cls} | {c.base} | {c.series} | {why} |")
    lines += zts_sections(g.root)
    lines += ["", "### Builds", "", "| " + " | ".join(BUILD_COLUMNS) + " |",
              "|" + "---|" * len(BUILD_COLUMNS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
              for row in build_rows(g)]
    lines += [f"- {side}: {problem}" for side, problem in g.problems.items()]
    return "\n".join(lines) + "\n"


def zts_files(root: Path, side: str) -> list[Path]:
    return sorted((root / side).glob(f"*/cases/*/{zts.RESULTS_FILE}"))


def zts_sections(root: Path) -> list[str]:
    """OpenZFS's own tests (when the selection ran the ZTS lane), per side."""
    out = []
    for side in ("base", "series"):
        for f in zts_files(root, side):
            meta, res = zts.load(f)
            out += ["", zts.markdown(res, f"ZTS `{meta.get('tag')}` on {side} "
                                          f"({meta.get('describe', '')})")]
    return out


def junit(g: GateRun) -> ET.ElementTree:
    code, text = verdict(g.classes)
    suite = ET.Element("testsuite", name=f"gate {g.series}", tests=str(len(g.classes)),
                       failures=str(sum(c.cls in ("regression", "inconclusive")
                                        for c in g.classes)),
                       skipped=str(sum(c.cls == "flaky" for c in g.classes)))
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="verdict", value=text)
    for c in g.classes:
        file, _, name = c.nodeid.partition("::")
        tc = ET.SubElement(suite, "testcase", classname=file.replace("/", ".").removesuffix(".py"),
                           name=name or file)
        ET.SubElement(tc, "properties").append(
            ET.Element("property", name="class", value=c.cls))
        if c.cls in ("regression", "inconclusive"):
            ET.SubElement(tc, "failure", message=f"{c.cls}: {c.why}"[:1000], type=c.cls)
        elif c.cls == "flaky":
            ET.SubElement(tc, "skipped", message=f"flaky: {c.why}"[:1000])
        out = ET.SubElement(tc, "system-out")
        out.text = f"{c.cls}: {c.why}\nbase: {c.base}  series: {c.series}  reruns: " \
                   f"{c.reruns}\n" + read(artifacts(g.root, "series", c.nodeid))
    return ET.ElementTree(suite)


def html_page(g: GateRun) -> str:
    code, text = verdict(g.classes)
    e = html.escape
    rows = "".join(
        f"<tr class='{e(c.cls.replace(' ', '-'))}'><td>{e(c.cls)}</td><td><code>{e(c.nodeid)}"
        f"</code></td><td>{e(c.base)}</td><td>{e(c.series)}</td><td>{e(c.why)}</td></tr>"
        for c in sorted(g.classes, key=lambda c: CLASSES.index(c.cls)))
    details = []
    for c in g.classes:
        if c.cls not in FAILING:
            continue
        files = artifacts(g.root, "series", c.nodeid)
        links = " ".join(f"<a href='{e(str(p.relative_to(g.root)))}'>{e(p.name)}</a>"
                         for p in files)
        details.append(f"<h3>{e(c.cls)}: <code>{e(c.nodeid)}</code></h3><p>{e(c.why)}</p>"
                       f"<p>open: {links}</p><pre>{e(read(files))}</pre>")
    builds = ("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in BUILD_COLUMNS) + "</tr>" +
              "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>"
                      for row in build_rows(g)) + "</table>")
    style = ("body{font-family:sans-serif;margin:2em} td,th{border:1px solid #ccc;padding:4px}"
             " table{border-collapse:collapse} .regression,.inconclusive{background:#fdd}"
             " .flaky{background:#ffd} .fixed{background:#dfd} pre{background:#f6f6f6;"
             "padding:1em;overflow:auto;max-height:40em}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>gate {e(g.series)}"
            f"</title><style>{style}</style></head><body><h1>Gate: {e(g.series)} against "
            f"{e(g.base[:11])}: {e(text)} (exit {code})</h1><table><tr><th>class</th>"
            f"<th>case</th><th>base</th><th>series</th><th>why</th></tr>{rows}</table>"
            f"<h2>Builds</h2>{builds}{''.join(details)}</body></html>\n")


def write_reports(g: GateRun) -> list[Path]:
    g.root.mkdir(parents=True, exist_ok=True)
    out = [g.root / "gate.json", g.root / "gate.md", g.root / "junit.xml", g.root / "report.html"]
    out[0].write_text(g.to_json() + "\n")
    out[1].write_text(markdown(g))
    junit(g).write(out[2], encoding="unicode", xml_declaration=True)
    for side in ("base", "series"):                 # each ZTS test under its own id
        zts.fold_into_junit(out[2], zts_files(g.root, side), label=side)
    out[3].write_text(html_page(g))
    return out


def print_verdict(g: GateRun, files: list[Path]) -> None:
    code, text = verdict(g.classes)
    print(f"\ngate {g.series} against {g.base[:11]}: {text}")
    for k in CLASSES:
        cs: list[CaseClass] = [c for c in g.classes if c.cls == k]
        print(f"  {k:24s} {len(cs)}")
        if k in FAILING:
            for c in cs:
                print(f"    {c.nodeid}: {c.why}")
    for side, p in g.problems.items():
        print(f"  {side}: {p}")
    print("reports: " + " ".join(str(f) for f in files))
