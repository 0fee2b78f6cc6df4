"""The ZTS lane without a guest: runfiles, the console parser, JUnit folding, selection."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from suite.guest import zts
from suite.report import zts as report
from suite.symptoms import Symptom

PFX = "[2026-11-30T20:01:02.123456] Test: /root/.cache/ozfs-vmci/builds/k/src/tests/zfs-tests/tests"
CONSOLE = f"""\
{PFX}/functional/direct/setup (run as root) [00:03] [PASS]
{PFX}/functional/direct/dio_aligned_block (run as root) [00:41] [PASS]
{PFX}/functional/direct/dio_mmap (run as root) [01:02] [FAIL]
{PFX}/functional/direct/dio_loopback_dev (run as root) [00:01] [SKIP]
{PFX}/functional/direct/dio_random (run as root) [10:00] [KILLED]
{PFX}/functional/direct/cleanup (run as root) [00:02] [PASS]

Results Summary
PASS\t   3
FAIL\t   1
SKIP\t   1
KILLED\t   1

Running Time:\t00:12:49
Percent passed:\t50.0%
Log directory:\t/var/tmp/test_results/20261130T200102

Tests with results other than PASS that are expected:
    SKIP direct/dio_loopback_dev (Test user does not have permission)

Tests with result of PASS that are unexpected:

Tests with results other than PASS that are unexpected:
    FAIL direct/dio_mmap (expected PASS)
    KILLED direct/dio_random (expected PASS)
