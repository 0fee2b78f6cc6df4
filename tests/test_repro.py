"""Self-tests of the reproducer a failed case leaves (no VM): the harness's own
commands are left out, the build's tools and the NVMe devices become the
guest's and the script's arguments, and the script, run here against a host
file, says REPRODUCED / NOT REPRODUCED from the symptoms the case recorded."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite.report.repro import case_commands, translate, write_reproducer
from suite.symptoms import CaseVerdict, Symptom
from test_dioengine import ddir, make_file  # noqa: F401,I001

B = "/root/.cache/ozfs-vmci/builds/f9dc/src"
LOG = f"""\
[2026-11-30 16:11:03.134] ozfs-gw0-1 $ insmod {B}/module/spl.ko
[2026-11-30 16:11:12.611] ozfs-gw0-1 $ echo 'ozfs-vmci: begin test_x' > /dev/kmsg
[2026-11-30 16:11:16.142] ozfs-gw0-1 $ LD_LIBRARY_PATH={B}/.libs {B}/.libs/zpool create -f -o ashift=12 tank /dev/nvme0n1 /dev/nvme1n1
[2026-11-30 16:11:17.746] ozfs-gw0-1 rc=0 1.54s  (...)
[2026-11-30 16:11:18.000] ozfs-gw0-1 $ mkdir -p /tmp/ozfs-engine
[2026-11-30 16:11:18.100] ozfs-gw0-1 $ PYTHONPATH=/work/main /usr/bin/python3 -m suite.ioengine run /tmp/ozfs-engine/p.plan.json
[2026-11-30 16:11:19.000] ozfs-gw0-1 background $ {B}/zinject -E 2 -T read tank
[2026-11-30 16:11:20.000] ozfs-gw0-1 $ # ozfs-vmci: end of the case; the harness's checks follow
[2026-11-30 16:11:21.000] ozfs-gw0-1 $ echo w > /proc/sysrq-trigger
"""


def test_only_the_case_s_own_commands_are_replayed():
    steps = case_commands(LOG)
    assert [bg for _, bg in steps] == [False, False, False, True]
    out = [translate(c) for c, _ in steps]
    assert out[0] == 'zpool create -f -o ashift=12 tank "$DEV0" "$DEV1"'
    assert out[1] is None                                   # the harness's mkdir
    assert out[2] == 'engine run "$HERE/p.plan.json"'
    assert out[3] == "zinject -E 2 -T read tank"
    assert not any("sysrq" in c for c, _ in steps)          # after the end marker


def test_the_resident_engine_is_the_harness_s_and_its_client_is_the_engine():
    log = LOG.replace(
        "$ PYTHONPATH=/work/main /usr/bin/python3 -m suite.ioengine run",
        "background $ PYTHONPATH=/work/main /usr/bin/python3 -m suite.ioengine serve --dir "
        "/tmp/ozfs-engine/srv </dev/null\n[2026-11-30 16:11:18.050] ozfs-gw0-1 $ PYTHONPATH=/work/main "
        "bash /work/main/suite/ioengine/client.sh /tmp/ozfs-engine/srv /usr/bin/python3 run")
    steps = case_commands(log)
    out = [translate(c) for c, _ in steps]
    assert out[1] is None and out[2] is None                # mkdir, the resident engine
    assert out[3] == 'engine run "$HERE/p.plan.json"'


def _case(tmp: Path, path: str, segment: dict, symptom: Symptom) -> Path:
    case = tmp / "case"
    (case / "engine").mkdir(parents=True)
    plan = {"files": [{"path": path, "size": 16384, "seed": "s", "create": False}],
            "trials": [{"id": "0000", "file": path, "interface": "sync", "op": "read",
                        "segments": [segment], "offset": 0, "o_direct": True,
                        "condition": "sync"}]}
    (case / "engine" / "p.plan.json").write_text(json.dumps(plan))
    log = "\n".join(ln for ln in LOG.splitlines() if "zpool" not in ln and "zinject" not in ln)
    (case / "commands.log").write_text(log + "\n")
    v = CaseVerdict("cases/t.py::test_x", "failed", [symptom], "boom")
    sh = write_reproducer(case, v.nodeid, v)
    assert sh is not None and sh.exists()
    return sh


def run(sh: Path, tools: bool = True) -> subprocess.CompletedProcess:
    """Run the script here; ``tools``: stand-in zpool/zfs on PATH (a guest with ZFS)."""
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    if tools:
        bin_ = sh.parent / "fakebin"
        bin_.mkdir(exist_ok=True)
        for t in ("zpool", "zfs"):
            (bin_ / t).write_text("#!/bin/sh\nexit 0\n")
            (bin_ / t).chmod(0o755)
        path = f"{bin_}:{path}"
    return subprocess.run(["bash", str(sh)], capture_output=True, text=True, timeout=120,
                          env={"PATH": path})


def test_reproducer_says_not_reproduced_when_the_bytes_are_right(ddir: Path, tmp_path: Path):
    f = make_file(ddir, "ok.bin", 16384, "s")
    sh = _case(tmp_path, f, {"len": 4096, "page_offset": 0},
               Symptom("wrong-bytes", "trial 0000: 4096 wrong", "sync"))
    text = sh.read_text()
    assert "/work/main" not in text and "ozfs-vmci/builds" not in text
    r = run(sh)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "NOT REPRODUCED" in r.stdout


def test_reproducer_says_reproduced_when_the_symptom_comes_back(ddir: Path, tmp_path: Path):
    # The file holds other bytes than the plan's generator: every read is wrong,
    # as the recorded failure was.
    f = make_file(ddir, "other.bin", 16384, "not-s")
    sh = _case(tmp_path, f, {"len": 4096, "page_offset": 0},
               Symptom("wrong-bytes", "trial 0000: 4096 wrong, first at 0", "sync"))
    r = run(sh)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REPRODUCED (1 of 1" in r.stdout and "SAME" in r.stdout


def test_reproducer_without_zfs_tools_says_setup_failed(ddir: Path, tmp_path: Path):
    f = make_file(ddir, "nz.bin", 16384, "s")
    sh = _case(tmp_path, f, {"len": 4096, "page_offset": 0},
               Symptom("wrong-bytes", "trial 0000: 4096 wrong", "sync"))
    r = run(sh, tools=False)
    assert r.returncode == 2 and "not on PATH" in r.stdout


def test_a_failed_pool_setup_is_a_setup_failure():
    from suite.report.repro import script
    v = CaseVerdict("cases/t.py::test_x", "failed", [], "boom")
    text = script(v.nodeid, v, case_commands(LOG), 2, False)
    assert "must 'zpool create -f -o ashift=12 tank \"$DEV0\" \"$DEV1\"'" in text
    assert "step 'engine run" in text


def test_a_pool_an_earlier_case_made_is_created_by_the_reproducer():
    log = ("[t] g $ echo 'ozfs-vmci: begin test_y' > /dev/kmsg\n"
           "[t] g $ # ozfs-vmci: setup: zpool destroy -f tank ; zpool create -f -o ashift=12 "
           "tank /dev/nvme0n1 /dev/nvme1n1\n"
           "[t] g $ zfs create tank/case\n"
           "[t] g $ # ozfs-vmci: end of the case; the harness's checks follow\n")
    steps = [translate(c) for c, _ in case_commands(log)]
    assert steps == ["zpool destroy -f tank", 'zpool create -f -o ashift=12 tank "$DEV0" "$DEV1"',
                     "zfs create tank/case"]


def test_an_explore_reproducer_runs_only_the_confirmed_minimal_sequence():
    from suite.report.repro import only_the_finding
    eng = "PYTHONPATH=/x /usr/bin/python3 -m suite.ioengine explore-run /tmp/ozfs-engine/"
    steps = [("zfs set recordsize=16K tank/case", False),
             (eng + "explore-1-0001-s0.seq.json --file /t/a.bin", False),
             ("echo 1 > /sys/module/zfs/parameters/zfs_async_dio_enabled", False),
             (eng + "explore-2-0002-s1.seq.json --file /t/b.bin", False),
             (eng + "explore-2-0003-shrink.seq.json --file /t/c.bin", False),
             (eng + "explore-2-0004-confirm.seq.json --file /t/d.bin", False)]
    kept = [c for c, _ in only_the_finding(steps)]
    assert kept == [steps[0][0], steps[2][0], steps[5][0]]
    assert only_the_finding(steps[:4]) == steps[:4]      # nothing confirmed: all of it


@pytest.mark.parametrize("kind,expect", [("paths-disagree", 1), ("wrong-bytes", 0)])
def test_a_corpus_sequence_s_failure_is_judged_by_its_explore_result(tmp_path: Path, kind: str,
                                                                     expect: int):
    """A corpus case's symptom reads "NAME.json: failed at op N: ..." (not "explore
    ..."): its replay is judged by the sequence's own result, not by trials it has none of."""
    from suite.report.repro import JUDGE
    rec = {"symptoms": [{"kind": kind, "detail": "truncate-after-clone.json: failed at op 6: "
                         f"{kind}: verify of 8192 bytes", "row": ""}]}
    (tmp_path / "expected.json").write_text(json.dumps(rec))
    out = tmp_path / "out"
    out.mkdir()
    (out / "dmesg.txt").write_text("")
    (out / "corpus.jsonl").write_text(json.dumps({"event": "explore-done", "ok": False,
                                                  "kind": "paths-disagree"}) + "\n")
    r = subprocess.run([sys.executable, "-c", JUDGE], capture_output=True, text=True,
                       env={"HERE": str(tmp_path), "OUT": str(out)}, timeout=60)
    assert r.returncode == expect, r.stdout + r.stderr
    assert ("SAME" in r.stdout) == bool(expect)


