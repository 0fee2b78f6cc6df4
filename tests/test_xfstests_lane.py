"""The xfstests lane without a guest: its manifest and cached build, the selections,
the exclude lists with their reasons, the guest's configuration per profile, and the
results read from ./check's xunit report into tables and JUnit."""
from __future__ import annotations

import shlex
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from suite.build import xfstests as xb
from suite.casekit.xfstests import DIO_TESTS, check_args
from suite.guest import xfstests as xg
from suite.report import xfstests as xr

pytest_plugins = ["pytester"]

XUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="xfstests" failures="1" skipped="1" tests="3">
  <testcase classname="xfstests.global" name="generic/091" time="42">
    <failure message="- output mismatch (see generic/091.out.bad)" type="TestFail" />
  </testcase>
  <testcase classname="xfstests.global" name="generic/130" time="7"></testcase>
  <testcase classname="xfstests.global" name="generic/019" time="0">
    <skipped message="fail_make_request not found" />
  </testcase>
</testsuite>
"""


def test_the_manifest_pins_a_commit_of_the_fork_with_zfs_support():
    src = xb.manifest()
    assert src.url == "https://github.com/implr/xfstests" and src.branch == "zfs"
    assert len(src.commit) == 40 and int(src.commit, 16)


def test_a_build_counts_only_when_its_marker_names_its_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path))
    c = "a" * 40
    d = tmp_path / "xfstests" / c
    d.mkdir(parents=True)
    (d / "check").write_text("#!/bin/sh\n")
    assert xb.built(c) is None                      # no marker: an interrupted build
    (d / xb.MARKER).write_text("b" * 40 + "\n")
    assert xb.built(c) is None                      # another commit's marker
    (d / xb.MARKER).write_text(c + "\n")
    assert xb.built(c) == xb.Tree(c, d)


def test_a_bad_manifest_says_what_to_restore(tmp_path):
    bad = tmp_path / "source.toml"
    bad.write_text("url = 'x'\n")
    with pytest.raises(Exception, match="restore patches/xfstests/source.toml"):
        xb.manifest(bad)


def test_selections_become_check_arguments():
    assert check_args([]) == ["-g", "aio", *DIO_TESTS]
    assert check_args(["g:quick", "x:dangerous", "generic/091"]) == \
        ["-g", "quick", "-x", "dangerous", "generic/091"]
    # ./check wants every option before the first test name
    args = check_args(["dio", "x:stress", "e:generic/133,generic/208", "generic/091"])
    assert args[:6] == ["-g", "aio", "-x", "stress", "-e", "generic/133,generic/208"]
    assert args[6:] == [*DIO_TESTS, "generic/091"]
    # one value may hold several words, as the workflow's input and a shell user write them
    assert check_args(["dio x:stress e:generic/133,generic/208", "generic/091"]) == args
    with pytest.raises(ValueError, match="g:GROUP"):
        check_args(["aio"])
    with pytest.raises(ValueError, match="'aio'"):
        check_args(["dio aio"])


def tree_with_groups(tmp_path: Path) -> Path:
    (tmp_path / "tests" / "generic").mkdir(parents=True)
    (tmp_path / "tests" / "generic" / "group.list").write_text(
        "# generated\n019 aio auto\n091 rw auto quick\n130 auto quick\n300 aio auto\n")
    (tmp_path / "tests" / "ext4").mkdir()
    (tmp_path / "tests" / "ext4" / "group.list").write_text("301 aio auto\n")
    (tmp_path / xr.FORK_EXCLUDE).write_text("# ENOSPC vs EDQUOT\ngeneric/300\n# unknown\n"
                                            "generic/091\n")
    return tmp_path


def test_groups_expand_and_exclusions_carry_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(xr, "EXCLUDE", tmp_path / "none.toml")     # the fork's list alone
    tree = tree_with_groups(tmp_path)
    assert xr.expand(["-g", "aio", "generic/130"], tree) == \
        ["generic/019", "generic/130", "generic/300"]
    assert xr.expand(["-g", "auto", "-x", "aio"], tree) == ["generic/091", "generic/130"]
    assert xr.expand(["-g", "aio", "generic/130", "-e", "generic/019,generic/130"], tree) == \
        ["generic/300"]
    assert "ext4/301" in xr.expand(["-g", "aio"], tree, "ext4")     # ext4 on zvols: its own
    excl = xr.exclusions(tree)
    assert excl["generic/300"].reason == "the fork excludes it: ENOSPC vs EDQUOT"
    assert excl["generic/300"].source == "fork"
    assert "generic/300" not in xr.exclusions(tree, fstyp="ext4")   # ZFS's list, not ext4's
    text = xr.exclude_file(excl, tmp_path / "ex.txt").read_text()
    assert "generic/300" in text.splitlines() and "# fork: the fork excludes it: unknown" in text


def test_every_suite_exclusion_has_a_reason():
    for e in xr.suite_exclusions():
        assert e.reason and e.test.startswith(("generic/", "zfs/"))


def test_an_exclusion_without_a_reason_is_refused(tmp_path):
    p = tmp_path / "exclude.toml"
    p.write_text('[[exclude]]\ntest = "generic/013"\n')
    with pytest.raises(ValueError, match="needs a test"):
        xr.suite_exclusions(p)


def test_results_read_the_xunit_report_and_name_what_did_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(xr, "EXCLUDE", tmp_path / "none.toml")     # the fork's list alone
    tree = tree_with_groups(tmp_path / "tree")
    out = tmp_path / "run"
    (out / "results").mkdir(parents=True)
    (out / "results" / "result.xml").write_text(XUNIT)
    selected = ["generic/019", "generic/091", "generic/130", "generic/300", "generic/591"]
    rs = {r.test: r for r in xr.results(out, selected, xr.exclusions(tree))}
    assert rs["generic/091"].status == "fail" and "output mismatch" in rs["generic/091"].reason
    assert rs["generic/130"].status == "pass" and rs["generic/130"].seconds == 7
    assert rs["generic/019"].status == "notrun" and "fail_make_request" in rs["generic/019"].reason
    assert rs["generic/300"].status == "excluded" and "EDQUOT" in rs["generic/300"].reason
    assert rs["generic/591"].status == "notrun" and "ended before" in rs["generic/591"].reason
    md = xr.markdown(list(rs.values()), "t", 60)
    assert "5 tests in 60 s: pass 1, fail 1, excluded 1, notrun 2" in md
    assert md.index("generic/091") < md.index("generic/130")      # failures first


def test_each_xfstests_test_is_a_junit_testcase_under_its_own_id(tmp_path):
    out = tmp_path / "case"
    out.mkdir()
    rs = [xr.XfsResult("generic/091", "fail", 42, "mismatch"),
          xr.XfsResult("generic/130", "pass", 7),
          xr.XfsResult("generic/300", "excluded", 0, "ENOSPC vs EDQUOT")]
    xr.save(rs, out / xr.RESULTS_FILE, {"profile": "direct"})
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite name="pytest" tests="1"/></testsuites>')
    assert xr.fold_into_junit(junit, [out / xr.RESULTS_FILE]) == 3
    suite = [s for s in ET.parse(junit).getroot() if s.get("name") == "xfstests-direct"][0]
    cases = {tc.get("file"): tc for tc in suite}
    assert cases["xfstests:generic/091"].find("failure") is not None
    assert cases["xfstests:generic/300"].find("skipped").get("message").startswith("excluded")
    assert suite.get("failures") == "1" and suite.get("skipped") == "1"


class FakeZfs:
    def cmd(self, tool: str) -> str:
        return f"LD_LIBRARY_PATH=/b/.libs /b/.libs/{tool}"


def test_each_profile_makes_its_datasets_and_sets_its_parameters():
    script, test_dev, scratch = xg.prepare_script(FakeZfs(), xg.profile("plain"),
                                                  ["/dev/nvme0n1", "/dev/nvme1n1", "/dev/nvme2n1"])
    assert test_dev == xg.TEST_FS and scratch == ["/dev/nvme1n1", "/dev/nvme2n1"]
    assert "exec env LD_LIBRARY_PATH=/b/.libs /b/.libs/zfs" in script      # /sbin/zfs is the build's
    assert "-o acltype=posix" in script and "-o recordsize=64K" in script
    assert "direct=" not in script and "123456-fsgqa" in script
    d, _, _ = xg.prepare_script(FakeZfs(), xg.profile("direct"), ["/dev/a", "/dev/b"])
    assert "-o direct=always" in d
    cfg = xg.local_config(xg.profile("direct"), xg.TEST_FS, ["/dev/b", "/dev/c"])
    assert "FSTYP=zfs" in cfg and 'SCRATCH_DEV_POOL="/dev/b /dev/c"' in cfg
    assert "-O direct=always" in cfg                    # the scratch pool too
    a, _, _ = xg.prepare_script(FakeZfs(), xg.profile("async"), ["/dev/a", "/dev/b"])
    assert "zfs_async_dio_enabled" in a
    z, zdev, zscratch = xg.prepare_script(FakeZfs(), xg.profile("zvol"), ["/dev/a", "/dev/b"])
    assert "create -V" in z and (zdev, zscratch) == (xg.TEST_ZVOL, [xg.SCRATCH_ZVOL])
    # one pool over every namespace (a 4 GiB disk could not hold both volumes), the
    # zvol Direct I/O parameter on before the volumes (and ext4, made after: its
    # /dev/zdN found by name, no udev rules in the guest)
    assert f"{xg.TEST_POOL} /dev/a /dev/b" in z and "mkfs" not in z
    assert z.index("zvol_dio_enabled") < z.index("create -V")
    assert "FSTYP=ext4" in xg.local_config(xg.profile("zvol"), zdev, zscratch)


def _require_in(cfg: str, tmp_path: Path, mkfs_options: str | None = None) -> str:
    """What the fork's ``_require_no_compress`` path does under ``cfg``: the config read
    as common/config reads it, then the helper called as common/rc calls it."""
    (tmp_path / "local.config").write_text(cfg)
    env = "" if mkfs_options is None else f"ZFS_MKFS_OPTIONS={shlex.quote(mkfs_options)}; "
    sh = ("_notrun() { echo \"notrun: $*\"; exit 0; }; . ./local.config; "
          f"{env}_require_zfs_no_compress && echo runs")
    r = subprocess.run(["bash", "-c", sh], cwd=tmp_path, capture_output=True, text=True)
    return r.stdout + r.stderr


def test_the_config_supplies_the_helper_the_fork_calls_but_lacks(tmp_path):
    # generic/427 failed on stock master with "_require_zfs_no_compress: command not found"
    cfg = xg.local_config(xg.profile("direct"), xg.TEST_FS, ["/dev/b", "/dev/c"])
    assert _require_in(cfg, tmp_path).strip() == "runs"        # the lane's scratch: off
    said = _require_in(cfg, tmp_path, "-O compression=lz4 -O direct=always")
    assert said.startswith("notrun: the scratch file system may be compressed")
    assert "command not found" in _require_in("", tmp_path)    # what the fork alone does
    # ext4 on a zvol is not ZFS's file: no ZFS helpers in its config
    assert "_require_zfs" not in xg.local_config(xg.profile("zvol"), "/dev/zd0", ["/dev/zd16"])


def test_a_profile_needing_a_series_is_not_for_a_stock_build():
    class Rec:
        features: list[str] = []
    assert "async_dio" in xg.not_for(Rec(), xg.profile("async"))
    assert xg.not_for(Rec(), xg.profile("direct")) == ""
    Rec.features = ["zvol_dio"]
    assert xg.not_for(Rec(), xg.profile("zvol")) == ""
    with pytest.raises(Exception, match="use one of"):
        xg.profile("nfs")


def test_its_packages_are_the_ones_setup_installs():
    listed = {ln.strip() for ln in (xb.paths.PROJECT_ROOT / "ci" / "apt-packages.txt")
              .read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    assert set(xb.APT) <= listed, set(xb.APT) - listed


def test_a_gate_sorts_each_xfstests_test_like_a_case(tmp_path):
    """A test passing on the base and failing with the series is a regression, even
    though the profile's case fails on both sides (another test fails on both)."""
    from suite.campaign.gate import classify
    for side, st in (("base", "pass"), ("series", "fail")):
        d = tmp_path / side / "20261205-run" / "cases" / "test_xfstests_direct_"
        d.mkdir(parents=True)
        xr.save([xr.XfsResult("generic/091", st, 10, "output mismatch" if st == "fail" else ""),
                 xr.XfsResult("generic/130", "fail", 5, "known on both"),
                 xr.XfsResult("generic/300", "excluded", 0, "ENOSPC vs EDQUOT")],
                d / xr.RESULTS_FILE, {"profile": "direct"})
    base, series = xr.verdicts(tmp_path / "base"), xr.verdicts(tmp_path / "series")
    assert set(base) == {"xfstests:generic/091[direct]", "xfstests:generic/130[direct]",
                         "xfstests:generic/300[direct]"}
    n = "xfstests:generic/091[direct]"
    assert classify(n, base[n], series[n], {"base": [], "series": []}).cls == "regression"
    m = "xfstests:generic/130[direct]"
    assert classify(m, base[m], series[m]).cls == "still failing"
    e = "xfstests:generic/300[direct]"
    assert series[e].outcome == "skipped" and "ENOSPC" in series[e].reason