"""


def by_test(results):
    return {r.test: r for r in results}


def test_parse_reads_every_result_line_and_the_report_verdicts():
    res = by_test(report.parse(CONSOLE))
    assert set(res) == {f"functional/direct/{t}" for t in (
        "setup", "dio_aligned_block", "dio_mmap", "dio_loopback_dev", "dio_random", "cleanup")}
    assert res["functional/direct/dio_aligned_block"].seconds == 41
    assert res["functional/direct/dio_random"].seconds == 600
    assert [t for t, r in sorted(res.items()) if r.failed] == [
        "functional/direct/dio_mmap", "functional/direct/dio_random"]
    skip = res["functional/direct/dio_loopback_dev"]
    assert skip.expected and not skip.failed and "permission" in skip.reason
    assert res["functional/direct/dio_mmap"].id == "zts:functional/direct/dio_mmap"


def test_without_a_report_every_non_pass_is_a_failure():
    cut = CONSOLE.split("Results Summary")[0]        # the run died before zts-report
    res = by_test(report.parse(cut))
    assert res["functional/direct/dio_loopback_dev"].failed
    assert not res["functional/direct/setup"].failed


def test_an_empty_console_has_no_results():
    assert report.parse("fail: This script must not be run as root.\n") == []


def test_runfile_tags_and_scaled_timeouts():
    text = ("[DEFAULT]\ntimeout = 600\ntags = ['functional']\n\n[tests/functional/async:Linux]\n"
            "tests = ['async_read_001_pos']\ntimeout = 0\ntags = ['functional', 'async']\n")
    assert zts.runfile_tags(text) == {"functional", "async"}
    scaled = zts.scale_timeouts(text, 6.0)
    assert "timeout = 3600" in scaled and "timeout = 0" in scaled
    assert zts.runfile_tags(scaled) == {"functional", "async"}


def test_fold_adds_a_testsuite_with_one_case_per_zts_test(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="1">'
                   '<testcase classname="cases.test_zts" name="test_zts_tag[direct]"/>'
                   '</testsuite></testsuites>')
    case = tmp_path / "cases" / "c"
    case.mkdir(parents=True)
    report.save(report.parse(CONSOLE), case / report.RESULTS_FILE, {"tag": "direct"})
    assert report.fold_into_junit(xml, [case / report.RESULTS_FILE]) == 6
    root = ET.parse(xml).getroot()
    zsuite = [s for s in root.iter("testsuite") if s.get("name") == "zts-direct"]
    assert len(zsuite) == 1 and zsuite[0].get("failures") == "2"
    failed = {tc.get("name") for tc in zsuite[0].iter("testcase") if tc.find("failure") is not None}
    assert failed == {"dio_mmap", "dio_random"}
    assert {tc.get("classname") for tc in zsuite[0].iter("testcase")} == {"zts.functional.direct"}


def test_markdown_puts_unexpected_results_first():
    md = report.markdown(report.parse(CONSOLE), "ZTS direct")
    rows = [ln for ln in md.splitlines() if ln.startswith("| `")]
    assert "dio_mmap" in rows[0] and "**unexpected**" in rows[0]
    assert "6 tests" in md


@pytest.mark.parametrize("expr,want", [("zts", True), ("perf or zts", True),
                                       ("not zts", False), ("", False), ("zvol", False)])
def test_only_a_marker_expression_that_selects_zts_asks_for_it(expr, want):
    from suite.plugin.hooks import asks_for

    class Cfg:
        def getoption(self, name, default=None):
            return expr
    assert asks_for(Cfg(), "zts") is want


def test_the_guest_setup_makes_a_sudo_user_and_a_disk_backed_filedir(tmp_path):
    script = zts.prepare_guest_script(tmp_path, "/dev/nvme3n1")
    assert "ztsuser:x:4242" in script and "NOPASSWD" in script
    assert "mkfs.ext4 -q -F /dev/nvme3n1" in script
    assert "lowerdir=/," in script and "chroot /mnt/root" in script   # a writable /
    assert "for m in loop overlay; do modprobe $m" in script   # losetup in dio_loopback_dev
    # A fresh constrained PATH: no link left from another build's tree survives.
    bin_ = f"/mnt/root{tmp_path}/tests/zfs-tests/bin"
    assert script.index(f"rm -rf {bin_}") < script.index(f"mkdir -p {bin_}")


def test_session_counts_leave_the_folded_zts_tests_out(tmp_path):
    from suite.sessions import count
    xml = tmp_path / "junit.xml"
    xml.write_text('<testsuites><testsuite name="pytest" tests="2" failures="1" errors="0" '
                   'skipped="0"/><testsuite name="zts-direct" tests="6" failures="2" '
                   'errors="0" skipped="1"/></testsuites>')
    assert count(xml) == (1, 1, 0, 0)


def zts_table(rows):
    """The ZTS lane's table (from the one builder) of (bug, bad commit, the suite's
    verdict there, what ZTS saw there) rows."""
    from suite.campaign.lanes import table
    from suite.campaign.lanes.cases import CasesLane
    from suite.campaign.lanes.zts import ZtsLane
    from suite.report.outcomes import CaseResult, Outcome
    from suite.source.series import KnownBug
    cases, lane, bugs = CasesLane(), ZtsLane(), []
    for bug, commit, verdict, z in rows:
        bugs.append(KnownBug(bug, "t", commit, "f" * 40))
        cases.runs[(bug, "bad")] = Outcome(bug, commit, "bad", [CaseResult("n", verdict)])
        if z is not None:
            lane.runs[commit[:11]] = z
    return table(bugs, [cases, lane])


def test_zts_vs_suite_reads_a_session_and_credits_zts_only_with_unexpected_failures(tmp_path):
    from suite.campaign.lanes import zts as ztsbugs
    case = tmp_path / "run" / "cases" / "test_zts_tag_direct_"
    case.mkdir(parents=True)
    report.save(report.parse(CONSOLE), case / report.RESULTS_FILE, {"tag": "direct"})
    ran, bad = ztsbugs.read_session(tmp_path)
    assert ran == 6 and bad == ["direct/dio_mmap FAIL", "direct/dio_random KILLED"]
    seen = ztsbugs.ZtsAt("eb75ba1c586", ran, bad)
    quiet = ztsbugs.ZtsAt("917a434a1a4", 19, [])
    md = zts_table([("preadv-freed-iovec", "eb75ba1c586", "caught", seen),
                    ("async-oappend-stale-eof", "917a434a1a4", "caught", quiet),
                    ("x", "0000000", "caught", None)])
    assert "2 unexpected of 6: direct/dio_mmap FAIL" in md
    assert "all 19 as expected (saw nothing)" in md and "not run" in md
    assert ztsbugs.ZtsAt("abc").describe().startswith("INCONCLUSIVE")


def test_a_narrowed_or_cut_short_zts_run_never_reads_as_the_whole_tag_passing(tmp_path):
    from suite.campaign.lanes import zts as ztsbugs
    case = tmp_path / "run" / "cases" / "test_zts_tag_async_"
    case.mkdir(parents=True)
    quiet = report.parse(CONSOLE.replace("[FAIL]", "[PASS]").replace("[KILLED]", "[PASS]"))
    only = ["functional/async/async_write_002_pos", "functional/async/async_write_003_pos"]
    report.save(quiet, case / report.RESULTS_FILE, {"tag": "async", "only": only})
    z = ztsbugs._judge(ztsbugs.ZtsAt("dc643dc2041"), tmp_path, 1, "")
    assert z.describe() == ("all 6 (only async_write_002_pos, async_write_003_pos) "
                            "as expected (saw nothing)")
    report.save(quiet, case / report.RESULTS_FILE, {"tag": "async", "partial": True})
    z = ztsbugs._judge(ztsbugs.ZtsAt("dc643dc2041"), tmp_path, 1, "")
    assert z.describe() == "INCONCLUSIVE: cut short after 6, all as expected so far"
    report.save(report.parse(CONSOLE), case / report.RESULTS_FILE,
                {"tag": "async", "partial": True})
    z = ztsbugs._judge(ztsbugs.ZtsAt("dc643dc2041"), tmp_path, 1, "")
    assert z.describe().startswith("2 unexpected of 6, then cut short: direct/dio_mmap FAIL")


def test_a_tag_the_commit_lacks_reads_as_no_test_not_as_inconclusive(tmp_path):
    from suite.campaign.lanes import zts as ztsbugs
    from suite.sessions import skip_reasons
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite name="pytest" tests="1" skipped="1"><testcase '
                     'name="test_zts_tag[async]"><skipped type="pytest.skip" message="ZTS tag '
                     "'async' is not in this build's runfiles (zfs-2.4.99-935)\"/>"
                     '</testcase></testsuite></testsuites>')
    absent = skip_reasons(junit)
    assert absent == ["ZTS tag 'async' is not in this build's runfiles (zfs-2.4.99-935)"]
    z = ztsbugs.ZtsAt("39991b06fea", absent=absent)
    assert z.describe().startswith("no test here (saw nothing): ZTS tag 'async'")
    assert skip_reasons(tmp_path / "none.xml") == []


def test_bugs_zts_only_runs_zts_once_per_bad_commit_and_writes_the_table(tmp_path, monkeypatch):
    from suite.campaign import bugs as knownbugs
    from suite.campaign.lanes import cases
    from suite.campaign.lanes import zts as ztsbugs
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    calls = []

    def fake(name, commit, root, extra, tags=()):
        calls.append((commit[:11], tags))
        return ztsbugs.ZtsAt(commit[:11], 5, ["async/async_read_002_pos FAIL"]
                             if commit.startswith("eb75") else [])
    monkeypatch.setattr(ztsbugs, "run_zts_at", fake)
    monkeypatch.setattr(cases, "run_cases", lambda *a, **k: pytest.fail("suite ran"))
    rc = knownbugs.run_bugs("async-dio", [], "", [], roles=["bad"],
                            lanes=[ztsbugs.ZtsLane(("async",), only=True)])
    bads = {b.bad[:11] for b in knownbugs.series.available()["async-dio"].bugs if not b.deferred}
    assert rc == 0 and sorted(c for c, _ in calls) == sorted(bads)
    assert all(t == ("async",) for _, t in calls)
    md = next(tmp_path.glob("bugs-*/zts-vs-suite.md")).read_text()
    assert "`preadv-freed-iovec` | eb75ba1c586 | INCONCLUSIVE: not run here" in md
    assert "1 unexpected of 5: async/async_read_002_pos FAIL" in md


def test_a_cut_short_run_keeps_what_zts_printed(tmp_path):
    from suite.errors import GuestError

    class G:
        def __init__(self, text):
            self.text = text

        def get(self, remote, local, timeout=60):
            if self.text is None:
                raise GuestError("guest lost")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(self.text)
            return local
    got = zts.salvage_console(G(CONSOLE.split("Results Summary")[0]), tmp_path)
    assert len(report.parse(got)) == 6 and (tmp_path / "console.partial.txt").exists()
    assert zts.salvage_console(G(None), tmp_path / "x") == ""


RUNFILE = """\
[DEFAULT]
pre = setup
post = cleanup
timeout = 600
tags = ['functional']

