"""zfs_dio_strict semantics, alternated trial by trial with strict 0 and 1.

Aligned O_DIRECT reads never fail under either setting and are served by Direct
I/O. A misaligned buffer, offset or length is EINVAL under strict=1 and correct
data through the ARC under strict=0 (the "Direct I/O design" semantics: a
misaligned request is executed as uncached ARC I/O unless the user asked for
strictness). Run for the synchronous control and for libaio with the async path
on and off, so the async path cannot change the semantics unnoticed.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import (ASYNC_PARAM, PAGE, STRICT_PARAM, Shape, cond, expect_arc,
                               expect_direct, expect_einval)
from suite.ioengine.plan import FileSpec

pytestmark = [pytest.mark.vm, pytest.mark.nvme]

SHAPES = {
    "aligned": Shape("aligned-16k", nsegs=0, total=4 * PAGE),
    "misaligned-buffer": Shape("buffer+512", nsegs=0, total=4 * PAGE, page_offset=512),
    "misaligned-offset": Shape("offset+512", nsegs=0, total=4 * PAGE, offset=512),
    "misaligned-length": Shape("length+512", nsegs=0, total=4 * PAGE + 512),
}
PATHS = {
    "sync": ("sync", {}),
    "libaio-async1": ("libaio", {ASYNC_PARAM: 1}),
    "libaio-async0": ("libaio", {ASYNC_PARAM: 0}),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_strict(dio, shape, path):
    interface, params = PATHS[path]
    optional = (ASYNC_PARAM,) if params.get(ASYNC_PARAM) == 0 else ()
    conds = [cond(f"{path} strict={s}", interface, optional=optional,
                  **{STRICT_PARAM: s, **params}) for s in (0, 1)]
    sh = SHAPES[shape]
    if sh.aligned:
        expect = {c.label: expect_direct for c in conds}
    else:
        expect = {conds[0].label: expect_arc, conds[1].label: expect_einval}
    file = FileSpec(dio.path("strict.bin"), 8 * PAGE, seed=f"strict-{shape}")
    v = dio.run(f"zfs_dio_strict 0 vs 1: {shape} PREAD, {path}", file, sh, conds, expect)
    assert v.ok, "\n" + v.table.text()
