"""A failed xfstests test's ``.out.bad`` read as symptom kinds (no guest)."""
from __future__ import annotations

from pathlib import Path

from suite.report import xfstests as xr
from suite.report import xfsymptoms as xs

# generic/210 at async-dio 39991b06fe (eof-tail-efault), as the guest wrote it
OUT_BAD_210 = "QA output created by 210\nAIO read of last block in file returned -14 bytes, " \
              "expected 300\n"
XUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="xfstests" failures="2" tests="3">
  <testcase classname="xfstests.global" name="generic/210" time="3">
    <failure message="- output mismatch (see generic/210.out.bad)" type="TestFail" />
  </testcase>
  <testcase classname="xfstests.global" name="generic/130" time="7">
    <failure message="- output mismatch (see generic/130.out.bad)" type="TestFail" />
  </testcase>
  <testcase classname="xfstests.global" name="generic/212" time="2"></testcase>
</testsuite>
"""


def test_errnos_are_read_as_numbers_names_and_messages():
    assert xs.errno_kinds(["AIO read returned -14 bytes, expected 300"]) == ["EFAULT"]
    assert xs.errno_kinds(["pwrite: Invalid argument", "got EIO, then EIO"]) == \
        ["EINVAL", "error:EIO"]
    assert xs.errno_kinds(["read 300 bytes, expected 300", "offset -14 is odd"]) == []


def test_only_lines_the_golden_output_lacks_count(tmp_path):
    golden = tmp_path / "123.out"
    golden.write_text("QA output created by 123\nwrite: Invalid argument\n")
    bad = tmp_path / "123.out.bad"
    bad.write_text("QA output created by 123\nwrite: Invalid argument\nread: Bad address\n")
    assert xs.errno_kinds(xs.added_lines(bad, golden)) == ["EFAULT"]
    assert xs.errno_kinds(xs.added_lines(bad, None)) == ["EINVAL", "EFAULT"]


def test_results_give_each_failure_its_kinds(tmp_path):
    tree = tmp_path / "tree"
    (tree / "tests" / "generic").mkdir(parents=True)
    (tree / "tests" / "generic" / "210.out").write_text("QA output created by 210\n")
    (tree / "tests" / "generic" / "130.out").write_text("QA output created by 130\n")
    res = tmp_path / "run" / "results" / "zfs" / "generic"
    res.mkdir(parents=True)
    (tmp_path / "run" / "results" / "result.xml").write_text(XUNIT)
    (res / "210.out.bad").write_text(OUT_BAD_210)
    (res / "130.out.bad").write_text("QA output created by 130\nbytes differ at 4096\n")
    rs = {r.test: r for r in xr.results(tmp_path / "run", [], {}, tree)}
    assert rs["generic/210"].kinds == ["EFAULT"]
    assert rs["generic/130"].failed and rs["generic/130"].kinds == []
    assert rs["generic/212"].kinds == []
    saved = tmp_path / "r.json"
    xr.save(list(rs.values()), saved, {})
    assert {r.test: r.kinds for r in xr.load(saved)[1]}["generic/210"] == ["EFAULT"]
