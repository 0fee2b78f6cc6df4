"""Explore, a request held in flight while something else goes on: ``held_read`` and
``held_write`` issue one O_DIRECT request (sync, libaio or io_uring, from a thread of
its own) whose I/O the pool delays (``zinject -E slow_ms -T read|write -t data
FILE``), then, while it is held, run ``then``:

- ``rollback`` (a read): ``zfs rollback`` to a snapshot taken just before; the
  review's deadlock was a rollback draining the async reads under the teardown
  lock while a read's completion waited for that lock. A rollback that does not
  return is left to the host: the engine waits, the host's no-progress watchdog
  keeps every D-state task's stack (``suite/explore/crashes/stream.py``);
- ``fsync``/``syncfs`` (a write): a barrier while the write is held; where the
  build's async O_DIRECT path is on, the series' contract is that a barrier
  covers every write submitted before it: a barrier that returns while the held
  write is still in flight is ``early-barrier``;
- ``later_write`` (a write): ``syncfs`` begins while the write is held, then a
  later async write to another file of the dataset is submitted and completes at
  once: the barrier must still wait for the held write (a later write must not
  satisfy it: ``early-barrier``, the review's barrier-satisfied-by-later-write);
- ``stream`` (a write): ``fsync`` begins while the write is held, then a stream of
  later async writes to the same file (the held write's range and bytes again, each
  held as long) is submitted behind it. The barrier's latency is judged: a barrier
  that returns only after a write submitted after it completed, and more than half a
  hold after the write submitted before it, waited for the stream
  (``late-barrier``, the review's fsync starved by a write stream).

Then the hold is lifted, the request reaped and judged: a read's bytes are the
model's (the snapshot's bytes are the model's when it was taken), or a clean error;
a write's bytes land. A request that completed before ``then`` began (its I/O never
reached the disk: a cached record) was not held: the op says so (``held: false``)
and judges it as a plain request.
"""
from __future__ import annotations

import errno as errno_mod
import os
import threading
import time

from ..queues import IoOp
from .file import evict, flush_arc
from .model import Ctx, Model, Outcome, check_bytes, error, failed
from .powercut import async_path_on
from .requests import IoBuffer, syncfs
from .step import Step
from .zfs import Snap, _no_zfs

HELD_OPS = ("held_read", "held_write")
THEN = {"held_read": ("rollback",), "held_write": ("fsync", "syncfs", "later_write", "stream")}
UIO_FASTIOV = 8             # <uapi/linux/uio.h>: iovecs the kernel keeps on its stack
SETTLE_S = 0.2              # after submitting, before ``then``: the request reaches the disk
CLEAN_READ_ERRORS = (errno_mod.EIO, errno_mod.ENOENT, errno_mod.ESTALE, errno_mod.EBADF)


def submitter_of(iface: str, keep: bool) -> str:
    """What a held request's submitting thread does: ``syscall`` (sync), ``reaps`` the
    async request itself, or ``exits`` once the kernel took it (the reach table's cell)."""
    return "syscall" if iface == "sync" else "reaps" if keep else "exits"


def iovec_of(segs: int) -> str:
    """Where the kernel builds a request's iovec array: on the submitting call's ``stack``
    (up to UIO_FASTIOV, 8 segments: one buffer too), else on the ``heap`` (kmalloc'd,
    freed as the call returns): the reach table's cell."""
    return "heap" if segs > UIO_FASTIOV else "stack"


def _hold(ctx: Ctx, s: Step, write: bool) -> str | None:
    """Delay the file's reads or writes by ``s.slow_ms``; why not, or None."""
    assert ctx.zfs is not None
    r = ctx.zfs.run("zinject", "-E", str(max(1, s.slow_ms)), "-T", "write" if write else "read",
                    "-t", "data", ctx.target.path)
    return None if r.rc == 0 else f"zinject -E: {(r.err or '').strip()[-200:] or r.rc}"


def _release(ctx: Ctx) -> None:
    if ctx.zfs is not None:
        ctx.zfs.run("zinject", "-c", "all")


def _wait_forever(what: str) -> None:  # noqa: ARG001 (said in the host's hang report)
    """A command stuck in the kernel: the host's watchdog takes it from here (the
    stacks of every task in D state), as for any op that stops making progress."""
    while True:                                         # pragma: no cover - a guest's hang
        time.sleep(3600)


