"""zvol Direct I/O request shapes (openzfs/zfs#18661).

Property: every read and write to ``/dev/zdN`` returns its full length with the
generator's bytes (a write is read back at once with O_DIRECT, and all of
them again from disk after the pool was exported and imported), and with
``zvol_dio_enabled=1`` it takes the path
the series promises: around the ARC when the request is eligible (reads:
page-aligned pages and offset; writes: whole blocks of ``volblocksize``),
through the ARC otherwise. The zvol's logical block size is 512, so
512-byte-aligned O_DIRECT is legal and must be served by the ARC, correctly.
Conditions alternate trial by trial: libaio, io_uring, sync and page-cache I/O
with Direct I/O on, and libaio with it off, the row stock OpenZFS runs too.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import PAGE, Shape
from suite.casekit.trials import trials_needed
from suite.casekit.writes import reimport_check
from suite.casekit.zvol import SIZES, create_zvol, expect_path, relocator, zconditions
from suite.ioengine.plan import FileSpec

pytestmark = [pytest.mark.vm, pytest.mark.nvme]

# The path is a property of the shape, not a coin toss: enough trials to see a
# 2-in-5 intermittent failure with 95%, fewer than the file cases' 14.
ZVOL_TRIALS = trials_needed(rate=0.4)


def shapes(vbs: int) -> dict[str, Shape]:
    """Request shapes relative to one volblocksize."""
    quarter = max(vbs // 4, PAGE)
    out = {
        "block": Shape("block", nsegs=0, total=vbs),
        "vec4": Shape("vec4", nsegs=4, seg_len=quarter),
        "straddle": Shape("straddle", nsegs=0, total=2 * PAGE, offset=vbs - PAGE),
        "block+4k": Shape("block+4k", nsegs=0, total=vbs + PAGE),
        "sector512": Shape("sector512", nsegs=0, total=PAGE, offset=512),
        "buf512": Shape("buf512", nsegs=0, total=PAGE, page_offset=512),
    }
    if vbs > PAGE:
        out["subblock"] = Shape("subblock", nsegs=0, total=PAGE, offset=PAGE)
    return out


def run_shape(zdio, op: str, vbs: int, shape: Shape, title: str, seed: str,
              queue: str = "bio", vol: str = "vol"):
    rounds = zdio.trials or ZVOL_TRIALS
    conds = zconditions()
    span = shape.offset + shape.page_offset + shape.length
    stride = -(-span // vbs) * vbs
    zv = create_zvol(zdio.dataset, zdio.engine, vol, stride * rounds * len(conds), vbs,
                     queue=queue)
    file = FileSpec(zv.dev, zv.size, seed=seed)
    after = None
    if op == "write":       # every trial's bytes again, from disk, in a fresh import
        after = reimport_check(zdio.zfs, zdio.engine, zdio.pool, file,
                               relocate=relocator(zdio.engine, zv.name))
    return zdio.run(title, file, shape, conds, expect_path(op, shape, vbs), op=op,
                    stride=stride, name=f"{op}-{shape.name}", after=after, rounds=rounds,
                    notes=[f"{zv.name} ({zv.dev}, {queue} queue) volblocksize {vbs}, "
                           f"primarycache=metadata; path from kprobe hits: "
                           f"dmu_{op}_abd (DIO) vs dmu_{op}_uio_dnode (ARC)"])


CASES = [(v, s) for v in SIZES for s in shapes(SIZES[v])]


@pytest.mark.parametrize("op", ["read", "write"])
@pytest.mark.parametrize("vbs,shape", CASES, ids=[f"{v}-{s}" for v, s in CASES])
def test_zvol_shape(zdio, op, vbs, shape):
    """One shape, one volblocksize: full length, right bytes, the promised path."""
    size = SIZES[vbs]
    sh = shapes(size)[shape]
    v = run_shape(zdio, op, size, sh, f"zvol {op.upper()} {shape} ({sh.length} B at "
                  f"{sh.offset}, buffer page offset {sh.page_offset}), volblocksize {vbs}",
                  f"z-{op}-{vbs}-{shape}")
    assert v.ok, "\n" + v.table.text()


LAYOUTS = [pytest.param(lay, marks=[pytest.mark.guest(nvme=n), pytest.mark.pool(layout=lay)],
                        id=lay) for lay, n in (("mirror", 2), ("raidz2", 4))]


@pytest.mark.parametrize("op", ["read", "write"])
@pytest.mark.parametrize("shape", ["block", "straddle"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_zvol_layout(zdio, op, shape, layout):
    """The same at 128K on a mirror and on raidz2 (the seed's layout)."""
    sh = shapes(SIZES["128K"])[shape]
    v = run_shape(zdio, op, SIZES["128K"], sh, f"zvol {op.upper()} {shape}, volblocksize "
                  f"128K, {layout}", f"zl-{layout}-{op}-{shape}")
    assert v.ok, "\n" + v.table.text()


# The blk-mq queue (zvol_use_blk_mq=1): the series takes a request's pages with
# rq_for_each_segment and checks their alignment per request, a branch of its own
# (zvol_dio_get_pages, zfs_uio_page_aligned) that no bio-queue case reaches (the
# debug profile's coverage of the zvol cases said so). Each row runs the shapes
# whose pages sit at, and off, page boundaries: the aligned ones must go around the
# ARC, the misaligned ones through it, every byte right either way.
BLKMQ_SHAPES = ("block", "vec4", "buf512", "sector512")
BLKMQ_ROWS = [(v, op) for v in ("4K", "128K", "1M") for op in ("read", "write")]


@pytest.mark.quick("128K-read")
@pytest.mark.parametrize("vbs,op", BLKMQ_ROWS, ids=[f"{v}-{op}" for v, op in BLKMQ_ROWS])
def test_zvol_blkmq(zdio, vbs, op):
    """Aligned and misaligned shapes on a zvol whose queue is blk-mq."""
    size = SIZES[vbs]
    failed = []
    for i, name in enumerate(BLKMQ_SHAPES):
        sh = shapes(size)[name]
        v = run_shape(zdio, op, size, sh, f"blk-mq zvol {op.upper()} {name} ({sh.length} B "
                      f"at {sh.offset}, buffer page offset {sh.page_offset}), volblocksize "
                      f"{vbs}", f"zq-{op}-{vbs}-{name}", queue="blk-mq", vol=f"mq{i}")
        if not v.ok:
            failed.append(v.table.text())
    assert not failed, "\n" + "\n".join(failed)
