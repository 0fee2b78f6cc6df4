"""zinject scenarios with async Direct I/O in flight.

- delayed reads, many in flight: every result arrives, correct, none lost,
  within the deadline (and not before the injected delay: the fault was armed);
- EIO on one file's reads: each affected request completes with EIO, never
  hangs, never returns wrong bytes; reads of an unaffected file succeed
  (alternated trial by trial);
- checksum errors on one side of a mirror: reads self-heal, return correct data,
  and ``zpool status`` counts the errors on that device.
Every injection is cleared by the pool fixture after the case, pass or fail.
"""
from __future__ import annotations

import re

import pytest

from suite.casekit.dio import ASYNC_PARAM, Shape, cond, expect_correct, judge, plan, symptom_of
from suite.casekit.faults import arm_delay
from suite.ioengine.plan import FileSpec, Plan
from suite.symptoms import Symptom

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.zinject]

SIZE = 4 << 20


def _async_conditions(prefix: str):
    return [cond(f"{prefix} libaio async=1", "libaio", **{ASYNC_PARAM: 1}),
            cond(f"{prefix} libaio async=0", "libaio", optional=(ASYNC_PARAM,),
                 **{ASYNC_PARAM: 0}),
            cond(f"{prefix} sync", "sync", control=True)]


@pytest.mark.async_dio
@pytest.mark.pool(props={"primarycache": "metadata"})
def test_zinject_delayed_reads_many_in_flight(zfs_guest, pool, engine, accel):
    zfs_guest.set_param(ASYNC_PARAM, 1)
    path = pool.path("delayed.bin")
    engine.oneshot("write-file", path, "--size", str(SIZE), "--seed", "delayed")
    delay = accel.hold(1)
    arm_delay(zfs_guest, path, delay)
    k = 16
    # The injected delay may serialize the reads (one lane): k x delay is the
    # slowest correct outcome, so "lost or hung" is only past that.
    deadline = delay * k + accel.deadline(10)
    lines = engine.oneshot("hold", "--file", path, "--seed", "delayed", "--size", str(SIZE),
                           "--interface", "libaio", "-k", str(k), "--len", "131072",
                           "--stride", "262144", "--deadline-s", str(int(deadline)),
                           timeout=(deadline + 60) / accel.scale)
    done = next((ln for ln in lines if ln.get("event") in ("completed", "timeout")), None)
    assert done is not None, f"no completion report: {lines}"
    assert done["event"] == "completed", f"reads lost or hung: {done}"
    reqs = done["requests"]
    assert len(reqs) == k and all(r["correct"] for r in reqs), reqs
    assert done["elapsed_s"] >= delay * 0.9, (
        f"reads finished in {done['elapsed_s']:.1f}s, before the {delay:.0f}s delay: not armed")


@pytest.mark.pool(props={"primarycache": "metadata"})
def test_zinject_eio_affected_and_unaffected(dio, zfs_guest):
    bad = FileSpec(dio.path("eio.bin"), SIZE, seed="eio")
    good = FileSpec(dio.path("clean.bin"), SIZE, seed="clean")
    shape = Shape("pread-128k", nsegs=0, total=131072)
    conds_bad, skipped = dio.split(_async_conditions("EIO-injected"))
    conds_good, _ = dio.split(_async_conditions("unaffected"))
    # Write both files first (no injection yet), then inject EIO on one.
    engine = dio.engine
    for f in (bad, good):
        engine.oneshot("write-file", f.path, "--size", str(f.size), "--seed", f.seed)
    r = zfs_guest.zinject("-t", "data", "-e", "io", "-T", "read", bad.path, check=False)
    assert r.rc == 0, f"could not arm: zinject refused: {r.stderr}"
    pa = plan(FileSpec(bad.path, SIZE, bad.seed, create=False), shape, conds_bad, dio.trials,
              dio.pool, dio.have_params)
    pb = plan(FileSpec(good.path, SIZE, good.seed, create=False), shape, conds_good,
              dio.trials, dio.pool, dio.have_params)
    trials = [t for pair in zip(pa.trials, pb.trials) for t in pair]
    for i, t in enumerate(trials):
        t.id = f"{i:04d}"
    results = engine.run(Plan(pa.files + pb.files, trials), timeout=300, name="eio")

    def expect_eio(c, res):
        if res.get("errname") == "EIO":
            return None
        bad = symptom_of(c, res)
        return bad or Symptom("no-EIO", f"expected EIO, got res={res.get('res')}", c.label)

    exp = {c.label: expect_eio for c in conds_bad} | {c.label: expect_correct for c in conds_good}
    v = judge("zinject -e io on one file: affected vs unaffected reads",
              Plan(pa.files + pb.files, trials), conds_bad + conds_good, results, exp, skipped)
    dio.finish(v)
    assert v.ok, "\n" + v.table.text()


@pytest.mark.guest(nvme=2)
@pytest.mark.pool(layout="mirror", props={"primarycache": "metadata"})
def test_zinject_mirror_checksum_self_heals(dio, zfs_guest, pool):
    f = FileSpec(dio.path("mirror.bin"), SIZE, seed="mirror")
    dio.engine.oneshot("write-file", f.path, "--size", str(SIZE), "--seed", "mirror")
    zfs_guest.guest.run("sync", timeout=120)
    dev = zfs_guest.nvme_devices()[0]
    # "corrupt" flips bits in what the device returns: the checksum catches it.
    r = zfs_guest.zinject("-d", dev, "-e", "corrupt", "-T", "read", "-f", "100",
                          pool.pool.name, check=False)
    assert r.rc == 0, f"could not arm: zinject refused: {r.stderr}"
    shape = Shape("pread-128k", nsegs=0, total=131072)
    v = dio.run("mirror with checksum errors injected on one side", FileSpec(
        f.path, SIZE, f.seed, create=False), shape, _async_conditions("mirror"), expect_correct)
    status = pool.pool.status()
    zfs_guest.zinject("-c", "all", check=False)
    name = dev.rsplit("/", 1)[-1]
    row = next((ln.split() for ln in status.splitlines() if ln.strip().startswith(name)), None)
    assert v.ok, "\n" + v.table.text()
    assert row and int(re.sub(r"\D", "", row[4]) or 0) > 0, (
        f"zpool status counted no checksum errors on {name}: the fault did not fire\n{status}")
