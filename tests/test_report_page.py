"""The one report design (suite/report/page) on results folders made without a VM:
a plain run that passed, a gate with a regression, merged shards with one missing, a
run that tested nothing, ``suite bugs``, and a run too big for a step summary. What
a maintainer relies on is asserted, not the markup: the verdict comes first, failed
cases before passed ones, no raw JSON anywhere a person reads, every link opens a
file inside the results folder, and the summary fits GitHub's limit and says what
it left out."""
from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
from reportdirs import CaseSpec, case, explore_finding, passing_run, session

from suite.report import page
from suite.report.outcomes import CaseClass, GateRun
from suite.campaign.merge import merge
from suite.report.page.model import STATUS_ORDER
from suite.report.page.render_md import LIMIT
from suite.report.runreport import write_reports
from suite.symptoms import Symptom

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
REGRESSION = "cases/test_dio_preadv.py::test_preadv_aligned[libaio-segs4-strict1]"
UNCHANGED = "cases/test_dio_eof.py::test_eof_tail[size40000-pread-libaio]"
FIXED = "cases/test_write_shapes.py::test_pwritev_aligned[libaio-segs9-strict1]"


class Visible(HTMLParser):
    """The text a reader sees, the links and the element ids of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.srcs: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        self._hidden += tag in ("style", "script")
        if a.get("href"):
            self.hrefs.append(a["href"])
        if a.get("src"):
            self.srcs.append(a["src"])
        if a.get("id"):
            self.ids.add(a["id"])

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("style", "script")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.text.append(data)


def read_page(html_file: Path) -> Visible:
    v = Visible()
    v.feed(html_file.read_text())
    return v


def assert_readable(results: Path, html_file: Path, md_file: Path) -> Visible:
    """What every report must be: self-contained, no raw JSON, links that open."""
    v = read_page(html_file)
    text = "".join(v.text)
    assert '{"' not in text and '{"' not in md_file.read_text(), "raw JSON in a report"
    assert "<script" not in html_file.read_text()
    assert all(s.startswith("data:image/png;base64,") for s in v.srcs), "a resource not embedded"
    for h in v.hrefs:
        if h.startswith("#"):
            assert h[1:] in v.ids, f"in-page link {h} goes nowhere"
            continue
        assert not re.match(r"^[a-z]+:|^/", h), f"link {h} is not relative"
        target = (html_file.parent / unquote(h)).resolve()
        assert target.is_file(), f"link {h} does not open a file"
        assert target.is_relative_to(results.resolve()), f"link {h} leaves the results folder"
    return v


def statuses_in_order(html_file: Path) -> list[str]:
    return re.findall(r"<details id=case-\d+ class='s-(\w+)'", html_file.read_text())


def assert_failed_first(html_file: Path) -> None:
    order = [STATUS_ORDER.index(s) for s in statuses_in_order(html_file)]
    assert order == sorted(order), f"cases out of order: {statuses_in_order(html_file)}"


def verdict_first(html_file: Path, md_file: Path, word: str) -> None:
    body = html_file.read_text().split("<main>", 1)[1]
    assert body.startswith(f"<header class='verdict {word.lower()}'><div class=word>{word}</div>")
    assert md_file.read_text().splitlines()[0].startswith(f"## ozfs-vmci: {word} — ")


# -- the runs -----------------------------------------------------------------------

def make_gate(root: Path) -> GateRun:
    """base: stock; series: the regression (tables, evidence, repro, a judge finding),
    a case fixed by the series, one unchanged, and explore's finding."""
    base = session(root / "base", "20260101-100000-stock", describe="zfs-2.4.99-486-g869d805997",
                   srcversion="A762FC73FF292B2137261A9", series=False)
    series = session(root / "series", "20260101-110000-async-dio")
    case(base, CaseSpec(REGRESSION))
    case(series, CaseSpec(REGRESSION, "failed", [
        Symptom("EFAULT", "trial 0003: res=-14 at stage complete", "libaio async=1 strict=1"),
        Symptom("kstat:wrap", "abdstats scatter_cnt = 18446744073709551598 (= -18 as signed)")],
        "EFAULT on the async row", bad_rows=1, evidence=True, tables=2))
    for s in (base, series):
        case(s, CaseSpec(UNCHANGED))
    case(base, CaseSpec(FIXED, "failed", [Symptom("wrong-bytes", "4 KiB at 0", "async=1")],
                        "wrong bytes", bad_rows=1, evidence=True))
    case(series, CaseSpec(FIXED))
    explore_finding(series)
    classes = [CaseClass(REGRESSION, "regression", "EFAULT [libaio async=1 strict=1]: trial "
                         "0003 (again in 2 of 2 reruns)", "pass", "fail"),
               CaseClass(UNCHANGED, "unchanged pass", "", "pass", "pass"),
               CaseClass(FIXED, "fixed", "on base: wrong-bytes [async=1]: 4 KiB at 0", "fail",
                         "pass"),
               CaseClass("cases/test_explore.py::test_explore", "still failing",
                         "base: paths-disagree; series: paths-disagree", "fail", "fail")]
    return GateRun("async-dio", "869d8059975b5dd1b93309c6a7e0d2ccfbad72ba", root,
                   ["-k", "preadv or eof or pwritev"], classes,
                   {"base": 700.0, "series": 705.0, "rerun1-series": 90.0})


