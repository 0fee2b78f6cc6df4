"""``suite xfstests --table``: builds x profiles from results folders (no guest)."""
from __future__ import annotations

import os
from pathlib import Path

from suite.report import xfstests as xr
from suite.report import xfstestsmatrix as mx


def part(session: Path, case: str, profile: str, seconds: float, results: list[xr.XfsResult],
         build: str = "zfs-2.4.99-966-gbe7657e3f2", stopped: bool = False) -> None:
    d = session / "cases" / case
    d.mkdir(parents=True)
    xr.save(results, d / xr.RESULTS_FILE, {"profile": profile, "describe": build,
                                           "seconds": seconds, "stopped": stopped})


def test_the_parts_of_a_split_run_at_once_and_sessions_add_up(tmp_path):
    s1 = tmp_path / "20261205-1"
    part(s1, "test_xfstests_part1of2-direct_", "direct", 900,
         [xr.XfsResult("generic/133", "pass", 450), xr.XfsResult("generic/091", "excluded", 0,
                                                                 "the fork excludes it")])
    part(s1, "test_xfstests_part2of2-direct_", "direct", 1000,
         [xr.XfsResult("generic/299", "fail", 180, "- output mismatch"),
          xr.XfsResult("generic/019", "notrun", 0, "no debugfs")])
    part(s1, "test_xfstests_plain_", "plain", 1500, [xr.XfsResult("generic/133", "pass", 400)])
    s2 = tmp_path / "20261205-2"
    part(s2, "test_xfstests_direct_", "direct", 100, [xr.XfsResult("generic/130", "pass", 90)],
         stopped=True)
    part(s2, "test_xfstests_direct_x", "direct", 50, [xr.XfsResult("generic/130", "pass", 9)],
         build="zfs-2.4.99-970-gc7b7a98ba2")
    cs = mx.cells([tmp_path])
    assert [(c.build[-10:], c.profile) for c in cs] == [
        ("be7657e3f2", "direct"), ("be7657e3f2", "plain"), ("c7b7a98ba2", "direct")]
    d = cs[0]
    assert (d.count("pass"), d.count("fail"), d.count("excluded"), d.count("notrun")) == (2, 1, 1, 1)
    assert d.seconds == 1000 + 100 and d.parts == 2 and d.stopped
    md = mx.markdown(cs)
    assert "| direct | 2 | 1 | 1 | 1 | 18 min 20 s (2 parts at once), 2 runs (stopped at the " \
           "budget) | `generic/299`: - output mismatch |" in md
    assert "| plain | 1 | 0 | 0 | 0 | 25 min 00 s | - |" in md
    assert "- `generic/019` (notrun): no debugfs" in mx.not_run(cs)


def test_a_newer_result_of_a_test_wins_unless_it_did_not_run(tmp_path):
    old, new = tmp_path / "a", tmp_path / "b"
    part(old, "c", "direct", 10, [xr.XfsResult("generic/130", "fail", 9, "old failure")])
    part(new, "c", "direct", 10, [xr.XfsResult("generic/130", "notrun", 0, "cut short")])
    os.utime(old / "cases" / "c" / xr.RESULTS_FILE, (1, 1))
    assert mx.cells([tmp_path])[0].results["generic/130"].reason == "old failure"
    part(tmp_path / "c", "c", "direct", 10, [xr.XfsResult("generic/130", "pass", 9)])
    assert mx.cells([tmp_path])[0].results["generic/130"].status == "pass"