class Inflight:
    """The held request, issued by a thread of its own, so that a submitter that
    blocks until the I/O is done (OpenZFS ignores ``IOCB_NOWAIT``: io_uring's inline
    attempt and stock libaio both block in the submitting call) leaves this thread
    free to run ``then`` meanwhile. A sync request is the thread's syscall. An async
    one is submitted by the thread; then, as ``s.keep`` says, the thread reaps it
    itself (it lives until the request completes) or exits and leaves the reaping to
    this one, so that the kernel stack the request's iovec was built on is gone while
    the request is in flight. Either way its completion is read without waiting
    (:meth:`done`)."""

    def __init__(self, t, s: Step, write: bool, buf: IoBuffer) -> None:
        self.res: int | None = None
        self.timing = ""                    # then=stream: the barrier's latency, said
        self.q = None if s.iface == "sync" else t._make_queue(s.iface)
        self.keep = bool(s.keep) and self.q is not None
        self.sent = threading.Event()       # the submitting call returned
        self.submit_failed = False
        self.thread = threading.Thread(target=self._issue, args=(t, s, write, buf),
                                       name="explore-held", daemon=True)

    def _issue(self, t, s: Step, write: bool, buf: IoBuffer) -> None:
        try:
            if self.q is None:
                v = buf.views()
                self.res = os.pwritev(t.dfd, v, s.off) if write else os.preadv(t.dfd, v, s.off)
            elif self.q.submit([IoOp(1, write, t.dfd, s.off, buf, s.segs > 1)]) != 1:
                self.submit_failed, self.res = True, -errno_mod.EAGAIN
            elif self.keep:
                self.sent.set()
                while self.res is None:
                    for _tag, res in self.q.reap(1, 1, 1.0):
                        self.res = res
        except OSError as e:
            self.submit_failed, self.res = True, -(e.errno or errno_mod.EIO)
        finally:
            self.sent.set()

    @property
    def submitter(self) -> str:
        """What the submitting thread did: ``syscall`` (sync), ``reaps`` or ``exits``."""
        return submitter_of("sync" if self.q is None else "async", self.keep)

    def start(self) -> None:
        self.thread.start()

    def submitted(self) -> bool:
        """The submitting call returned (an async request is queued in the kernel)."""
        return self.sent.is_set() and (self.q is not None or not self.thread.is_alive())

    def done(self) -> bool:
        """The request completed, as the kernel says now (no wait)."""
        if self.keep or self.thread.is_alive():
            return self.res is not None
        if self.res is None and self.q is not None:
            for _tag, res in self.q.reap(0, 1, 0.0):
                self.res = res
        return self.res is not None

    def wait(self, wait_s: float) -> int | None:
        deadline = time.monotonic() + wait_s
        self.thread.join(wait_s)
        while not self.done() and (left := deadline - time.monotonic()) > 0:
            if self.q is not None and not self.keep and not self.thread.is_alive():
                for _tag, res in self.q.reap(1, 1, min(left, 1.0)):
                    self.res = res
            else:
                time.sleep(min(left, 0.2))
        return self.res

    def close(self) -> None:
        if self.q is not None and self.res is not None:
            self.thread.join(1.0)           # keep: the thread is past its last reap
            self.q.close()


def _then(ctx: Ctx, s: Step, io: Inflight) -> Outcome | None:
    """Run ``s.then`` while the request is held; a finding, or None."""
    t, write = ctx.target, s.op == "held_write"
    if s.then == "rollback":
        assert ctx.zfs is not None
        r = ctx.zfs.run("zfs", "rollback", "-r", ctx.snaps[-1].name)
        if r.rc is None:
            _wait_forever("zfs rollback")
        if r.rc:
            return failed("zfs-command", f"{r.line}: exit {r.rc}: {r.err.strip()[-300:]}")
        return None
    if not write:
        return None
    if s.then == "later_write":
        return _later_write(ctx, s, io)
    if s.then == "stream":
        return _stream(ctx, s, io)
    queued = io.submitted() and not io.done()      # submitted before it, not complete
    if s.then == "syncfs":
        if (err := syncfs(t.fd)):
            return error(err, "syncfs")
    else:
        os.fsync(t.fd)
    # The series' contract: a barrier covers every async write submitted before it.
    if queued and not io.done() and s.iface != "sync" and async_path_on():
        return failed("early-barrier", f"{'fsync' if s.then == 'later_write' else s.then} "
                      f"returned while the async write submitted before it (off={s.off} "
                      f"len={s.len}) was still held in flight")
    return None


