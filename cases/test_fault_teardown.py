"""Teardown of a dataset while a read is held in flight (openzfs/zfs#18902 review).

The bug class: ``zfs rollback`` (zfsvfs_teardown) took the teardown lock as
writer and then waited for the async in-flight count to drain, while the read's
completion updated atime (atime=on, relatime=off) and waited for that same lock:
both tasks stuck in D state forever. A read held by ``zinject -E`` makes the
overlap deterministic; the case proves the read is in flight before starting
the teardown.

Pass: the read and the teardown both finish within a deadline derived from the
injected delay, the read returns correct data or a clean error, and the
dataset works afterwards. Fail: the report carries the D-state tasks' kernel
stacks, sysrq-w, dmesg and the console tail, and the guest is recycled.

``reader=sync`` (dd iflag=direct) is the control that exists on stock builds.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import set_async
from suite.casekit.faults import (TEARDOWNS, hold, raced_while_held, require_raced_while_held,
                                  restore_after, teardown_cmd, teardown_refused, teardown_target,
                                  while_held)
from suite.errors import GuestError

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.zinject]

SIZE = 1 << 20


@pytest.mark.bug("rollback-drain-deadlock")
@pytest.mark.pool(props={"atime": "on", "relatime": "off", "primarycache": "metadata"})
@pytest.mark.parametrize("reader", ["async", "sync"])
@pytest.mark.parametrize("op", TEARDOWNS)
def test_teardown_with_held_read(zfs_guest, pool, engine, accel, op, reader, case_dir, symptom):
    z = zfs_guest
    if reader == "async":
        set_async(z, 1, "reader=async")
    t = teardown_target(z, engine, pool, op, SIZE, "held", {"atime": "on", "relatime": "off"},
                        accel.deadline(30))
    target_ds, clone, path = t.dataset, t.clone, t.path

    delay = accel.hold(5)                         # 5 s under KVM, 10 s under TCG
    held = hold(z, engine, path, "held", SIZE, delay, reader, accel.scale)
    td = z.guest.background(while_held(held.pid, teardown_cmd(z, op, target_ds, clone)))
    deadline = delay + accel.deadline(30)
    try:
        td_result = td.wait(deadline)
    except GuestError:                       # still running at the deadline
        td_result = None
    try:
        read = held.wait(accel.deadline(10))
    except GuestError as e:
        read = {"finished": False, "ok": False, "detail": e.what}

    raced = raced_while_held(td.output_so_far()[0])
    held.proof.append(f"reader still running when `{op}` began: {raced}")
    (case_dir / "armed.txt").write_text("\n".join(held.proof) + "\n")
    problems = []
    if td_result is None or td_result.rc is None:
        problems.append(f"`{op}` did not finish within {deadline:.0f}s of a {delay:.0f}s hold")
        symptom("hang", problems[-1], row=f"{reader} reader")
    elif td_result.rc != 0:
        if not teardown_refused(op, td_result.stderr):
            problems.append(f"`{op}` failed rc={td_result.rc}: {td_result.stderr.strip()[-300:]}")
            symptom(f"error:{op}", problems[-1], row=f"{reader} reader")
        (case_dir / "outcome.txt").write_text(f"{op}: refused ({td_result.stderr.strip()})\n")
    if not read["finished"]:
        problems.append(f"the held {reader} read did not complete: {read['detail'][:300]}")
        symptom("hang", problems[-1], row=f"{reader} reader")
    elif not read["ok"]:
        problems.append(f"the held read returned wrong data or an unclean error: {read['detail']}")
        symptom("wrong-bytes", problems[-1], row=f"{reader} reader")
    assert not problems, "\n".join(problems + ["armed: " + "; ".join(held.proof)])
    require_raced_while_held(td_result is not None, raced, f"{reader} read")

    z.zinject("-c", "all", check=False)
    restore_after(z, op, pool.name, pool.pool.name)
    after = pool.path("after.bin")
    res = engine.run({"files": [{"path": after, "size": SIZE, "seed": "after"}],
                      "trials": [{"id": "r", "file": after, "segments": [{"len": SIZE}],
                                  "interface": "sync", "o_direct": True}]}, name="after")
    assert res[0]["correct"], f"the dataset does not work after {op}: {res[0]}"