def shard(parent: Path, name: str, outcomes: dict[str, str]) -> Path:
    """A --shard runner's folder: its junit.xml and its session."""
    d = parent / name
    s = session(d, f"20260101-12000{name[-1]}-async-dio")
    cases = []
    for nodeid, outcome in outcomes.items():
        sym = [Symptom("EINVAL", "res=-22", "libaio async=1")] if outcome == "failed" else []
        case(s, CaseSpec(nodeid, outcome, sym, "EINVAL on the async row" if sym else "",
                         bad_rows=bool(sym), evidence=bool(sym)))
        cls, _, tname = nodeid.partition("::")
        fail = '<failure message="EINVAL on the async row">trace</failure>' if sym else ""
        cases.append(f'<testcase classname="{cls[:-3].replace("/", ".")}" name="{tname}" '
                     f'time="60.0">{fail}</testcase>')
    (d / "junit.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
        f'tests="{len(cases)}" time="600.5">{"".join(cases)}</testsuite></testsuites>')
    return d


def huge_run(parent: Path, n: int = 2500) -> Path:
    """A run of ``n`` cases, every one with tables: far more than a step summary holds."""
    s = session(parent, "20260101-130000-async-dio")
    for i in range(n):
        failed = i % 50 == 0
        case(s, CaseSpec(f"cases/test_zvol_shapes.py::test_zvol_shape[case-{i:05d}]",
                         "failed" if failed else "passed",
                         [Symptom("wrong-bytes", f"{i} bytes", "async=1")] if failed else [],
                         "wrong bytes" if failed else "", bad_rows=int(failed), tables=2))
    return s


# -- behaviour ----------------------------------------------------------------------

def test_a_passing_plain_run_reads_pass_with_its_builds_tables_and_findings(tmp_path: Path):
    s = passing_run(tmp_path)
    p = page.load(s)
    assert (p.kind, p.verdict.status, p.verdict.exit_code) == ("plain", "pass", 0)
    html, md = page.write(p, with_junit=False)
    verdict_first(html, md, "PASS")
    v = assert_readable(s, html, md)
    text = " ".join(v.text)
    for want in ("debian-6.1 6.1.0-57-amd64", "zfs-2.4.99-949-gc7b7a98ba2 (c7b7a98ba2b)",
                 "async-dio: 3 commits, head 3333333333", "625360E3CBE870A9A23187C",
                 "tcg x6.0 (KVM unusable)", "cached (built 2025-12-31 10:00 in 20 min)",
                 "zfs_dio_enabled=1", "quick: guests run under TCG", "21 min",
                 "PREADV 4 x 4 KiB", "Where the time went", "Diff coverage",
                 "module/zfs/dmu_direct.c", "from 10, to 30", "101, 102, 140"):
        assert want in text, want
    assert "kvm_buf_set_msrs" not in text           # the accelerator's reason, shortened
    assert not re.search(r"<details id=case-\d+ class='s-pass' open", html.read_text())
    assert len(v.srcs) == 1                         # the perf chart, embedded
    assert "table-1.txt" in " ".join(v.hrefs) and "commands.log" in " ".join(v.hrefs)


