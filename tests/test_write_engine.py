"""Self-tests of the write side of the guest I/O engine and of the host helpers
that judge writes (suite/ioengine/barriers.py, suite/casekit/writes.py). No VM:
the engine runs as a subprocess against a host filesystem that accepts O_DIRECT.
"""
from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from suite.casekit.dio import Condition
from suite.casekit.writes import Inflight, expect_short, landed
from suite.ioengine.content import pattern
from suite.ioengine.plan import FileSpec, Plan, Request, Segment
from test_dioengine import ddir, engine, make_file, need, run_plan, trials_of  # noqa: F401,I001

REC = 4096


def test_inflight_reports_barrier_between_writes_and_block_owners(ddir: Path):
    need("libaio")
    f = make_file(ddir, "inflight.bin", 4 * REC, "base")
    _, ev = engine("inflight", "--write", f"{f}:0:{2 * REC}:a", "--write", f"{f}:{2 * REC}:{REC}:b",
                   "--late", f"{f}:0:{REC}:c", "--late-after-ms", "50", "--barrier", "fsync",
                   "--base-seed", "base")
    names = [e["event"] for e in ev]
    assert names[0] == "submitted" and names[-1] == "done"
    assert names.index("probe") < names.index("barrier-start") < names.index("late-submitted")
    assert "barrier-end" in names
    # settled (the host may release what held the writes) comes before the read-back
    assert names.index("barrier-end") < names.index("settled") == len(names) - 2
    done = ev[-1]
    assert [w["res"] for w in done["writes"] + done["late"]] == [2 * REC, REC, REC]
    owners = {(c["offset"], c["len"]): c["blocks"] for c in done["contents"]}
    # c (late) overwrote a's first block; b is whole; the untouched block is the base
    assert owners[(0, 2 * REC)] == ["c", "a"]
    assert owners[(2 * REC, REC)] == ["b"]
    _, (o,) = engine("owners", "--file", f, "--range", f"0:{4 * REC}", "--seed", "a",
                     "--seed", "c", "--base-seed", "base")
    assert o["blocks"][1] == "a" and o["blocks"][3] == "base"
    assert o["blocks"][2] == "?"          # b's bytes: not among the seeds asked about


def test_inflight_reads_back_only_after_the_go_ahead(ddir: Path):
    need("libaio")
    f = make_file(ddir, "go.bin", 2 * REC, "base")
    go = ddir / "go-ahead"
    t0 = time.monotonic()
    _, ev = engine("inflight", "--write", f"{f}:0:{REC}:a", "--read-back-after", str(go),
                   "--read-back-wait-s", "2", "--base-seed", "base")
    assert time.monotonic() - t0 >= 2       # waited its 2 s for a file that never came
    assert [e["event"] for e in ev][-2:] == ["settled", "done"]
    assert ev[-1]["contents"][0]["blocks"] == ["a"]     # then read back all the same
    go.touch()
    t0 = time.monotonic()
    engine("inflight", "--write", f"{f}:0:{REC}:b", "--read-back-after", str(go),
           "--read-back-wait-s", "30", "--base-seed", "base")
    assert time.monotonic() - t0 < 15       # there already: no wait


def test_append_lands_records_in_order_and_rlimit_cuts_the_second(ddir: Path):
    need("libaio")
    f = make_file(ddir, "append.bin", 2 * REC, "p")
    _, (done,) = engine("append", "--file", f, "--seed", "r", "-k", "3", "--len", str(REC))
    assert done["size_after"] == 5 * REC
    assert [x["record"] for x in done["layout"]] == [0, 1, 2]
    g = make_file(ddir, "append-limit.bin", 2 * REC, "p")
    _, (lim,) = engine("append", "--file", g, "--seed", "r", "-k", "2", "--len", str(REC),
                       "--interface", "sync", "--rlimit-fsize", str(3 * REC))
    assert [r["res"] for r in lim["records"]] == [REC, -errno.EFBIG]
    assert lim["size_after"] == 3 * REC and [x["record"] for x in lim["layout"]] == [0]


