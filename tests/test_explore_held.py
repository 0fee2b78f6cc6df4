"""Requests held in flight while something else runs (suite/ioengine/explore/held.py):
drawn from a generator of their own, refused cleanly where the pool's commands are
missing (here), judged in a guest (docs/measurements.md)."""
from __future__ import annotations

import os
from pathlib import Path

from suite.explore import reach
from suite.explore.gen import Choices, generate, recordsize
from suite.explore.ops import Op, Sequence
from suite.explore.reshape import crash_point
import random

from tests.test_explore import _ops, ddir, run_engine  # noqa: F401  (ddir: a fixture)

MIB = 1 << 20
HELD = ("held_read", "held_write")


def test_holds_come_from_a_generator_of_their_own():
    meta = {k: (("metadata",) if k == "primarycache" else v)
            for k, v in Choices().props.items()}
    with_, without = (generate(9, 60, "file", MIB, Choices(zfs_ops=True, held_share=s,
                                                           props=meta))
                      for s in (0.9, 0.0))
    cached = generate(9, 60, "file", MIB, Choices(zfs_ops=True, held_share=0.9, props={
        **meta, "primarycache": ("all",)}))
    assert not any(o.op.startswith("held_") for o in cached.ops), "the dbuf cache serves it"
    assert len(with_.ops) == len(without.ops)
    held = [(a, b) for a, b in zip(with_.ops, without.ops) if a.op.startswith("held_")]
    assert held, "a 0.9 share holds some request"
    rec = recordsize(with_.props)
    for a, b in held:       # the request it was, held: same interface, range, data
        assert a.iface == b.iface and b.direct and b.off % 4096 == 0
        assert b.iface in ("sync", "libaio", "io_uring") and a.slow_ms in (1000, 3000)
        assert a.then == "rollback" if a.op == "held_read" else a.then != "rollback"
        if a.op == "held_read":
            assert (a.off, a.len) == (b.off, b.len)
        else:               # the whole records of its range: what Direct I/O serves
            assert a.off % rec == 0 and a.len % rec == 0 and a.off <= b.off and \
                b.off + b.len <= a.off + a.len < b.off + b.len + rec
        assert not a.keep or a.iface != "sync", "a syscall has no submitter to keep"
    assert [Op.from_dict(o.to_dict()) for o in with_.ops] == list(with_.ops)
    assert any(c.startswith("held:") for c in reach.seq_cells(with_))
    no_zfs = generate(9, 60, "file", MIB, Choices(zfs_ops=False, held_share=0.9))
    assert not any(o.op.startswith("held_") for o in no_zfs.ops), "they need zinject"


def test_a_held_writes_records_and_its_submitter_are_drawn_on_their_own():
    """A held write of part of a record is served through the ARC (never held, never
    async: 2026-12-07 at dc643dc204, ``held: false``); the submitter's lifetime comes
    from a generator of its own, so the holds' other draws stay what they were."""
    from suite.explore.reshape import hold_requests
    ops = [Op(k, iface=i, direct=True, off=12288, len=8192, data=3)
           for k in ("pwrite", "pread") for i in ("sync", "libaio", "io_uring")] * 20
    meta = {"primarycache": "metadata"}
    base = hold_requests(ops, random.Random(5), 0.9, meta, rec=16384)
    kept = hold_requests(ops, random.Random(5), 0.9, meta, keep=random.Random(6), rec=16384)
    assert [(o.op, o.off, o.len, o.then, o.slow_ms) for o in base] == \
        [(o.op, o.off, o.len, o.then, o.slow_ms) for o in kept]
    writes = [o for o in kept if o.op == "held_write"]
    assert writes and all((o.off, o.len) == (0, 32768) for o in writes)
    assert all((o.off, o.len) == (12288, 8192) for o in kept if o.op == "held_read")
    assert {o.keep for o in kept if o.op in HELD and o.iface != "sync"} == {True, False}
    assert not any(o.keep for o in kept if o.iface == "sync") and not any(o.keep for o in base)
    cells = reach.seq_cells(Sequence(seed=1, ops=tuple(kept)))
    assert {"held:submitter:reaps", "held:submitter:exits"} <= set(cells)


