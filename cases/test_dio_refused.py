"""O_DIRECT writes refused after the file was opened: immutable and append-only.

A file made immutable (or append-only) while a writer holds it open refuses that
writer's next write at offset 0 with EPERM; ``zfs_write`` checks it, and the async
series checks it once more where it queues a write to its taskq, with the
request's iovec copied and, past that point, its pages pinned. A refusal must
come back as EPERM on every interface, leave the file's bytes as they were, and
leave nothing behind (pinned pages, the in-flight budget, a task that runs later:
the after-case judges; KASAN and kmemleak on ``debian-6.1-debug``); the same write
with the flag cleared then lands whole.

Why: no case had a Direct I/O write refused, so the series' refusal branches
(on the way to the taskq and in the task) ran in no guest. Every trial: sync,
libaio and io_uring; one segment and four; immutable and append-only; async on
and off where the build has the switch. Each row's control writes are counted on
the pool's ``zpl_async_*`` taskqs: on the async row a libaio or io_uring control
dispatches a task (else the row is ``unproven``: it did not test the async path),
on the sync row none does.

Shown catching a bug of that branch (2026-12-04): a mutant of the async-dio head
whose task returns on EPERM before it lets the request's pages go, with the
queue-side check removed so refusals reach the task (a ``--series`` folder stacked
on ``async-dio``): ``[async1]`` fails with ``pins:leak`` (128 pages, the eight
async trials' 16 each, still pinned after the case); ``[async0]``, which never pins
through the taskq, passes. The head: both rows pass, all 24 trials EPERM, each async
control write one task.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import set_async
from suite.casekit.engine import problem_kind, report_trials
from suite.ioengine.refused import FLAGS, INTERFACES

pytestmark = [pytest.mark.vm, pytest.mark.nvme]

TRIALS = len(INTERFACES) * 2 * len(FLAGS)        # x segments (1, 4)


KINDS = (("accepted", "accepted"), ("bytes of the file changed", "wrong-bytes"),
         ("wrong bytes", "wrong-bytes"), ("control", "short"))


def _kind(problem: str) -> str:
    return problem_kind(problem, KINDS)


def _row(t: dict) -> str:
    return f"{t['interface']} segs{t['nsegs']} {t['flag']}"


def label_problems(trials: list[dict], async_: int) -> list[str]:
    """The row ran as labelled: async, each queued control write went to the taskq;
    sync, no write of the row did."""
    out = []
    for t in trials:
        row = _row(t)
        if t["tasks"] is None or t["control_tasks"] is None:
            out.append(f"{row}: the async taskq counter could not be read")
        elif async_ and t["interface"] != "sync" and t["control_tasks"] < 1:
            out.append(f"{row}: labelled async but its control write dispatched no task")
        elif (not async_ or t["interface"] == "sync") and t["tasks"] + t["control_tasks"]:
            out.append(f"{row}: labelled synchronous but "
                       f"{t['tasks'] + t['control_tasks']} task(s) went to the async taskq")
    return out


@pytest.mark.quick("async1")
@pytest.mark.parametrize("async_", [1, 0], ids=["async1", "async0"])
def test_dio_write_refused_after_open(zfs_guest, pool, engine, accel, async_, symptom):
    set_async(zfs_guest, async_)
    lines = engine.oneshot("refused", "--file", pool.path("refused.bin"),
                           "--pool", pool.pool.name,
                           "--timeout-s", str(int(accel.deadline(30))), timeout=300)
    trials = report_trials(lines, "refused", TRIALS, symptom, _row, _kind)
    bad = [t for t in trials if not t["ok"]]
    unproven = label_problems(trials, async_)
    for p in unproven:
        symptom("unproven", p)
    results = sorted({t["error"] or f"{t['res']} B" for t in trials})
    assert not bad, (f"{len(bad)} of {TRIALS} trials wrong: "
                     + "; ".join(f"{_row(t)}: {', '.join(t['problems'])}" for t in bad[:6])
                     + f" (results seen: {results})")
    assert not unproven, "; ".join(unproven)
