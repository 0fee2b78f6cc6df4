"""Teardown of a dataset while an async O_DIRECT write is held in flight
(openzfs/zfs#18902; the PR's own async_write_005 covers rollback).

The async write task runs zfs_write_impl without the teardown lock; teardown
(rollback, unmount, export) marks the filesystem draining and waits for the
in-flight bytes to drain. A write held by ``zinject -E -T write`` on its blocks
makes the overlap certain; the case proves the write is outstanding before it
starts the teardown.

Pass: the teardown finishes (or cleanly refuses with "busy" where Linux may),
the write completes with its full length or a clean error, the dataset works
afterwards, and the written range is wholly old or wholly new, never a mix.
``writer=sync`` (dd oflag=direct) is the control that exists on stock builds.
"""
from __future__ import annotations

import time

import pytest

from suite.casekit.dio import set_async
from suite.casekit.engine import parse_lines
from suite.casekit.faults import (TEARDOWNS, NotArmed, held_deadline_s, probe_ms,
                                  raced_while_held, require_raced_while_held, restore_after,
                                  teardown_cmd, teardown_refused, teardown_target, while_held)
from suite.casekit.writes import WRITE_PROPS, arm_write_delay
from suite.errors import GuestError
from suite.guest.lifecycle import POISON

# A teardown with writes in flight frees what they hold: on a poisoned guest.
pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.zinject,
              pytest.mark.guest(append=POISON)]

SIZE = 64 * 1024
N = 16 * 1024
CLEAN_ERRORS = {"EIO", "ENXIO", "EBUSY", "ENOENT", "ESTALE", "EROFS"}


def _start_writer(z, engine, accel, writer, path, delay):
    look_ms = probe_ms(delay, accel.scale)
    if writer == "async":
        h = engine.background("inflight", "--write", f"{path}:0:{N}:new", "--barrier", "none",
                              "--barrier-after-ms", str(look_ms), "--base-seed", "base",
                              "--deadline-s", str(held_deadline_s(delay, accel.scale)))
        stop = accel.deadline(30) + look_ms / 1000
        t0 = time.monotonic()
        while time.monotonic() - t0 < stop:
            probe = next((e for e in parse_lines(h.output_so_far()[0])
                          if e.get("event") == "probe"), None)
            if probe is not None:
                if not probe.get("outstanding"):
                    raise NotArmed("the write completed before the teardown could start")
                return h, f"write outstanding {look_ms} ms after submission"
            if h.done:
                raise NotArmed(f"the writer exited early: {h.output_so_far()}")
            time.sleep(0.2)
        raise NotArmed("no in-flight probe from the writer in time")
    h = z.guest.background(f"dd if=/dev/urandom of={path} bs={N} count=1 oflag=direct "
                           f"conv=notrunc status=none")
    time.sleep(look_ms / 1000)
    if h.done:
        raise NotArmed("dd finished before the teardown could start")
    return h, f"dd oflag=direct still running after {look_ms} ms"


@pytest.mark.pool(props={**WRITE_PROPS, "atime": "on", "relatime": "off"})
@pytest.mark.parametrize("writer", ["async", "sync"])
@pytest.mark.parametrize("op", TEARDOWNS)
def test_teardown_with_held_write(zfs_guest, pool, engine, accel, op, writer, case_dir,
                                  symptom):
    z = zfs_guest
    if writer == "async":
        set_async(z, 1, "writer=async")
    t = teardown_target(z, engine, pool, op, SIZE, "base", {"recordsize": "4K"},
                        accel.deadline(30))
    target_ds, clone, path = t.dataset, t.clone, t.path
    delay = accel.hold(5)
    arm_write_delay(z, path, delay)
    h, proof = _start_writer(z, engine, accel, writer, path, delay)
    td = z.guest.background(while_held(h.pid, teardown_cmd(z, op, target_ds, clone)))
    deadline = delay + accel.deadline(30)
    try:
        td_result = td.wait(deadline)
    except GuestError:
        td_result = None
    try:
        wr = h.wait(accel.deadline(10))
    except GuestError:
        wr = None
    raced = raced_while_held(td.output_so_far()[0])
    (case_dir / "armed.txt").write_text(f"{proof}\nwriter still running when `{op}` began: {raced}\n")
    problems = []
    if td_result is None or td_result.rc is None:
        problems.append(f"`{op}` did not finish within {deadline:.0f}s of a {delay:.0f}s hold")
        symptom("hang", problems[-1], row=f"{writer} writer")
    elif td_result.rc != 0 and not teardown_refused(op, td_result.stderr):
        problems.append(f"`{op}` failed rc={td_result.rc}: {td_result.stderr.strip()[-300:]}")
        symptom(f"error:{op}", problems[-1], row=f"{writer} writer")
    if wr is None or wr.rc is None:
        problems.append("the held write did not complete")
        symptom("hang", problems[-1], row=f"{writer} writer")
    elif writer == "async":
        done = next((e for e in parse_lines(wr.stdout) if e.get("event") == "done"), None)
        w = (done or {}).get("writes", [{}])[0]
        if done is None or not (w.get("res") == N or w.get("errname") in CLEAN_ERRORS):
            problems.append(f"the held write ended badly: {w or wr.stdout[-300:]}")
            symptom(f"error:{w.get('errname')}" if w.get("errname") else "short",
                    problems[-1], row="async writer")
    elif wr.rc != 0 and not any(e in wr.stderr for e in ("Input/output", "No such")):
        problems.append(f"dd oflag=direct failed: {wr.stderr.strip()[-300:]}")
        symptom("error:dd", problems[-1], row="sync writer")
    assert not problems, "\n".join(problems + ["armed: " + proof])
    require_raced_while_held(td_result is not None, raced, f"{writer} write")

    z.zinject("-c", "all", check=False)
    restore_after(z, op, pool.name, pool.pool.name)
    if op != "destroy-clone" and writer == "async":
        owners = engine.oneshot("owners", "--file", path, "--range", f"0:{N}", "--seed", "new",
                                "--base-seed", "base")
        blocks = owners[-1]["blocks"] if owners else ["?"]
        if len(set(blocks)) != 1 or blocks[0] not in ("new", "base"):
            symptom("mixed", f"after {op} the written range holds {blocks}")
            pytest.fail(f"after {op} the written range is neither wholly old nor wholly new: "
                        f"{blocks}")
    after = pool.path("after.bin")
    res = engine.run({"files": [{"path": after, "size": SIZE, "seed": "after"}],
                      "trials": [{"id": "r", "file": after, "segments": [{"len": SIZE}],
                                  "interface": "sync", "o_direct": True}]}, name="after")
    assert res[0]["correct"], f"the dataset does not work after {op}: {res[0]}"
