"""Vectored PREADV through the async Direct I/O path (openzfs/zfs#18902 review).

The bug class: the async path decided Direct I/O eligibility on a taskq thread by
walking the iovec array that aio_read() had already freed (2..8 segments live on
its stack, 9+ in a kmalloc'd block it kfree()s). Under ``zfs_dio_strict=1`` a
valid page-aligned O_DIRECT read then failed with EINVAL; under the default
strict=0 it was silently served through the ARC (pinned-page copy).

Each case alternates, trial by trial, the async path (libaio/io_uring with
``zfs_async_dio_enabled=1``), the same interface with async off, and the
synchronous ``preadv`` control. Every read must be correct, never EINVAL, and
served by Direct I/O alone. The misaligned shape is the negative control: EINVAL
under strict=1, correct data through the ARC under strict=0, so a case that
cannot tell the two apart cannot pass.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import (ASYNC_PARAM, PAGE, STRICT_PARAM, Shape, cond, expect_arc,
                               expect_direct, expect_einval)
from suite.ioengine.plan import FileSpec

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.bug("preadv-freed-iovec")]

SEGMENTS = [1, 2, 4, 8, 9, 16]


def conditions(interface: str, strict: int):
    return [
        cond(f"{interface} async=1 strict={strict}", interface,
             **{ASYNC_PARAM: 1, STRICT_PARAM: strict}),
        cond(f"{interface} async=0 strict={strict}", interface, optional=(ASYNC_PARAM,),
             **{ASYNC_PARAM: 0, STRICT_PARAM: strict}),
        cond(f"sync preadv strict={strict}", "sync", control=True, **{STRICT_PARAM: strict}),
    ]


@pytest.mark.parametrize("strict", [0, 1], ids=["strict0", "strict1"])
@pytest.mark.parametrize("nsegs", SEGMENTS, ids=[f"segs{n}" for n in SEGMENTS])
@pytest.mark.parametrize("interface", ["libaio", "io_uring"])
@pytest.mark.quick("libaio-segs9-strict1")   # 9 segments: the most a bug has bitten
# Two CPUs really at once: the freed iovec array must be reused while the taskq thread
# still reads it. At eb75ba1c5 with 2 vCPUs EINVAL came in up to 10 of 14 async trials;
# with 1 vCPU (two workers on two cores, suite/vm/cpus.py) in 1 of 14.
@pytest.mark.guest(cpus=2)
def test_preadv_aligned(dio, interface, nsegs, strict):
    """Page-aligned, page-sized segments: correct, never EINVAL, served by DIO."""
    shape = Shape(f"preadv-{nsegs}x4k", nsegs=nsegs)
    file = FileSpec(dio.path(f"preadv{nsegs}.bin"), shape.length, seed=f"preadv-{nsegs}")
    v = dio.run(f"PREADV {nsegs} x 4 KiB page-aligned, {interface}, zfs_dio_strict={strict}",
                file, shape, conditions(interface, strict), expect_direct)
    assert v.ok, "\n" + v.table.text()


@pytest.mark.parametrize("strict", [0, 1], ids=["strict0", "strict1"])
@pytest.mark.parametrize("nsegs", [2, 9], ids=["segs2", "segs9"])
def test_preadv_misaligned_control(dio, nsegs, strict):
    """Negative control: segments 512 B into their page are never DIO-eligible."""
    shape = Shape(f"preadv-{nsegs}x4k-po512", nsegs=nsegs, page_offset=512)
    file = FileSpec(dio.path(f"mis{nsegs}.bin"), shape.length + PAGE, seed=f"mis-{nsegs}")
    expect = expect_einval if strict else expect_arc
    v = dio.run(f"PREADV {nsegs} x 4 KiB at page offset 512 (control), zfs_dio_strict={strict}",
                file, shape, conditions("libaio", strict), expect)
    assert v.ok, "\n" + v.table.text()
