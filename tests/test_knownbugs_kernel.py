"""JUnit counting and kernel profile error paths (no VM)."""
from __future__ import annotations

import pytest

from suite.build.kernel import installed_releases, kernel_from_release, load_profile, resolve_kernel
from suite.errors import KernelError
from suite.sessions import count


def test_junit_count(tmp_path):
    x = tmp_path / "j.xml"
    x.write_text('<testsuites><testsuite tests="7" failures="2" errors="1" skipped="1"/>'
                 '</testsuites>')
    assert count(x) == (3, 2, 1, 1)


def test_junit_counts_a_case_that_failed_in_teardown_once(tmp_path):
    """pytest's totals say tests=2 errors=1 for a case whose call passed and whose
    teardown (the after-case judge: a KASAN report) failed: one case, one error."""
    x = tmp_path / "j.xml"
    x.write_text('<testsuites><testsuite name="pytest" errors="1" failures="0" skipped="0" '
                 'tests="2"><testcase classname="c" name="t[a]"><error message="failed on '
                 'teardown"/></testcase><testcase classname="c" name="t[b]"/>'
                 '<testcase classname="c" name="t[c]"><skipped/></testcase>'
                 '<testcase classname="c" name="t[d]"><failure/><error/></testcase>'
                 '</testsuite></testsuites>')
    assert count(x) == (1, 1, 1, 1)


def test_kernel_without_headers_names_the_package(tmp_path):
    img = tmp_path / "vmlinuz-6.1.0-99-amd64"
    img.write_bytes(b"x")
    with pytest.raises(KernelError) as e:
        kernel_from_release("p", "6.1.0-99-amd64", img, tmp_path / "no-headers")
    assert "no headers" in e.value.what and "linux-headers-6.1.0-99-amd64" in e.value.fix


def test_unknown_profile_lists_known_ones():
    with pytest.raises(KernelError) as e:
        load_profile("nope")
    assert "debian-6.1" in e.value.fix


def test_release_globs_pick_the_newest(tmp_path):
    for r in ("6.1.0-9-amd64", "6.1.0-57-amd64", "6.12.95+deb12-amd64"):
        (tmp_path / f"vmlinuz-{r}").write_bytes(b"")
    assert installed_releases("6.1.0-*-amd64", tmp_path)[-1] == "6.1.0-57-amd64"
    assert installed_releases("6.12.*-amd64", tmp_path) == ["6.12.95+deb12-amd64"]


def test_missing_kernel_image_is_a_clear_error(tmp_path):
    with pytest.raises(KernelError, match="does not exist"):
        resolve_kernel(str(tmp_path / "vmlinuz-missing"))