[tests/functional/direct:Linux]
tests = ['dio_loopback_dev', 'dio_write_verify']
tags = ['functional', 'direct']

[tests/functional/async:Linux]
tests = ['async_read_001_pos',
    'async_write_001_pos']
timeout = 1200
tags = ['functional', 'async']
"""


def test_a_runfile_cut_to_some_tests_keeps_their_sections_and_defaults(tmp_path):
    text, kept = zts.select_tests(RUNFILE, ["dio_loopback_dev", "functional/async/async_write_001_pos"])
    assert kept == ["functional/direct/dio_loopback_dev", "functional/async/async_write_001_pos"]
    assert "[DEFAULT]\npre = setup" in text
    assert "tests = ['dio_loopback_dev']\ntags = ['functional', 'direct']" in text
    assert "tests = ['async_write_001_pos']\ntimeout = 1200" in text
    assert "dio_write_verify" not in text and "async_read_001_pos" not in text
    only_async, kept = zts.select_tests(RUNFILE, ["dio_loopback_dev", "async_read_001_pos"], "async")
    assert kept == ["functional/async/async_read_001_pos"] and "direct" not in only_async
    assert zts.select_tests(RUNFILE, ["nope"])[1] == []
    # The tag's case asks the build which of the wanted tests it runs.
    (tmp_path / "tests" / "runfiles").mkdir(parents=True)
    (tmp_path / "tests" / "runfiles" / "linux.run").write_text(RUNFILE)
    rec = type("R", (), {"src_dir": str(tmp_path)})()
    assert zts.tests_in_tag(rec, "direct", ["dio_loopback_dev"]) == \
        ["functional/direct/dio_loopback_dev"]
    assert zts.tests_in_tag(rec, "async", ["dio_loopback_dev"]) == []


def _earlier_bugs_run(root, bug, nodeid, symptoms, mtime):
    """A session folder as ``suite bugs`` leaves it: junit.xml and a verdict.json."""
    import os

    from suite.symptoms import CaseVerdict
    d = root / bug / "bad"
    case = d / "20261130-120000-async-dio" / "cases" / "c"
    case.mkdir(parents=True)
    (d / "junit.xml").write_text('<testsuites><testsuite name="pytest" tests="1" failures="1" '
                                 'errors="0" skipped="0"/></testsuites>')
    (case / "verdict.json").write_text(CaseVerdict(nodeid, "failed", symptoms, "x").to_json())
    os.utime(d / "junit.xml", (mtime, mtime))
    return d


def test_suite_from_judges_the_newest_earlier_session_again(tmp_path, monkeypatch):
    from suite.campaign import bugs as knownbugs
    from suite.campaign.lanes import cases
    from suite.campaign.lanes import zts as ztsbugs
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path / "new"))
    monkeypatch.setattr(ztsbugs, "run_zts_at", lambda n, c, *a, **k: ztsbugs.ZtsAt(c[:11], 4))
    monkeypatch.setattr(cases, "run_cases", lambda *a, **k: pytest.fail("suite ran"))
    old = tmp_path / "old"
    node = "cases/test_dio_preadv.py::test_preadv_vectored[libaio-strict1]"
    ctl = [Symptom("EINVAL", "10/14", "async=0 strict=1")]        # a control row: not it
    _earlier_bugs_run(old / "bugs-1", "preadv-freed-iovec", node, ctl, 1000)
    newest = _earlier_bugs_run(old / "bugs-2", "preadv-freed-iovec", node,
                               [Symptom("EINVAL", "10/14", "async=1 strict=1")], 2000)
    from suite.sessions import newest_session
    assert newest_session([old], "preadv-freed-iovec/bad") == newest
    assert newest_session([old / "bugs-1"], "preadv-freed-iovec/bad") != newest
    knownbugs.run_bugs("async-dio", ["preadv-freed-iovec", "eof-tail-efault"], "", [],
                       roles=["bad"], lanes=[ztsbugs.ZtsLane(only=True)], suite_from=[old])
    md = next((tmp_path / "new").glob("bugs-*/zts-vs-suite.md")).read_text()
    assert "`eof-tail-efault` | 39991b06fea | INCONCLUSIVE: no earlier run under --suite-from" in md
    assert "`preadv-freed-iovec` | eb75ba1c586 | caught | all 4 as expected" in md
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path / "new2"))
    knownbugs.run_bugs("async-dio", ["preadv-freed-iovec"], "", [], roles=["bad"],
                       lanes=[ztsbugs.ZtsLane(only=True)], suite_from=[old / "bugs-1"])
    md = next((tmp_path / "new2").glob("bugs-*/zts-vs-suite.md")).read_text()
    assert "`preadv-freed-iovec` | eb75ba1c586 | INCONCLUSIVE" in md


def test_zts_from_reads_earlier_zts_runs_and_runs_nothing(tmp_path, monkeypatch):
    import os

    from suite.campaign import bugs as knownbugs
    from suite.campaign.lanes import cases
    from suite.campaign.lanes import zts as ztsbugs
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path / "new"))
    monkeypatch.setattr(ztsbugs, "run_zts_at", lambda *a, **k: pytest.fail("ZTS ran"))
    monkeypatch.setattr(cases, "run_cases", lambda *a, **k: pytest.fail("suite ran"))
    for n, (stamp, text) in enumerate([("1", CONSOLE.replace("[FAIL]", "[PASS]")),
                                       ("2", CONSOLE)]):
        d = tmp_path / "old" / f"bugs-{stamp}" / "zts" / "eb75ba1c586"
        case = d / "run" / "cases" / "test_zts_tag_async_"
        case.mkdir(parents=True)
        report.save(report.parse(text), case / report.RESULTS_FILE, {"tag": "async"})
        (d / "junit.xml").write_text('<testsuites><testsuite name="pytest" tests="1" '
                                     'failures="1"/></testsuites>')
        os.utime(d / "junit.xml", (1000 + n, 1000 + n))
    z = ztsbugs.read_zts_at("eb75ba1c5860566178d615b1a170206b450c95f9", [tmp_path / "old"])
    assert z.ran == 6 and z.unexpected == ["direct/dio_mmap FAIL", "direct/dio_random KILLED"]
    assert "no earlier ZTS run" in ztsbugs.read_zts_at("39991b06fea", [tmp_path / "old"]).describe()
    rc = knownbugs.run_bugs("async-dio", ["preadv-freed-iovec", "eof-tail-efault"], "", [],
                            roles=["bad"],
                            lanes=[ztsbugs.ZtsLane(only=True, read_from=[tmp_path / "old"])])
    md = next((tmp_path / "new").glob("bugs-*/zts-vs-suite.md")).read_text()
    assert "| eb75ba1c586 | INCONCLUSIVE: not run here (ZTS only) | 2 unexpected of 6" in md
    assert "| 39991b06fea | INCONCLUSIVE: not run here (ZTS only) | INCONCLUSIVE: no earlier" in md
    assert rc == 1


def test_zts_lbs_changes_only_the_zts_guests_sector_size(tmp_path):
    """``--zts-lbs 512`` gives ZTS the 512-byte sectors of OpenZFS's loop-file CI;
    the suite's own cases keep the sector size they ask for."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "test_shape.py").write_text(
        "import json, pytest\n"
        "from suite.plugin.grouping import shape_of\n"
        "@pytest.mark.zts\n@pytest.mark.guest(nvme=4, size_mib=4096)\n"
        "def test_zts_shape(request):\n"
        "    print('SHAPE', request.node.name, json.dumps(shape_of(request.node).lbs))\n"
        "@pytest.mark.guest(nvme=2, lbs=4096)\n"
        "def test_case_shape(request):\n"
        "    print('SHAPE', request.node.name, json.dumps(shape_of(request.node).lbs))\n")

    def shapes(*args: str) -> dict[str, int]:
        r = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path), "-p", "suite.plugin",
                            "-p", "no:cacheprovider", "-s", "-q", "--results",
                            str(tmp_path / "results"), "-m", "zts or not zts", *args],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env={**__import__("os").environ, "PYTHONPATH": str(root),
                                "OZFS_VMCI_CACHE": str(tmp_path / "cache")})
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        import re
        return {m[1]: int(m[2]) for m in re.finditer(r"SHAPE (\S+) (\d+)", r.stdout)}

    assert shapes() == {"test_zts_shape": 4096, "test_case_shape": 4096}
    assert shapes("--zts-lbs", "512") == {"test_zts_shape": 512, "test_case_shape": 4096}


