"""Self-tests of the guest I/O engine (suite/ioengine), run on the host (no VM).

The engine runs as a subprocess, exactly as in the guest, against files in a
directory whose filesystem accepts O_DIRECT. Alignment expectations are not
hard-coded: they come from an os-level probe of that filesystem.
"""
from __future__ import annotations

import ast
import ctypes
import errno
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from suite.ioengine import content, counters, plan, queues, stress  # noqa: E402

ENGINE = REPO / "suite" / "ioengine"
IFACES = ("sync", "libaio", "io_uring")
ASYNC = ("libaio", "io_uring")
KSTAT_SAMPLE = """25 1 0x01 8 2176 5130224458 16340866048
name                            type data
direct_read_count               4    12
arc_read_count                  4    7
"""


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def _odirect_ok(d: Path) -> bool:
    probe = d / ".odirect-probe"
    try:
        probe.write_bytes(bytes(8192))
        fd = os.open(probe, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 8192)
        try:
            with memoryview(buf) as mv:
                return os.preadv(fd, [mv[:4096]], 0) == 4096
        finally:
            os.close(fd)
            buf.close()
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def ddir(tmp_path_factory: pytest.TempPathFactory):
    """A directory on a filesystem that supports O_DIRECT."""
    tmp = tmp_path_factory.mktemp("dio")
    if _odirect_ok(tmp):
        yield tmp
        return
    repo_tmp = Path(tempfile.mkdtemp(prefix=".dio-selftest-", dir=REPO))
    try:
        if not _odirect_ok(repo_tmp):
            pytest.skip(f"neither {tmp} nor {repo_tmp} accepts O_DIRECT")
        yield repo_tmp
    finally:
        shutil.rmtree(repo_tmp, ignore_errors=True)


