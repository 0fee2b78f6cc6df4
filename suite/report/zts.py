"""ZTS results: read ``zfs-tests.sh``'s console, say it as tables and JUnit.

The runner prints one line per test (``Test: .../tests/functional/direct/
dio_random (run as root) [01:02] [PASS]``) and ``zts-report`` then lists which
non-PASS results it expected (its known-failure lists) and which it did not. A
ZTS test is reported under its own id, ``zts:functional/direct/dio_random``, with
``failed`` meaning an unexpected non-PASS, as OpenZFS's CI counts it.
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

# The pattern zts-report.py itself uses for a result line.
RESULT_RE = re.compile(
    r"^(?:\[[0-9\-T:\.]+\]\s+)?Test(?:\s+\(\S+\))?:\s*\S*/zfs-tests/tests/"
    r"((?:functional|perf/regression)/\S+)\s*\(run as (\S+)\)\s*\[(\S+)\]\s*\[(\S+)\]", re.M)
SECTION_RE = re.compile(r"^Tests with results other than PASS that are (expected|unexpected):\s*$")
ITEM_RE = re.compile(r"^\s+(\S+)\s+(\S+)\s*(?:\((.*)\))?\s*$")
RESULTS_FILE = "zts-results.json"


@dataclass
class ZtsResult:
    test: str               # functional/direct/dio_random
    result: str             # PASS FAIL SKIP KILLED ...
    seconds: int
    expected: bool = True   # False: zts-report lists it as unexpected (a failure)
    reason: str = ""        # zts-report's reason for an expected non-PASS

    @property
    def id(self) -> str:
        return f"zts:{self.test}"

    @property
    def failed(self) -> bool:
        return self.result != "PASS" and not self.expected


def _seconds(runtime: str) -> int:
    parts = [int(p) for p in runtime.split(":") if p.isdigit()]
    s = 0
    for p in parts:
        s = s * 60 + p
    return s


def parse(console: str) -> list[ZtsResult]:
    """The results in ``console`` (last result wins for a test run twice)."""
    res: dict[str, ZtsResult] = {}
    for m in RESULT_RE.finditer(console):
        res[m.group(1)] = ZtsResult(m.group(1), m.group(4), _seconds(m.group(3)))
    section = None
    for line in console.splitlines():
        if line.startswith("Tests with"):
            sm = SECTION_RE.match(line)
            section = sm.group(1) if sm else None
            continue
        im = ITEM_RE.match(line) if line.startswith(" ") else None
        if im is None:
            if line.strip():
                section = None
            continue
        key = f"functional/{im.group(2)}"
        if section and key in res:
            res[key].expected = section == "expected"
            res[key].reason = im.group(3) or ""
    # zts-report lists only what it has an opinion on; a non-PASS it did not
    # list (its report missing, e.g. the run died) is unexpected.
    if not re.search(r"^Tests with results other than PASS that are unexpected", console, re.M):
        for r in res.values():
            r.expected = r.result == "PASS"
    return list(res.values())


def counts(results: list[ZtsResult]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        out[r.result] = out.get(r.result, 0) + 1
    return out


def markdown(results: list[ZtsResult], title: str) -> str:
    c = counts(results)
    head = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
    lines = [f"#### {title}", "", f"{len(results)} tests: {head}", "",
             "| ZTS test | result | time | |", "|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (not r.failed, r.test)):
        note = "**unexpected**" if r.failed else (r.reason if r.result != "PASS" else "")
        lines.append(f"| `{r.test}` | {r.result} | {r.seconds} s | {note} |")
    return "\n".join(lines) + "\n"


def save(results: list[ZtsResult], path: Path, meta: dict) -> None:
    path.write_text(json.dumps({**meta, "results": [asdict(r) for r in results]}, indent=1))


def load(path: Path) -> tuple[dict, list[ZtsResult]]:
    data = json.loads(path.read_text())
    return data, [ZtsResult(**r) for r in data.pop("results")]


def junit_suite(results: list[ZtsResult], name: str, console_ref: str = "") -> ET.Element:
    """One ``<testsuite>``: a testcase per ZTS test, under its own id."""
    suite = ET.Element("testsuite", name=name, tests=str(len(results)),
                       failures=str(sum(r.failed for r in results)),
                       skipped=str(sum(r.result == "SKIP" for r in results)),
                       errors="0", time=str(sum(r.seconds for r in results)))
    for r in results:
        tc = ET.SubElement(suite, "testcase", classname="zts." + r.test.rsplit("/", 1)[0]
                           .replace("/", "."), name=r.test.rsplit("/", 1)[-1], time=str(r.seconds))
        tc.set("file", r.id)
        if r.failed:
            el = ET.SubElement(tc, "failure", message=f"{r.result} (expected PASS)")
            el.text = f"{r.id}: {r.result}; per-test logs: {console_ref}"
        elif r.result == "SKIP":
            ET.SubElement(tc, "skipped", message=r.reason or "skipped by ZTS")
        elif r.result != "PASS":
            out = ET.SubElement(tc, "system-out")
            out.text = f"{r.result}, expected by zts-report: {r.reason}"
    return suite


def append_suites(xml_path: Path, suites: list[ET.Element]) -> None:
    """Append ``<testsuite>`` elements to the JUnit XML at ``xml_path`` (wrapped in
    ``<testsuites>`` if pytest wrote a single suite)."""
    tree = ET.parse(xml_path)
    root = tree.getroot()
    if root.tag != "testsuites":
        wrapper = ET.Element("testsuites")
        wrapper.append(root)
        root = wrapper
        tree = ET.ElementTree(root)
    root.extend(suites)
    tree.write(xml_path, encoding="unicode", xml_declaration=True)


def fold_into_junit(xml_path: Path, result_files: list[Path], label: str = "") -> int:
    """Append a ``<testsuite>`` per ZTS results file to the JUnit XML at
    ``xml_path`` (named ``zts-<tag>``, ``-<label>`` added); returns the testcases
    added."""
    if not xml_path.exists() or not result_files:
        return 0
    suites, added = [], 0
    for f in result_files:
        meta, results = load(f)
        name = f"zts-{meta.get('tag', 'tags')}" + (f"-{label}" if label else "")
        suites.append(junit_suite(results, name, str(f.parent / "test_results.tar.gz")))
        added += len(results)
    append_suites(xml_path, suites)
    return added
