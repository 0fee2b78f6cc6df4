"""Known upstream findings as xfail (suite/plugin/expected.py), in inner pytest
sessions: the terminal, the exit code, JUnit, verdict.json and the run's report;
XPASS for a named case that passes; ``--strict-known`` for the red view."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from suite.plugin.expected import expected
from suite.report.upstream import UpstreamFinding

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent

FINDINGS = '''
[[findings]]
id = "stale-read"
title = "An O_DIRECT read returns a freed record"
cases = ["test_known", "test_fixed"]
kinds = ["wrong-bytes"]

[[findings]]
id = "lock-order"
title = "lockdep: a lock order"
cases = ["test_lockdep_only"]
kinds = ["kernel:lockdep"]
signature = "circular locking"

[[findings]]
id = "pin-panic"
title = "A write cut short pins the uncut length"
cases = ["test_panic_known", "test_panic_other", "test_harness_no_result", "test_left_waiting"]
kinds = ["kernel:spl_panic"]
signature = "VERIFY0\\\\(len\\\\) failed"
also = ["no-result", "D-state"]

[[findings]]
id = "two-locks"
title = "lockdep: two locks of one class"
cases = ["*"]
kinds = ["kernel:lockdep"]
signature = "circular locking.*ms_lock"
status = "false-positive"
status_why = "different dnodes share one class"
'''

CASES = '''
import pytest

pytestmark = pytest.mark.ozfs_case

@pytest.fixture
def zfs_build():
    return None

def test_known(zfs_build, symptom):
    symptom("wrong-bytes", "op 3 read 4096 bytes: old ones")
    assert False, "wrong bytes"

def test_new(zfs_build, symptom):
    symptom("EFAULT", "op 1")
    assert False, "EFAULT"

def test_known_and_more(zfs_build, symptom):
    symptom("wrong-bytes", "op 3")
    symptom("EFAULT", "op 4")
    assert False, "both"

def test_fixed(zfs_build):
    pass

def test_lockdep_only(zfs_build):
    pass

def test_plain(zfs_build):
    pass

def test_panic_known(zfs_build, symptom):
    symptom("kernel:spl_panic", "[ 12.5] VERIFY0(len) failed (-131072)")
    symptom("no-result", "the kernel reported spl_panic while running: engine")
    assert False, "panicked"

def test_panic_other(zfs_build, symptom):
    symptom("kernel:spl_panic", "[ 12.5] VERIFY(zio->io_abd != NULL) failed")
    symptom("no-result", "the kernel reported spl_panic while running: engine")
    assert False, "panicked"

def test_harness_no_result(zfs_build, symptom):
    symptom("no-result", "the engine printed no result: KeyError: 'rows'")
    assert False, "no result"

def test_left_waiting(zfs_build, symptom):
    symptom("D-state", "886 (python3)", stack=("zfs_dio_wait",))
    assert False, "stuck"

@pytest.fixture
def judged_after(symptom):
    yield
    symptom("kernel:lockdep", "possible circular locking dependency ms_lock dn_dbufs_mtx")
    pytest.fail("the kernel reported after the case")

def test_false_positive_after(zfs_build, judged_after):
    pass
'''


@pytest.fixture(autouse=True)
def _inner_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    (patches / "upstream").mkdir(parents=True)
    (patches / "upstream" / "findings.toml").write_text(FINDINGS)
    monkeypatch.setenv("OZFS_VMCI_PATCHES", str(patches))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\nmarkers =\n    ozfs_case: a case\n")
    pytester.makepyfile(test_cases=CASES)
    return pytester.runpytest_subprocess(
        "-p", "suite.plugin", "-p", "no:cacheprovider", "--results",
        str(pytester.path / "results"), "--junitxml", str(pytester.path / "junit.xml"),
        "-rxX", *args, timeout=300)


def verdicts(pytester: pytest.Pytester) -> dict[str, dict]:
    return {json.loads(p.read_text())["nodeid"].split("::")[-1]: json.loads(p.read_text())
            for p in (pytester.path / "results").glob("*/cases/*/verdict.json")}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_failure_by_a_known_finding_alone_is_xfail_and_a_named_pass_is_xpass(
        pytester, workers):
    res = run(pytester, *workers)
    res.assert_outcomes(passed=3, failed=5, xfailed=2, xpassed=1)
    out = res.stdout.str()
    assert "XFAIL" in out and "known upstream finding stale-read" in out
    assert "XPASS" in out and "fixed upstream? retire the finding" in out
    v = verdicts(pytester)
    assert v["test_known"]["outcome"] == "xfailed"
    assert v["test_known"]["reason"].startswith(
        "known upstream finding stale-read (by kinds wrong-bytes): An O_DIRECT")
    assert v["test_panic_known"]["reason"].startswith(
        "known upstream finding pin-panic (by /VERIFY0\\(len\\) failed/)")
    assert v["test_new"]["outcome"] == "failed"
    assert v["test_known_and_more"]["outcome"] == "failed", "a new symptom beside it is new"
    assert v["test_fixed"]["outcome"] == "xpassed"
    assert v["test_lockdep_only"]["outcome"] == "passed", "passes unseen without lockdep"
    assert v["test_panic_known"]["outcome"] == "xfailed", "its own panic, and what followed"
    assert v["test_panic_other"]["outcome"] == "failed", "a panic of another title is new"
    assert v["test_harness_no_result"]["outcome"] == "failed", "no-result alone is no finding"
    assert v["test_left_waiting"]["outcome"] == "failed", "a consequence alone is no finding"
    assert v["test_false_positive_after"]["outcome"] == "passed"
    assert v["test_false_positive_after"]["reason"].startswith("false positive retired: two-locks")
    cases = {tc.get("name"): tc for tc in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    skipped = cases["test_known"].find("skipped")
    assert skipped is not None and skipped.get("type") == "pytest.xfail"
    assert "stale-read" in skipped.get("message", "")
    assert cases["test_new"].find("failure") is not None


def test_only_known_failures_exit_0_and_the_report_says_pass(pytester):
    res = run(pytester, "-k", "(known and not more and not panic) or plain")
    res.assert_outcomes(passed=1, xfailed=1)
    assert res.ret == 0
    from suite.report.page.kinds import plain
    page = plain(next((pytester.path / "results").glob("*-stock")))
    assert page.verdict.status == "pass", page.verdict
    assert "1 known upstream findings (xfail): stale-read" in page.verdict.headline
    from suite.report.page.render_junit import junit     # `suite report`'s junit.xml
    cases = {tc.get("name"): tc for tc in junit(page).getroot().iter("testcase")}
    skipped = cases["test_known"].find("skipped")
    assert skipped is not None and skipped.get("type") == "pytest.xfail", \
        "the report's JUnit says xfail as pytest's does (docs/findings.md)"
    assert cases["test_plain"].find("skipped") is None


def test_a_panic_of_another_title_fails_the_run_exit_1(pytester):
    res = run(pytester, "-k", "panic_other or plain")
    res.assert_outcomes(passed=1, failed=1)
    assert res.ret == 1
    from suite.report.page.kinds import plain
    page = plain(next((pytester.path / "results").glob("*-stock")))
    assert page.verdict.status == "fail" and "known" not in page.verdict.headline


def test_a_harness_no_result_is_inconclusive_exit_2_never_xfail(pytester):
    res = run(pytester, "-k", "harness_no_result or plain")
    res.assert_outcomes(passed=1, failed=1)
    assert res.ret == 2, res.stdout.str()[-2000:]
    assert "INCONCLUSIVE" in res.stdout.str()
    from suite.report.page.kinds import plain
    page = plain(next((pytester.path / "results").glob("*-stock")))
    assert page.verdict.status == "inconclusive"


def test_a_finding_of_a_catch_all_kind_without_a_signature_stops_the_run(pytester, tmp_path):
    (tmp_path / "patches" / "upstream" / "findings.toml").write_text(
        FINDINGS.replace('signature = "circular locking"\n', ""))
    res = run(pytester, "-k", "plain")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "lock-order: kind 'kernel:lockdep' says too little alone" in res.stderr.str()


def test_strict_known_keeps_them_failures(pytester):
    res = run(pytester, "--strict-known", "-k", "(known and not more and not panic) or fixed")
    res.assert_outcomes(failed=1, passed=1)
    assert res.ret == 1
    assert verdicts(pytester)["test_known"]["outcome"] == "failed"


def test_expected_outcomes_by_rule():
    f = UpstreamFinding("f", "t", ("test_c[a]", "test_*"), ("wrong-bytes",))
    assert expected("c.py::test_c[a]", True, ["wrong-bytes: x"], [f]).outcome == "xfailed"
    assert expected("c.py::test_c[a]", True, ["EIO: x"], [f]) is None
    assert expected("c.py::test_c[a]", False, [], [f]).outcome == "xpassed"
    assert expected("c.py::test_d", False, [], [f]) is None, "a pattern names no case outright"
    assert expected("c.py::test_c[a]", False, [], [f], series=True) is None, \
        "a series may carry its own fix: its pass is no news about upstream"
    assert expected("c.py::test_c[a]", True, ["wrong-bytes: x"], [f], series=True).outcome \
        == "xfailed"
    switch = UpstreamFinding("g", "t", ("test_c[a]",), ("wrong-bytes",),
                             stands_with="zfs_vdev_direct_read_verify=0")
    assert expected("c.py::test_c[a]", False, [], [switch]) is None, \
        "a finding that needs a pull request's switch: a pass without it is no news"


def test_a_false_positive_is_retired_from_the_xfail_list():
    """A report upstream status calls a false positive fails no case and xfails none:
    a case whose call passed and whose after-case judge met only that report passes,
    naming it; beside a failure of the call itself, or another symptom, it is no
    cover for anything."""
    fp = UpstreamFinding("two-locks", "lockdep: two locks", ("*",), ("kernel:lockdep",),
                         signature="circular locking.*ms_lock", status="false-positive",
                         status_why="different dnodes, one class")
    report = ["kernel:lockdep: possible circular locking dependency ms_lock dn_dbufs_mtx"]
    e = expected("c.py::test_x", True, report, [fp], call_failed=False)
    assert e is not None and e.outcome == "passed" and "false positive retired: two-locks" \
        in e.reason and "different dnodes" in e.reason
    assert expected("c.py::test_x", True, report, [fp], call_failed=True) is None, \
        "the call failed: not the report's doing"
    assert expected("c.py::test_x", True, [*report, "wrong-bytes: x"], [fp],
                    call_failed=False) is None
    other = ["kernel:lockdep: possible circular locking dependency zv_suspend_lock"]
    assert expected("c.py::test_x", True, other, [fp], call_failed=False) is None
