"""Async O_DIRECT write shapes (openzfs/zfs#18902, the write half).

From 917a434a1 on, libaio/io_uring O_DIRECT writes are queued to the pool's
``zpl_async_write`` taskq with their iovec copied and their pages pinned in the
submitter. The read half's worst bug was an eligibility check walking an iovec
array the kernel had already freed; the write path copies the same arrays, so
every shape the kernel builds differently is issued here: ``PWRITE`` (one
buffer) and ``PWRITEV`` with 1, 2, 4, 8 (the on-stack ``inline_vecs``), 9 and 16
(a kmalloc'd array) page-aligned segments, libaio and io_uring, alternated trial
by trial with async off and the synchronous ``pwritev`` control, under
``zfs_dio_strict`` 0 and 1.

Property: every write returns its full length, is done by Direct I/O (the
pool's ``direct_write_count`` moves by its number of 4 KiB records; the
pool-wide ``arc_write_count`` also counts the sync thread's own writes, so it
is reported, not judged), and its
bytes are on disk: read back at once with O_DIRECT (recordsize 4K,
``primarycache=metadata``: nothing of it is cached) and again, for every trial
together, after the pool was exported and imported. Misaligned segments are the
negative control: EINVAL under strict=1, written correctly through the ARC
under strict=0.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import (ASYNC_PARAM, DEFAULT_TRIALS, PAGE, STRICT_PARAM, Shape, cond,
                               expect_arc, expect_einval)
from suite.casekit.writes import WRITE_PROPS, expect_direct_write, reimport_check
from suite.ioengine.plan import FileSpec

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.pool(props=WRITE_PROPS)]

SEGMENTS = [1, 2, 4, 8, 9, 16]


def conditions(interface: str, strict: int):
    return [
        cond(f"{interface} async=1 strict={strict}", interface,
             **{ASYNC_PARAM: 1, STRICT_PARAM: strict}),
        cond(f"{interface} async=0 strict={strict}", interface, optional=(ASYNC_PARAM,),
             **{ASYNC_PARAM: 0, STRICT_PARAM: strict}),
        cond(f"sync pwritev strict={strict}", "sync", control=True, **{STRICT_PARAM: strict}),
    ]


def _run(dio, zfs_guest, title, shape, conds, expect, seed):
    rounds = dio.trials or DEFAULT_TRIALS
    stride = -(-(shape.length + shape.page_offset) // PAGE) * PAGE
    file = FileSpec(dio.path(f"{seed}.bin"), stride * rounds * len(conds), seed=seed)
    return dio.run(title, file, shape, conds, expect, op="write", stride=stride,
                   after=reimport_check(zfs_guest, dio.engine, dio.pool, file))


@pytest.mark.parametrize("strict", [0, 1], ids=["strict0", "strict1"])
@pytest.mark.parametrize("nsegs", SEGMENTS, ids=[f"segs{n}" for n in SEGMENTS])
@pytest.mark.parametrize("interface", ["libaio", "io_uring"])
@pytest.mark.quick("libaio-segs9-strict1")   # 9 segments: the most a bug has bitten
def test_pwritev_aligned(dio, zfs_guest, interface, nsegs, strict):
    """Page-aligned, page-sized segments: full length, DIO, the bytes on disk."""
    shape = Shape(f"pwritev-{nsegs}x4k", nsegs=nsegs)
    v = _run(dio, zfs_guest, f"PWRITEV {nsegs} x 4 KiB page-aligned, {interface}, "
             f"zfs_dio_strict={strict}", shape, conditions(interface, strict),
             expect_direct_write, f"pwritev-{interface}-{nsegs}-{strict}")
    assert v.ok, "\n" + v.table.text()


@pytest.mark.parametrize("length", [PAGE, 16 * PAGE], ids=["4k", "64k"])
@pytest.mark.parametrize("interface", ["libaio", "io_uring"])
def test_pwrite_aligned(dio, zfs_guest, interface, length):
    """PWRITE / IORING_OP_WRITE: one contiguous buffer (ITER_UBUF)."""
    shape = Shape(f"pwrite-{length // 1024}k", nsegs=0, total=length)
    v = _run(dio, zfs_guest, f"PWRITE {length // 1024} KiB page-aligned, {interface}", shape,
             conditions(interface, 0), expect_direct_write, f"pwrite-{interface}-{length}")
    assert v.ok, "\n" + v.table.text()


@pytest.mark.parametrize("strict", [0, 1], ids=["strict0", "strict1"])
@pytest.mark.parametrize("nsegs", [2, 9], ids=["segs2", "segs9"])
def test_pwritev_misaligned_control(dio, zfs_guest, nsegs, strict):
    """Negative control: segments 512 B into their page are never DIO-eligible."""
    shape = Shape(f"pwritev-{nsegs}x4k-po512", nsegs=nsegs, page_offset=512)
    v = _run(dio, zfs_guest, f"PWRITEV {nsegs} x 4 KiB at page offset 512 (control), "
             f"zfs_dio_strict={strict}", shape, conditions("libaio", strict),
             expect_einval if strict else expect_arc, f"mis-{nsegs}-{strict}")
    assert v.ok, "\n" + v.table.text()
