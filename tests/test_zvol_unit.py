"""Self-tests of the zvol pieces that need no VM: kprobe hit counts as engine
counters, path attribution and the eligibility rule, page-cache trials flushed
inside the trial, a write whose buffer changes in flight, log-device pools.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from suite.casekit.dio import PAGE, Shape, cond
from suite.casekit.trials import served
from suite.casekit.zvol import ZVOL_PARAM, direct_eligible, expect_path, zconditions
from suite.guest.probes import Kprobes
from suite.guest.zfs import PoolSpec
from suite.ioengine.counters import read_counter
from suite.ioengine.plan import EXIT_FAILED
from test_dioengine import ddir, engine, make_file, run_plan, trials_of  # noqa: F401,I001

PROFILE = """\
  dmu_read_abd                                               12               0
  dmu_read_uio_dnode                                          3               1
"""


def test_kprobe_hit_count_is_a_counter(tmp_path: Path):
    p = tmp_path / "kprobe_profile"
    p.write_text(PROFILE)
    assert read_counter({"path": str(p), "kprobe": "dmu_read_abd"}) == 12
    assert read_counter({"path": str(p), "kprobe": "dmu_read_uio_dnode"}) == 3  # hits, not misses
    assert read_counter({"path": str(p), "kprobe": "dmu_write_abd"}) is None
    assert read_counter({"path": str(tmp_path / "gone"), "kprobe": "dmu_read_abd"}) is None


def test_probe_hits_attribute_the_path():
    assert served({"dio_calls": 1, "arc_calls": 0}).label == "DIO"
    assert served({"dio_calls": 0, "arc_calls": 2}).label == "ARC"
    assert served({"dio_calls": 1, "arc_calls": 1}).label == "DIO+ARC"
    assert not served({"dio_calls": None, "arc_calls": None}).known
    # the probe counts win over pool iostats when both are there
    assert served({"dio_calls": 0, "arc_calls": 1, "direct_read_count": 5}).label == "ARC"


@pytest.mark.parametrize("op,shape,vbs,want", [
    ("read", Shape("b", 0, total=PAGE), 131072, True),          # reads: pages only
    ("read", Shape("s", 0, total=PAGE, offset=512), 4096, False),
    ("read", Shape("p", 0, total=PAGE, page_offset=512), 4096, False),
    ("write", Shape("b", 0, total=131072), 131072, True),
    ("write", Shape("sub", 0, total=PAGE, offset=PAGE), 131072, False),
    ("write", Shape("plus", 0, total=131072 + PAGE), 131072, False),
    ("write", Shape("v", 4, seg_len=32768), 131072, True),
    ("write", Shape("s", 0, total=2 * PAGE, offset=PAGE), 4096, True),
])
def test_eligibility_rule(op, shape, vbs, want):
    assert direct_eligible(op, shape, vbs) is want


def test_buffered_io_reaches_the_zvol_as_whole_pages():
    sub = Shape("sub", 0, total=512, offset=512)
    assert direct_eligible("read", sub, 131072, buffered=True)
    assert direct_eligible("write", sub, 4096, buffered=True)        # dirties one whole block
    assert not direct_eligible("write", sub, 131072, buffered=True)


def _trial(dio: int, arc: int, correct: bool = True) -> dict:
    return {"res": 4096, "expected_len": 4096, "correct": correct, "stage": None,
            "counters": {"dio_calls": dio, "arc_calls": arc}}


def test_expect_path_names_the_wrong_path():
    on, off = zconditions()[0], zconditions()[-1]
    block = Shape("b", 0, total=4096)
    check = expect_path("write", block, 4096)
    assert check(on, _trial(1, 0)) is None
    assert check(on, _trial(0, 1)).kind == "served-by-ARC"
    assert check(on, _trial(1, 1)).kind == "dio-fallback"
    assert check(off, _trial(0, 1)) is None
    assert check(off, _trial(1, 0)).kind == "served-by-DIO"
    assert check(on, _trial(0, 0)).kind == "unproven"
    assert check(on, _trial(1, 0, correct=False)).kind == "wrong-bytes"
    buffered = cond("buffered dio=1", "sync", via="", buffered=True, **{ZVOL_PARAM: 1})
    assert check(buffered, _trial(0, 1)) is None            # writeback decides: bytes only


def test_a_request_over_one_bio_may_split_into_a_direct_block_and_an_arc_tail():
    on, off = zconditions()[0], zconditions()[-1]
    big = Shape("block+4k", 0, total=(1 << 20) + 4096)
    check = expect_path("write", big, 1 << 20)
    assert check(on, _trial(0, 1)) is None                  # whole: not eligible
    assert check(on, _trial(1, 1)) is None                  # split: 1 MiB bio direct
    assert check(on, _trial(1, 0)).kind == "served-by-DIO"  # all direct: never right
    assert check(off, _trial(1, 1)).kind == "served-by-DIO"  # dio=0: no bio goes direct
    small = Shape("b+512", 0, total=4096 + 512)             # one bio: no excuse
    assert expect_path("write", small, 4096)(on, _trial(1, 1)).kind == "served-by-DIO"


def test_page_cache_trials_are_flushed_inside_the_trial(ddir: Path):
    f = make_file(ddir, "buffered.bin", 8 * PAGE, "base")
    seg = [{"len": PAGE, "page_offset": 0}]
    lines = run_plan(ddir, [{"path": f, "size": 8 * PAGE, "seed": "base", "create": False}], [
        {"id": "w", "file": f, "op": "write", "interface": "sync", "segments": seg,
         "offset": PAGE, "o_direct": False, "flush": True},
        {"id": "r", "file": f, "op": "read", "interface": "sync", "segments": seg,
         "offset": PAGE, "o_direct": False, "flush": True},
    ])
    t = trials_of(lines)
    assert t["w"]["correct"] and t["w"]["res"] == PAGE
    assert t["r"]["correct"] and t["r"]["o_direct"] is False


def test_flip_write_reports_each_write_and_the_stable_result(ddir: Path):
    f = make_file(ddir, "flip.bin", 32 * PAGE, "base")
    _, (out,) = engine("flip-write", f, "--len", str(16 * PAGE), "--writes", "5")
    assert out["writes"] == 5 and len(out["results"]) == 5
    assert out["flips"] > 0
    assert out["errors"] == 0 and out["short"] == 0     # a host fs does not verify checksums
    assert out["readback_matches"] is True


def test_zvol_dev_says_when_no_device_answers():
    rc, (out,) = engine("zvol-dev", "nopool/novol", "--wait-s", "0", ok=(EXIT_FAILED,))
    assert out["dev"] is None


def test_log_devices_are_the_trailing_namespaces():
    devs = ["/dev/a", "/dev/b", "/dev/c"]
    assert PoolSpec(log=1).vdev_args(devs) == ["/dev/a", "/dev/b", "log", "/dev/c"]
    assert PoolSpec("mirror", log=1).vdev_args(devs) == ["mirror", "/dev/a", "/dev/b", "log",
                                                          "/dev/c"]
    with pytest.raises(Exception, match="log device"):
        PoolSpec(log=3).vdev_args(devs)


@dataclass
class _R:
    rc: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass
class FakeGuest:
    commands: list[str] = field(default_factory=list)

    def run(self, cmd: str, timeout: float = 0, check: bool = True) -> _R:
        self.commands.append(cmd)
        return _R(stdout=PROFILE if "kprobe_profile" in cmd else "")


def test_kprobes_are_armed_once_for_the_guest_and_never_disarmed():
    """Disarming patches kernel text and waits on every CPU: it wedged a TCG guest
    after a case (issue #27). Probes are armed once, without the sched_switch hook
    of record-cmd and without optimized (later re-patched) probes."""
    g = FakeGuest()
    probes = Kprobes(g)
    specs = probes.install("dmu_read_abd", "dmu_read_uio_dnode")
    assert len(g.commands) == 1
    arm = g.commands[0]
    assert arm.index("options/record-cmd") < arm.index("p:ozfs/dmu_read_abd zfs:dmu_read_abd")
    assert "kprobes-optimization" in arm
    assert "events/ozfs/dmu_read_uio_dnode/enable" in arm
    assert specs["dmu_read_abd"] == {"path": "/sys/kernel/tracing/kprobe_profile",
                                     "kprobe": "dmu_read_abd"}
    # The next case of the same guest: nothing to arm, nothing written.
    assert probes.install("dmu_read_abd", "dmu_read_uio_dnode") == specs
    assert len(g.commands) == 1
    # A new symbol is armed alone; the tracing options were set already.
    probes.install("dmu_read_abd", "dmu_write_abd")
    assert len(g.commands) == 2 and "dmu_write_abd" in g.commands[1]
    assert "dmu_read_abd" not in g.commands[1] and "record-cmd" not in g.commands[1]
    assert not any("-:" in c or "echo 0 > /sys/kernel/tracing/events" in c for c in g.commands)
    assert not hasattr(probes, "remove")
    assert Kprobes(g, symbols=["dmu_read_abd"]).hits() == {"dmu_read_abd": 12}


def test_udev_is_kept_off_the_zvols_and_settled_after_each_new_device():
    from suite.casekit.zvol import UDEV_RULE, quiet_udev, settle
    ran = []

    class G:
        def run(self, cmd, timeout=60, check=True):
            ran.append(cmd)
    quiet_udev(G())
    settle(G())
    assert 'KERNEL=="zd*", OPTIONS+="nowatch"' in ran[0] and UDEV_RULE in ran[0]
    assert "reload-rules" in ran[0] and "udevadm settle" in ran[1]


def test_block_requests_leave_out_what_a_stock_build_lacks():
    """Stock OpenZFS has no zvol_dio_enabled: a dio=0 row runs there without it
    (the engine would call the trial unproven for a parameter it could not set)."""
    from suite.casekit.zvol import Zvol, block_requests
    zv = Zvol("tank/v", "/dev/zd0", 4096, 3 * 4096)
    off = cond("dio=0", "libaio", via="", optional=(ZVOL_PARAM,), **{ZVOL_PARAM: 0})
    on = cond("dio=1", "libaio", via="", **{ZVOL_PARAM: 1})
    stock = block_requests(zv, "write", off, {}, "w", have={"zfs_dio_strict"})
    assert [r.offset for r in stock] == [0, 4096, 8192] and all(r.params == {} for r in stock)
    series = block_requests(zv, "write", off, {}, "w", have={ZVOL_PARAM})
    assert all(r.params == {ZVOL_PARAM: 0} for r in series)
    # a required parameter stays, so the engine reports the trial it could not arm
    assert block_requests(zv, "read", on, {}, "r", have=set())[0].params == {ZVOL_PARAM: 1}
    assert block_requests(zv, "read", off, {}, "r")[0].params == {ZVOL_PARAM: 0}
