"""Several actors at once (explore's ``actors`` op): the oracle on hand-made
histories, the programs as data, and the op run for real on this machine's file
system, honest and with an actor that lies."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from suite.explore.gen import Choices, generate
from suite.explore.ops import Op, Sequence
from suite.ioengine.content import pattern
from suite.ioengine.explore import actors
from suite.ioengine.explore.history import Read, Written, check_final, check_read
from suite.ioengine.explore.model import Ctx, Model
from suite.ioengine.explore.ops import OPS
from suite.ioengine.explore.requests import Target
from suite.ioengine.explore.step import Step

B = 4096
OLD = b"o" * (2 * B)
A, C = b"a" * B, b"c" * B


def w(who: str, data: bytes, t0: int, t1: int, off: int = 0, mmap: bool = False) -> Written:
    return Written(who, off, data, t0, t1, mmap)


def test_a_read_after_a_write_ended_must_see_it():
    v = check_read(Read("r", 0, OLD[:B], 20, 30), [w("w", A, 0, 10)], OLD, 0, B)
    assert v is not None and v.kind == "wrong-bytes" and v.at == 0
    assert "w" in v.why                      # the legal contents are named


def test_a_read_overlapping_a_write_may_see_before_or_after():
    for got in (OLD[:B], A):
        assert check_read(Read("r", 0, got, 5, 15), [w("w", A, 0, 10)], OLD, 0, B) is None


def test_a_superseded_write_is_stale_but_concurrent_last_writes_are_both_legal():
    ws = [w("first", A, 0, 10), w("second", C, 20, 30)]
    assert check_read(Read("r", 0, A, 40, 50), ws, OLD, 0, B) is not None
    overlapping = [w("x", A, 0, 25), w("y", C, 20, 30)]
    for got in (A, C):
        assert check_read(Read("r", 0, got, 40, 50), overlapping, OLD, 0, B) is None


def test_a_block_torn_between_two_writes_is_flagged_unless_a_mapping_stored():
    torn = A[:B // 2] + C[B // 2:]
    ws = [w("x", A, 0, 25), w("y", C, 20, 30)]
    v = check_read(Read("r", 0, torn, 22, 24), ws, OLD, 0, B)
    assert v is not None and v.kind == "torn"
    stores = [w("x", A, 0, 25, mmap=True), w("y", C, 20, 30)]
    assert check_read(Read("r", 0, torn, 22, 24), stores, OLD, 0, B) is None


def test_bytes_nobody_wrote_and_blocks_past_the_first():
    ws = [w("w", A + C, 0, 10)]
    assert check_read(Read("r", 0, A + C, 20, 30), ws, OLD, 0, B) is None
    v = check_read(Read("r", 0, A + b"z" * B, 20, 30), ws, OLD, 0, B)
    assert v is not None and v.at == B
    # a fine (mmap) read is judged byte by byte, and still refuses bytes nobody wrote
    assert check_read(Read("m", 0, b"z" * B, 5, 15, fine=True), [w("w", A, 0, 10)], OLD,
                      0, B) is not None


def test_the_end_state_agrees_across_paths_and_holds_a_legal_last_write():
    ws = [w("x", A, 0, 25), w("y", C, 20, 30)]
    for last in (A, C):
        paths = {"buffered": last + OLD[B:], "O_DIRECT": last + OLD[B:], "mmap": last + OLD[B:]}
        assert check_final(paths, ws, OLD, 0, B) is None
    v = check_final({"buffered": A + OLD[B:], "O_DIRECT": C + OLD[B:]}, ws, OLD, 0, B)
    assert v is not None and v.kind == "paths-disagree"
    stale = [w("x", A, 0, 10), w("y", C, 20, 30)]
    v = check_final({"buffered": A + OLD[B:]}, stale, OLD, 0, B)
    assert v is not None and v.kind == "wrong-bytes"


def test_programs_are_data_drawn_from_the_seed():
    a = actors.draw(7, 3, 4, 5, 8192, 16 * B, False, True, 1 << 20)
    assert a == actors.draw(7, 3, 4, 5, 8192, 16 * B, False, True, 1 << 20)
    assert a != actors.draw(7, 4, 4, 5, 8192, 16 * B, False, True, 1 << 20)
    assert len(a.programs) == 4 and all(len(p) == 5 for p in a.programs)
    assert {r.kind for r in a.programs[0]} == {"dio_write"}
    assert all(r.off % B == 0 and r.len % B == 0 and 8192 <= r.off and r.off + r.len <= 8192 + 16 * B
               for p in a.programs for r in p)
    dev = actors.draw(7, 3, 4, 5, 0, 16 * B, True, True, 1 << 20)
    assert not dev.kinds() & {"punch", "copy", "truncate"}      # a block device's size stays


def _ctx(tmp_path: Path, size: int) -> Ctx:
    path = str(tmp_path / "target")
    t = Target(path, path, False, 30.0)
    init = pattern("1:init", 0, size)
    os.pwrite(t.fd, init, 0)
    return Ctx(t, Model(init), 1, pattern("1:src", 0, 1 << 20))


def no_mmap_writer(token: int, actors: int) -> bool:
    plan = actors_mod.draw(1, token, actors, 5, 4 * B, 8 * B, False, True, 1 << 20)
    return "mmap_write" not in plan.kinds()


actors_mod = actors
# This machine's ext4 is not the file system under test, and Linux says it may keep a
# stale page when an O_DIRECT write meets an mmap writer ("Page cache invalidation
# failure on direct I/O. Possible data corruption"): those programs are left to the
# guests, where OpenZFS keeps its mapped pages coherent with Direct I/O.
HOST_TOKENS = [t for t in range(1, 20) if no_mmap_writer(t, 2 + t % 3)][:8]


@pytest.mark.parametrize("token", HOST_TOKENS)
def test_actors_on_this_machines_file_system_pass(tmp_path, token):
    ctx = _ctx(tmp_path, 12 * B)
    o = OPS["actors"](ctx, Step("actors", off=4 * B, len=8 * B, segs=2 + token % 3, size=5,
                                data=token))
    assert o.outcome == "ok", o.why
    assert o.extra["requests"] == o.extra["actors"] * 5
    assert ctx.model.read(0, 12 * B) == os.pread(ctx.target.fd, 12 * B, 0)


def test_a_truncating_actor_runs_and_the_size_is_kept(tmp_path, monkeypatch):
    real = actors.draw

    def truncating(*a, **kw):
        plan = real(*a, **kw)
        extra = actors.Req("truncate", 8 * B, 4 * B)
        return actors.Plan(plan.threads, (plan.programs[0], (extra,) + plan.programs[1][1:]))
    monkeypatch.setattr(actors, "draw", truncating)
    ctx = _ctx(tmp_path, 12 * B)
    o = OPS["actors"](ctx, Step("actors", off=4 * B, len=8 * B, segs=2, size=4, data=5))
    assert o.outcome == "ok", o.why
    assert "truncate" in o.extra["kinds"]
    assert os.fstat(ctx.target.fd).st_size == 12 * B


def test_an_actor_returning_stale_bytes_is_caught(tmp_path, monkeypatch):
    """A read that returns the window's bytes from before every write (what a page
    cache Direct I/O forgot to invalidate would give) fails the op."""
    real_do = actors.Actor.do
    first: dict[str, bytes] = {}

    def stale(self, r, size):
        res, data = real_do(self, r, size)
        if r.kind.endswith("_read") and res > 0:
            key = f"{r.off}"
            first.setdefault(key, data)
            return res, first[key] if r.kind == "buf_read" else data
        return res, data

    monkeypatch.setattr(actors.Actor, "do", stale)
    monkeypatch.setattr(actors, "draw", lambda *a, **kw: actors.Plan(True, (
        (actors.Req("buf_read", 4 * B, B), actors.Req("dio_write", 4 * B, B, "k"),
         actors.Req("buf_read", 4 * B, B)),)))
    ctx = _ctx(tmp_path, 8 * B)
    o = OPS["actors"](ctx, Step("actors", off=4 * B, len=4 * B, segs=2, size=3, data=1))
    assert o.outcome == "failed" and o.kind == "wrong-bytes", o
    assert "actor 0 buf_read" in o.why


def test_the_generator_draws_actors_and_the_json_keeps_them():
    seqs = [generate(s, 40, "file", 1 << 20, Choices(zfs_ops=False)) for s in range(40)]
    ops = [o for s in seqs for o in s.ops if o.op == "actors"]
    assert ops and {o.segs for o in ops} == {2, 3, 4}
    back = Sequence.from_json(seqs[[i for i, s in enumerate(seqs)
                                    if any(o.op == "actors" for o in s.ops)][0]].to_json())
    got = [o for o in back.ops if o.op == "actors"][0]
    assert got.len % B == 0 and got.off % B == 0 and got.size >= 1 and got.data
    assert Op.from_dict(got.to_dict()) == got


def test_the_shrinker_offers_fewer_actors_and_fewer_requests():
    from suite.explore.shrink import simpler
    op = Op("actors", off=0, len=8 * B, segs=4, size=8, data=1)
    got = simpler(op)
    assert replace_(op, segs=2) in got and replace_(op, size=4) in got
    assert all(c.segs >= 2 for c in got)
    assert simpler(Op("actors", off=0, len=B, segs=2, size=1, data=1)) == []


def replace_(op: Op, **kw) -> Op:
    from dataclasses import replace
    return replace(op, **kw)
