"""O_DIRECT requests whose buffer has a page that cannot be pinned (PROT_NONE).

Direct I/O pins the caller's pages before it moves a byte. When pinning fails part
way, the pages already pinned must be released and the request fail with EFAULT
(or, where a copy is made instead, stop short at the hole); it must not report
bytes it did not move, write bytes that are neither the old nor the new ones, or
leave the descriptor unable to do the same request once the buffer is whole. What
it leaves in the kernel is the after-case judges' (taint, accounting, kmemleak,
KASAN on ``debian-6.1-debug``).

Why: line coverage of async-dio on the debug kernel (``suite coverage``) showed
the series' error branch of ``zfs_uio_get_dio_pages_alloc`` (unpin what was
pinned, free the page array, reset the Direct I/O state so a later teardown does
not release it again) never reached by any case. Every trial: sync, libaio and
io_uring; read and write; one segment and four; the hole at the first page and
at the sixth; async on and off where the build has the switch.

Shown catching a bug in exactly that branch (2026-12-03): a mutant of the
async-dio head with the reset after a failed pin taken out (the three lines that
NULL ``uio_dio.pages`` and zero ``npages``/``pinned``, as a ``--series`` folder
stacked on ``async-dio``) fails both rows within two seconds on a ``--poison``
guest: "BUG kmalloc-128: Object already free" in ``zfs_uio_free_dio_pages`` <-
``zfs_read_impl`` <- ``preadv`` (the page array freed twice), then an Oops. The
head itself: both rows pass, all 48 trials EFAULT, pinned pages balanced.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import set_async
from suite.casekit.engine import problem_kind, report_trials
from suite.ioengine.unpinnable import INTERFACES, OPS

pytestmark = [pytest.mark.vm, pytest.mark.nvme]

TRIALS = len(INTERFACES) * len(OPS) * 2 * 2      # x segments (1, 4) x holes (page 0, 5)


KINDS = (("past the unpinnable page", "overrun"), ("wrong bytes", "wrong-bytes"),
         ("neither old nor new", "mixed"), ("control", "short"))


def _kind(problem: str) -> str:
    return problem_kind(problem, KINDS)


def _row(t: dict) -> str:
    return f"{t['interface']} {t['op']} segs{t['nsegs']} hole@{t['hole']}"


@pytest.mark.quick("async1")
@pytest.mark.parametrize("async_", [1, 0], ids=["async1", "async0"])
def test_dio_buffer_with_unpinnable_page(zfs_guest, pool, engine, accel, async_, symptom):
    set_async(zfs_guest, async_)
    lines = engine.oneshot("unpinnable", "--file", pool.path("unpinnable.bin"),
                           "--timeout-s", str(int(accel.deadline(30))), timeout=300)
    trials = report_trials(lines, "unpinnable", TRIALS, symptom, _row, _kind)
    bad = [t for t in trials if not t["ok"]]
    results = sorted({(t["op"], t["error"] or f"{t['res']} B") for t in trials})
    assert not bad, (f"{len(bad)} of {TRIALS} trials wrong: "
                     + "; ".join(f"{_row(t)}: {', '.join(t['problems'])}" for t in bad[:6])
                     + f" (results seen: {results})")
