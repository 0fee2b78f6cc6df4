"""Appends submitted together (suite/ioengine/explore/batch.py): drawn from a generator
of their own, run here by the guest engine on a local file (libaio, io_uring), and
judged: a file grown past its RLIMIT_FSIZE, or by less than the counts returned, is a
finding (async-dio 917a434a1a judged every append at the end of file of submission
time)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from suite.explore import reach
from suite.explore.gen import Choices, generate
from suite.explore.ops import Op, Sequence
from suite.ioengine.explore.batch import judge
from suite.ioengine.explore.model import Ctx, Model
from suite.ioengine.explore.step import Step
from tests.test_explore import _ops, ddir, run_engine  # noqa: F401  (ddir: a fixture)

MIB = 1 << 20
REC = 16384


def _batched(seed: int, share: float):
    return generate(seed, 80, "file", MIB, Choices(zfs_ops=True, batch_share=share,
                                                    batch_share_async=share))


def test_batches_come_from_a_generator_of_their_own():
    """A seed's other ops stay what they were: a batch takes a write's place."""
    for seed in range(1, 40):
        with_, without = _batched(seed, 0.9), _batched(seed, 0.0)
        batches = [o for o in with_.ops if o.op == "append_batch"]
        if batches:
            break
    else:
        pytest.fail("no seed of 1-39 drew a batch at a share of 0.9")
    assert len(with_.ops) == len(without.ops)
    for a, b in zip(with_.ops, without.ops):
        if a.op == "append_batch":
            assert b.op in ("pwrite", "pwritev") and a.data == b.data
            assert a.iface == b.iface or b.iface not in ("libaio", "io_uring")
        else:
            assert a == b
    rec = int(with_.props["recordsize"].rstrip("KM")) * (1024 if "K" in
                                                          with_.props["recordsize"] else MIB)
    assert all(o.len == o.size == rec and 2 <= o.segs <= 3 for o in batches)
    assert [Op.from_dict(o.to_dict()) for o in with_.ops] == list(with_.ops)
    assert batches[0].render().startswith(f"append_batch iface={batches[0].iface} len={rec}")
    assert any(c.startswith("batch:") for c in reach.seq_cells(with_))


def test_batches_are_drawn_more_often_with_the_async_path_on():
    params = ("zfs_async_dio_enabled",)
    runs = [generate(s, 40, "file", MIB, Choices(zfs_ops=True, params=params))
            for s in range(1, 121)]
    def share(on: int) -> float:
        seqs = [q for q in runs if q.params.get("zfs_async_dio_enabled") == on
                and not q.caller and q.props.get("recordsize") != "1M"]
        return sum(any(o.op == "append_batch" for o in q.ops) for q in seqs) / len(seqs)
    assert share(1) > 2 * share(0) > 0


def test_no_batch_where_records_are_large_or_a_caller_issues_the_requests():
    for seed in range(1, 30):
        seq = _batched(seed, 1.0)
        if seq.props.get("recordsize") == "1M" or seq.caller:
            assert not any(o.op == "append_batch" for o in seq.ops), seq.props


@pytest.mark.parametrize("iface", ["libaio", "io_uring"])
@pytest.mark.parametrize("limit", ["", "fsize"])
def test_appends_in_one_submit_land_whole_at_the_end(ddir: Path, iface: str, limit: str):
    """The file first padded to a record; each append whole, one after another; under
    RLIMIT_FSIZE with room for one the others are refused with EFBIG."""
    seq = Sequence(seed=5, init_size=5000, file_size_max=MIB, ops=(
        Op("append_batch", iface=iface, len=REC, segs=3, data=4, size=REC, limit=limit),
        Op("pwrite", iface="sync", off=0, len=4096, data=5),      # no limit any more
        Op("verify")))
    rc, lines = run_engine(ddir, seq, f"batch-{iface}-{limit or 'none'}")
    ops = _ops(lines)
    if ops[0]["outcome"] == "unsupported":
        pytest.skip(f"{iface} here: {ops[0]['why']}")
    assert rc == 0 and lines[-1]["ok"], lines[-3:]
    assert ops[0]["start"] == REC, "5000 bytes padded to the record"
    if limit:
        assert sorted(ops[0]["appends"]) == [-errno.EFBIG, -errno.EFBIG, REC]
        assert ops[0]["rlimit_fsize"] == 2 * REC and ops[2]["size"] == 2 * REC
    else:
        assert ops[0]["appends"] == [REC] * 3 and ops[2]["size"] == 4 * REC
    assert reach.batch_cell(iface, bool(limit)) in reach.run_cells(lines)


class _T:
    blockdev, timeout_s = False, 5.0

    def __init__(self, fd: int) -> None:
        self.fd = fd


def _ctx(tmp_path: Path, landed: bytes) -> Ctx:
    f = tmp_path / "t.bin"
    f.write_bytes(landed)
    return Ctx(target=_T(os.open(f, os.O_RDWR)), model=Model(b"\0" * REC), seed=1, source=b"")


def test_the_stale_end_of_file_is_past_limit_and_a_lost_append_is_size(tmp_path: Path):
    s = Step("append_batch", iface="libaio", len=REC, segs=2, data=1, size=REC, limit="fsize")
    datas = [b"\x11" * REC, b"\x22" * REC]
    # both admitted under room for one, both landed: the file past its limit
    ctx = _ctx(tmp_path, b"\0" * REC + datas[0] + datas[1])
    o = judge(ctx, s, REC, 2 * REC, datas, [(REC, 0), (REC, 0)])
    assert o.kind == "past-limit" and "grew to 49152" in o.why
    # both returned their length, one landed over the other: the file grew by one
    ctx = _ctx(tmp_path, b"\0" * REC + datas[1])
    o = judge(ctx, s, REC, None, datas, [(REC, 0), (REC, 0)])
    assert o.kind == "size"
    # refused with EFBIG, the other whole: right, in either order
    ctx = _ctx(tmp_path, b"\0" * REC + datas[1])
    o = judge(ctx, s, REC, 2 * REC, datas, [(-errno.EFBIG, errno.EFBIG), (REC, 0)])
    assert o.ok and o.extra["order"] == [1] and ctx.model.size == 2 * REC
    # another error is the finding it names
    ctx = _ctx(tmp_path, b"\0" * REC)
    o = judge(ctx, s, REC, None, datas, [(-errno.EIO, errno.EIO), (REC, 0)])
    assert o.kind == "error:EIO"
