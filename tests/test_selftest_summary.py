"""The self-tests' own summary (tests/conftest.py ``VmSelfTests``): how many VM
self-tests ran and why the others skipped; with OZFS_VMCI_REQUIRE_VM=1 a run in
which none ran is red."""
from __future__ import annotations

import pytest
from conftest import VmSelfTests

pytest_plugins = ["pytester"]

VM_TESTS = '''
import pytest

pytestmark = pytest.mark.vm

def test_boots():
    pass

def test_needs_qemu():
    pytest.skip("qemu-system-x86_64 not installed")
'''

ALL_SKIP = '''
import pytest

pytestmark = pytest.mark.vm

def test_needs_qemu():
    pytest.skip("qemu-system-x86_64 not installed")
'''


def _run(pytester: pytest.Pytester, src: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\nmarkers =\n    vm: boots a guest\n")
    pytester.makepyfile(test_vm=src)
    return pytester.runpytest("-p", "no:cacheprovider", plugins=[VmSelfTests()])


def test_the_summary_says_how_many_vm_self_tests_ran_and_why_the_others_skipped(pytester):
    res = _run(pytester, VM_TESTS)
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["VM self-tests: 1 ran (1 passed, 0 failed), 1 skipped: "
                              "qemu-system-x86_64 not installed (1)"])


def test_where_vm_self_tests_are_required_none_running_is_red(pytester, monkeypatch):
    monkeypatch.setenv("OZFS_VMCI_REQUIRE_VM", "1")
    res = _run(pytester, ALL_SKIP)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["*no VM self-test ran: VM self-tests: 0 ran*"])
    monkeypatch.delenv("OZFS_VMCI_REQUIRE_VM")
    assert _run(pytester, ALL_SKIP).ret == pytest.ExitCode.OK, "elsewhere a skip stays a skip"
