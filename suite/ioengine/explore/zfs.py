"""Explore, the ops that need the guest's ZFS commands: ``snapshot`` and
``rollback`` of the dataset the target lives on, ``txg_sync`` (``zpool sync``).

The host passes the build's programs (``--zfs-dataset NAME --zfs-cmd PATH
--zpool-cmd PATH [--zfs-libdir DIR]``); without them these ops are unsupported
and the generator never emits them. A command that does not return within the
op timeout is a hang (the review thread's rollback deadlock is one): it is
killed, not waited for, since a process stuck in the kernel may never exit.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .model import Ctx, Model, Outcome, failed

if TYPE_CHECKING:
    from .step import Step


@dataclass(frozen=True)
class ToolRun:
    argv: list[str]
    rc: int | None              # None: it did not return in time (killed)
    out: str = ""
    err: str = ""

    @property
    def line(self) -> str:
        return shlex.join(self.argv)


def _run_id() -> str:
    """Unique among the runs on one dataset: the pid and the second it started."""
    return f"{os.getpid()}-{int(time.time())}"


@dataclass(frozen=True)
class ZfsTools:
    """The build's ``zfs`` and ``zpool`` (with the library directory they
    need), the dataset the target lives on, and how long a command may take."""
    dataset: str
    zfs: str = "zfs"
    zpool: str = "zpool"
    libdir: str | None = None
    timeout_s: float = 60.0
    run_id: str = field(default_factory=_run_id)

    @property
    def pool(self) -> str:
        return self.dataset.split("/", 1)[0]

    def snapshot_name(self, n: int) -> str:
        """The run's ``n``-th snapshot in its chain (names free again after a
        ``rollback -r`` destroyed the later ones)."""
        return f"{self.dataset}@explore-{self.run_id}-{n}"

    def tool(self, name: str) -> str:
        """``zfs``, ``zpool`` as given; ``zinject`` from the directory ``zpool`` is in."""
        if name in ("zfs", "zpool"):
            return self.zfs if name == "zfs" else self.zpool
        return os.path.join(os.path.dirname(self.zpool), name)

    def run(self, tool: str, *args: str) -> ToolRun:
        argv = [self.tool(tool), *args]
        env = {**os.environ, "LD_LIBRARY_PATH": self.libdir} if self.libdir else None
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
        try:
            out, err = p.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()                # not waited for: it may be stuck in the kernel
            return ToolRun(argv, None)
        return ToolRun(argv, p.returncode, out, err)


@dataclass(frozen=True)
class Snap:
    """A snapshot a run took: the op's data token, its name, the model then."""
    tag: int
    name: str
    model: bytes


def _no_zfs(ctx: Ctx, s: Step, blockdev_ok: bool = False) -> Outcome | None:
    """Why ``s`` cannot run here, or None. ``blockdev_ok``: an op of the pool (a
    zvol's is the dataset's pool), not of the file's dataset."""
    if ctx.zfs is None:
        return Outcome("unsupported", why=f"{s.op}: no --zfs-dataset (the guest's ZFS "
                       "commands) given")
    if ctx.target.blockdev and not blockdev_ok:
        return Outcome("unsupported", why=f"{s.op}: the target is a block device")
    return None


def _zfs_command(ctx: Ctx, tool: str, *args: str) -> Outcome | None:
    """Run a ZFS command: None when it succeeded, else the failure (a hang when
    it did not return: the target is then left alone, like a request in flight)."""
    assert ctx.zfs is not None
    r = ctx.zfs.run(tool, *args)
    if r.rc is None:
        ctx.target.hung = True
        return failed("hang", f"{r.line} did not return within {ctx.zfs.timeout_s}s")
    if r.rc:
        return failed("zfs-command", f"{r.line}: exit {r.rc}: {r.err.strip()[-300:]}")
    return None


def op_snapshot(ctx: Ctx, s: Step) -> Outcome:
    """Snapshot the target's dataset; the model now is what a rollback to it restores."""
    if (o := _no_zfs(ctx, s)) is not None:
        return o
    assert ctx.zfs is not None
    name = ctx.zfs.snapshot_name(len(ctx.snaps))
    if (o := _zfs_command(ctx, "zfs", "snapshot", name)) is not None:
        return o
    ctx.snaps.append(Snap(s.data, name, bytes(ctx.model.data)))
    return Outcome(extra={"snapshot": name})


def op_rollback(ctx: Ctx, s: Step) -> Outcome:
    """Roll the dataset back to the snapshot of data token ``data`` (``-r``:
    the later ones go), the model with it; the target is opened again."""
    if (o := _no_zfs(ctx, s)) is not None:
        return o
    at = next((i for i in reversed(range(len(ctx.snaps))) if ctx.snaps[i].tag == s.data), None)
    if at is None:
        return Outcome("skipped", why=f"no snapshot of data {s.data} in this run")
    snap = ctx.snaps[at]
    if (o := _zfs_command(ctx, "zfs", "rollback", "-r", snap.name)) is not None:
        return o
    del ctx.snaps[at + 1:]
    ctx.model = Model(snap.model)
    ctx.target.reopen()
    return Outcome(extra={"snapshot": snap.name})


