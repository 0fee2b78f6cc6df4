"""Self-tests of the benchmark plumbing (no VM): fio JSON, /proc/stat and perf
report parsing, and the side-by-side tables with their ratios and charts."""
from __future__ import annotations

import json
from pathlib import Path

from suite.casekit.perf import (FioJob, busy_jiffies, cell_command, copy_share, parse_fio,
                                parse_perf_report)
from suite.report.perf import TCG_NOTE, PerfTable

FIO = "fio: some warning\n" + json.dumps({"jobs": [{
    "read": {"io_bytes": 2 << 30, "bw_bytes": 400 << 20, "iops": 400.0,
             "clat_ns": {"percentile": {"50.000000": 900000, "99.000000": 2500000}}},
    "write": {"io_bytes": 0, "bw_bytes": 0, "iops": 0.0}}]})

PERF = """\
    37.83%  [k] __memcpy
     3.62%  [k] read_tsc
     1.48%  [k] zfs_uiomove_bvec_rq
     1.00%  [k] copy_user_enhanced_fast_string
     0.50%  [.] fio_main
"""


def test_fio_json_after_warnings():
    f = parse_fio(FIO)
    assert f["bw_mib_s"] == 400 and f["iops"] == 400 and f["p99_lat_us"] == 2500
    assert f["bytes"] == 2 << 30


def test_p99_is_submission_to_completion_where_fio_gives_it():
    """A sync O_DIRECT read inside io_submit: clat ~0, the time is in slat."""
    d = json.loads(FIO.split("\n", 1)[1])
    d["jobs"][0]["read"]["clat_ns"]["percentile"]["99.000000"] = 175_000
    d["jobs"][0]["read"]["lat_ns"] = {"percentile": {"99.000000": 12_255_000}}
    assert parse_fio(json.dumps(d))["p99_lat_us"] == 12255
    assert "--lat_percentiles=1" in FioJob("read", "1m", 1, 1, "libaio").args("/dev/zd0")


def test_busy_jiffies_leaves_out_idle_and_iowait():
    busy, total = busy_jiffies("cpu  10 0 20 100 5 1 1 0 0 0\ncpu0 1 2 3 4\n")
    assert busy == 32 and total == 137


def test_copy_share_counts_only_copy_functions():
    syms = parse_perf_report(PERF)
    assert syms[0] == ("__memcpy", 37.83)
    assert copy_share(syms) == 40.31          # __memcpy + copy_user_* + zfs_uiomove_*
    # A build that inlines memcpy into OpenZFS's copy loop: that loop is the copy;
    # and the idle loop's samples are not the base the share is taken over.
    assert copy_share([("zfs_uiomove_bvec_impl", 6.79), ("fletcher_2_native", 7.2),
                       ("native_safe_halt", 35.8), ("abd_copy_to_buf_off_cb", 1.0)]) == \
        round(100 * 7.79 / 64.2, 2)
    assert copy_share([("pv_native_safe_halt", 100.0)]) == 0.0


def test_fio_job_command_line():
    args = FioJob("randread", "4k", 8, 4, "io_uring", 3, "32m").args("/dev/zd0")
    assert "--ioengine=io_uring" in args and "--numjobs=4" in args and "--direct=1" in args
    assert "--output-format=json" in args and "--time_based" in args


def _cell(side: str, bw: float, cpu: float) -> dict:
    return {"labels": {"side": side, "rw": "read", "bs": "1m", "iodepth": 32, "numjobs": 1,
                       "ioengine": "libaio"}, "bw_mib_s": bw, "iops": bw, "p99_lat_us": 10.0,
            "cpu_s_per_gib": cpu, "copy_share": 30.0 if side == "dio=0" else 2.0, "error": ""}


def test_the_cpu_window_is_fio_alone_not_perfs_start_up(tmp_path: Path):
    """The /proc/stat reads sit inside the profiled command, right around fio
    (perf's start-up cost minutes of CPU per cell under TCG and was counted)."""
    import subprocess
    fio = ["sh", "-c", "exit 7"]                  # stands in for fio
    prof = cell_command(fio, True)
    assert prof.startswith("unshare -m sh -c ") and " -B -N --no-bpf-event " in prof
    assert "mount -t tmpfs" in prof and "/lib/modules/$(uname -r)" in prof
    inner = prof.split(" -- ", 1)[1]
    assert inner.startswith("sh -c ") and "/tmp/ozfs-stat.0" in inner and "/tmp/ozfs-stat.1" in inner
    assert prof.index("/tmp/ozfs-stat.0") > prof.index("perf record")
    # The quoting survives two shells: the outer sh hands perf one window command.
    import shlex
    outer = shlex.split(prof)
    assert outer[:3] == ["unshare", "-m", "sh"] and outer[3] == "-c" and len(outer) == 5
    rec = shlex.split(outer[4].split("; ", 1)[1])
    assert rec[:3] == ["exec", "perf", "record"] and rec[-3:-1] == ["sh", "-c"]
    assert rec[-1].startswith("cat /proc/stat > /tmp/ozfs-stat.0; sh -c 'exit 7'")
    plain = cell_command(fio, False)
    assert "perf" not in plain
    # The plain window runs as written: both reads, fio between, fio's rc kept.
    run = plain.replace("/tmp/ozfs-", str(tmp_path) + "/")
    r = subprocess.run(["bash", "-c", run])
    assert r.returncode == 7
    assert (tmp_path / "stat.0").read_text().startswith("cpu ")
    assert (tmp_path / "stat.1").read_text().startswith("cpu ")


def test_the_profiled_cell_runs_fio_once_and_keeps_its_exit_code(tmp_path: Path):
    import os
    import shutil
    import subprocess
    import pytest
    if not shutil.which("perf") or not shutil.which("unshare") or os.geteuid() != 0:
        pytest.skip("needs root, perf and unshare (the guest has them: it runs the host's)")
    data = tmp_path / "perf.data"
    cmd = (cell_command(["sh", "-c", "exit 7"], True)
           .replace("/tmp/ozfs-perf.data", str(data))
           .replace("/tmp/ozfs-", str(tmp_path) + "/"))
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    if r.returncode != 7 and "perf_event_paranoid" in r.stderr + r.stdout:
        pytest.skip("perf may not record system-wide here")
    assert r.returncode == 7, r.stderr
    assert (tmp_path / "stat.0").exists() and (tmp_path / "stat.1").exists() and data.exists()


def test_table_puts_sides_together_with_their_ratio(tmp_path: Path):
    t = PerfTable("zvol", "tcg", ("dio=0", "dio=1"))
    t.add(_cell("dio=0", 100.0, 4.0))
    t.add(_cell("dio=1", 150.0, 2.0))
    md = t.markdown()
    row = next(ln for ln in md.splitlines() if ln.startswith("| read"))
    assert row.startswith("| read 1m iodepth=32 numjobs=1 libaio | 100 | 150 | 1.50 |")
    assert "| 4.00 | 2.00 | 0.50 |" in row
    assert TCG_NOTE in md
    files = t.write(tmp_path, "zvol")
    assert json.loads(files[0].read_text())["cells"][1]["bw_mib_s"] == 150.0
    assert any(f.suffix == ".png" and f.stat().st_size > 1000 for f in files)


def test_failed_cells_are_listed_not_hidden():
    t = PerfTable("x", "kvm", ("async=0", "async=1"))
    c = _cell("async=0", 1.0, 1.0)
    c["error"] = "fio rc=1: boom"
    t.add(c)
    md = t.markdown()
    assert "cell failed" in md and "boom" in md and TCG_NOTE not in md
