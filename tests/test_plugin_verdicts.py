"""The plugin's verdict rules in inner pytest sessions (no VM: the build fixture is
replaced where a case must not need one)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.plugin.fixtures import UNREACHABLE

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _inner_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                         "--results", str(pytester.path / "results"), *args,
                                         timeout=300)


def verdicts(pytester: pytest.Pytester) -> dict[str, dict]:
    out = {}
    for p in (pytester.path / "results").glob("*/cases/*/verdict.json"):
        v = json.loads(p.read_text())
        out[v["nodeid"].split("::")[-1]] = v
    return out


def test_trials_below_one_is_a_usage_error(pytester):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    res = run(pytester, "--trials", "0")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "at least 1 trial" in res.stderr.str()


def test_a_misspelt_xfstests_selection_is_a_usage_error(pytester):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    res = run(pytester, "--xfstests", "dio aoi")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "'aoi'" in res.stderr.str() and "g:GROUP" in res.stderr.str()
    assert run(pytester, "--xfstests", "dio x:stress").ret == pytest.ExitCode.OK


def test_unreachable_source_errors_the_cases_and_fails_the_run(pytester):
    pytester.makepyfile(test_case="def test_case(zfs_build):\n    pass\n")
    res = run(pytester, "--zfs-source", "https://example.invalid/zfs", "--offline")
    res.assert_outcomes(errors=1)
    assert res.ret != 0
    out = res.stdout.str()
    assert "no OpenZFS build under test" in out and "example.invalid" in out
    v = verdicts(pytester)["test_case"]
    assert v["outcome"] == "error" and v["symptoms"][0]["kind"] == "setup"
    assert res.ret == 2, "no build: INCONCLUSIVE"
    assert UNREACHABLE not in out, "--offline and not cached is no unreachable source"


def test_only_an_unreachable_source_lets_a_vm_self_test_skip(pytester):
    from test_plugin_vm import skip_if_unreachable
    pytester.makepyfile(test_case="def test_case(zfs_build):\n    pass\n")
    res = run(pytester, "--zfs-source", "https://example.invalid/zfs")
    res.assert_outcomes(errors=1)
    out = res.stdout.str()
    assert f"{UNREACHABLE} https://example.invalid/zfs:" in out
    with pytest.raises(pytest.skip.Exception, match="did not answer: https://example.invalid/zfs"):
        skip_if_unreachable(out)
    broken = out.replace(UNREACHABLE, "no OpenZFS build under test, so nothing can be tested:")
    skip_if_unreachable(broken)         # a build that failed for any other reason: no skip



@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_builds_progress_reaches_the_terminal_as_it_happens(pytester, workers):
    """Not held back in the case's captured output, nor lost in an xdist worker: a
    first run must not sit silent for the minutes a cold build takes."""
    pytester.makepyfile(test_case="def test_case(zfs_build):\n    pass\n")
    res = run(pytester, "--zfs-source", "https://example.invalid/zfs", "--offline", *workers)
    res.assert_outcomes(errors=1)
    live = res.stderr.str()
    assert "==> resolve source and series" in live
    assert "<== resolve source and series: FAILED" in live

SKIPPING = '''
import pytest

@pytest.fixture
def zfs_build():
    pytest.skip("stand-in: the build has no such feature")

def test_a(zfs_build):
    pass

def test_b(zfs_build):
    pass
'''


def test_a_run_whose_cases_all_skipped_is_not_green(pytester):
    pytester.makepyfile(test_skips=SKIPPING)
    res = run(pytester)
    res.assert_outcomes(skipped=2)
    assert res.ret == 2, "INCONCLUSIVE, as the README says of a run that tested nothing"
    assert "none ran to a verdict" in res.stdout.str()


def test_a_plain_skip_outside_vm_cases_stays_green(pytester):
    pytester.makepyfile(test_plain="import pytest\n\ndef test_p():\n    pytest.skip('x')\n")
    assert run(pytester).ret == 0


BACKSTOP = '''
import time
import pytest

@pytest.fixture
def zfs_build():
    return None

@pytest.mark.deadline(1)
def test_stuck(zfs_build):
    time.sleep(30)

def test_asserts(zfs_build, symptom):
    symptom("EINVAL", "res=-22", row="libaio async=1")
    assert False, "EINVAL on the async row"

def test_bare_assert(zfs_build):
    assert 1 == 2
'''


def test_backstop_and_symptoms_reach_verdict_json(pytester):
    pytester.makepyfile(test_b=BACKSTOP)
    res = run(pytester)
    res.assert_outcomes(failed=3)
    v = verdicts(pytester)
    assert v["test_stuck"]["symptoms"][0]["kind"] == "backstop"
    assert [(s["kind"], s["row"]) for s in v["test_asserts"]["symptoms"]] == [
        ("EINVAL", "libaio async=1")]
    assert v["test_bare_assert"]["symptoms"][0]["kind"] == "assertion"
    assert "EINVAL on the async row" in v["test_asserts"]["reason"]
    assert all(x["outcome"] == "failed" for x in v.values())


SECTIONED = '''
import pytest
from suite.plugin.hooks import add_section

@pytest.fixture
def zfs_build():
    return None

def test_tabled(request, zfs_build):
    add_section(request.node, "table 1", "PREADV 16 x 4 KiB\\n  libaio async=1  14  14")
    assert False, "boom"

def test_quiet(request, zfs_build):
    add_section(request.node, "table 1", "quiet table")
'''


def test_junit_testcases_carry_the_tables(pytester):
    import xml.etree.ElementTree as ET
    pytester.makepyfile(test_t=SECTIONED)
    pytester.makeini("[pytest]\njunit_logging = system-out\n")
    junit = pytester.path / "junit.xml"
    run(pytester, f"--junitxml={junit}")
    cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    out = {n: "".join(e.text or "" for e in tc.iter("system-out")) for n, tc in cases.items()}
    assert "PREADV 16 x 4 KiB" in out["test_tabled"]
    assert "quiet table" in out["test_quiet"]


OPT_IN = '''
import pytest
from pathlib import Path
from suite.report import zts

CONSOLE = ("Test: /b/src/tests/zfs-tests/tests/functional/direct/dio_mmap (run as root) "
           "[00:09] [FAIL]\\n"
           "Test: /b/src/tests/zfs-tests/tests/functional/direct/dio_random (run as root) "
           "[00:19] [PASS]\\n"
           "Tests with results other than PASS that are unexpected:\\n"
           "    FAIL direct/dio_mmap (expected PASS)\\n")

@pytest.mark.zts
def test_zts_like(request, tmp_path):
    from suite.plugin.hooks import case_dir_of
    d = case_dir_of(request.config, request.node.nodeid)
    zts.save(zts.parse(CONSOLE), d / zts.RESULTS_FILE, {"tag": "direct"})
    assert request.config.getoption("zts") is True

@pytest.mark.perf
def test_perf_like():
    pass

def test_plain():
    pass
'''


def test_zts_and_perf_cases_run_only_when_asked_and_zts_lands_in_junit(pytester):
    pytester.makepyfile(test_optin=OPT_IN)
    res = run(pytester)
    res.assert_outcomes(passed=1, deselected=2)
    xml = pytester.path / "junit.xml"
    res = run(pytester, "-m", "zts", "--junitxml", str(xml))
    res.assert_outcomes(passed=1, deselected=2)
    text = xml.read_text()
    assert 'name="zts-direct"' in text and 'name="dio_mmap"' in text
    assert text.count("<failure") == 1          # the unexpected FAIL, under its own id


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_session_without_cases_of_the_build_leaves_no_results_folder(pytester, workers):
    """The harness's own self-tests are such a session: no report line that says
    INCONCLUSIVE under pytest's green one, no folder left behind."""
    pytester.makepyfile(test_plain="import pytest\n\npytestmark = pytest.mark.vm\n\n"
                                   "def test_p():\n    pass\n\ndef test_q():\n    pass\n")
    res = run(pytester, *workers)
    res.assert_outcomes(passed=2)
    assert res.ret == 0
    assert not (pytester.path / "results").exists()
    assert "ozfs-vmci report" not in res.stdout.str()