def test_shards_of_a_selection_are_disjoint_and_cover_it():
    from suite.casekit.xfstests import shard
    tests = [f"generic/{n:03d}" for n in range(1, 40)] + ["zfs/001"]
    parts = [shard(tests, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(t for p in parts for t in p) == sorted(tests)
    assert not set(parts[0]) & set(parts[1]) and max(map(len, parts)) - min(map(len, parts)) <= 1
    assert shard(tests, None) == tests and shard(["generic/001"], "2/2") == []
    for bad in ("3", "0/2", "3/2", "a/b"):
        with pytest.raises(ValueError):
            shard(tests, bad)


def test_a_split_deals_the_longest_tests_first_by_their_recorded_time():
    from suite.plugin.shards import split_xfstests as split
    tests = ["generic/112", "generic/130", "generic/133", "generic/208", "generic/210",
             "generic/999"]
    times = {"xfstests:generic/133[direct]": 452, "xfstests:generic/208[direct]": 220,
             "xfstests:generic/112[direct]": 147, "xfstests:generic/130[plain]": 125,
             "xfstests:generic/133[plain]": 30,                 # another profile's: not used
             "xfstests:generic/210[direct]": 15, "generic/133": 1}      # a case's id: not ours
    parts = split(tests, 2, times, "direct")
    assert sorted(sum(parts, [])) == sorted(tests)
    assert parts[0] == ["generic/133"] or "generic/133" in parts[0]
    # 130 has only a plain time (125), 999 none (the median of the known, 147)
    load = [sum({"generic/133": 452, "generic/208": 220, "generic/112": 147,
                 "generic/130": 125, "generic/210": 15}.get(t, 147) for t in p) for p in parts]
    assert abs(load[0] - load[1]) <= 147, (parts, load)
    # round-robin on sorted names would put 133, 208 and 112 together
    assert not {"generic/133", "generic/208"} <= set(parts[0])
    assert split(tests, 3, times, "direct") == split(list(reversed(tests)), 3, times, "direct")


def test_an_excluded_test_weighs_nothing_in_a_split():
    """Two excluded tests with long recorded times (one stopped by hand after 11 min)
    had made one part a third of the other's length."""
    from suite.plugin.shards import split_xfstests as split
    tests = ["generic/133", "generic/208", "generic/299", "generic/551", "generic/591"]
    times = {"xfstests:generic/133[direct]": 450, "xfstests:generic/208[direct]": 220,
             "xfstests:generic/299[direct]": 200, "xfstests:generic/551[direct]": 620,
             "xfstests:generic/591[direct]": 659}
    parts = split(tests, 2, times, "direct", skip={"generic/551", "generic/591"})
    assert sorted(sum(parts, [])) == sorted(tests)                  # still reported
    run = [[t for t in p if t not in ("generic/551", "generic/591")] for p in parts]
    assert sorted(run) == [["generic/133"], ["generic/208", "generic/299"]]


def test_each_run_records_its_tests_seconds_for_the_next_split(tmp_path):
    case = tmp_path / "cases" / "test_xfstests_direct_"
    case.mkdir(parents=True)
    xr.save([xr.XfsResult("generic/133", "pass", 452.0),
             xr.XfsResult("generic/299", "fail", 185.0, "mismatch"),
             xr.XfsResult("generic/019", "notrun", 0.0, "no debugfs"),
             xr.XfsResult("generic/091", "excluded", 0.0, "fork")],
            case / xr.RESULTS_FILE, {"profile": "direct"})
    assert xr.seconds_of(tmp_path) == {"xfstests:generic/133[direct]": 452.0,
                                       "xfstests:generic/299[direct]": 185.0}


def test_the_split_makes_a_case_per_part_of_each_profile(pytester, monkeypatch, tmp_path):
    root = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    res = pytester.runpytest_subprocess(
        str(root / "cases" / "test_xfstests.py"), "-p", "no:cacheprovider", "--collect-only",
        "-q", "-m", "xfstests", "--xfstests-split", "2", "--rootdir", str(root), timeout=120)
    ids = [ln.split("::", 1)[1] for ln in res.stdout.lines if "::" in ln]
    assert "test_xfstests[part1of2-plain]" in ids and "test_xfstests[part2of2-direct]" in ids
    assert len(ids) == 2 * len(xg.PROFILES)


def test_the_tree_goes_to_a_guest_as_one_archive_made_once(tmp_path):
    import tarfile
    d = tmp_path / ("c" * 40)
    (d / "tests" / "generic").mkdir(parents=True)
    (d / "check").write_text("#!/bin/sh\n")
    (d / "tests" / "generic" / "091").write_text("fsx\n")
    tree = xb.Tree("c" * 40, d)
    a = tree.archive()
    assert a == tmp_path / f"{'c' * 40}.tar"
    with tarfile.open(a) as t:
        assert {"./check", "./tests/generic/091"} <= set(t.getnames())
    stamp = a.stat().st_mtime_ns
    assert tree.archive() == a and a.stat().st_mtime_ns == stamp      # not made again


def test_an_exclusion_bound_to_tcg_applies_only_there(tmp_path, monkeypatch):
    f = tmp_path / "exclude.toml"
    f.write_text('[[exclude]]\ntest = "generic/551"\nreason = "slow under TCG"\n'
                 'checked = "stock"\naccel = "tcg"\n'
                 '[[exclude]]\ntest = "generic/300"\nreason = "ENOSPC"\nchecked = "stock"\n')
    monkeypatch.setattr(xr, "EXCLUDE", f)
    assert set(xr.exclusions(None, "tcg")) == {"generic/551", "generic/300"}
    assert set(xr.exclusions(None, "kvm")) == {"generic/300"}
    assert xr.exclusions(None, "tcg")["generic/551"].accel == "tcg"


def test_a_test_this_repository_checked_is_judged_by_its_entry_not_the_forks(tmp_path,
                                                                             monkeypatch):
    tree = tree_with_groups(tmp_path / "tree")      # the fork excludes 300 and 091
    f = tmp_path / "exclude.toml"
    f.write_text('[[run]]\ntest = "generic/300"\nreason = "passed on stock"\n'
                 'checked = "stock"\n'
                 '[[exclude]]\ntest = "generic/091"\nreason = "21 min under TCG"\n'
                 'checked = "stock"\naccel = "tcg"\n')
    monkeypatch.setattr(xr, "EXCLUDE", f)
    assert xr.suite_runs() == {"generic/300": "passed on stock"}
    tcg = xr.exclusions(tree, "tcg")
    assert set(tcg) == {"generic/091"} and tcg["generic/091"].source == "suite"
    assert xr.exclusions(tree, "kvm") == {}         # the fork's "unknown" set aside
    f.write_text('[[run]]\ntest = "generic/300"\n')
    with pytest.raises(ValueError, match="run entry needs a test"):
        xr.suite_runs()


def test_an_exclusion_of_an_old_kernels_finding_applies_only_there(tmp_path, monkeypatch):
    f = tmp_path / "exclude.toml"
    f.write_text('[[exclude]]\ntest = "generic/591"\nreason = "hangs"\nchecked = "stock"\n'
                 'linux_before = "6.5"\nfstyp = "zfs"\n'
                 'finding = "sendfile-from-direct-always-moves-nothing"\n')
    monkeypatch.setattr(xr, "EXCLUDE", f)
    assert xr.exclusions(None, "tcg", "6.1.0-57-amd64")["generic/591"].finding == \
        "sendfile-from-direct-always-moves-nothing"
    assert xr.exclusions(None, "tcg", "6.12.57+deb13-amd64") == {}
    assert xr.exclusions(None, "tcg", "6.1.0-57-amd64", "ext4") == {}     # ext4 on a zvol


def test_progress_says_each_test_as_it_finishes(tmp_path):
    import io
    import time
    from suite.progress import Step
    console = ("FSTYP -- zfs\n\ngeneric/019       [not run] no debugfs\ngeneric/036        31s\n"
               "generic/091       [expunged]\ngeneric/112       - output mismatch (see x)\n"
               "    --- tests/generic/112.out\ngeneric/133       ")
    assert xg.finished_lines(console) == [
        "generic/019       [not run] no debugfs", "generic/036        31s",
        "generic/091       [expunged]", "generic/112       - output mismatch (see x)"]
    assert xg.finished_lines("generic/036 ") == []              # still running

    class Guest:
        texts = [console, console + "452s\n"]

        def run(self, cmd, timeout=60, log=True):
            assert cmd.startswith("cat ") and not log
            return type("R", (), {"stdout": self.texts.pop(0) if self.texts else ""})()
    out = io.StringIO()
    with xg.watching(Guest(), xg.CONSOLE, Step("x", out), every=0.05):
        time.sleep(0.5)
    said = [ln.split("] ", 1)[1] for ln in out.getvalue().splitlines()]
    assert said == ["generic/019 [not run] no debugfs", "generic/036 31s", "generic/091 [expunged]",
                    "generic/112 - output mismatch (see x)", "generic/133 452s"]


def test_a_case_takes_its_shard_or_its_part_of_the_split():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "xfstests_case", Path(__file__).resolve().parent.parent / "cases" / "test_xfstests.py")
    case = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(case)
    from suite.plugin.shards import CASE_TIMES

    class Config:
        def __init__(self, shard):
            self.shard = shard
            self.stash = {CASE_TIMES: {"xfstests:generic/133[direct]": 500.0,
                                       "xfstests:generic/208[direct]": 200.0,
                                       "xfstests:generic/299[direct]": 200.0}}

        def getoption(self, name):
            assert name == "xfstests_shard"
            return self.shard
    tests = ["generic/133", "generic/208", "generic/299", "generic/591"]
    assert case.share(tests, Config(None), "direct", None, {}) == (tests, "")
    assert case.share(tests, Config("2/2"), "direct", (0, 2), {}) == \
        (["generic/208", "generic/591"], "2/2")                  # the runner's shard wins
    parts = [case.share(tests, Config(None), "direct", (i, 2), {"generic/591": None})
             for i in range(2)]
    assert [spec for _, spec in parts] == ["1/2", "2/2"]
    assert sorted(t for got, _ in parts for t in got) == tests
    assert ["generic/133"] in [[t for t in got if t != "generic/591"] for got, _ in parts]