def test_a_pull_requests_gate_is_titled_by_its_number_not_its_patch_folder(tmp_path: Path):
    """``gate --pr 18844`` exports the pull request into a cache folder; its reports
    (and a resort of them) name it openzfs/zfs#18844 (2026-12-07: the title was the path)."""
    from dataclasses import replace as with_
    from suite.report.page.kinds import gate_from_folder
    root = tmp_path / "gate-20260101-100000"
    folder = "/cache/pulls/github.com_openzfs_zfs-5fc97c1f/zfs-18844-d2896bc8e062"
    write_reports(with_(make_gate(root), series=folder, label="openzfs/zfs#18844"))
    title = (root / "gate.md").read_text().splitlines()[0]
    assert "gate openzfs/zfs#18844 against 869d8059975" in title and folder not in title
    assert json.loads((root / "gate.json").read_text())["label"] == "openzfs/zfs#18844"
    assert gate_from_folder(root).subject.startswith("gate openzfs/zfs#18844")


def test_a_failing_gate_puts_the_regression_first_with_its_tables_and_files(tmp_path: Path):
    root = tmp_path / "gate-20260101-100000"
    files = write_reports(make_gate(root))
    assert [f.name for f in files] == ["gate.json", "gate.md", "junit.xml", "report.html"]
    html, md = root / "report.html", root / "gate.md"
    verdict_first(html, md, "FAIL")
    assert md.read_text().splitlines()[0].endswith("**FAIL: 1 regression(s)** (exit 1)")
    v = assert_readable(root, html, md)
    assert_failed_first(html)
    assert statuses_in_order(html)[0] == "fail"
    page_text = html.read_text()
    first = re.search(r"<details id=case-0 class='s-fail' open>.*?</details>", page_text, re.S)
    assert first and REGRESSION in first[0]
    for want in ("EFAULT", "kstat:wrap", "PREADV 8 x 4 KiB", "evidence", "repro.sh",
                 "commands.log", "console-tail.txt"):
        assert want in first[0], want
    # The base side's tables of the fixed case are there too, collapsed.
    fixed = re.search(rf"<details id=case-\d+ class='s-pass'>(?:(?!</details>).)*"
                      rf"{re.escape(FIXED)}.*?</details>", page_text, re.S)
    assert fixed and "base" in fixed[0] and "EFAULT" in fixed[0]
    text = " ".join(v.text)
    for want in ("A762FC73FF292B2137261A9", "625360E3CBE870A9A23187C", "(stock)",
                 "-k preadv or eof or pwritev", "12 min", "After-case checks",
                 "Explore findings", "shrunk to 4 ops", "mmap_write off=32768 len=20480"):
        assert want in text, want
    md_text = md.read_text()
    assert md_text.index(REGRESSION) < md_text.index(UNCHANGED)
    assert "PREADV 8 x 4 KiB" in md_text and "repro/repro.sh" in md_text
    suite = ET.parse(root / "junit.xml").getroot()
    failed = [tc for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert [tc.get("name") for tc in failed] == ["test_preadv_aligned[libaio-segs4-strict1]"]
    out = failed[0].find("system-out").text
    assert "PREADV 4 x 4 KiB" in out and "EFAULT" in out and "commands.log" in out


def test_merged_shards_with_one_missing_are_inconclusive(tmp_path: Path):
    one = shard(tmp_path / "shards", "shard1", {
        "cases/test_dio_eof.py::test_eof_tail[a]": "passed",
        "cases/test_dio_preadv.py::test_preadv_aligned[b]": "failed"})
    out = tmp_path / "merged"
    assert merge([one, tmp_path / "shards" / "shard2"], out, expected=2) == 2
    html, md = out / "report.html", out / "summary.md"
    verdict_first(html, md, "INCONCLUSIVE")
    v = assert_readable(out, html, md)
    text = " ".join(v.text)
    assert "shard2: its results never arrived (no folder)" in text
    assert_failed_first(html)
    # The shard's files came along: the merged folder is the artifact, links and all.
    assert any("shards/shard1/" in unquote(h) and h.endswith("commands.log") for h in v.hrefs)
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] == "inconclusive" and verdict["expected"] == 2
    assert [s["counts"]["failed"] for s in verdict["shards"]] == [1, 0]
    # Rendered again later from the merged folder alone: the same verdict.
    again = page.load(out)
    assert (again.kind, again.verdict.status) == ("merged", "inconclusive")