def engine(*args: str, stdin: str | None = None, timeout: float = 60,
           ok: tuple[int, ...] = (0,)) -> tuple[int, list[dict[str, Any]]]:
    p = subprocess.run([sys.executable, "-m", "suite.ioengine", *args], input=stdin, cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode in ok, f"rc={p.returncode}\nstdout={p.stdout}\nstderr={p.stderr}"
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


_plan_no = 0


def run_plan(d: Path, files: list[dict], trials: list[dict], *extra: str) -> list[dict]:
    global _plan_no
    _plan_no += 1
    plan = d / f"plan{_plan_no}.json"
    plan.write_text(json.dumps({"files": files, "trials": trials}))
    _, lines = engine("run", str(plan), *extra)
    assert lines[-1]["event"] == "summary"
    assert lines[-1]["trials"] == len(trials)
    return lines


def trials_of(lines: list[dict]) -> dict[str, dict]:
    return {x["id"]: x for x in lines if x["event"] == "trial"}


def make_file(d: Path, name: str, size: int, seed: Any) -> str:
    path = str(d / name)
    _, (info,) = engine("write-file", path, "--size", str(size), "--seed", str(seed))
    assert info["actual_size"] == size
    return path


_IFACE_OK: dict[str, str | None] = {}


def need(iface: str) -> None:
    """Skip when this host refuses the interface (seccomp, io_uring_disabled, aio-max-nr)."""
    if iface not in _IFACE_OK:
        _IFACE_OK[iface] = None
        if iface in ASYNC:
            try:
                queues.make_queue(iface, 4).close()
            except OSError as e:
                _IFACE_OK[iface] = f"{iface} unavailable on this host: {e}"
    if _IFACE_OK[iface]:
        pytest.skip(_IFACE_OK[iface])


def need_all() -> None:
    for iface in ASYNC:
        need(iface)


def probe_misaligned(path: str, page_offset: int) -> int | None:
    """What the fs does with an O_DIRECT read from a buffer at page_offset:
    None = success, else the errno."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 3 * mmap.PAGESIZE)
    try:
        with memoryview(buf) as mv:
            os.preadv(fd, [mv[page_offset:page_offset + 4096]], 0)
        return None
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)
        buf.close()


# ---------------------------------------------------------------------------
# library-level
# ---------------------------------------------------------------------------

def test_engine_uses_standard_library_only():
    mods: set[str] = set()
    for f in ENGINE.glob("*.py"):
        tree = ast.parse(f.read_text())
        mods |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
        mods |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
    assert mods - {"__future__"} <= set(sys.stdlib_module_names), mods


def test_abi_layouts():
    assert ctypes.sizeof(queues.IoCb) == 64
    assert [queues.IoCb.aio_lio_opcode.offset, queues.IoCb.aio_fildes.offset, queues.IoCb.aio_buf.offset,
            queues.IoCb.aio_nbytes.offset, queues.IoCb.aio_offset.offset, queues.IoCb.aio_flags.offset,
            queues.IoCb.aio_resfd.offset] == [16, 20, 24, 32, 40, 56, 60]
    if sys.byteorder == "little":
        assert (queues.IoCb.aio_key.offset, queues.IoCb.aio_rw_flags.offset) == (8, 12)
    assert ctypes.sizeof(queues.IoEvent) == 32
    assert ctypes.sizeof(queues.IoUringParams) == 120
    assert queues.IoUringParams.sq_off.offset == 40 and queues.IoUringParams.cq_off.offset == 80
    assert queues._SQE.size == 64 and queues._CQE.size == 16


def test_pattern_depends_only_on_seed_and_offset():
    whole = content.pattern(7, 0, 20000)
    assert len(whole) == 20000
    for off, n in [(0, 1), (1, 4095), (4095, 2), (4096, 4096), (12345, 5000), (19999, 1)]:
        assert content.pattern(7, off, n) == whole[off:off + n]
        assert content.pattern(7, off, n, cache=False) == whole[off:off + n]
    assert content.pattern("7", 100, 50) == whole[100:150]
    assert content.pattern(8, 0, 4096) != whole[:4096]
    assert whole[:4096] != whole[4096:8192]
    assert content.pattern(7, 5, 0) == b""
    t0 = time.monotonic()
    assert len(content.pattern(1, 0, 32 << 20, cache=False)) == 32 << 20
    assert time.monotonic() - t0 < 3.0, "pattern too slow for tens of MiB"


def test_compare_reports_first_wrong_byte_and_unknown_ranges():
    exp = content.pattern(1, 1000, 3000)
    got = bytearray(exp)
    got[10] ^= 1
    got[2000:2100] = bytes(100)
    c = content.compare(bytes(got), exp, 1000)
    assert (c.first_wrong_byte, c.wrong_kind) == (1010, "other")
    assert c.wrong_bytes == sum(a != b for a, b in zip(got, exp))
    c = content.compare(bytes(got), exp, 1000, unknown=[(1000, 1011)])
    assert (c.first_wrong_byte, c.wrong_kind, c.unverified_bytes) == (3000, "zeros", 11)
    assert content.compare(exp, exp, 1000).wrong_bytes == 0


def test_file_model_overlays_and_holes():
    m = content.FileModel("x", 3, 10000)
    m.record_write(4096, 4096, "w")
    m.record_write(12000, 100, "e")           # extends: 10000..12000 is a hole
    assert m.size == 12100
    exp, unknown = m.expected(0, 12100)
    assert exp[:4096] == content.pattern(3, 0, 4096)
    assert exp[4096:8192] == content.pattern("w", 4096, 4096)
    assert exp[8192:10000] == content.pattern(3, 8192, 1808)
    assert exp[10000:12000] == bytes(2000)
    assert exp[12000:] == content.pattern("e", 12000, 100)
    assert unknown == []
    m.record_write(0, 100, None)
    m.record_write(50, 10, "k")
    assert m.expected(0, 200)[1] == [(0, 50), (60, 100)]


def test_parse_kstat_sample():
    vals = counters.parse_kstat(KSTAT_SAMPLE)
    assert vals == {"direct_read_count": 12, "arc_read_count": 7}


def test_counter_snapshots_and_deltas(tmp_path: Path):
    kstat = tmp_path / "iostats"
    single = tmp_path / "param"
    kstat.write_text(KSTAT_SAMPLE)
    single.write_text("100\n")
    specs = {"dr": {"path": str(kstat), "field": "direct_read_count"},
             "arc": {"path": str(kstat), "field": "arc_read_count"},
             "nofield": {"path": str(kstat), "field": "no_such_field"},
             "single": str(single),
             "missing": {"path": str(tmp_path / "nope"), "field": "x"}}
    before = counters.snapshot_counters(specs)
    kstat.write_text(KSTAT_SAMPLE.replace("12", "40"))
    single.write_text("97\n")
    deltas = counters.counter_deltas(before, counters.snapshot_counters(specs))
    assert deltas == {"dr": 28, "arc": 0, "nofield": None, "single": -3, "missing": None}


def test_param_manager_is_per_trial_and_restores(tmp_path: Path):
    (tmp_path / "a").write_text("0\n")
    (tmp_path / "b").write_text("5\n")
    pm = counters.ParamManager(str(tmp_path))
    applied, unavailable, errors = pm.apply({"a": 1, "ghost": 2})
    assert applied == {"a": 1} and unavailable == ["ghost"] and errors == {}
    assert (tmp_path / "a").read_text() == "1"
    pm.apply({"b": 9})                          # a goes back to its original
    assert (tmp_path / "a").read_text().strip() == "0"
    assert (tmp_path / "b").read_text() == "9"
    assert pm.restore_all() == {"a": 0, "b": 5}
    assert (tmp_path / "b").read_text().strip() == "5"


def test_plan_dataclasses_round_trip():
    req = plan.Request(id="t1", file="/f", segments=[plan.Segment(4096), plan.Segment(512, 512)],
                     interface="libaio", vectored=True, offset=8192, condition="c",
                     params={"zfs_dio_strict": 1},
                     counters={"dr": {"path": "/p", "field": "direct_read_count"}})
    pl = plan.Plan([plan.FileSpec("/f", 40000, 3)], [req])
    again = plan.Plan.from_dict(json.loads(pl.to_json()))
    assert again == pl
    assert req.total_len == 4608 and req.problems() == []
    assert plan.Request(id="x", file="/f", segments=[plan.Segment(1), plan.Segment(1)]).problems()
    assert plan.Request(id="x", file="/f", segments=[plan.Segment(1)], interface="aio").problems()
    assert [s.len for s in stress.split_segments(131072, 9)] == [12288] * 8 + [32768]


# ---------------------------------------------------------------------------
# engine subprocess: write-file and run
# ---------------------------------------------------------------------------

def test_write_file_exact_size_direct_body_buffered_tail(ddir: Path):
    path = str(ddir / "wf")
    _, (info,) = engine("write-file", path, "--size", "40000", "--seed", "11")
    assert info["o_direct"] is True and info["fallback"] is None
    assert (info["direct_bytes"], info["buffered_bytes"]) == (36864, 3136)
    assert info["fsync"] is True and info["fadvise"] == "dontneed"
    assert Path(path).read_bytes() == content.pattern(11, 0, 40000)


SHAPES = {"pread": (False, 1), "preadv1": (True, 1), "preadv2": (True, 2),
          "preadv8": (True, 8), "preadv9": (True, 9), "preadv16": (True, 16)}


@pytest.fixture(scope="module")
def shape_results(ddir: Path) -> dict[str, dict]:
    size = 512 << 10
    path = str(ddir / "shapes")
    trials = []
    for iface in IFACES:
        for name, (vectored, nsegs) in SHAPES.items():
            segs = [{"len": 4096 * (1 + i % 2), "page_offset": 0} for i in range(nsegs)]
            trials.append({"id": f"{iface}-{name}", "file": path, "interface": iface,
                           "op": "read", "vectored": vectored, "segments": segs,
                           "offset": 3 * 4096, "o_direct": True, "condition": name})
    lines = run_plan(ddir, [{"path": path, "size": size, "seed": "shapes", "create": True}],
                     trials)
    assert lines[0]["event"] == "write-file" and lines[0]["actual_size"] == size
    return trials_of(lines)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("iface", IFACES)
def test_read_shapes_return_correct_bytes(shape_results: dict, iface: str, shape: str):
    need(iface)
    r = shape_results[f"{iface}-{shape}"]
    vectored, nsegs = SHAPES[shape]
    assert (r["vectored"], r["nr_segs"]) == (vectored, nsegs)
    assert r["errno"] is None and r["stage"] is None, r
    assert r["res"] == r["expected_len"] == r["total_len"]
    assert r["wrong_bytes"] == 0 and r["first_wrong_byte"] is None
    assert r["overrun_bytes"] == 0 and r["correct"] is True
    assert r["latency_us"] > 0


def test_read_past_eof_returns_only_what_exists(ddir: Path):
    need_all()
    path = str(ddir / "eof")
    trials = []
    for iface in IFACES:
        trials.append({"id": f"{iface}-d", "file": path, "interface": iface,
                       "segments": [{"len": 8192, "page_offset": 0}], "offset": 36864})
        trials.append({"id": f"{iface}-v", "file": path, "interface": iface, "vectored": True,
                       "segments": [4096, 4096, 4096], "offset": 32768})
        trials.append({"id": f"{iface}-b", "file": path, "interface": iface, "o_direct": False,
                       "segments": [[4096, 100]], "offset": 39000})
        trials.append({"id": f"{iface}-z", "file": path, "interface": iface,
                       "segments": [4096], "offset": 40960})
    t = trials_of(run_plan(ddir, [{"path": path, "size": 40000, "seed": 5}], trials))
    for iface in IFACES:
        assert t[f"{iface}-d"]["res"] == t[f"{iface}-d"]["expected_len"] == 40000 - 36864
        assert t[f"{iface}-v"]["res"] == 40000 - 32768
        assert t[f"{iface}-b"]["res"] == 1000
        assert t[f"{iface}-z"]["res"] == t[f"{iface}-z"]["expected_len"] == 0
        assert all(t[f"{iface}-{k}"]["correct"] for k in "dvbz"), iface


@pytest.mark.parametrize("page_offset", [512, 1])
def test_misaligned_buffer_matches_what_the_fs_does(ddir: Path, page_offset: int):
    need_all()
    path = make_file(ddir, f"mis{page_offset}", 65536, 9)
    want = probe_misaligned(path, page_offset)
    trials = [{"id": f"{iface}-{v}", "file": path, "interface": iface, "vectored": v,
               "segments": [{"len": 4096, "page_offset": page_offset}], "offset": 0,
               "o_direct": True}
              for iface in IFACES for v in (False, True)]
    t = trials_of(run_plan(ddir, [{"path": path, "size": 65536, "seed": 9, "create": False}],
                           trials))
    for r in t.values():
        assert r["errno"] == want, (r, want)
        if want is None:
            assert r["correct"] and r["res"] == 4096
        else:
            assert r["res"] == -want and r["stage"] in ("syscall", "submit", "complete")
            assert r["correct"] is False
    if page_offset == 1:
        assert want == errno.EINVAL, "a 1-byte-misaligned O_DIRECT buffer should be refused"


def test_wrong_byte_detection_points_at_the_corrupted_offset(ddir: Path):
    need_all()
    path = make_file(ddir, "corrupt", 65536, 21)
    fd = os.open(path, os.O_RDWR)
    try:
        b = os.pread(fd, 1, 5000)
        os.pwrite(fd, bytes([b[0] ^ 0xFF]), 5000)
        os.fsync(fd)
    finally:
        os.close(fd)
    trials = [{"id": f"{iface}-{v}", "file": path, "interface": iface, "vectored": v,
               "segments": [4096, 4096] if v else [8192], "offset": 4096}
              for iface in IFACES for v in (False, True)]
    trials.append({"id": "clean", "file": path, "segments": [4096], "offset": 8192})
    t = trials_of(run_plan(ddir, [{"path": path, "size": 65536, "seed": 21, "create": False}],
                           trials))
    clean = t.pop("clean")
    assert clean["correct"] and clean["wrong_bytes"] == 0
    for r in t.values():
        assert r["res"] == 8192 and r["len_ok"] is True
        assert r["first_wrong_byte"] == 5000 and r["wrong_bytes"] == 1, r
        assert r["wrong_kind"] == "other" and r["correct"] is False


def test_writes_land_new_data_and_are_verified(ddir: Path):
    need_all()
    path = str(ddir / "writes")
    size = 64 << 10
    trials, expect = [], {}
    off = 0
    for iface in IFACES:
        for v in (False, True):
            segs = [4096, 4096] if v else [8192]
            tid = f"w-{iface}-{v}"
            trials.append({"id": tid, "file": path, "interface": iface, "op": "write",
                           "vectored": v, "segments": segs, "offset": off})
            expect[tid] = (off, f"41@{tid}")
            off += 8192
    trials.append({"id": "w-extend", "file": path, "interface": "libaio", "op": "write",
                   "segments": [4096], "offset": size + 8192, "write_seed": "ext"})
    trials += [{"id": f"r-{iface}", "file": path, "interface": iface, "vectored": True,
                "segments": [16384] * 6, "offset": 0} for iface in IFACES]
    t = trials_of(run_plan(ddir, [{"path": path, "size": size, "seed": 41}], trials))
    for tid, (o, seed) in expect.items():
        r = t[tid]
        assert r["res"] == 8192 and r["correct"], r
        assert r["verify"] == "readback-direct"
    assert t["w-extend"]["correct"]
    new_size = size + 8192 + 4096
    for iface in IFACES:
        r = t[f"r-{iface}"]
        assert r["expected_len"] == r["res"] == new_size and r["correct"], r
    data = Path(path).read_bytes()
    assert len(data) == new_size
    for o, seed in expect.values():
        assert data[o:o + 8192] == content.pattern(seed, o, 8192) != content.pattern(41, o, 8192)
    assert data[size:size + 8192] == bytes(8192)
    assert data[size + 8192:] == content.pattern("ext", size + 8192, 4096)


def test_params_unavailable_reported_and_restored(ddir: Path, tmp_path: Path):
    path = make_file(ddir, "params", 16384, 3)
    pdir = tmp_path / "parameters"
    pdir.mkdir()
    (pdir / "zfs_dio_strict").write_text("0\n")
    files = [{"path": path, "size": 16384, "seed": 3, "create": False}]
    trials = [{"id": "p1", "file": path, "segments": [4096], "condition": "strict",
               "params": {"zfs_dio_strict": 1, "zfs_not_in_this_build": 7},
               "counters": {"strict": {"path": str(pdir / "zfs_dio_strict")},
                            "gone": {"path": "/proc/spl/kstat/zfs/nopool/iostats",
                                     "field": "direct_read_count"}}},
              {"id": "p2", "file": path, "segments": [4096]}]
    lines = run_plan(ddir, files, trials, "--param-dir", str(pdir))
    t = trials_of(lines)
    assert t["p1"]["params_applied"] == {"zfs_dio_strict": 1}
    assert t["p1"]["params_unavailable"] == ["zfs_not_in_this_build"]
    assert t["p1"]["counters"] == {"strict": 0, "gone": None}
    assert t["p1"]["correct"] and t["p2"]["correct"]
    assert lines[-1]["params_restored"] == {"zfs_dio_strict": 0}
    assert (pdir / "zfs_dio_strict").read_text().strip() == "0"
    run_plan(ddir, files, trials[:1], "--param-dir", str(pdir), "--keep-params")
    assert (pdir / "zfs_dio_strict").read_text().strip() == "1"


def test_bad_trials_are_reported_not_fatal(ddir: Path):
    need("io_uring")
    path = make_file(ddir, "bad", 8192, 1)
    files = [{"path": path, "size": 8192, "seed": 1, "create": False}]
    trials = [{"id": "unknown-file", "file": str(ddir / "nope"), "segments": [4096]},
              {"id": "two-segs-not-vectored", "file": path, "segments": [4096, 4096]},
              {"id": "bad-iface", "file": path, "interface": "posix_aio", "segments": [4096]},
              {"id": "good", "file": path, "interface": "io_uring", "segments": [4096]}]
    lines = run_plan(ddir, files, trials)
    t = trials_of(lines)
    for tid in ("unknown-file", "two-segs-not-vectored", "bad-iface"):
        assert t[tid]["stage"] == "plan" and t[tid]["error"] and not t[tid]["correct"]
    assert t["good"]["correct"]
    assert lines[-1]["plan_errors"] == 3 and lines[-1]["correct"] == 1
    _, out = engine("run", "-", stdin="{not json", ok=(2,))
    assert out[0]["event"] == "error" and out[0]["stage"] == "plan"


def test_run_stops_after_a_trial_that_never_completed(ddir: Path):
    """A request the kernel never completed may hold locks or have corrupted
    state: later trials would test a damaged kernel, so they are reported as
    not run (stage plan, naming the hung trial), never silently skipped."""
    need_all()
    fifo = ddir / "fifo-run"
    os.mkfifo(fifo)
    path = make_file(ddir, "after-timeout", 8192, 2)
    files = [{"path": str(fifo), "size": 4096, "seed": 0, "create": False},
             {"path": path, "size": 8192, "seed": 2, "create": False}]
    trials = [{"id": "stuck", "file": str(fifo), "interface": "io_uring", "o_direct": False,
               "segments": [4096], "timeout_s": 0.3},
              {"id": "next-uring", "file": path, "interface": "io_uring", "segments": [4096]},
              {"id": "next-aio", "file": path, "interface": "libaio", "segments": [4096]}]
    lines = run_plan(ddir, files, trials)
    t = trials_of(lines)
    assert t["stuck"]["stage"] == "timeout" and t["stuck"]["res"] is None
    for later in ("next-uring", "next-aio"):
        assert t[later]["stage"] == "plan" and not t[later]["correct"]
        assert "trial stuck never completed" in t[later]["error"]
    assert lines[-1]["timeouts"] == 1 and lines[-1]["plan_errors"] == 2


# ---------------------------------------------------------------------------
# hold and flood
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("iface", ASYNC)
def test_hold_prints_submitted_then_completed(ddir: Path, iface: str):
    need(iface)
    path = make_file(ddir, f"hold-{iface}", 1 << 20, "h")
    _, lines = engine("hold", "--file", path, "--seed", "h", "--interface", iface,
                      "-k", "4", "--len", "65536", "--stride", "131072",
                      "--probe-inflight", "0", "--deadline-s", "20")
    assert [x["event"] for x in lines] == ["submitted", "probe", "completed"]
    sub, probe, done = lines
    assert sub["submitted"] == 4 and sub["pids"] == [sub["pid"]] and sub["t"] > 0
    assert probe["completed"] + probe["outstanding"] == 4
    assert done["all_correct"] is True and len(done["requests"]) == 4
    assert [r["offset"] for r in done["requests"]] == [0, 131072, 262144, 393216]
    assert all(r["res"] == 65536 and r["wrong_bytes"] == 0 for r in done["requests"])


def test_hold_timeout_exits_nonzero_with_outstanding(ddir: Path):
    need("io_uring")
    fifo = ddir / "fifo-hold"
    os.mkfifo(fifo)
    rc, lines = engine("hold", "--file", str(fifo), "--seed", "x", "--interface", "io_uring",
                       "-k", "3", "--len", "4096", "--probe-inflight", "50",
                       "--deadline-s", "0.5", ok=(plan.EXIT_TIMEOUT,))
    assert [x["event"] for x in lines] == ["submitted", "probe", "timeout"]
    assert lines[1]["outstanding"] == 3
    assert lines[2]["outstanding"] == 3


@pytest.mark.parametrize("iface", ASYNC)
def test_flood_two_submitters_all_correct(ddir: Path, tmp_path: Path, iface: str):
    need(iface)
    path = make_file(ddir, f"flood-{iface}", 4 << 20, "fl")
    counter = tmp_path / "pinned"
    counter.write_text("123\n")
    _, (out,) = engine("flood", "--file", path, "--seed", "fl", "--interface", iface,
                       "--submitters", "2", "--depth", "4", "--len", "65536",
                       "--requests", "200", "--nsegs", "2",
                       "--sample", f"pinned={counter}", "--sample", "gone=/nonexistent#x",
                       "--sample-ms", "10")
    assert out["event"] == "flood" and out["all_correct"] is True and out["hung"] == []
    assert len(out["submitters"]) == 2
    assert len({s["pid"] for s in out["submitters"]}) == 2
    for s in out["submitters"]:
        assert s["completed"] == s["correct"] == 200 and s["wrong"] == 0 and s["errors"] == {}
    assert out["samples"]["pinned"]["count"] >= 1
    assert out["samples"]["pinned"]["min"] == out["samples"]["pinned"]["max"] == 123
    assert out["samples"]["gone"]["count"] == 0


def test_vmstat_rows_and_field_difference(tmp_path):
    """Pinned pages in flight = nr_foll_pin_acquired - nr_foll_pin_released."""
    from suite.ioengine.counters import parse_kstat, read_counter
    vm = tmp_path / "vmstat"
    vm.write_text("nr_free_pages 1000\nnr_foll_pin_acquired 530\nnr_foll_pin_released 500\n")
    assert parse_kstat(vm.read_text())["nr_foll_pin_acquired"] == 530
    assert read_counter({"path": str(vm), "field": "nr_foll_pin_acquired-nr_foll_pin_released"}) == 30
    assert read_counter({"path": str(vm), "field": "nope-nr_free_pages"}) is None


def test_glob_counter_sums_taskq_kstats_created_on_demand(tmp_path: Path):
    """The async taskqs appear on first use: none yet counts 0, then their sum."""
    spec = {"glob": str(tmp_path / "zpl_async_*_tank.*"), "field": "tasks_dispatched"}
    before = counters.snapshot_counters({"t": spec})
    assert before == {"t": 0}
    for name, n in (("zpl_async_read_tank.0", 3), ("zpl_async_write_tank.0", 2),
                    ("zpl_async_read_other.0", 50)):
        (tmp_path / name).write_text(
            f"12 1 0x01 3 192 1 1\nname type data\ntasks_dispatched 4 {n}\n")
    assert counters.counter_deltas(before, counters.snapshot_counters({"t": spec})) == {"t": 5}


def test_a_trial_says_it_began_so_the_one_in_flight_can_be_named():
    from suite.casekit.engine import in_flight
    lines = [{"event": "begin", "trial": "0000", "condition": "sync"},
             {"event": "trial", "id": "0000", "condition": "sync"},
             {"event": "begin", "trial": "0001", "condition": "io_uring async=1"}]
    assert in_flight(lines)["trial"] == "0001"
    assert in_flight(lines[:2]) is None
    assert in_flight([]) is None