def test_a_kernel_report_ends_the_step_and_the_wait(tmp_path: Path):
    """A panicked kernel leaves the step's process stuck for good: the reproducer stops
    waiting at the report (not at STEP_TIMEOUT), skips the steps after it, and says
    REPRODUCED by the kernel's lines."""
    import time
    from suite.report.repro import script
    v = CaseVerdict("cases/t.py::test_panic", "failed",
                    [Symptom("kernel:spl_panic", "VERIFY0(len) failed", "")], "boom")
    steps = [("touch $OUT/go; sleep 300", False), ("touch $OUT/second-step-ran", False)]
    sh = tmp_path / "repro.sh"
    sh.write_text(script(v.nodeid, v, steps, 1, False))
    (tmp_path / "expected.json").write_text(json.dumps(
        {"symptoms": [s.to_dict() for s in v.symptoms], "devices": 1}))
    bins = tmp_path / "bin"
    bins.mkdir()
    for t, body in (("zpool", "exit 0"), ("zfs", "exit 0"),
                    ("dmesg", 'for d in /tmp/ozfs-repro.*; do [ -e "$d/go" ] && '
                              'echo "VERIFY0(len) failed (-131072)" && echo "PANIC at zfs_uio.c"; '
                              'done; exit 0')):
        (bins / t).write_text(f"#!/bin/sh\n{body}\n")
        (bins / t).chmod(0o755)
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(sh)], capture_output=True, text=True, timeout=120,
                       env={"PATH": f"{bins}:{Path(sys.executable).parent}:/usr/bin:/bin",
                            "STEP_TIMEOUT": "100"})
    assert time.monotonic() - t0 < 60, "waited for the stuck step"
    assert "the kernel reported a failure during this step" in r.stdout
    assert "skipped: the kernel reported a failure" in r.stdout
    assert r.returncode == 1 and "REPRODUCED" in r.stdout, r.stdout + r.stderr


