"""``suite bugs --xfstests``: what xfstests saw at each bad commit, against the base
(hand-made session folders as the lane leaves them; no guest)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from suite.bugs_cmd import add_parser
from suite.report import xfstests as xr
from suite.campaign.lanes import table
from suite.campaign.lanes import xfstests as xb
from suite.source.series import KnownBug
from suite.symptoms import SymptomSpec

BAD = "b" * 40
BASE = "0" * 40


def session(root: Path, profile: str, results: dict[str, str], stopped: bool = False,
            junit: str = "<testsuites/>") -> Path:
    """A session folder as ``run_cases`` leaves it: one results file per profile."""
    case = root / "20261205-000000-x" / "cases" / f"test_xfstests_{profile}_"
    case.mkdir(parents=True, exist_ok=True)
    rs = [xr.XfsResult(t, s.split(":")[0], 1.0, s.partition(":")[2]) for t, s in results.items()]
    xr.save(rs, case / xr.RESULTS_FILE, {"profile": profile, "stopped": stopped})
    (root / "junit.xml").write_text(junit)
    return root


def bug(id: str = "eof-tail-efault", deferred: str = "") -> KnownBug:
    return KnownBug(id, "t", BAD, "f" * 40, ("eof",), SymptomSpec(["EFAULT"]), deferred)


def test_a_failure_the_base_shares_is_not_the_bugs(tmp_path):
    base = xb.read_session(session(tmp_path / "base", "direct", {
        "generic/130": "pass", "generic/299": "fail:output mismatch"}), BASE)
    bad = xb.read_session(session(tmp_path / "bad", "direct", {
        "generic/130": "fail:- output mismatch (see 130.out.bad)",
        "generic/299": "fail:output mismatch", "generic/019": "notrun:no debugfs"}), BAD)
    assert bad.ran == 2 and base.ran == 2            # a test that did not run is not counted
    assert bad.new_failures(base) == {"generic/130[direct]": "- output mismatch (see 130.out.bad)"}
    text = bad.describe(base)
    assert text.startswith("1 failed of 2 [direct]: generic/130[direct]")
    assert "failing on the base too: generic/299[direct]" in text


def test_without_a_base_every_failure_is_listed_and_that_is_said(tmp_path):
    bad = xb.read_session(session(tmp_path / "bad", "async", {"generic/299": "fail:m"}), BAD)
    assert "1 failed of 1 [async] (no base run to compare)" in bad.describe(None)
    assert "no base run" not in bad.describe(compared=False)    # a lane's own line


def test_silence_is_a_pass_only_when_the_run_was_whole(tmp_path):
    whole = xb.read_session(session(tmp_path / "a", "direct", {"generic/130": "pass"}), BAD)
    assert "saw nothing" in whole.describe()
    cut = xb.read_session(session(tmp_path / "b", "direct", {"generic/130": "pass"},
                                  stopped=True), BAD)
    assert cut.describe().startswith("INCONCLUSIVE: cut short after 1")


def test_a_session_that_ran_nothing_is_inconclusive_with_the_reason(tmp_path):
    empty = tmp_path / "s"
    empty.mkdir()
    (empty / "junit.xml").write_text(
        '<testsuites><testsuite><testcase name="t"><skipped message="Skipped: profile '
        '\'async\' needs zfs_async_dio_enabled"/></testcase></testsuite></testsuites>')
    x = xb.read_session(empty, BAD)
    assert x.describe() == ("INCONCLUSIVE: no xfstests test ran (profile 'async' needs "
                            "zfs_async_dio_enabled)")
    nodisk = tmp_path / "nodisk"
    nodisk.mkdir()
    (nodisk / "junit.xml").write_text(
        '<testsuites><testsuite><testcase name="t"><skipped message="profile \'plain\' not '
        'asked for"/></testcase><testcase name="u"><error message="failed on setup: no guest '
        'with the build under test: not enough free space"/></testcase></testsuite>'
        '</testsuites>')
    assert xb.read_session(nodisk, BAD).describe() == (
        "INCONCLUSIVE: the lane's case failed before ./check: failed on setup: no guest with "
        "the build under test: not enough free space")
    lost = tmp_path / "lost"
    lost.mkdir()
    assert xb.read_session(lost, BAD).describe().startswith("INCONCLUSIVE: the xfstests "
                                                           "session left no results")


def test_the_table_names_each_bug_and_the_base(tmp_path):
    base = xb.read_session(session(tmp_path / "base", "direct", {"generic/130": "pass"}), BASE)
    bad = xb.read_session(session(tmp_path / "bad", "direct", {"generic/130": "fail:a|b"}), BAD)
    lane = xb.XfstestsLane()
    lane.__dict__["_base"], lane.runs[BAD[:11]] = base, bad
    md = table([bug(), KnownBug("other", "t", "c" * 40, "f" * 40, ("eof",), SymptomSpec(["EFAULT"]),
                                "KASAN only")], [lane])
    assert md.startswith(f"xfstests on the series' base {BASE[:11]}: none of 1 failed")
    assert f"| `eof-tail-efault` | {BAD[:11]} | 1 failed of 1 [direct]: generic/130[direct]: a\\|b |" in md
    assert "| `other` |" in md and "| not run |" in md


def test_earlier_runs_are_read_newest_first(tmp_path):
    root = tmp_path / "bugs-1"
    old = session(root / "xfstests" / BAD[:11], "direct", {"generic/130": "fail:old"})
    plan = xb.XfstestsLane(read_from=[tmp_path], only=True)
    assert plan.at("async-dio", BAD, tmp_path / "unused", []).failed == \
        {"generic/130[direct]": "old"}
    newer = session(tmp_path / "bugs-2" / "xfstests" / BAD[:11], "direct", {"generic/130": "pass"})
    import os
    os.utime(old / "junit.xml", (1, 1))
    assert plan.at("async-dio", BAD, tmp_path / "unused", []).results == str(newer)
    missing = plan.at("async-dio", "c" * 40, tmp_path, [])
    assert missing.describe().startswith("INCONCLUSIVE: no earlier xfstests run")


def test_the_bugs_command_takes_the_lane_and_its_profiles():
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers())
    args = ap.parse_args(["bugs", "async-dio", "--xfstests", "dio", "--xfstests-only"])
    p = xb.from_args(args)
    assert p.only and p.select == ["dio"]
    assert p.lane_args() == ["--xfstests", "dio", "--xfstests-profile", "direct",
                             "--xfstests-profile", "async", "--xfstests-profile", "zvol"]
    args = ap.parse_args(["bugs", "async-dio", "--xfstests", "g:aio", "--xfstests-profile",
                          "async"])
    assert xb.from_args(args).lane_args() == ["--xfstests", "g:aio", "--xfstests-profile", "async"]
    assert xb.from_args(args).lane_args(base=True) == ["--xfstests", "g:aio", "--xfstests-profile",
                                                  "direct"]
    assert xb.from_args(ap.parse_args(["bugs", "async-dio"])) is None
    # a misspelt selection is refused before any build or guest, in ./check's words
    with pytest.raises(SystemExit, match="'aio'"):
        xb.from_args(ap.parse_args(["bugs", "async-dio", "--xfstests", "dio aio"]))


def test_bugs_runs_the_lane_once_per_bad_commit_and_once_on_the_base(tmp_path, monkeypatch,
                                                                      capsys):
    from suite.campaign import bugs as knownbugs
    from suite.campaign.lanes import cases
    from suite.source.series import Manifest
    other = "c" * 40
    m = Manifest("async-dio", "", "u", "b", "h" * 40, BASE, "u",
                 bugs=(bug("a"), bug("b"), KnownBug("c", "t", other, "f" * 40, ("x",),
                                                    SymptomSpec(["EIO"]))))
    monkeypatch.setattr(knownbugs.series, "available", lambda: {"async-dio": m})
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    calls: list[list[str]] = []

    def fake_run_cases(args, results, extra=(), targets=None, **k):
        calls.append([*args, *extra])
        assert targets == [xb.LANE]
        failing = {"generic/130": "fail:new"} if f"async-dio@{BAD[:11]}" in args else {}
        profile = args[args.index("--xfstests-profile") + 1]
        session(results, profile, {"generic/299": "fail:both", "generic/451": "pass",
                                   **failing})
        return 3, "", 12.0
    monkeypatch.setattr(xb, "run_cases", fake_run_cases)
    monkeypatch.setattr(cases, "run_cases", lambda *a, **k: pytest.fail("ran suite cases"))
    plan = xb.XfstestsLane(["g:aio"], ["async"], only=True)
    assert knownbugs.run_bugs("async-dio", [], "", ["-x"], roles=["bad"], lanes=[plan]) == 0
    assert [c[2:4] for c in calls] == [["--zfs-ref", BASE], ["--series", f"async-dio@{BAD[:11]}"],
                                       ["--series", f"async-dio@{other[:11]}"]]
    assert all(c[:2] == ["-m", "xfstests"] and c[-1] == "-x" for c in calls)
    assert [c[c.index("--xfstests-profile") + 1] for c in calls] == ["direct", "async", "async"]
    md = next(tmp_path.glob("bugs-*/xfstests-at-bad.md")).read_text()
    assert "| `a` | " + BAD[:11] + " | 1 failed of 3 [async]: generic/130[async]: new; " \
           "failing on the base too: generic/299[async] |" in md
    assert "| `c` | " + other[:11] + " | none of 2 failed that passes on the base" in md
    assert "not run here (xfstests only)" in capsys.readouterr().out


def test_a_check_that_refused_its_arguments_says_so_once(tmp_path):
    """./check ran, wrote no result (it refused an option after a test name): the row
    says what the case said, not "no result" once per selected test."""
    junit = ('<testsuites><testsuite><testcase name="t"><failure message="xfstests ran no '
             "test in profile 'async' (exit 1; ./check said: 'Arguments before tests, "
             "please!')\"/></testcase></testsuite></testsuites>")
    refused = session(tmp_path / "r", "async", {"generic/130": "notrun:no result",
                                                "generic/135": "notrun:no result"}, junit=junit)
    text = xb.read_session(refused, BAD).describe()
    assert text.startswith("INCONCLUSIVE: the lane ran no test: xfstests ran no test")
    assert "Arguments before tests" in text and "no result" not in text


def fake_lane(monkeypatch, results: dict[str, str]) -> list[list[str]]:
    """``run_cases`` replaced by a lane that leaves ``results`` (profile async); the
    arguments of each call are appended to the list returned."""
    ran: list[list[str]] = []

    def fake_run_cases(args, folder, extra=(), targets=None, **k):
        ran.append(args)
        session(folder, "async", results)
        return 1, "", 5.0
    monkeypatch.setattr(xb, "run_cases", fake_run_cases)
    return ran


def test_a_sweep_resumes_running_only_the_commits_earlier_runs_lack(tmp_path, monkeypatch):
    earlier = tmp_path / "bugs-1"
    session(earlier / "xfstests" / BASE[:11], "direct", {"generic/130": "pass"})
    ran = fake_lane(monkeypatch, {"generic/130": "fail:new"})
    plan = xb.XfstestsLane(["g:aio"], ["async"], only=True, read_from=[earlier])
    base = plan.at("async-dio", BASE, tmp_path / "bugs-2", [], base=True)
    bad = plan.at("async-dio", BAD, tmp_path / "bugs-2", [])
    assert [a[a.index("--series") + 1] for a in ran] == [f"async-dio@{BAD[:11]}"]
    assert base.results.startswith(str(earlier))
    assert bad.new_failures(base) == {"generic/130[async]": "new"}


def test_a_bug_is_caught_only_by_its_own_kind_in_a_new_failure(tmp_path):
    def at(root: str, results: dict[str, tuple[str, list[str]]]) -> xb.XfstestsAt:
        case = tmp_path / root / "20261205-000000-x" / "cases" / "test_xfstests_async_"
        case.mkdir(parents=True)
        rs = [xr.XfsResult(t, s, 1.0, "output mismatch", k) for t, (s, k) in results.items()]
        xr.save(rs, case / xr.RESULTS_FILE, {"profile": "async"})
        (tmp_path / root / "junit.xml").write_text("<testsuites/>")
        return xb.read_session(tmp_path / root, BAD)
    base = at("base", {"generic/210": ("pass", []), "generic/130": ("fail", ["EFAULT"])})
    bad = at("bad", {"generic/210": ("fail", ["EFAULT"]), "generic/130": ("fail", ["EFAULT"])})
    assert xb.cell(bug(), bad, base).startswith(
        "CAUGHT by its own symptom (generic/210[async]: EFAULT); 1 failed of 2 [async]")
    other = at("other", {"generic/210": ("fail", ["error:EIO"])})
    assert "CAUGHT" not in xb.cell(bug(), other, base)          # not the bug's kind
    shared = at("shared", {"generic/130": ("fail", ["EFAULT"])})
    assert "CAUGHT" not in xb.cell(bug(), shared, base)         # the base fails it too


def test_resuming_runs_again_a_commit_whose_lane_never_reached_check(tmp_path, monkeypatch):
    earlier = tmp_path / "bugs-1"
    broken = earlier / "xfstests" / BAD[:11]
    broken.mkdir(parents=True)
    (broken / "junit.xml").write_text(
        '<testsuites><testsuite><testcase name="u"><error message="failed on setup: no guest '
        'with the build under test: not enough free space"/></testcase></testsuite>'
        '</testsuites>')
    ran = fake_lane(monkeypatch, {"generic/130": "pass"})
    resumed = xb.XfstestsLane(["g:aio"], ["async"], only=True, read_from=[earlier])
    assert resumed.at("async-dio", BAD, tmp_path / "bugs-2", []).ran == 1 and len(ran) == 1
    reading = xb.XfstestsLane(read_from=[earlier], only=True)       # read only: says so
    assert reading.at("async-dio", BAD, tmp_path / "x", []).problem.startswith(
        "the lane's case failed before ./check")


def test_a_results_file_with_fields_this_version_lacks_still_reads(tmp_path):
    f = tmp_path / "r.json"
    f.write_text('{"profile": "async", "results": [{"test": "generic/210", "status": "fail",'
                 ' "seconds": 3, "reason": "m", "kinds": ["EFAULT"], "later": 1}]}')
    meta, rs = xr.load(f)
    assert meta["profile"] == "async" and rs[0].kinds == ["EFAULT"]


def test_a_kernel_report_during_check_is_said_as_such(tmp_path):
    """zvol-dio 17b61d93af: a VERIFY in zvol_dio_get_pages under generic/091 ended the
    lane before any results file; that is not 'failed before ./check'."""
    died = tmp_path / "died"
    died.mkdir()
    (died / "junit.xml").write_text(
        '<testsuites><testsuite><testcase name="t"><failure message="suite.errors.'
        'KernelTripped: the kernel reported spl_panic: VERIFY3U(idx, &lt;, total_npages) '
        "failed (4 &lt; 4) while running: ( timeout -k 30 21600 sh -c 'cd /var/tmp/xfstests"
        "/tree &amp;&amp; ./check -g aio')\"/></testcase></testsuite></testsuites>")
    text = xb.read_session(died, BAD).describe()
    assert text.startswith("INCONCLUSIVE: the kernel stopped ./check: suite.errors.Kernel")
    assert "total_npages" in text