@pytest.mark.parametrize("layout", ["session", "junit"])
def test_a_run_that_tested_nothing_is_inconclusive(tmp_path: Path, layout: str):
    if layout == "session":
        root = session(tmp_path)                   # built and booted, no case ran
    else:
        root = tmp_path / "results"
        session(root)
        (root / "junit.xml").write_text('<testsuites><testsuite name="pytest" tests="0"/>'
                                        '</testsuites>')
    p = page.load(root)
    assert (p.verdict.status, p.verdict.exit_code) == ("inconclusive", 2)
    assert "nothing was tested" in p.verdict.headline
    html, md = page.write(p, with_junit=False)
    verdict_first(html, md, "INCONCLUSIVE")
    assert_readable(root, html, md)


def test_only_skipped_cases_are_inconclusive_too(tmp_path: Path):
    s = session(tmp_path)
    case(s, CaseSpec("cases/t.py::test_a", "skipped", reason="the build has no async"))
    assert page.load(s).verdict.status == "inconclusive"


def test_a_failure_that_proved_nothing_is_inconclusive_not_a_finding(tmp_path: Path):
    s = session(tmp_path)
    case(s, CaseSpec("cases/t.py::test_a"))
    case(s, CaseSpec("cases/t.py::test_b", "failed", [Symptom("guest-lost", "qemu exited")],
                     "guest lost"))
    p = page.load(s)
    assert p.verdict.status == "inconclusive" and "proved nothing" in p.verdict.headline


def test_a_huge_run_fits_the_step_summary_and_says_what_it_cut(tmp_path: Path):
    s = huge_run(tmp_path)
    p = page.load(s)
    md = page.markdown(p)
    assert len(md.encode()) <= LIMIT < 1 << 20
    first = md.splitlines()[0]
    assert first.startswith("## ozfs-vmci: FAIL — ") and "50 case(s) failed" in first
    assert "**Cut here**" in md and "The full report is `report.html`" in md
    assert "passing cases' tables" in md.split("**Cut here**", 1)[1]
    # What matters most made it: every failing case before the cut.
    head = md.split("**Cut here**", 1)[0]
    assert head.count("### failed: `") == 50


@pytest.fixture
def demo_bug(tmp_path: Path, monkeypatch) -> str:
    """A manifest with one known bug (EFAULT on the async row) to judge by."""
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "demo.toml").write_text(textwrap.dedent("""
        name = "demo"
        url = "https://example.invalid/zfs"
        branch = "b"
        head = "c7b7a98ba2b2f62a7d907754c6e936d8125a86a7"
        base = "efc74710b8d58f0eee1f24d64ed046b3c7054039"
        [[bugs]]
        id = "eof-tail-efault"
        bad = "39991b06fea6787edbf421f30144a03330aa7d5a"
        fixed = "264aa8432d5ea1d2fecdb05c0d065267f3ddfa0f"
        cases = ["eof"]
        [bugs.symptom]
        kinds = ["EFAULT"]
        rows = "async=1"
        """))
    monkeypatch.setenv("OZFS_VMCI_PATCHES", str(patches))
    return "eof-tail-efault"


def bug_session(results: Path, fails: bool) -> None:
    """What an inner session of ``suite bugs`` leaves: its JUnit and a session."""
    s = session(results, f"20260101-10000{int(fails)}-demo")
    sym = [Symptom("EFAULT", "res=-14", "libaio async=1")] if fails else []
    case(s, CaseSpec(UNCHANGED, "failed" if fails else "passed", sym, "EFAULT" if fails else "",
                     bad_rows=int(fails), evidence=fails))
    (results / "junit.xml").write_text(f'<testsuites><testsuite name="pytest" tests="1" '
                                       f'failures="{int(fails)}" time="300"/></testsuites>')