def test_a_guest_that_died_under_a_kernel_failure_counts_as_reproduced(tmp_path: Path):
    from suite.campaign.reproduce import died
    exp = tmp_path / "expected.json"
    exp.write_text(json.dumps({"symptoms": [{"kind": "kernel:spl_panic"}, {"kind": "no-result"}]}))
    vm = tmp_path / "run" / "vms" / "repro-1"
    vm.mkdir(parents=True)
    (vm / "console.log").write_text("[ 47.1] VERIFY0(len) failed (-1048576)\n"
                                    "[ 47.2] PANIC at zfs_uio.c:230:zfs_uio_pin_user_pages()\n")
    assert died(exp, tmp_path / "run", "guest stopped answering") == 1
    (vm / "console.log").write_text("[ 47.1] nothing the kernel said\n")
    assert died(exp, tmp_path / "run", "guest stopped answering") == 2
    exp.write_text(json.dumps({"symptoms": [{"kind": "wrong-bytes"}]}))
    (vm / "console.log").write_text("[ 1.0] BUG: unable to handle page fault\n")
    assert died(exp, tmp_path / "run", "x") == 2       # not the failure it recorded


def test_tasks_the_engine_saw_stuck_are_the_recorded_hang(tmp_path: Path):
    """remap-cross reports its own tasks left in D state and returns: the step did not
    overrun, yet the hang is there."""
    from suite.report.repro import JUDGE
    rec = {"symptoms": [{"kind": "hang", "detail": "ficlonerange A->B beside B->A"},
                        {"kind": "D-state", "detail": "1568 (python3)"}]}
    (tmp_path / "expected.json").write_text(json.dumps(rec))
    out = tmp_path / "out"
    out.mkdir()
    (out / "dmesg.txt").write_text("")
    line = {"event": "remap-cross", "stuck": {"548": {"state": "D", "wchan": "zpl_clone"}}}
    (out / "results.jsonl").write_text(json.dumps(line) + "\n")
    r = subprocess.run([sys.executable, "-c", JUDGE], capture_output=True, text=True,
                       env={"HERE": str(tmp_path), "OUT": str(out)}, timeout=60)
    assert r.returncode == 1 and "REPRODUCED (2 of 2" in r.stdout, r.stdout + r.stderr
    (out / "results.jsonl").write_text(json.dumps({"event": "remap-cross", "stuck": {}}) + "\n")
    r = subprocess.run([sys.executable, "-c", JUDGE], capture_output=True, text=True,
                       env={"HERE": str(tmp_path), "OUT": str(out)}, timeout=60)
    assert r.returncode == 0
