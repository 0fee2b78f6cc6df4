"""Release lines (issue #25): which tag stands for each line, and the runs of the
lines side by side."""
from __future__ import annotations

from pathlib import Path

import pytest

from suite.errors import SourceError
from suite.campaign import lines as side
from suite.source.lines import newest, refs_to_test, remote_tags

TAGS = ["zfs-2.3.0-rc5", "zfs-2.3.9", "zfs-2.3.10", "zfs-2.3.99", "zfs-2.4.0-rc1",
        "zfs-2.4.4", "zfs-2.5.0-rc1", "zfs-0.8.6", "zfs-2.4.4-rc2", "not-a-tag"]


def test_the_newest_release_of_a_line_is_compared_as_numbers():
    assert newest(TAGS, "2.3") == "zfs-2.3.10"           # 10 > 9, .99 is master's marker
    assert newest(TAGS, "2.4") == "zfs-2.4.4"            # the final beats its rc
    assert newest(TAGS, "2.5") is None                   # only rcs: not what users run
    assert newest(TAGS, "2.5", rc=True) == "zfs-2.5.0-rc1"


def test_the_lane_tests_each_lines_newest_release_then_master():
    assert refs_to_test(TAGS) == ["zfs-2.3.10", "zfs-2.4.4", "master"]
    assert refs_to_test(TAGS, ("2.4", "2.5"), master=False) == ["zfs-2.4.4"]


def test_the_upstream_tags_are_asked_of_git():
    try:
        tags = remote_tags(timeout=30)
    except SourceError as e:
        pytest.skip(f"upstream OpenZFS is not reachable from here: {e}")
    assert newest(tags, "2.3") and newest(tags, "2.4")
    assert all(not t.startswith("refs/") for t in tags)


def junit(folder: Path, cases: dict[str, str]) -> Path:
    """A pytest-style junit.xml: name -> passed | failed | skipped:why."""
    body = []
    for name, what in cases.items():
        kind, _, why = what.partition(":")
        inner = {"passed": "", "failed": f'<failure message="{why or "boom"}">trace</failure>',
                 "skipped": f'<skipped type="pytest.skip" message="{why}">x</skipped>'}[kind]
        body.append(f'<testcase classname="cases.test_write" name="{name}">{inner}</testcase>')
    folder.mkdir(parents=True)
    (folder / "junit.xml").write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">' + "".join(body) +
        "</testsuite></testsuites>")
    return folder


def test_cases_that_differ_between_lines_come_with_each_lines_reason(tmp_path):
    old = junit(tmp_path / "2.3", {"test_a[x]": "skipped:build has no zvol_dio_enabled",
                                   "test_b": "failed:stale bytes at 49152", "test_c": "passed"})
    new = junit(tmp_path / "master", {"test_a[x]": "passed", "test_b": "passed",
                                      "test_c": "passed"})
    runs = [side.read_run(old), side.read_run(new, "master")]
    assert runs[0].label == "2.3"                        # no build record: the folder's name
    assert side.differing(runs) == ["cases/test_write.py::test_a[x]",
                                    "cases/test_write.py::test_b"]
    md = side.markdown(runs)
    assert "| `cases/test_write.py::test_b` | failed: stale bytes at 49152 | passed |" in md
    assert "skipped: build has no zvol_dio_enabled" in md
    assert "test_c" not in md.split("differs")[1].split("### Failed")[0]
    assert "### Failed on `2.3`" in md and side.exit_code(runs) == 1


def test_a_line_without_results_makes_the_comparison_inconclusive(tmp_path):
    good = junit(tmp_path / "a", {"test_a": "passed"})
    (tmp_path / "b").mkdir()
    runs = [side.read_run(good), side.read_run(tmp_path / "b")]
    assert side.exit_code(runs) == 2
    assert "**Inconclusive:** no results from `b`" in side.markdown(runs)
    assert side.exit_code([side.read_run(good)]) == 0
