"""Self-tests of the merge gate (no VM): how a case is classed from its two
sides and its reruns, the exit code, and the reports written from the
sessions' folders. The sessions themselves are faked by writing verdict.json
files where pytest would."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from suite.campaign import gate
from suite.campaign.gate import classify, run_gate
from suite.report.outcomes import state, verdict
from suite.report.runreport import slug, write_reports
from suite.symptoms import CaseVerdict, Symptom

N = "cases/test_dio_eof.py::test_eof[40000]"


def v(outcome: str, *kinds: str, reason: str = "") -> CaseVerdict:
    return CaseVerdict(N, outcome, [Symptom(k, "detail", "async=1") for k in kinds], reason)


def test_side_states():
    assert state(None)[0] == "missing"
    assert state(v("passed"))[0] == "pass"
    assert state(v("failed", "EFAULT"))[0] == "fail"
    assert state(v("failed", "guest-lost"))[0] == "inconclusive"      # proved nothing
    assert state(v("failed", "not-armed", "EFAULT"))[0] == "fail"
    assert state(v("error"))[0] == "inconclusive"
    # a panic named before the task it left stuck (zfs-2.3.9's rlimit write)
    assert state(v("failed", "no-result", "D-state", "kernel:spl_panic"))[1].startswith(
        "kernel:spl_panic")
    assert state(v("skipped", reason="the loaded build has no zfs_async_dio_enabled"))[0] \
        == "feature-skip"


@pytest.mark.parametrize("base,series,reruns,want", [
    (v("passed"), v("passed"), None, "unchanged pass"),
    (v("failed", "EFAULT"), v("passed"), None, "fixed"),
    (v("failed", "EFAULT"), v("failed", "EFAULT"), None, "still failing"),
    (v("skipped", reason="async_dio: the loaded build has no zfs_async_dio_enabled"),
     v("passed"), None, "not applicable on base"),
    (v("skipped", reason="the loaded build has no zfs_async_dio_enabled"),
     v("failed", "EINVAL"), None, "regression"),
    (v("skipped", reason="the loaded build has no zfs_async_dio_enabled"),
     v("failed", "EINVAL"), {"series": ["fail", "fail"]}, "regression"),
    (v("skipped", reason="the loaded build has no zfs_async_dio_enabled"),
     v("failed", "EINVAL"), {"series": ["pass", "pass"]}, "flaky"),
    (v("passed"), v("failed", "EFAULT"), {"series": ["fail", "pass"], "base": ["pass", "pass"]},
     "regression"),
    (v("passed"), v("failed", "EFAULT"), {"series": ["pass", "pass"], "base": ["pass", "pass"]},
     "flaky"),
    (v("passed"), v("failed", "EFAULT"), {"series": ["fail", "fail"], "base": ["fail", "pass"]},
     "flaky"),
    (v("skipped", reason="async=1: the build has no zfs_async_dio_enabled"),
     v("skipped", reason="async=1: the build has no zfs_async_dio_enabled"), None,
     "not applicable"),
    # each side names its own build (a gate of #18795: 4 cases called inconclusive)
    (v("skipped", reason="async_dio: the loaded build has no zfs_async_dio_enabled "
                         "(build zfs-2.4.99-829-g52424e4d38); use --series"),
     v("skipped", reason="async_dio: the loaded build has no zfs_async_dio_enabled "
                         "(build zfs-2.4.99-830-g625f5e268e); use --series"), None,
     "not applicable"),
    (v("skipped", reason="async=1: the build has no zfs_async_dio_enabled"),
     v("skipped", reason="zvol: the build has no zvol_dio_enabled"), None, "inconclusive"),
    (v("passed"), v("passed"), None, "unchanged pass"),
    (v("passed"), v("failed", "guest-lost"), None, "inconclusive"),
    (None, v("passed"), None, "inconclusive"),
    (v("passed"), None, None, "inconclusive"),
])
def test_classes(base, series, reruns, want):
    assert classify(N, base, series, reruns).cls == want


def panic(title: str, *frames: str) -> CaseVerdict:
    return CaseVerdict(N, "failed", [Symptom("kernel:spl_panic", f"[ 91.2] {title}", "",
                                             frames),
                                     Symptom("no-result", "the kernel reported spl_panic")])


def test_a_head_failing_with_another_signature_than_its_base_is_a_regression():
    known = panic("VERIFY0(len) failed (-131072)", "zfs_uio_pin_user_pages")
    again = panic("VERIFY0(len) failed (-4096)", "zfs_uio_pin_user_pages")
    other = panic("VERIFY(zio->io_abd != NULL) failed", "zio_done")
    assert classify(N, known, again).cls == "still failing", "numbers are not a signature"
    c = classify(N, known, other)
    assert c.cls == "regression" and "zio->io_abd" in c.why, c.why
    assert classify(N, v("failed", "EFAULT"), v("failed", "EFAULT", "wrong-bytes")).cls == \
        "regression", "a new kind beside the old one"
    assert classify(N, v("failed", "EFAULT", "wrong-bytes"), v("failed", "EFAULT")).cls == \
        "still failing", "fewer symptoms is no new failure"


def test_a_fix_claimed_on_one_run_must_hold_on_every_rerun_of_both_sides():
    """A timing-dependent case (a refused write zeroes its block only while its record
    is dirty) flipped to pass on a fix's head once: that is not "fixed"."""
    bad, ok = v("failed", "wrong-bytes"), v("passed")
    assert classify(N, bad, ok).cls == "fixed" and "not rerun" in classify(N, bad, ok).why
    held = classify(N, bad, ok, {"base": ["fail", "fail"], "series": ["pass", "pass"]})
    assert held.cls == "fixed" and "2 of 2 reruns" in held.why, held.why
    assert classify(N, bad, ok, {"base": ["fail", "pass"], "series": ["pass", "pass"]}).cls \
        == "flaky"
    assert classify(N, bad, ok, {"base": ["fail", "fail"], "series": ["pass", "fail"]}).cls \
        == "flaky"



