"""Async reads are not stuck behind held async writes (openzfs/zfs#18902).

Until 3d0b7bc20 reads and writes shared one ``zpl_async_dio_<pool>`` taskq of
``zfs_async_dio_task_depth`` threads: writes blocked on slow I/O, a range lock
or tx assignment held every worker, and an async read of an unrelated file
waited for them. 3d0b7bc20 gave reads and writes a taskq each.

The module is loaded with ``zfs_async_dio_task_depth=2`` (a load-time
parameter), four async writes to one file wait on its range lock, held by a
synchronous O_DIRECT read that a ``zinject -E`` read delay keeps in flight (the
writes proved outstanding), and one async O_DIRECT read of another file is
issued. Property: the read completes promptly (well within the delay), while the
writes are still held.
"""
from __future__ import annotations

import time

import pytest

from suite.casekit.dio import ASYNC_PARAM
from suite.casekit.engine import parse_lines
from suite.casekit.faults import NotArmed, hold
from suite.casekit.writes import WRITE_PROPS

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.zinject,
              pytest.mark.pool(props=WRITE_PROPS)]

DEPTH_PARAM = "zfs_async_dio_task_depth"
W = 4096
RSIZE = 1 << 20


def test_async_read_not_blocked_by_held_writes(zfs_guest, pool, engine, accel, guests, case_dir,
                                               symptom):
    z = zfs_guest
    if not z.has_param(DEPTH_PARAM):
        pytest.skip(f"the build has no {DEPTH_PARAM}")
    depth = 2
    wfile, rfile = pool.path("w.bin"), pool.path("r.bin")
    engine.oneshot("write-file", wfile, "--size", str(64 * 1024), "--seed", "base")
    engine.oneshot("write-file", rfile, "--size", str(RSIZE), "--seed", "r")
    z.guest.run("sync", timeout=accel.deadline(30))
    name = pool.pool.name
    z.zpool("export", name, timeout=accel.deadline(60))
    guests.current.fit = False          # a non-default load-time parameter: no later case inherits it
    z.reload({DEPTH_PARAM: str(depth)})
    z.zpool("import", "-d", "/dev", name, timeout=accel.deadline(120))
    z.set_param(ASYNC_PARAM, 1)
    delay = accel.hold(5)
    # The writes must hold their workers: a zio delay does not (the task waits
    # elsewhere), a range lock does. A synchronous O_DIRECT read of the write
    # file, itself delayed, holds the range every write waits for.
    lock = hold(z, engine, wfile, "base", 64 * 1024, delay * 2, "sync", accel.scale,
                length=64 * 1024)
    n = 2 * depth
    args = []
    for i in range(n):
        args += ["--write", f"{wfile}:{i * W}:{W}:w{i}"]
    h = engine.background("inflight", *args, "--barrier", "none", "--barrier-after-ms", "500",
                          "--deadline-s", str(int(delay * (n + 4) + 60 * accel.scale)))
    stop = time.monotonic() + accel.deadline(30)
    probe = None
    while probe is None and time.monotonic() < stop and not h.done:
        probe = next((e for e in parse_lines(h.output_so_far()[0]) if e.get("event") == "probe"),
                     None)
        time.sleep(0.2)
    if probe is None or len(probe.get("outstanding") or []) < depth:
        raise NotArmed(f"the writes were not held ({probe}); cannot fill the workers")
    lines = engine.oneshot("hold", "--file", rfile, "--seed", "r", "--size", str(RSIZE),
                           "--interface", "libaio", "-k", "1", "--len", str(128 * 1024),
                           "--deadline-s", str(int(delay * (n + 2))), timeout=delay * (n + 4))
    writes_still_held = not h.done
    done = next((e for e in lines if e.get("event") in ("completed", "timeout")), {})
    # What the case proves is settled: let the rest go. Each held write reads its
    # record first (read-modify-write), and each such read waited out the delay
    # in turn: 293 s of waiting on Linux 6.12 under TCG with the handler left armed.
    z.zinject("-c", "all", check=False)
    lock.wait(delay * 4)
    h.wait(delay * (n + 4) + accel.deadline(60))      # the writes finish before the case ends
    (case_dir / "armed.txt").write_text(
        f"{len(probe['outstanding'])} writes held behind a {2 * delay:.0f} s range lock on "
        f"{depth} workers ({'; '.join(lock.proof)}); read: {done}; writes still held after "
        f"it: {writes_still_held}\n")
    bound = delay / 2
    if done.get("event") != "completed":
        symptom("starved", f"the async read did not complete: {done}")
        pytest.fail(f"the async read did not complete while writes were held: {done}")
    if not done.get("all_correct"):
        symptom("wrong-bytes", f"the read returned wrong data: {done}")
        pytest.fail(f"the read returned wrong data: {done}")
    if done["elapsed_s"] > bound:
        symptom("starved", f"the read took {done['elapsed_s']} s with {n} writes held "
                f"{delay:.0f} s each on {depth} workers (bound {bound:.0f} s)")
        pytest.fail(f"an async read waited {done['elapsed_s']} s behind held async writes "
                    f"(bound {bound:.0f} s)")
    if not writes_still_held:
        raise NotArmed("the writes finished before the read did: the overlap is not proven")
