"""Non-page-aligned EOF tails (openzfs/zfs#18902 review).

The bug class: a Direct I/O read reaching past the end of a file whose size is
not a page multiple. zfs_read_impl() clears UIO_DIRECT for the tail, and on the
async path the tail copy ran on a taskq thread with no user mm: EFAULT, with the
bytes at and past the last page-aligned boundary never written (first wrong
byte at 36864 for a 40000-byte file).

Rows are the reviewer's: file size, shape, request, tail. The async read is
alternated with the same interface with async off and with the synchronous
control. Every read must return exactly the bytes to EOF, every byte right.
How each was served is reported, not asserted: the tail legitimately goes
through the ARC.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import ASYNC_PARAM, PAGE, Shape, cond, expect_correct
from suite.ioengine.plan import FileSpec

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.bug("eof-tail-efault")]

# (file size, segments (0 = PREAD, one contiguous buffer), request length)
ROWS = [
    (40000, 0, 40960),
    (40000, 10, 40960),
    (12000, 4, 16384),
    (4196, 2, 8192),
]


def conditions(interface: str):
    sync = "sync pread" if interface == "pread" else "sync preadv"
    return [
        cond(f"{interface} async=1", interface, **{ASYNC_PARAM: 1}),
        cond(f"{interface} async=0", interface, optional=(ASYNC_PARAM,), **{ASYNC_PARAM: 0}),
        cond(sync, "sync", control=True),
    ]


# 4K records: the page-aligned body of the file is Direct I/O-eligible and only the
# tail goes through the ARC (with 128K records a 40000-byte file is one odd-sized
# block and nothing in it is eligible).
@pytest.mark.pool(props={"recordsize": "4K"})
@pytest.mark.parametrize("interface", ["libaio", "io_uring"])
@pytest.mark.parametrize("size,nsegs,request_len", ROWS,
                         ids=[f"size{s}-{'pread' if n == 0 else f'segs{n}'}" for s, n, _ in ROWS])
def test_eof_tail(dio, interface, size, nsegs, request_len):
    shape = Shape(f"eof-{size}-{nsegs or 'pread'}", nsegs=nsegs,
                  seg_len=request_len // max(nsegs, 1), total=request_len)
    tail = size % PAGE
    file = FileSpec(dio.path(f"eof{size}.bin"), size, seed=f"eof-{size}")
    conds = conditions(interface)
    if nsegs == 0:
        conds[2] = cond("sync pread", "sync", control=True)
    v = dio.run(f"EOF tail: {size} B file, {nsegs or 'PREAD'} {'segments' if nsegs else ''} "
                f"reading {request_len} B, tail {tail} B, {interface}", file, shape, conds,
                expect_correct, notes=[f"expected length = {size} (bytes to EOF)"])
    assert v.ok, "\n" + v.table.text()