def test_a_case_the_base_cannot_run_failing_only_by_a_finding_the_base_shows_is_not_a_regression():
    """#17218's gate: a misaligned-write control the base cannot run (no
    zfs_dio_strict) xfailed on the head by abdstats going below zero, the known
    abd-stats finding the base's other cases xfailed by too: not the pull request's."""
    skip = v("skipped", reason="the build has no zfs_dio_strict")
    known = v("xfailed", "kstat:wrap", reason="known upstream finding abd-stats-direct-io-"
                                              "asymmetry (by /abdstats/): below zero")
    c = classify(N, skip, known, base_known=frozenset({"abd-stats-direct-io-asymmetry"}))
    assert c.cls == "not applicable on base" and "abd-stats" in c.why, c.why
    assert classify(N, skip, known).cls == "regression"            # the base never showed it
    other = frozenset({"rollback-keeps-cached-pages"})
    assert classify(N, skip, known, base_known=other).cls == "regression"
    failed = v("failed", "kstat:wrap", "EINVAL", reason="EINVAL")   # its own check failed too
    assert classify(N, skip, failed,
                    base_known=frozenset({"abd-stats-direct-io-asymmetry"})).cls == "regression"

def test_a_new_signature_is_a_regression_only_if_it_returns_on_the_head_and_never_on_base():
    base, head = v("failed", "wrong-bytes"), v("failed", "EIO")
    both = {"base": ["fail", "fail"], "series": ["fail", "fail"]}
    assert classify(N, base, head).cls == "regression"              # not rerun: no proof
    sig = head.symptoms[0].signature()
    c = classify(N, base, head, both, {"base": [], "series": [sig]})
    assert c.cls == "regression" and "again on rerun" in c.why, c.why
    c = classify(N, base, head, both, {"base": [sig], "series": [sig]})
    assert c.cls == "still failing" and "base shows it too" in c.why, c.why
    c = classify(N, base, head, both, {"base": [], "series": []})
    assert c.cls == "flaky", c.why