LATE_AFTER_S = 0.3          # the later write: submitted this long after the barrier began


def _later_write(ctx: Ctx, s: Step, io: Inflight) -> Outcome | None:
    """The review's shape: ``syncfs`` begins (a thread) while the held write is in
    flight; a later async O_DIRECT write to another file of the dataset, not held, is
    submitted after it and completes at once. The barrier must still wait for the
    held write (it was submitted before it): returning first is ``early-barrier``."""
    t = ctx.target
    queued = io.submitted() and not io.done()
    done: dict[str, float | int] = {}

    def barrier() -> None:
        done["err"] = syncfs(t.fd)
        done["at"] = time.monotonic()

    th = threading.Thread(target=barrier, name="explore-barrier", daemon=True)
    th.start()
    time.sleep(LATE_AFTER_S)
    other = t.src_path + ".later"
    fd = os.open(other, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    buf = IoBuffer("anon", s.len, 0, 1, t.shm_path, for_read=False)
    q = None
    try:
        buf.fill(ctx.data(s.data + 1, 0, s.len))
        if s.iface == "sync":               # the later write as the held one: a syscall
            os.pwritev(fd, buf.views(), 0)
        else:
            q = t._make_queue(s.iface)
            if q.submit([IoOp(7, True, fd, 0, buf, False)]) == 1:
                q.reap(1, 1, t.timeout_s)
        th.join(t.timeout_s * 4)
        if th.is_alive():
            return None                     # the barrier waits yet: the host's watchdog
        early = queued and not io.done()
    finally:
        if q is not None:
            q.close()
        buf.close()
        os.close(fd)
        os.unlink(other)
    if done.get("err"):
        return error(int(done["err"]), "syncfs")
    if early and s.iface != "sync" and async_path_on():
        return failed("early-barrier", f"syncfs returned once a later async write to another "
                      f"file completed, while the async write submitted before it "
                      f"(off={s.off} len={s.len}) was still held in flight")
    return None


STREAM_WRITES = 4          # later writes in the stream, one every half hold


def _stream(ctx: Ctx, s: Step, io: Inflight) -> Outcome | None:
    """``fsync`` (a thread) while the held write is in flight, then STREAM_WRITES later
    async writes of the same bytes to the same range (the model is unchanged by them),
    one every half hold, each held as long by the same ``zinject -E``. Timed on
    CLOCK_MONOTONIC: when the held write completed, when each later write did, when
    the barrier returned. Judged only where the async O_DIRECT path is on (the series'
    contract: a barrier waits for the writes submitted before it, not after)."""
    t, hold_s = ctx.target, max(1, s.slow_ms) / 1000.0
    at: dict[str, float | int] = {}
    begun = time.monotonic()

    def barrier() -> None:
        os.fsync(t.fd)
        at["barrier"] = time.monotonic()

    data = ctx.data(s.data, s.off, s.len)
    bufs = [IoBuffer("anon", s.len, 0, 1, t.shm_path, for_read=False)
            for _ in range(STREAM_WRITES)]
    later: list[float] = []
    results: list[int] = []
    q = t._make_queue("libaio" if s.iface == "sync" else s.iface)

    def streamer() -> None:
        for i, b in enumerate(bufs):
            time.sleep(max(0.0, begun + LATE_AFTER_S + i * hold_s / 2 - time.monotonic()))
            b.fill(data)
            q.submit([IoOp(100 + i, True, t.dfd, s.off, b, False)])
        while len(results) < len(bufs):
            for _tag, res in q.reap(1, len(bufs) - len(results), 1.0):
                results.append(res)
                later.append(time.monotonic())

    th = threading.Thread(target=barrier, name="explore-barrier", daemon=True)
    st = threading.Thread(target=streamer, name="explore-stream", daemon=True)
    th.start()
    st.start()
    deadline = begun + t.timeout_s * 4 + hold_s * (STREAM_WRITES + 2)
    while (th.is_alive() or st.is_alive()) and time.monotonic() < deadline:
        if "held" not in at and io.done():
            at["held"] = time.monotonic()
        time.sleep(0.02)
    if th.is_alive() or st.is_alive():
        return None                         # still waiting: the host's watchdog
    at.setdefault("held", time.monotonic() if io.done() else float("inf"))
    q.close()
    for b in bufs:
        b.close()
    if (bad := [r for r in results if r != s.len]):
        if bad[0] < 0:
            return error(-bad[0], "a later write of the stream", bad[0])
        return failed("short", f"a later write of the stream returned {bad[0]} of {s.len}")
    waited = at["barrier"] - max(at["held"], begun)
    outlived = sum(1 for x in later if x < at["barrier"])
    timing = (f"fsync returned {at['barrier'] - begun:.2f} s after it began, {waited:.2f} s "
              f"after the write submitted before it completed, after {outlived} of "
              f"{STREAM_WRITES} later writes completed (hold {hold_s:.1f} s)")
    io.timing = timing
    if async_path_on() and s.iface != "sync" and outlived and waited > hold_s / 2:
        return failed("late-barrier", f"{timing}: it waited for writes submitted after it")
    return None


def op_held(ctx: Ctx, s: Step) -> Outcome:
    write = s.op == "held_write"
    if (o := _no_zfs(ctx, s)) is not None:
        return o
    t = ctx.target
    if t.dfd is None or s.iface not in ("sync", "libaio", "io_uring") or \
            s.then not in THEN[s.op]:
        return Outcome("unsupported", why=f"{s.op}: an O_DIRECT request (sync, libaio, "
                       f"io_uring) with then in {THEN[s.op]}, on a file opened O_DIRECT")
    assert ctx.zfs is not None
    snap = None
    if s.then == "rollback":
        snap = ctx.zfs.snapshot_name(len(ctx.snaps))
        r = ctx.zfs.run("zfs", "snapshot", snap)
        if r.rc != 0:
            return failed("zfs-command", f"{r.line}: exit {r.rc}: {(r.err or '').strip()[-300:]}")
        ctx.snaps.append(Snap(s.data, snap, bytes(ctx.model.data)))
    ctx.zfs.run("zpool", "sync", ctx.zfs.pool)     # no dirty record serves the range
    evict(t.fd, ctx.drop_caches)
    flush_arc(ctx)
    if (why := _hold(ctx, s, write)) is not None:
        return Outcome("unsupported", why=f"{s.op}: {why}")
    data = ctx.data(s.data, s.off, s.len) if write else b""
    model = bytes(ctx.model.data)
    buf = IoBuffer("anon", s.len, 0, max(1, s.segs), t.shm_path, for_read=not write)
    if write:
        buf.fill(data)
    io = Inflight(t, s, write, buf)
    io.start()
    try:
        time.sleep(SETTLE_S)
        held = not io.done()
        found = _then(ctx, s, io)
        _release(ctx)
        res = io.wait(t.timeout_s)
        if res is None:
            t.hung = True
            return failed("hang", f"{s.op}: no completion within {t.timeout_s}s of the hold "
                          "lifted")
        o = found or _judge(ctx, s, write, buf, data, model, res)
        o.extra.update({"held": held, "then": s.then, "submitter": io.submitter,
                        "iovec": iovec_of(s.segs),
                        **({"timing": io.timing} if io.timing else {})})
        return o
    finally:
        _release(ctx)
        if not t.hung and io.done():        # an error before the request came back:
            io.close()                      # its buffer stays the kernel's (never freed)
            buf.close()
            if snap is not None:        # this op's snapshot: the model is its bytes
                ctx.model = Model(ctx.snaps.pop().model)
                ctx.zfs.run("zfs", "destroy", snap)
                t.reopen()


def _judge(ctx: Ctx, s: Step, write: bool, buf: IoBuffer, data: bytes, model: bytes,
           res: int) -> Outcome:
    if res < 0:
        if not write and -res in CLEAN_READ_ERRORS and s.then == "rollback":
            return Outcome("refused", why=f"the held read ended with {errno_mod.errorcode[-res]} "
                           "across the rollback (a clean error)", res=res)
        return error(-res, f"{s.op} complete", res)
    if write:
        if res != s.len:
            return failed("short", f"wrote {res} of {s.len} bytes", res=res)
        ctx.model.write(s.off, data)
        return Outcome(res=res)
    want = max(0, min(s.len, len(model) - s.off))
    if res != want:
        return failed("short" if res < want else "wrong-bytes",
                      f"read {res} of {want} bytes (EOF at {len(model)})", res=res)
    return check_bytes(buf.gather(res), Model(model), s.off, "the held read") or \
        Outcome(res=res)