def test_known_bugs_are_judged_again_against_their_manifest(tmp_path: Path, demo_bug: str):
    root = tmp_path / "bugs-20260101-100000"
    for role in ("bad", "fixed"):
        bug_session(root / demo_bug / role, fails=True)
    p = page.load(root)
    assert p.kind == "bugs"
    assert p.verdict.status == "fail"               # still caught at the fix: not fixed
    assert any("NOT FIXED" in r for r in p.verdict.reasons)
    html, md = page.write(p, with_junit=False)
    v = assert_readable(root, html, md)
    assert "Known bugs" in " ".join(v.text)
    assert md.read_text().index("### Known bugs") < md.read_text().index("### Builds")


def test_suite_bugs_leaves_its_report_and_the_step_summary_gets_it(tmp_path: Path, demo_bug,
                                                                    monkeypatch):
    from suite.campaign import bugs as knownbugs
    from suite.campaign.lanes import cases
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))

    def fake(args, results, extra=(), timeout=0, targets=None):
        bug_session(results, fails=results.name == "bad")
        return 1, "", 300.0
    monkeypatch.setattr(cases, "run_cases", fake)
    assert knownbugs.run_bugs("demo", [], "", []) == 0
    [root] = (tmp_path / "results").glob("bugs-*")
    html, md = root / "report.html", root / "summary.md"
    verdict_first(html, md, "PASS")
    assert_readable(root, html, md)
    assert (tmp_path / "summary.md").read_text() == md.read_text()


def test_suite_report_renders_the_newest_run_of_a_folder_and_exits_with_its_verdict(
        tmp_path: Path, capsys):
    from suite.cli import main
    results = tmp_path / "results"
    passing_run(results)
    newest = session(results, "20260102-120000-async-dio")
    case(newest, CaseSpec("cases/t.py::test_a", "failed", [Symptom("EINVAL", "res=-22")],
                          "EINVAL"))
    import os
    os.utime(newest, (2e9, 2e9))
    assert main(["report", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"plain run {newest.resolve()}" in out
    assert (newest / "report.html").exists() and (newest / "summary.md").exists()
    assert out.strip().splitlines()[-1].startswith("FAIL: run async-dio (2026-01-02 12:00)")
    assert (newest / "junit.xml").exists()           # none was there: one is written
    elsewhere = tmp_path / "out"
    assert main(["report", str(results / "20260101-120000-async-dio"), "--out",
                 str(elsewhere)]) == 0
    assert (elsewhere / "report.html").exists()
    assert main(["report", str(tmp_path / "nothing-here")]) == 2


def test_the_end_of_a_plain_run_writes_its_report_and_step_summary(pytester, tmp_path: Path,
                                                                    monkeypatch):
    """A real (VM-less) pytest run: its build cannot be made, so it tested nothing, and
    its report says so; the step summary gets it, an inner session's does not."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    pytester.makepyfile(test_case="def test_case(zfs_build):\n    pass\n")
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))

    def run(results: str) -> Path:
        res = pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                            "--results", str(pytester.path / results),
                                            "--zfs-source", "https://example.invalid/zfs",
                                            "--offline", "-k", "case", timeout=300)
        assert "ozfs-vmci report: " in res.stdout.str()
        [run_dir] = (pytester.path / results).iterdir()
        return run_dir
    run_dir = run("results")
    html, md = run_dir / "report.html", run_dir / "summary.md"
    verdict_first(html, md, "INCONCLUSIVE")
    assert_readable(run_dir, html, md)
    assert "example.invalid" in html.read_text()
    assert json.loads((run_dir / "selection.json").read_text())["k"] == "case"
    assert summary.read_text() == md.read_text()
    monkeypatch.setenv("OZFS_VMCI_INNER_SESSION", "1")
    run("inner")
    assert summary.read_text() == md.read_text()     # nothing more appended


def test_accelerator_phrase_names_the_hold_factor_where_the_run_had_one() -> None:
    from suite.report.page.disk import accel_phrase
    assert accel_phrase({"name": "tcg", "scale": 6.0, "hold_scale": 2.0,
                         "reason": "KVM unusable: no EDD"}) == "tcg x6.0, holds x2.0 (KVM unusable)"
    assert accel_phrase({"name": "kvm", "scale": 1.0, "reason": ""}) == "kvm x1.0"
    assert accel_phrase({}) == "?"