def test_the_gate_reruns_a_fixed_case_on_both_sides(tmp_path: Path, monkeypatch):
    racy = "cases/t.py::test_racy"
    runs = {"base": iter(["failed", "passed", "failed"]), "series": iter(["passed"] * 3)}
    calls = []

    def fake(args, results, extra=(), timeout=0, targets=None, inner="1"):
        side = "base" if "--zfs-ref" in args else "series"
        calls.append((results.name, targets))
        out = next(runs[side])
        write_case(results, racy, v(out, *(["wrong-bytes"] if out == "failed" else [])))
        (results / "20260101-000000-x" / "build").mkdir(parents=True, exist_ok=True)
        return 1, "", 1.0

    monkeypatch.setattr(gate, "run_cases", fake)
    g = run_gate("fix", "e" * 40, ["-k", "racy"], [], reruns=2, root=tmp_path / "g")
    assert [c[0] for c in calls] == ["base", "series", "rerun1-base", "rerun1-series",
                                     "rerun2-base", "rerun2-series"]
    (c,) = g.classes
    assert c.cls == "flaky" and c.reruns == {"base": ["pass", "fail"],
                                             "series": ["pass", "pass"]}, c

def test_exit_codes():
    c = lambda cls: gate.CaseClass(N, cls, "")        # noqa: E731
    assert verdict([c("unchanged pass"), c("fixed")])[0] == 0
    assert verdict([c("unchanged pass"), c("flaky")]) == (0, "PASS (1 flaky)")
    assert verdict([c("regression"), c("inconclusive")])[0] == 1
    assert verdict([c("unchanged pass"), c("inconclusive")])[0] == 2
    assert verdict([])[0] == 2


def write_case(results: Path, nodeid: str, cv: CaseVerdict, table: str = "") -> None:
    d = results / "20260101-000000-x" / "cases" / slug(nodeid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "verdict.json").write_text(CaseVerdict(nodeid, cv.outcome, cv.symptoms,
                                                cv.reason).to_json())
    if table:
        (d / "table-1.md").write_text(table)
        (d / "table-1.txt").write_text(table)
    (d / "commands.log").write_text("$ zpool create tank ...\n")