@pytest.mark.parametrize("iface", ["sync", "libaio", "io_uring"])
def test_write_cut_by_rlimit_reports_short_count_and_size(ddir: Path, iface: str):
    need(iface)
    path = str(ddir / f"rlimit-{iface}.bin")
    files = [{"path": path, "size": 0, "seed": "s"}]
    trials = [{"id": "cut", "file": path, "op": "write", "interface": iface, "vectored": True,
               "segments": [4 * REC] * 4, "rlimit_fsize": 6 * REC}]
    t = trials_of(run_plan(ddir, files, trials))["cut"]
    assert t["res"] == 6 * REC and t["size_before"] == 0 and t["size_after"] == 6 * REC
    assert t["beyond_bytes"] == 0 and t["wrong_bytes"] == 0 and not t["correct"]
    assert expect_short(Condition("x"), t) is None
    # after the trial the limit is gone again: an uncut write of the same shape is whole
    t2 = trials_of(run_plan(ddir, files, [dict(trials[0], id="uncut", rlimit_fsize=0)]))["uncut"]
    assert t2["res"] == 16 * REC and t2["correct"]


def test_expect_short_names_what_is_wrong():
    c = Condition("libaio async=1")
    base = {"stage": None, "total_len": 1 << 20, "offset": 0, "size_before": 0}
    assert expect_short(c, dict(base, res=-122, errno=122, errname="EDQUOT", stage="complete",
                                size_after=131072)).kind == "error:EDQUOT"
    assert expect_short(c, dict(base, res=1 << 20, size_after=1 << 20)).kind == "no-short"
    assert expect_short(c, dict(base, res=4096, size_after=8192)).kind == "past-end"
    assert expect_short(c, dict(base, res=4096, size_after=4096, wrong_bytes=3)).kind == \
        "wrong-bytes"
    assert expect_short(c, dict(base, res=None, stage="timeout")).kind == "no-result"
    assert expect_short(c, dict(base, res=4096, size_after=4096)) is None


def test_landed_keeps_known_bytes_and_marks_unknown_ranges():
    p = Plan([FileSpec("/f", 0, "s")],
             [Request(id=i, file="/f", segments=[Segment(REC)], op="write", offset=o)
              for i, o in (("a", 0), ("b", REC), ("c", 2 * REC), ("d", 3 * REC))])
    results = [{"id": "a", "res": REC}, {"id": "b", "res": -22, "errno": 22, "errname": "EINVAL"},
               {"id": "c", "res": None, "stage": "timeout"},
               {"id": "d", "res": -5, "errno": 5, "errname": "EIO"}]
    assert landed(p, results) == [(0, REC, "s@a"), (2 * REC, REC, None), (3 * REC, REC, None)]


def test_file_overlays_are_checked_on_an_existing_file(ddir: Path):
    path = make_file(ddir, "overlay.bin", 4 * REC, "base")
    fd = open(path, "r+b")
    fd.seek(REC)
    fd.write(pattern("new", REC, REC))
    fd.close()
    read = {"id": "r", "file": path, "interface": "sync", "segments": [4 * REC]}
    good = {"path": path, "size": 4 * REC, "seed": "base", "create": False,
            "overlays": [[REC, REC, "new"]]}
    assert trials_of(run_plan(ddir, [good], [read]))["r"]["correct"]
    stale = dict(good, overlays=[])
    t = trials_of(run_plan(ddir, [stale], [read]))["r"]
    assert not t["correct"] and t["first_wrong_byte"] == REC and t["wrong_bytes"] > 0


def _events(*evs: dict) -> Inflight:
    return Inflight(list(evs))


def test_inflight_early_flags_only_writes_the_barrier_did_not_wait_for():
    w1 = {"tag": 1, "offset": 0, "len": REC, "t_done": 30.0}
    w2 = {"tag": 2, "offset": REC, "len": REC, "t_done": 1.1}
    done = {"event": "done", "writes": [w1, w2], "barrier_end": 1.0}
    early = _events({"event": "probe", "outstanding": [1, 2]}, done).early(0.5)
    assert len(early) == 1 and early[0].startswith("write 1 ")
    waited = dict(done, barrier_end=30.05)
    assert _events(waited).early(0.5) == []
    never = dict(done, writes=[dict(w1, t_done=None)])
    assert "never" in _events(never).early(0.5)[0]
    assert _events({"event": "timeout", "writes": [w1]}).early(0.5) == []