def op_txg_sync(ctx: Ctx, s: Step) -> Outcome:
    """``zpool sync``: the pool's open transaction group written out now (on a zvol
    too: its pool is the dataset's)."""
    if (o := _no_zfs(ctx, s, blockdev_ok=True)) is not None:
        return o
    assert ctx.zfs is not None
    return _zfs_command(ctx, "zpool", "sync", ctx.zfs.pool) or Outcome()


def destroy_snapshots(ctx: Ctx) -> list[str]:
    """Destroy the run's snapshots: all in one ``zfs destroy ds@a,b,c`` (one command,
    one txg wait: a ``zfs`` command is seconds under TCG), else one by one, newest
    first; the commands that failed."""
    problems: list[str] = []
    if ctx.zfs is not None and len(ctx.snaps) > 1 and not ctx.target.hung:
        dataset = ctx.snaps[0].name.split("@", 1)[0]
        if all(x.name.split("@", 1)[0] == dataset for x in ctx.snaps):
            r = ctx.zfs.run("zfs", "destroy", dataset + "@" + ",".join(
                x.name.split("@", 1)[1] for x in ctx.snaps))
            if r.rc == 0:
                ctx.snaps.clear()
            elif r.rc is None:
                ctx.target.hung = True
                problems.append(f"{r.line}: hang")
    while ctx.zfs is not None and ctx.snaps and not ctx.target.hung:
        r = ctx.zfs.run("zfs", "destroy", ctx.snaps.pop().name)
        if r.rc is None:
            ctx.target.hung = True          # the next would hang too
        if r.rc != 0:
            problems.append(f"{r.line}: {'hang' if r.rc is None else r.err.strip()[-200:]}")
    return problems


def zil_header(target: str) -> None:
    """Give the target's dataset a ZIL chain before ``zpool freeze``: on a frozen pool a
    ZIL made from nothing (its header written in a txg that never reaches the disk) is not
    found at import, so what it committed is not replayed. A rollback resets the header;
    a sequence that rolled back, froze and wrote with ``sync=always`` "lost" every synced
    block (stock be7657e3f2, 2026-12-06): a property of ``zpool freeze``, not a power
    loss. OpenZFS's own slog replay tests make the header the same way (a synced write,
    then the file removed) before they freeze."""
    scratch = os.path.join(os.path.dirname(target) or ".", ".explore-zil-header")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"\0")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.unlink(scratch)


def op_freeze(ctx: Ctx, s: Step) -> Outcome:
    """``zpool freeze``: the pool writes no transaction group from now on, so only what
    the ZIL commits (fsync, syncfs, ``sync=always``) survives the crash that follows
    (``crash``, or the sequence's end). What was written before is synced first."""
    if (o := _no_zfs(ctx, s)) is not None:
        return o
    if ctx.frozen:
        return Outcome("skipped", why="the pool is frozen already")
    assert ctx.zfs is not None
    zil_header(ctx.target.path)
    r = ctx.zfs.run("zpool", "freeze", ctx.zfs.pool)
    if r.rc is None:
        ctx.target.hung = True
        return failed("hang", f"{r.line} did not return within {ctx.zfs.timeout_s}s")
    if r.rc:
        return Outcome("unsupported", why=f"{r.line}: exit {r.rc}: {r.err.strip()[-200:]}")
    ctx.frozen = True
    if ctx.durable is not None:
        ctx.durable.synced(bytes(ctx.model.data))
    return Outcome(extra={"frozen": ctx.zfs.pool})


def op_crash(ctx: Ctx, s: Step) -> Outcome:
    """The frozen pool exported and imported again (its ZIL replayed): the file must
    hold what the durability model says survives, each block old or new, the size one
    it had at an op boundary. The model then takes what is there."""
    if (o := _no_zfs(ctx, s)) is not None:
        return o
    if not ctx.frozen:
        return Outcome("skipped", why="no zpool freeze before it")
    return recover(ctx)


def recover(ctx: Ctx) -> Outcome:
    """Export and import the frozen pool, then judge the file against ``ctx.durable``."""
    from .durable import check
    assert ctx.zfs is not None
    t = ctx.target
    t.release()
    for args in (("export", ctx.zfs.pool), ("import", ctx.zfs.pool)):
        if (o := _zfs_command(ctx, "zpool", *args)) is not None:
            return o
    ctx.frozen = False
    t.reopen()
    got = os.pread(t.fd, max(ctx.model.size, os.fstat(t.fd).st_size) + 1, 0)
    loss = check(ctx.durable, got) if ctx.durable is not None else None
    if loss is not None:
        return failed(f"crash-{loss.kind}", f"after zpool freeze, export and import: {loss.why}",
                      first_wrong_byte=loss.at, extra={"recovered": len(got)})
    ctx.model = Model(got)
    if ctx.durable is not None:
        ctx.durable.synced(got)
    return Outcome(res=len(got), extra={"recovered": len(got)})