def test_a_held_requests_segments_are_drawn_on_their_own_up_to_a_heap_iovec():
    """Half the holds are vectored: as many page segments as fit, up to 9 (past
    UIO_FASTIOV the kernel kmallocs the iovec array and frees it as the submitting
    call returns: what write-iovec-use-after-free's task walked); a generator of
    their own, so every other draw of the holds stays what it was."""
    from suite.explore.reshape import HEAP_IOVECS, hold_requests
    ops = [Op(k, iface=i, direct=True, off=0, len=n, data=3)
           for k in ("pwrite", "pread") for i in ("sync", "libaio", "io_uring")
           for n in (4096, 12288, 65536)] * 10
    meta = {"primarycache": "metadata"}
    plain = hold_requests(ops, random.Random(5), 0.9, meta, keep=random.Random(6), rec=16384)
    vec = hold_requests(ops, random.Random(5), 0.9, meta, keep=random.Random(6), rec=16384,
                        vector=random.Random(7))
    same = [(o.op, o.iface, o.then, o.slow_ms, o.keep) for o in plain]
    assert same == [(o.op, o.iface, o.then, o.slow_ms, o.keep) for o in vec]
    held = [o for o in vec if o.op in HELD]
    assert not any(o.segs for o in plain) and {o.segs for o in held} > {0}
    for a, o in zip(plain, vec):
        if o.op not in HELD:
            continue
        assert o.segs == 0 or 2 <= o.segs == min(HEAP_IOVECS, o.len // 4096)
        if o.segs and o.op == "held_write":     # grown to a heap iovec's pages, whole records
            assert o.segs == HEAP_IOVECS and o.off == a.off and o.len >= max(a.len, 36864)
        else:
            assert (o.off, o.len) == (a.off, a.len)
    assert [Op.from_dict(o.to_dict()).to_dict() for o in vec] == [o.to_dict() for o in vec]
    assert "segs=9" in next(o.render() for o in held if o.segs == 9)
    assert "segs" not in next(o.render() for o in held if not o.segs)
    cells = reach.seq_cells(Sequence(seed=1, ops=tuple(vec)))
    assert {"held:iovec:stack", "held:iovec:heap"} <= set(cells)


def test_a_vectored_held_request_goes_to_the_kernel_vectored(ddir: Path):
    """Each interface submits the segments as one vectored request (PREADV/PWRITEV,
    READV/WRITEV), its bytes where the segments say; the op says where the kernel
    built its iovec array."""
    import pytest
    from suite.ioengine.explore.held import Inflight, iovec_of
    from suite.ioengine.explore.requests import IoBuffer, Target
    from suite.ioengine.explore.step import Step
    data = bytes(range(256)) * 144                  # 36 KiB: nine pages
    t = Target(str(ddir / "vec.bin"), str(ddir / "vec"), False, 30.0)
    try:
        for iface in ("sync", "libaio", "io_uring"):
            os.pwrite(t.fd, b"\0" * len(data), 0)
            s = Step("held_write", iface=iface, off=0, len=len(data), data=1, segs=9)
            buf = IoBuffer("anon", len(data), 0, s.segs, t.shm_path, for_read=False)
            buf.fill(data)
            assert len(buf.segments) == 9
            try:
                io = Inflight(t, s, True, buf)
            except OSError as e:
                pytest.skip(f"{iface} here: {e}")
            io.start()
            assert io.wait(30.0) == len(data), iface
            io.close()
            buf.close()
            assert os.pread(t.fd, len(data), 0) == data, iface
    finally:
        t.close()
    assert (iovec_of(0), iovec_of(1), iovec_of(8), iovec_of(9)) == \
        ("stack", "stack", "stack", "heap")


def test_no_crash_point_spans_a_held_rollback():
    ops = [Op("pwrite", off=0, len=4096)] * 3 + [Op("held_read", iface="libaio", len=4096,
                                                    then="rollback")] + \
        [Op("pwrite", off=0, len=4096)] * 3
    for k in range(50):
        out = crash_point(list(ops), random.Random(k), 1.0)
        if "freeze" in [o.op for o in out]:
            i, j = [o.op for o in out].index("freeze"), [o.op for o in out].index("crash")
            assert not any(o.op == "held_read" for o in out[i:j + 1])


def test_without_the_pools_commands_a_hold_is_unsupported(ddir: Path):
    seq = Sequence(seed=2, init_size=8192, file_size_max=MIB, ops=(
        Op("held_read", iface="libaio", off=0, len=4096, then="rollback", slow_ms=1000),
        Op("held_write", iface="io_uring", off=0, len=4096, data=1, then="fsync",
           slow_ms=1000),
        Op("verify")))
    rc, lines = run_engine(ddir, seq, "held")
    ops = _ops(lines)
    assert rc == 0 and [o["outcome"] for o in ops] == ["unsupported", "unsupported", "ok"]
    assert "zfs-dataset" in ops[0]["why"]


def test_a_held_requests_completion_is_the_kernels_not_a_threads(ddir: Path):
    """An async request is submitted by the thread and reaped here: done() reads the
    kernel's completion without waiting (a thread's late wake-up once made a barrier
    look early at the very commit that fixed it)."""
    import pytest
    from suite.ioengine.explore.held import Inflight
    from suite.ioengine.explore.requests import IoBuffer, Target
    from suite.ioengine.explore.step import Step
    t = Target(str(ddir / "held.bin"), str(ddir / "held"), False, 30.0)
    try:
        for iface in ("sync", "libaio", "io_uring"):
            s = Step("held_write", iface=iface, off=0, len=8192, data=1)
            buf = IoBuffer("anon", 8192, 0, 1, t.shm_path, for_read=False)
            buf.fill(b"\x5a" * 8192)
            try:
                io = Inflight(t, s, True, buf)
            except OSError as e:
                pytest.skip(f"{iface} here: {e}")
            io.start()
            assert io.wait(30.0) == 8192 and io.done() and io.submitted()
            assert io.submitter == ("syscall" if iface == "sync" else "exits")
            io.close()
            buf.close()
        assert os.pread(t.fd, 8192, 0) == b"\x5a" * 8192
        # keep: the submitting thread reaps its request itself and lives until then;
        # this one only reads what it got (never reaps: one reaper per queue)
        for iface in ("libaio", "io_uring"):
            s = Step("held_read", iface=iface, off=0, len=8192, keep=True)
            buf = IoBuffer("anon", 8192, 0, 1, t.shm_path, for_read=True)
            io = Inflight(t, s, False, buf)
            io.start()
            assert io.wait(30.0) == 8192 and io.done() and io.submitted()
            assert io.submitter == "reaps" and buf.gather(8192) == b"\x5a" * 8192
            io.close()
            buf.close()
    finally:
        t.close()


def test_a_sync_held_write_gets_a_sync_later_write_and_an_error_frees_no_busy_buffer(ddir: Path):
    """``later_write`` beside a sync held write is a syscall too (there is no sync
    queue: asking for one raised, and the op's cleanup then freed the buffer the held
    pwritev was still writing from: BufferError, a no-result in a guest)."""
    import pytest
    from suite.ioengine.explore.held import Inflight, _later_write
    from suite.ioengine.explore.model import Ctx, Model
    from suite.ioengine.explore.requests import IoBuffer, Target
    from suite.ioengine.explore.step import Step
    t = Target(str(ddir / "held.bin"), str(ddir / "held"), False, 30.0)
    try:
        s = Step("held_write", iface="sync", off=0, len=8192, data=1, then="later_write")
        buf = IoBuffer("anon", 8192, 0, 1, t.shm_path, for_read=False)
        buf.fill(b"\x5a" * 8192)
        io = Inflight(t, s, True, buf)
        io.start()
        assert io.wait(30.0) == 8192
        ctx = Ctx(target=t, model=Model(bytearray(8192)), seed=1, source=b"")
        try:
            assert _later_write(ctx, s, io) is None, "a sync write: no early barrier to judge"
        except OSError as e:
            pytest.skip(f"O_DIRECT or syncfs here: {e}")
        assert not os.path.exists(t.src_path + ".later")
        io.close()
        buf.close()
    finally:
        t.close()


def test_a_barrier_timed_under_a_stream_is_late_only_when_it_outlived_later_writes(
        ddir: Path, monkeypatch):
    """``stream``: fsync while the held write is in flight, then four later writes of the
    same bytes to the same range. A barrier that returned at once is fine (its timing is
    said); one that waited until writes submitted after it completed, more than half a
    hold past the write before it, is ``late-barrier`` (fsync starved by a write stream,
    async-dio 317cbaa578). The fsync's wait is simulated here; in a guest it is the
    kernel's (docs/measurements.md)."""
    import time as time_mod
    import pytest
    from suite.ioengine.explore import held
    from suite.ioengine.explore.model import Ctx, Model
    from suite.ioengine.explore.requests import IoBuffer, Target
    from suite.ioengine.explore.step import Step
    monkeypatch.setattr(held, "async_path_on", lambda: True)
    t = Target(str(ddir / "held.bin"), str(ddir / "held"), False, 30.0)
    if t.dfd is None:
        pytest.skip("no O_DIRECT on this host's temporary file system")
    real_fsync = os.fsync
    try:
        s = Step("held_write", iface="libaio", off=0, len=8192, data=1, then="stream",
                 slow_ms=1000)
        ctx = Ctx(target=t, model=Model(bytearray(8192)), seed=1, source=b"")
        for starved in (False, True):
            buf = IoBuffer("anon", 8192, 0, 1, t.shm_path, for_read=False)
            buf.fill(ctx.data(1, 0, 8192))
            try:
                io = held.Inflight(t, s, True, buf)
            except OSError as e:
                pytest.skip(f"libaio here: {e}")
            io.start()
            assert io.wait(30.0) == 8192
            monkeypatch.setattr(held.os, "fsync", (lambda fd: (time_mod.sleep(2.5),
                                                               real_fsync(fd)))
                                if starved else real_fsync)
            out = held._stream(ctx, s, io)
            if starved:
                assert out is not None and out.kind == "late-barrier"
                assert "after 4 of 4 later writes completed" in out.why
            else:
                assert out is None and "after 0 of 4 later writes completed" in io.timing
            assert os.pread(t.fd, 8192, 0) == ctx.data(1, 0, 8192), "the same bytes again"
            io.close()
            buf.close()
    finally:
        t.close()