def test_slub_reports_are_kernel_findings():
    from suite.vm.console import RULES
    line = "BUG kmalloc-2k (Tainted: G           O      ): Right Redzone overwritten"
    assert next(r.kind for r in RULES if r.regex.search(line)) == "slub"


def test_waited_past_measures_from_the_last_write_before_the_barrier():
    w1 = {"tag": 1, "offset": 0, "len": REC, "t_done": 10.0}
    ok = _events({"event": "done", "writes": [w1], "barrier_end": 10.2})
    assert ok.waited_past(1.0) == ""
    late = _events({"event": "done", "writes": [w1], "barrier_end": 40.0})
    assert "30.0 s after the last write" in late.waited_past(1.0)


def test_late_writes_are_spaced_and_sample_stops_on_its_file(ddir: Path):
    need("libaio")
    f = make_file(ddir, "spaced.bin", 4 * REC, "base")
    _, ev = engine("inflight", "--write", f"{f}:0:{REC}:a", "--late", f"{f}:{REC}:{REC}:b",
                   "--late", f"{f}:{2 * REC}:{REC}:c", "--late-after-ms", "0",
                   "--late-every-ms", "300", "--barrier", "none")
    subs = [e["t"] for e in ev if e["event"] == "late-submitted"]
    assert len(subs) == 2 and subs[1] - subs[0] >= 0.25
    stop = ddir / "stop"
    stop.write_text("")
    _, out = engine("sample", "--sample", f"x={ddir}/counter", "--stop-file", str(stop))
    assert out[-1]["event"] == "sample" and out[-1]["samples"]["x"]["count"] == 0


def test_sample_sums_a_glob_of_kstats(ddir: Path):
    for i, active in enumerate((2, 3)):
        (ddir / f"zpl_async_read_tank.{i}").write_text(
            "25 1 0x01 8 2176 5130224458 16340866048\nname type data\n"
            f"threads_active 4 {active}\ntasks_pending 4 0\n")
    stop = ddir / "stop2"
    stop.write_text("")
    _, out = engine("sample", "--sample", f"a={ddir}/zpl_async_*_tank.*#threads_active",
                    "--stop-file", str(stop))
    assert out[-1]["samples"]["a"]["max"] == 5


def test_direct_write_is_judged_by_its_records_not_by_pool_wide_arc_noise():
    from suite.casekit.writes import expect_direct_write
    c = Condition("io_uring async=0")
    ok = {"res": 8192, "expected_len": 8192, "total_len": 8192, "correct": True,
          "counters": {"direct_write_count": 2, "arc_write_count": 6}}
    assert expect_direct_write(c, ok) is None       # 6 ARC writes of the sync thread
    part = dict(ok, counters={"direct_write_count": 1, "arc_write_count": 1})
    assert expect_direct_write(c, part).kind == "served-by-ARC"
    assert expect_direct_write(c, dict(ok, counters={})).kind == "unproven"


def test_a_quota_may_let_a_write_through_whole_but_never_fail_it_after_progress():
    from suite.casekit.writes import expect_short_or_whole
    c = Condition("sync write")
    whole = {"res": 1 << 20, "total_len": 1 << 20, "expected_len": 1 << 20, "correct": True,
             "size_after": 1 << 20, "offset": 0, "size_before": 0}
    assert expect_short_or_whole(c, whole) is None
    err = dict(whole, res=-122, errno=122, errname="EDQUOT", stage="complete", correct=False,
               size_after=131072)
    assert expect_short_or_whole(c, err).kind == "error:EDQUOT"
    cut = dict(whole, res=131072, size_after=131072, correct=False)
    assert expect_short_or_whole(c, cut) is None
