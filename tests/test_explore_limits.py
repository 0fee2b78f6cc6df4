"""Writes cut by a limit mid-request (suite/ioengine/explore/limits.py): drawn from a
generator of their own, run here by the guest engine on a local file (RLIMIT_FSIZE;
the refquota limit needs a dataset: its judge is held to a file changed behind it)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from suite.explore import reach
from suite.explore.gen import Choices, generate
from suite.explore.ops import Op, Sequence
from suite.ioengine.explore.limits import fsize_cut, judge_quota
from suite.ioengine.explore.model import Ctx, Model
from tests.test_explore import _ops, ddir, run_engine  # noqa: F401  (ddir: a fixture)

MIB = 1 << 20


def test_the_cut_is_half_the_write_in_whole_pages():
    assert fsize_cut(131072) == 65536 and fsize_cut(12288) == 4096
    assert fsize_cut(4096) == 0 and fsize_cut(512) == 0, "a page or less: refused whole"


def test_limits_come_from_a_generator_of_their_own():
    """A seed's other draws stay what they were: only ``limit`` differs, and where a
    refquota can cut a write (``quota_writes_grow``): the ops are the same ops, in the
    same order once the quota writes are set apart."""
    # seed 2: a sequence with no caller (seed 7 draws NFS since it came: no ZFS
    # commands under it, so no quota)
    with_, without = (generate(2, 60, "file", MIB, Choices(zfs_ops=True, limit_share=s))
                      for s in (0.5, 0.0))
    assert not with_.caller
    assert sorted(o.op for o in with_.ops) == sorted(o.op for o in without.ops)
    rest = iter(o.op for o in without.ops)
    assert all(op in rest for op in (o.op for o in with_.ops if o.limit != "quota"))
    cut = [o for o in with_.ops if o.limit]
    assert cut and {o.limit for o in cut} <= {"fsize", "quota"}
    assert all(o.op in ("pwrite", "pwritev") and o.buf not in ("racing", "holed") for o in cut)
    assert [Op.from_dict(o.to_dict()) for o in with_.ops] == list(with_.ops)
    assert "limit=" in cut[0].render()
    no_zfs = generate(2, 60, "file", MIB, Choices(zfs_ops=False, limit_share=0.5))
    assert {o.limit for o in no_zfs.ops if o.limit} == {"fsize"}, "quota needs the commands"
    assert "limit:fsize" in reach.seq_cells(with_)


@pytest.mark.parametrize("iface,direct", [("sync", False), ("sync", True), ("libaio", True),
                                          ("io_uring", True)])
def test_a_write_cut_by_rlimit_fsize_returns_the_cut_count(ddir: Path, iface: str, direct: bool):
    seq = Sequence(seed=3, init_size=8192, file_size_max=MIB, ops=(
        Op("pwrite", iface=iface, direct=direct, off=65536, len=131072, data=1, limit="fsize"),
        Op("pwritev", iface=iface, direct=direct, off=0, len=4096, segs=2, data=2,
           limit="fsize"),
        Op("pwrite", iface="sync", off=4096, len=4096, data=3),       # no limit any more
        Op("verify")))
    rc, lines = run_engine(ddir, seq, f"fsize-{iface}-{int(direct)}")
    ops = _ops(lines)
    if any(o["outcome"] == "unsupported" for o in ops):
        pytest.skip(f"{iface} here: {[o['why'] for o in ops if o['outcome'] == 'unsupported']}")
    assert rc == 0 and lines[-1]["ok"], lines[-3:]
    assert ops[0]["res"] == 65536 and ops[0]["cut"] == 65536 and ops[0]["limit_at"] == 131072
    assert ops[1]["errname"] == "EFBIG" and ops[1]["cut"] == 0, "a page: refused whole"
    assert ops[2]["res"] == 4096 and "limit" not in ops[2]
    assert ops[3]["size"] == 131072
    cells = reach.run_cells(lines)
    assert "limit:fsize" in cells


def test_a_quota_error_after_bytes_landed_is_the_finding(tmp_path: Path):
    """EDQUOT with the file as it was: allowed; EDQUOT with some of the write landed:
    ``error:EDQUOT`` (the review's short write reported as an error)."""
    f = tmp_path / "t.bin"
    f.write_bytes(b"\0" * 8192)
    fd = os.open(f, os.O_RDWR)
    try:
        ctx = Ctx(target=type("T", (), {"fd": fd, "blockdev": False})(), model=Model(b"\0" * 8192),
                  seed=1, source=b"")
        data = b"\x11" * 8192
        ok = judge_quota(ctx, 0, data, None, errno.EDQUOT, "syscall", None)
        assert ok.outcome == "ok" and ok.extra["errname"] == "EDQUOT"
        os.pwrite(fd, b"\x11" * 4096, 0)           # a record landed, then the error
        bad = judge_quota(ctx, 0, data, None, errno.EDQUOT, "syscall", None)
        assert bad.outcome == "failed" and bad.kind == "error:EDQUOT"
        assert "landed" in (bad.why or "")
        short = judge_quota(ctx, 0, data, 4096, 0, "syscall", None)
        assert short.outcome == "ok" and ctx.model.read(0, 4096) == b"\x11" * 4096
    finally:
        os.close(fd)


def test_writes_that_may_take_the_async_path_are_cut_more_often():
    """A write the taskq commits in part, then cut by a limit, is the async path's own
    shape (317cbaa578's short write reported as EDQUOT, dc643dc204's pin overflow):
    sequences whose O_DIRECT writes may take it cut 15% of their writes, the others 6%,
    and a write cut at 6% stays cut (the same generator)."""
    from dataclasses import replace as with_
    from suite.explore.gen import Choices, async_dio, generate, sequence_seed
    from suite.explore.ops import WRITES
    params = ("zfs_async_dio_enabled", "zfs_dio_enabled", "zfs_async_dio_max_inflight")
    ch = Choices(zfs_ops=True, params=params)
    seqs = [generate(sequence_seed(1, k), 40, "file", 3 << 20, ch) for k in range(300)]

    def share(qs) -> float:
        w = [o for q in qs for o in q.ops if o.op in WRITES and o.buf not in ("racing", "holed")]
        return sum(1 for o in w if o.limit) / len(w)
    fast = [q for q in seqs if async_dio(q.props, q.params) and not q.caller]
    plain = [q for q in seqs if not async_dio(q.props, q.params) and not q.caller]
    # (batches take writes no other draw wanted: the shares come out above 15% and 6%)
    assert 0.12 < share(fast) < 0.3 and 0.03 < share(plain) < 0.09, (share(fast), share(plain))
    low = with_(ch, limit_share_async=ch.limit_share)
    for q in fast[:20]:
        before = generate(q.seed, 40, "file", 3 << 20, low)
        cut = {o.data for o in q.ops if o.limit}       # a write is its data, wherever it went
        assert {b.data for b in before.ops if b.limit} <= cut
