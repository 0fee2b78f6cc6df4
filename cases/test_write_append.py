"""O_APPEND O_DIRECT writes submitted together (openzfs/zfs#18902).

917a434a1 queued O_APPEND writes like any other: the submitter judged each one
(RLIMIT_FSIZE, alignment) at the EOF of submission time, and the taskq then
appended them wherever the EOF was when each ran. 30582e2f4 keeps every append
on the synchronous path.

Properties: several O_APPEND iocbs in one ``io_submit`` each land whole, at
distinct offsets, in submission order, and the file grows by their sum; under
an RLIMIT_FSIZE with room for exactly one record, the file never grows past the
limit (the second append fails with EFBIG). The first append is held in flight
by a ``zinject -E`` write delay on its blocks, so the second is submitted while
the first has not landed: the stale-EOF window is certain, not raced for.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import set_async
from suite.casekit.faults import RAISE_HOLD, NotArmed
from suite.casekit.writes import WRITE_PROPS, arm_write_delay

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.pool(props=WRITE_PROPS)]

REC = 16 * 1024
PREFIX = 64 * 1024


def _append(engine, path, interface, k, seed, rlimit=0, deadline=120):
    lines = engine.oneshot("append", "--file", path, "--seed", seed, "-k", str(k), "--len",
                           str(REC), "--interface", interface, "--rlimit-fsize", str(rlimit),
                           "--deadline-s", str(int(deadline)), timeout=deadline + 60)
    done = next((ln for ln in lines if ln.get("event") == "done"), None)
    assert done is not None, f"the append run did not finish: {lines[-3:]}"
    return done


def _set_async(z, value):
    set_async(z, value)


@pytest.mark.parametrize("async_", [1, 0], ids=["async1", "async0"])
@pytest.mark.parametrize("interface", ["libaio", "io_uring"])
def test_write_append_in_submission_order(zfs_guest, pool, engine, interface, async_, symptom):
    _set_async(zfs_guest, async_)
    k, path = 8, pool.path("append.bin")
    engine.oneshot("write-file", path, "--size", str(PREFIX), "--seed", "prefix")
    done = _append(engine, path, interface, k, "rec")
    problems = []
    for i, r in enumerate(done["records"]):
        if r["res"] != REC:
            problems.append(f"record {i}: res={r['res']} ({r['errname']}), expected {REC}")
            symptom(f"error:{r['errname']}" if r["errname"] else "short", problems[-1])
    order = [x["record"] for x in done["layout"]]
    if done["size_after"] != PREFIX + k * REC:
        problems.append(f"size {done['size_after']}, expected {PREFIX + k * REC}")
        symptom("size", problems[-1])
    if None in order:
        problems.append(f"a {REC}-byte slot holds no whole record: {order}")
        symptom("wrong-bytes", problems[-1])
    elif order != list(range(k)):
        problems.append(f"records landed in order {order}, submitted as {list(range(k))}")
        symptom("order", problems[-1])
    assert not problems, "\n".join(problems)


@pytest.mark.zinject
@pytest.mark.parametrize("async_", [1, 0], ids=["async1", "async0"])
@pytest.mark.parametrize("interface", ["libaio", "io_uring"])
def test_write_append_respects_rlimit_fsize(zfs_guest, pool, engine, accel, interface, async_,
                                            case_dir, symptom):
    """RLIMIT_FSIZE = prefix + one record; two appends in one submission, the
    first held: the file must end at the limit, the second must fail (EFBIG)."""
    _set_async(zfs_guest, async_)
    path = pool.path("append-limit.bin")
    engine.oneshot("write-file", path, "--size", str(PREFIX), "--seed", "prefix")
    delay = accel.hold(3)
    arm_write_delay(zfs_guest, path, delay)
    limit = PREFIX + REC
    done = _append(engine, path, interface, 2, "lim", rlimit=limit, deadline=delay * 4 + 60)
    zfs_guest.zinject("-c", "all", check=False)
    first, second = done["records"]
    held = (first["t_done"] or 0) - (first["t_submit"] or 0)
    (case_dir / "armed.txt").write_text(f"first append took {held:.2f} s under a "
                                        f"{delay:.0f} s write delay\n")
    if held < 0.5 * delay:
        raise NotArmed(f"the first append was not held ({held:.2f} s under a {delay:.0f} s "
                       "delay): the second did not race it", fix=RAISE_HOLD)
    problems = []
    if done["size_after"] > limit:
        problems.append(f"the file grew to {done['size_after']} bytes, past RLIMIT_FSIZE "
                        f"{limit}: the second append was admitted at a stale EOF "
                        f"(res {second['res']})")
        symptom("past-limit", problems[-1])
    if first["res"] != REC:
        problems.append(f"the first append returned {first['res']}, expected {REC}")
        symptom(f"error:{first['errname']}" if first["errname"] else "short", problems[-1])
    if second["res"] != -27 and done["size_after"] <= limit:
        problems.append(f"the second append returned {second['res']}, expected -EFBIG")
        symptom("no-EFBIG", problems[-1])
    landed = [x["record"] for x in done["layout"]]
    if done["size_after"] <= limit and landed != [0]:
        problems.append(f"past the prefix the file holds records {landed}, expected [0]")
        symptom("wrong-bytes", problems[-1])
    assert not problems, "\n".join(problems)