def test_zts_from_merges_narrowed_reruns_back_to_the_newest_whole_run(tmp_path):
    """A tag run whole, then some of its tests again (``--zts-test``): the table counts
    every test once, the newer result winning; a run on other sectors stays out."""
    import os

    from suite.campaign.lanes import zts as ztsbugs

    def session(stamp: int, text: str, meta: dict) -> None:
        d = tmp_path / f"bugs-{stamp}" / "zts" / "dc643dc2041"
        case = d / "run" / "cases" / "test_zts_tag_async_"
        case.mkdir(parents=True)
        report.save(report.parse(text), case / report.RESULTS_FILE, {"tag": "async", **meta})
        (d / "junit.xml").write_text('<testsuites><testsuite name="pytest" tests="1"/>'
                                     '</testsuites>')
        os.utime(d / "junit.xml", (1000 + stamp, 1000 + stamp))

    mmap_only = "\n".join(ln for ln in CONSOLE.splitlines()
                          if "dio_mmap" in ln and "[FAIL]" in ln).replace("[FAIL]", "[PASS]")
    session(1, CONSOLE.replace("[FAIL]", "[PASS]"), {})          # superseded by run 2
    session(2, CONSOLE, {})                                        # whole: mmap FAIL, random KILLED
    session(3, CONSOLE.replace("[KILLED]", "[PASS]"),                # other sectors: left out
            {"lbs": 512, "only": ["functional/direct/dio_random"]})
    session(4, mmap_only, {"only": ["functional/direct/dio_mmap"]})  # mmap again: PASS
    z = ztsbugs.read_zts_at("dc643dc2041", [tmp_path])
    assert z.ran == 6 and z.unexpected == ["direct/dio_random KILLED"]
    assert z.only == [] and "bugs-2" in z.results and "bugs-4" in z.results
    assert "bugs-1" not in z.results and "bugs-3" not in z.results
    assert z.describe() == "1 unexpected of 6: direct/dio_random KILLED"