def test_gate_runs_both_sides_reruns_suspects_and_reports(tmp_path: Path, monkeypatch):
    ok, bad, feat = "cases/t.py::test_ok", "cases/t.py::test_broken", "cases/t.py::test_feature"
    calls = []

    def fake(args, results, extra=(), timeout=0, targets=None, inner="1"):
        calls.append((results.name, list(args), targets))
        side = "base" if "--zfs-ref" in args else "series"
        write_case(results, ok, v("passed"))
        if targets is None or any(bad in t for t in targets):
            broken = v("failed", "EFAULT") if side == "series" else v("passed")
            write_case(results, bad, broken, "**PREAD tail**\n| a | b |")
        if targets is None or any(feat in t for t in targets):
            write_case(results, feat, v("failed", "past-limit") if side == "series" else
                       v("skipped", reason="async=1: the build has no zfs_async_dio_enabled"))
        run = results / "20260101-000000-x"
        (run / "build").mkdir(parents=True, exist_ok=True)
        (run / "build" / "record-k.json").write_text(json.dumps({
            "kernel": {"profile": "debian-6.1", "release": "6.1.0-57-amd64"}, "key": "k",
            "source": {"describe": "zfs-2.4.99-1-gabc", "commit": "a" * 40, "series": []},
            "modules": {"zfs": {"srcversion": "ABC123"}}}))
        (run / "accel.json").write_text(json.dumps(
            {"name": "tcg", "scale": 6.0, "reason": "KVM unusable: qemu -accel kvm exited rc=-6 "
             "... kvm_buf_set_msrs: Assertion {x} failed"}))
        return 2, "", 1.0

    monkeypatch.setattr(gate, "run_cases", fake)
    g = run_gate("async-dio@39991b06f", "e" * 40, ["-k", "eof"], ["-n", "2"], reruns=2,
                 root=tmp_path / "g")
    assert [c[0] for c in calls] == ["base", "series", "rerun1-base", "rerun1-series",
                                     "rerun2-base", "rerun2-series"]
    assert calls[0][1] == ["-k", "eof", "--zfs-ref", "e" * 40]
    assert [t.rsplit("/", 1)[-1] for t in calls[2][2]] == ["t.py::test_broken"]   # base
    assert sorted(t.rsplit("::", 1)[-1] for t in calls[3][2]) == ["test_broken", "test_feature"]
    by = {c.nodeid: c for c in g.classes}
    assert by[ok].cls == "unchanged pass"
    assert by[bad].cls == "regression" and "2 of 2 reruns" in by[bad].why
    assert by[feat].cls == "regression" and "series feature" in by[feat].why
    files = write_reports(g)
    md = (tmp_path / "g" / "gate.md").read_text()
    assert md.splitlines()[0].endswith("**FAIL: 2 regression(s)** (exit 1)")
    assert "PREAD tail" in md and "commands.log" in md
    assert f"| `{ok}` | unchanged pass | pass | pass |" in md
    suite = ET.parse(tmp_path / "g" / "junit.xml").getroot()
    failed = [tc for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert sorted(tc.get("name") for tc in failed) == ["test_broken", "test_feature"]
    assert "PREAD tail" in next(tc for tc in failed if tc.get("name") == "test_broken"
                                ).find("system-out").text
    page = (tmp_path / "g" / "report.html").read_text()
    assert "test_broken" in page and "table-1.txt" in page and "<script" not in page
    # Builds as a table, not a record dump (#26): no JSON braces for a person to read.
    for text in (md, page):
        assert "ABC123" in text and "tcg x6.0 (KVM unusable)" in text
        assert '{"' not in text and "kvm_buf_set_msrs" not in text
    assert json.loads(files[0].read_text())["exit"] == 1


def test_gate_reports_carry_the_zts_tests_of_each_side(tmp_path: Path, monkeypatch):
    from suite.report import zts
    nodeid = "cases/test_zts.py::test_zts_tag[direct]"
    line = ("Test: /s/tests/zfs-tests/tests/functional/direct/dio_mmap (run as root) "
            "[00:09] [{}]\n")

    def fake(args, results, extra=(), timeout=0, targets=None, inner="1"):
        side = "base" if "--zfs-ref" in args else "series"
        write_case(results, nodeid, v("passed"))
        d = results / "20260101-000000-x" / "cases" / slug(nodeid)
        zts.save(zts.parse(line.format("PASS")), d / zts.RESULTS_FILE,
                 {"tag": "direct", "describe": side})
        (results / "20260101-000000-x" / "build").mkdir(parents=True, exist_ok=True)
        return 1, "", 1.0

    monkeypatch.setattr(gate, "run_cases", fake)
    g = run_gate("async-dio", "e" * 40, ["-m", "zts"], [], reruns=0, root=tmp_path / "g")
    write_reports(g)
    root = ET.parse(tmp_path / "g" / "junit.xml").getroot()
    names = sorted(s.get("name") for s in root.iter("testsuite"))
    assert names == ["gate async-dio", "zts-direct-base", "zts-direct-series"]
    md = (tmp_path / "g" / "gate.md").read_text()
    assert "ZTS `direct` on base" in md and "ZTS `direct` on series" in md


def test_gate_can_include_explore_with_one_seed_on_both_sides(tmp_path: Path, monkeypatch):
    import suite.cli as cli
    seen = {}

    def fake_gate(series, base, selection, extra, reruns, series_on_base=False, head_params=(),
                  label=""):
        seen["extra"] = extra
        raise SystemExit(0)
    monkeypatch.setattr(gate, "run_gate", fake_gate)
    with pytest.raises(SystemExit):
        cli.main(["gate", "--series", "async-dio", "-k", "eof or test_explore", "--explore", "10m",
                  "--explore-seed", "7"])
    extra = seen["extra"]
    assert extra[extra.index("-m") + 1] == "explore or not explore"
    assert extra[extra.index("--explore-budget") + 1] == "10m"
    assert extra[extra.index("--explore-seed") + 1] == "7"


def test_a_backport_gates_a_patch_folder_on_a_stable_tag(tmp_path: Path):
    from suite.cli import main
    from suite.campaign.gate import gate_sides
    assert gate_sides("async-dio", "efc74710b8", False) == {
        "base": ["--zfs-ref", "efc74710b8"], "series": ["--series", "async-dio"]}
    assert gate_sides(str(tmp_path), "zfs-2.3.9", True)["series"] == [
        "--series", str(tmp_path), "--zfs-ref", "zfs-2.3.9"]
    assert main(["gate", "--series", str(tmp_path)]) == 2     # a folder needs its base
    assert main(["gate", "--series", "no-such-series"]) == 2


def test_two_lockdep_reports_of_other_locks_are_two_signatures():
    def lockdep(locks: str) -> CaseVerdict:
        return CaseVerdict(N, "failed", [Symptom(
            "kernel:lockdep", f"[ 5.{len(locks)}] WARNING: possible circular locking dependency "
                              f"detected: {locks}")])
    known = lockdep("&ms->ms_lock -> &dn->dn_dbufs_mtx")
    assert classify(N, known, lockdep("&ms->ms_lock -> &dn->dn_dbufs_mtx")).cls == "still failing"
    assert classify(N, known, lockdep("&zp->z_rangelock -> &db->db_mtx")).cls == "regression"


def test_cases_neither_side_can_run_leave_the_verdict_to_the_others():
    """A fix gated on stock OpenZFS with cases of the async path in its selection:
    those skip on both sides (not applicable), the one that ran decides; a gate where
    nothing but those ran tested nothing."""
    skip = v("skipped", reason="async=1: the build has no zfs_async_dio_enabled")
    na = classify(N, skip, skip)
    fixed = classify(N, v("failed", "crash-size"), v("passed"))
    assert verdict([na, fixed]) == (0, "PASS")
    assert verdict([na])[0] == 2 and "nothing ran" in verdict([na])[1]


PR_18794_LIKE = """\
--- a/module/zfs/vdev.c
+++ b/module/zfs/vdev.c
@@ -171,6 +171,8 @@ uint_t zfs_vdev_direct_write_verify = 1;
+uint_t zfs_vdev_direct_read_verify = 1;
+static uint_t zfs_vdev_window = 64;
@@ -7094,6 +7105,9 @@ ZFS_MODULE_PARAM(zfs_vdev, zfs_vdev_, direct_write_verify, UINT, ZMOD_RW,
+ZFS_MODULE_PARAM(zfs_vdev, zfs_vdev_, direct_read_verify, UINT, ZMOD_RW,
+	"Direct I/O reads will perform checksum verification");
+ZFS_MODULE_PARAM(zfs_vdev, zfs_vdev_, window, UINT, ZMOD_RW, "a window");
 ZFS_MODULE_PARAM(zfs, zfs_, checksum_events_per_second, UINT, ZMOD_RW,
"""


def test_a_tunable_the_series_adds_gets_a_head_session_with_its_other_value(tmp_path):
    (tmp_path / "0001-x.patch").write_text(PR_18794_LIKE)
    found = gate.series_tunables(tmp_path)
    assert found == [("zfs_vdev_direct_read_verify", "1"), ("zfs_vdev_window", "64")]
    runs, left = gate.head_variants(found)
    assert runs == ["zfs_vdev_direct_read_verify=0"]
    assert left and "zfs_vdev_window" in left[0]
    # a tunable the base already had (a context line) is not the series'
    assert not any("checksum_events" in n for n, _ in found)


def test_the_gate_classes_each_tunable_head_against_the_base(tmp_path: Path, monkeypatch):
    heal = "cases/t.py::test_mirror_self_heals"
    calls = []

    def fake(args, results, extra=(), timeout=0, targets=None, inner="1"):
        calls.append((results.name, list(args)))
        off = "zfs_vdev_direct_read_verify=0" in args
        write_case(results, heal, v("failed", "wrong-bytes") if off else v("passed"))
        (results / "20260101-000000-x" / "build").mkdir(parents=True, exist_ok=True)
        return 1, "", 1.0

    monkeypatch.setattr(gate, "run_cases", fake)
    g = run_gate("pr", "e" * 40, ["-k", "heal"], [], reruns=1, root=tmp_path / "g",
                 series_on_base=True, head_params=["zfs_vdev_direct_read_verify=0"])
    assert [c[0] for c in calls] == ["base", "series", "series+zfs_vdev_direct_read_verify=0",
                                     "rerun1-base", "rerun1-series+zfs_vdev_direct_read_verify=0"]
    assert calls[2][1][-2:] == ["--zfs-param", "zfs_vdev_direct_read_verify=0"]
    by = {c.head: c for c in g.classes}
    assert by["series"].cls == "unchanged pass"
    bad = by["series+zfs_vdev_direct_read_verify=0"]
    assert bad.cls == "regression" and bad.label.endswith("[zfs_vdev_direct_read_verify=0]")
    assert verdict(g.classes)[0] == 1
    write_reports(g)
    md = (tmp_path / "g" / "gate.md").read_text()
    assert "[zfs_vdev_direct_read_verify=0]" in md
