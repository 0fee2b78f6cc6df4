"""Explore, a real power cut: ``power_cut`` submits O_DIRECT writes it never reaps,
runs a barrier (or none), says what must survive, and waits for the host to cut the
guest's power; ``explore-recover``, in the guest booted after on the same disks,
judges the file against it.

What must survive (:mod:`.durable`): everything the sequence made durable before,
after a barrier (``fsync``, ``fdatasync``, ``syncfs``) the writes it covers:
those that had completed when it began (POSIX), and, where the build's async
O_DIRECT path is on (``zfs_async_dio_enabled=1``, openzfs/zfs#18902), every write
submitted before it: the series' contract, whose breaking is
``fsync-ignores-queued-writes`` and ``syncfs-ignores-queued-writes``. A write no
barrier covers may be there or not, per aligned block, never torn inside one. With
``sync=always``, or writes submitted with RWF_DSYNC (``barrier=dsync``), a write that
had completed is durable with no barrier.

``slow_ms``: every disk of the pool answers that much later (``zinject -D``) from
just before the writes until the cut, so they are still in flight when the barrier
runs, as on a slow or busy disk: what a barrier of the async path must wait for.

The op's line ``{"event": "power-cut", ...}`` carries the model (:meth:`Durable.
to_state`) for the host, which cuts the power the moment it reads it
(``suite/explore/crashes/power.py``). Without a host that cuts (``--power-cut-wait
0``, the default: a local run, a reproducer) the op is unsupported and does nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from ..plan import EXIT_OK, EXIT_USAGE
from ..blockdev import wait_zvol
from ..queues import IoOp
from ..trials import emit
from .durable import Durable, allowed_sizes, check, record_end_past
from .model import Ctx, Outcome, failed
from .requests import IoBuffer, syncfs
from .step import Step

ASYNC_PARAM = "/sys/module/zfs/parameters/zfs_async_dio_enabled"
# dsync: no barrier call, the writes themselves carry RWF_DSYNC
BARRIERS = ("", "fsync", "fdatasync", "syncfs", "dsync")
RWF_DSYNC = 0x2
EXIT_FINDING = 1                    # as explore-run's


def async_path_on() -> bool:
    """The build has the async O_DIRECT path and it is on."""
    try:
        with open(ASYNC_PARAM, encoding="ascii") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def _barrier(fd: int, kind: str) -> None:
    if kind == "fsync":
        os.fsync(fd)
    elif kind == "fdatasync":
        os.fdatasync(fd)
    elif kind == "syncfs" and (err := syncfs(fd)):
        raise OSError(err, os.strerror(err))


def _submit(ctx: Ctx, s: Step) -> tuple[list[tuple[int, bytes]], set[int], Any]:
    """The op's writes submitted and not reaped: [(offset, bytes)], the indexes of
    those already complete just before the barrier, and the queue (kept alive)."""
    t = ctx.target
    writes = [(s.off + i * s.len, ctx.data(s.data + i, s.off + i * s.len, s.len))
              for i in range(s.segs if s.iface != "sync" else 0)]
    if not writes:
        return [], set(), None
    q = t._make_queue(s.iface)
    bufs = []
    for i, (off, data) in enumerate(writes):
        buf = IoBuffer("anon", len(data), 0, 1, t.shm_path, for_read=False)
        buf.fill(data)
        bufs.append(buf)
        flags = RWF_DSYNC if s.barrier == "dsync" else 0
        if q.submit([IoOp(i + 1, True, t.dfd, off, buf, False, flags)]) != 1:  # type: ignore
            raise OSError(11, "the queue took no request")
    done = {tag - 1 for tag, res in q.reap(0, len(writes), 0.0) if res == s.len}
    t.hung = True               # the kernel owns the buffers now: never closed here
    return writes, done, (q, bufs)


def model_after(ctx: Ctx, writes: list[tuple[int, bytes]], covered: set[int],
                barrier: bool) -> Durable:
    """The durability model once the writes are submitted and the barrier returned."""
    d = ctx.durable
    assert d is not None
    for i in sorted(covered):
        ctx.model.write(*writes[i])
    now = bytes(ctx.model.data)
    if barrier:
        d.synced(now)
    else:                   # sync=always: a write that completed is on stable storage
        for i in sorted(covered):
            d.synced_range(now, writes[i][0], len(writes[i][1]))
    for i, (off, data) in enumerate(writes):
        if i not in covered:
            ctx.model.write(off, data)
            d.changed(bytes(ctx.model.data), off, len(data))
    return d


def pool_disks(ctx: Ctx) -> list[str]:
    """The pool's leaf vdevs, by path (``zpool list -vHP``)."""
    assert ctx.zfs is not None
    r = ctx.zfs.run("zpool", "list", "-vHP", ctx.zfs.pool)
    return [w for line in (r.out or "").splitlines()[1:]
            for w in line.split()[:1] if w.startswith("/")]


def slow_disks(ctx: Ctx, ms: int) -> Outcome | None:
    """Every disk of the pool ``ms`` late (``zinject -D ms:1``); None when done."""
    if ctx.zfs is None:
        return Outcome("unsupported", why="power_cut slow_ms: needs the ZFS commands")
    disks = pool_disks(ctx)
    if not disks:
        return failed("setup-failed", f"power_cut slow_ms: no disk of {ctx.zfs.pool} listed")
    for disk in disks:
        r = ctx.zfs.run("zinject", "-d", disk, "-D", f"{ms}:1", ctx.zfs.pool)
        if r.rc != 0:
            return Outcome("unsupported", why=f"power_cut slow_ms: {' '.join(r.argv)}: "
                           f"{(r.err or '').strip() or r.rc}")
    return None


def op_power_cut(ctx: Ctx, s: Step) -> Outcome:
    if ctx.power_wait_s <= 0:
        return Outcome("unsupported", why="power_cut: no host cuts this guest's power "
                       "(explore-run --power-cut-wait)")
    if ctx.durable is None or ctx.target.dfd is None or s.barrier not in BARRIERS:
        return Outcome("unsupported", why="power_cut: needs a file on a dataset (the ZFS "
                       "commands given) or a zvol, opened with O_DIRECT")
    if s.slow_ms and (o := slow_disks(ctx, s.slow_ms)) is not None:
        return o
    writes, done, keep = _submit(ctx, s)
    barrier = s.barrier if s.barrier != "dsync" else ""
    covers_queued = bool(barrier) and async_path_on()
    if barrier:
        _barrier(ctx.target.fd, barrier)
    # A write that completed: covered by a barrier after it, durable by itself with
    # RWF_DSYNC or sync=always.
    synced_alone = s.barrier == "dsync" or ctx.sync_always
    covered = set(range(len(writes))) if covers_queued else (done if barrier or synced_alone
                                                             else set())
    d = model_after(ctx, writes, covered, bool(barrier))
    emit({"event": "power-cut", "i": ctx.step_index, "path": ctx.target.path, "zvol": ctx.zvol,
          "submitted": len(writes), "complete_before_barrier": sorted(done),
          "slow_ms": s.slow_ms,
          "barrier": s.barrier, "covers_queued": covers_queued, "state": d.to_state()})
    time.sleep(ctx.power_wait_s)            # the host cuts the power meanwhile
    del keep
    if s.slow_ms and ctx.zfs is not None:
        ctx.zfs.run("zinject", "-c", "all")
    return failed("no-result", f"power_cut: the host did not cut the power within "
                  f"{ctx.power_wait_s:.0f}s")


def recover(state: dict[str, Any], path: str) -> Outcome:
    """The file (or the zvol's window) after the power cut against the model the op left."""
    d = Durable.from_state(state["state"])
    if state.get("zvol"):               # its /dev/zdN may be another one now
        path = wait_zvol(state["zvol"], 60.0) or path
    try:
        with open(path, "rb") as f:
            got = f.read(d.size) if state.get("zvol") else f.read()
    except FileNotFoundError:
        got = None
    if got is None:
        return failed("crash-lost", f"after the power cut and import, {path} is gone")
    loss = check(d, got)
    if loss is not None:
        why = loss.why + (past_last_record(d, len(got), os.stat(path).st_blksize)
                          if loss.kind == "size" else "")
        return failed(f"crash-{loss.kind}", f"after the power cut and import: {why}",
                      first_wrong_byte=loss.at, extra={"recovered": len(got)})
    return Outcome(res=len(got), extra={"recovered": len(got)})


def past_last_record(d: Durable, got: int, blksize: int) -> str:
    """What a recovered size past every allowed one says of the file's records: the
    end of the record holding the largest allowed size is ZIL replay's whole-block
    write (``zil-replay-whole-block-extends-eof``), told apart from any other size."""
    top = max(allowed_sizes(d))
    if got <= top or blksize <= 0:
        return ""
    if record_end_past(got, top, blksize):
        return f"; past every one, at the end of the file's last {blksize}-byte record"
    return "; past every one"


def cmd_explore_recover(args: argparse.Namespace) -> int:
    try:
        with open(args.state, encoding="utf-8") as f:
            state = json.load(f)
        i, n = int(state["i"]), int(args.ops)
    except (OSError, ValueError, KeyError) as e:
        emit({"event": "error", "stage": "sequence", "error": f"{type(e).__name__}: {e}"})
        return EXIT_USAGE
    o = recover(state, args.file)
    emit({"event": "op", "i": i, "op": "power_cut", "ok": o.ok, "outcome": o.outcome,
          "kind": o.kind, "why": o.why, "res": o.res, "first_wrong_byte": o.first_wrong_byte,
          "size": o.res, **o.extra})
    emit({"event": "explore-done", "ok": o.ok, "failed_at": None if o.ok else i,
          "kind": o.kind, "why": o.why, "first_wrong_byte": o.first_wrong_byte, "ops": n})
    if o.ok and not args.keep and not state.get("zvol"):
        os.unlink(args.file)
    return EXIT_OK if o.ok else EXIT_FINDING


def add_commands(sub: Any) -> None:
    e = sub.add_parser("explore-recover", help="after a power cut: judge an explore file "
                       "against the model its power_cut op left")
    e.add_argument("state", help="the power_cut op's line (JSON), as the host kept it")
    e.add_argument("--file", required=True, help="the sequence's file, after import")
    e.add_argument("--ops", required=True, help="the sequence's op count")
    e.add_argument("--keep", action="store_true", help="keep the file when it is right")
    e.set_defaults(func=cmd_explore_recover)
