"""``explore-run SEQ.json --file PATH``: run a sequence of ops against one target,
keep a byte model of what it must hold, check every read against it.

The guest side of ``suite explore`` (the host side is ``suite/explore``), after
xfstests' fsx: a sequence is data (JSON, written by ``suite.explore.gen``)::

    {"seed": 7, "target": "file", "init_size": 40000, "file_size_max": 3145728,
     "props": {...}, "params": {...},            # applied by the host, not here
     "ops": [{"op": "pwrite", "iface": "libaio", "direct": true, "off": 8192,
              "len": 12288, "buf": "anon_offset", "buf_off": 512, "data": 3}, ...]}

The target is created (truncated) and filled with ``init_size`` bytes of the
sequence's pattern; a block device (``--blockdev``) is written over that window.
Ops are the functions of :data:`suite.ioengine.explore.step.OPS`; a write lays
down ``pattern("<seed>:w<data>")`` at its offset, so the bytes of every op
depend on the sequence alone. Output, one JSON line each, flushed:
``{"event": "setup", "what": ...}`` before the target is made and filled, and
``{"event": "begin", "i": N, "op": ...}`` before op N (if the kernel dies
under it, the host still knows which op was in flight), ``{"event": "op", "i":
N, "op": ..., "ok": ..., "outcome": ..., "kind": ..., "why": ...}`` after it,
and ``{"event": "explore-done", "ok": ..., "failed_at": N|null, "kind": ...,
"first_wrong_byte": ...}``. It stops at the first failed op.

``--zvol NAME`` says which zvol the ``--blockdev`` target is: when ``--file``
is a block device that does not serve NAME (a replay in another guest, where
the zvol got another minor), NAME's ``/dev/zdN`` is found by name and used.

Exit: 0 every op ok, 1 an op failed, 2 the sequence cannot be read, 4 the
target cannot be set up. A passing run removes its target and scratch files
(``--keep`` keeps them); a failing one leaves them for inspection. Snapshots
the run took (``--zfs-dataset``: see :mod:`.zfs`) are destroyed either
way, unless ``--keep``: shrinking replays a sequence many times.
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import time
from typing import Any

from ..blockdev import wait_zvol, zvol_name
from ..content import pattern
from . import callers, durable
from .file import evict, flush_arc
from .kmsg import KernelLog
from .model import Ctx, Model, Outcome, check_bytes
from .ops import OPS
from .step import CRASH_OPS, POWER_OPS, SOURCE_OPS, Step

WRITE_OPS = ("pwrite", "pwritev")
from .zfs import ZfsTools, destroy_snapshots, recover
from .requests import Target, syncfs
from .served import Meter, asks_direct, path_of, pool_of
from ..plan import EXIT_FAILED, EXIT_OK, EXIT_USAGE, errno_name
from ..trials import emit

EXIT_FINDING = 1
DEFAULT_OP_TIMEOUT_S = 60.0


def load_sequence(path: str) -> tuple[dict[str, Any], list[Step]]:
    """The sequence file and its ops; ValueError says what is malformed."""
    with open(path, encoding="utf-8") as f:
        seq = json.load(f)
    if not isinstance(seq, dict) or not isinstance(seq.get("ops"), list):
        raise ValueError("a sequence is a JSON object with an \"ops\" list")
    for key in ("seed", "init_size", "file_size_max"):
        if not isinstance(seq.get(key, 0), int):
            raise ValueError(f"sequence field {key!r} must be an integer")
    return seq, [Step.from_dict(d) for d in seq["ops"]]


def lay_down(target: Target, data: bytes, drop_caches: bool = False) -> None:
    """The initial content, buffered, synced, and dropped from the page cache. A file
    is synced with ``syncfs``, not ``fsync``: the setup is the harness's, and a drawn
    op's path it took would hang or fail every sequence there before its first op
    (async-dio 317cbaa578's fsync on a poisoned znode); ``fsync`` stays a drawn op. A
    block device: ``fsync`` (syncfs there syncs the bdev's pseudo file system)."""
    pos = 0
    while pos < len(data):
        pos += os.pwrite(target.fd, data[pos:pos + (1 << 20)], pos)
    if target.blockdev or syncfs(target.fd):
        os.fsync(target.fd)
    evict(target.fd, drop_caches)


def run_op(ctx: Ctx, step: Step) -> Outcome:
    """One op; an OSError it did not expect is its failure (``error:<ERRNO>``)."""
    try:
        return OPS[step.op](ctx, step)
    except OSError as e:
        name = errno_name(e.errno) or "unknown"
        return Outcome("failed", f"error:{name}", f"{step.op}: {e}", errname=name)


def op_line(i: int, step: Step, o: Outcome, size: int, ms: float) -> dict[str, Any]:
    d: dict[str, Any] = {"event": "op", "i": i, "op": step.op, "ok": o.ok,
                         "outcome": o.outcome, "kind": o.kind, "why": o.why, "res": o.res,
                         "errname": o.errname, "first_wrong_byte": o.first_wrong_byte,
                         "size": size, "ms": round(ms, 2)}
    d.update(o.extra)
    return d


def tamper_hook(ctx: Ctx, step: Step, o: Outcome, token: int | None) -> None:
    """Self-test hook (``--tamper-after-data``): once the write of data ``token``
    landed, overwrite its first byte behind the model's back."""
    if token is not None and o.outcome == "ok" and step.data == token and \
            step.op in ("pwrite", "pwritev", "mmap_write"):
        OPS["tamper"](ctx, Step("tamper", off=step.off, len=1))


KMSG = "/dev/kmsg"


def warn_hook(step: Step, o: Outcome, token: int | None, kmsg: str = KMSG) -> None:
    """Self-check hook (``--warn-after-data``): once the write of data ``token``
    landed, print a kernel WARNING line into the kernel log, as a Direct I/O
    page-reference bug's first sign would be: the host must stop the sequence there
    and name this op (suite/explore/crashes/stream.py)."""
    if token is not None and o.outcome == "ok" and step.data == token and \
            step.op in ("pwrite", "pwritev", "mmap_write"):
        with open(kmsg, "w", encoding="ascii") as f:      # one write: one record
            f.write(f"<4>WARNING: CPU: 0 PID: {os.getpid()} at suite/ioengine/explore/run.py: "
                    f"injected after the write of data {token} (--warn-after-data)\n")


def process_age_s() -> float | None:
    """Seconds since this process started (the interpreter's start-up and imports,
    slow on a guest whose root is the host's over 9p), or None off Linux."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def run_sequence(seq: dict[str, Any], steps: list[Step], path: str, scratch: str,
                 blockdev: bool, timeout_s: float, keep: bool,
                 tamper_data: int | None = None, zfs: ZfsTools | None = None,
                 power_wait_s: float = 0.0, zvol: str | None = None,
                 drop_caches: bool = False, warn_data: int | None = None) -> int:
    started = process_age_s()
    t_setup = time.monotonic()
    seed = int(seq.get("seed", 0))
    init = pattern(f"{seed}:init", 0, int(seq.get("init_size", 0)))
    loop = callers.make(seq.get("caller"), path, int(seq.get("file_size_max", 0)))
    meter = Meter(pool_of(path, zvol))         # which path served each O_DIRECT request
    props = seq.get("props") or {}
    # The kernel's caches dropped only where the sequence asks (one kept before did not).
    drop_caches = drop_caches and seq.get("evict") == "drop"
    # Said before it runs, like each op: a kernel that dies in the setup is named there.
    emit({"event": "setup", "what": (callers.describe(loop) if loop else f"create {path}, ") +
          f"write {len(init)} bytes, syncfs, POSIX_FADV_DONTNEED"})
    try:
        if loop is not None:            # the ops go to the caller set up over the file
            path, blockdev = loop.attach(timeout_s), loop.blockdev
        target = Target(path, scratch, blockdev, timeout_s)
        lay_down(target, init, drop_caches)
    except OSError as e:
        emit({"event": "error", "stage": "setup", "errname": errno_name(e.errno),
              "error": f"{path}: {e}"})
        return EXIT_FAILED
    source = b""
    if any(s.op in SOURCE_OPS + ("actors",) for s in steps):      # actors copy from it
        source = pattern(f"{seed}:src", 0, int(seq.get("file_size_max", 0)))
    ctx = Ctx(target, Model(init), seed, source, zfs, power_wait_s=power_wait_s, zvol=zvol,
              drop_caches=drop_caches)
    flush_arc(ctx)             # the initial content was written through the ARC
    # A crash can be made here: a file on a dataset (the ZFS commands given), or a zvol
    # (a power cut; its flush is fsync). Not through a caller.
    if loop is None and (zfs is not None and not blockdev or zvol is not None):
        ctx.durable = durable.Durable.of(init)
        ctx.sync_always = (seq.get("props") or {}).get("sync") == "always"
    klog = KernelLog()         # what the kernel logged while each op ran
    t0 = time.monotonic()
    setup_s = t0 - t_setup
    failed: tuple[int, Outcome] | None = None
    seen: dict[str, list[int]] = {"einval": [], "unsupported": [], "refused": [], "skipped": []}
    try:
        for i, step in enumerate(steps):
            emit({"event": "begin", "i": i, "op": step.op})
            ctx.step_index = i
            t = time.monotonic()
            before = bytes(ctx.model.data) if ctx.durable is not None else b""
            measured = asks_direct(step.op, step.direct, props)
            counted = meter.sample() if measured else None
            o = run_op(ctx, step)
            if measured and o.outcome in ("ok", "failed"):     # a refused one moved nothing
                o.extra["served"] = path_of(counted, meter.sample(), step.op in WRITE_OPS)
            if ctx.durable is not None and o.ok and step.op not in CRASH_OPS + POWER_OPS:
                durable.after_op(ctx.durable, step.op, before, bytes(ctx.model.data),
                                 ctx.frozen, ctx.sync_always)
            tamper_hook(ctx, step, o, tamper_data)
            warn_hook(step, o, warn_data)
            if said := klog.new():
                o.extra["kmsg"] = said
            emit(op_line(i, step, o, ctx.model.size, (time.monotonic() - t) * 1000))
            if o.outcome in seen:
                seen[o.outcome].append(i)
            if not o.ok:
                failed = (i, o)
                break
        if ctx.frozen and not target.hung:     # a freeze the sequence never crashed
            emit({"event": "begin", "i": len(steps), "op": "crash"})
            o = recover(ctx)
            emit(op_line(len(steps), Step("crash"), o, ctx.model.size, 0.0))
            if not o.ok and failed is None:
                failed = (len(steps) - 1, o)
    finally:
        klog.close()
        if not target.hung:
            target.close()
    if loop is not None and not target.hung:
        o = _backing_check(loop, ctx.model)
        if o is not None and failed is None:
            failed = (len(steps) - 1, o)
    done: dict[str, Any] = {"event": "explore-done", "ok": failed is None,
                            "failed_at": failed[0] if failed else None,
                            "kind": failed[1].kind if failed else None,
                            "why": failed[1].why if failed else None,
                            "first_wrong_byte": failed[1].first_wrong_byte if failed else None,
                            "ops": len(steps), "size": ctx.model.size,
                            "direct": target.no_direct or "open", **seen,
                            "elapsed_s": round(time.monotonic() - t0, 3),
                            # before the ops: the interpreter's start, the target's setup
                            "startup_s": None if started is None else round(started, 3),
                            "setup_s": round(setup_s, 3)}
    emit(done)
    t_clean = time.monotonic()
    problems = [] if keep else destroy_snapshots(ctx)      # failing or not: they pile up
    if failed is None and not keep:
        for p in ([] if blockdev or loop is not None else [path]) + \
                [target.shm_path, target.src_path] + (loop.files() if loop is not None else []):
            if os.path.exists(p):
                os.unlink(p)
        if loop is not None:
            callers.remove_dirs(loop)
    # after the done line: how long the snapshots' and files' removal took (the host
    # splits a sequence's time with it: suite/explore/timing.py)
    if ctx.zfs is not None or problems:
        emit({"event": "cleanup", "errors": problems,
              "seconds": round(time.monotonic() - t_clean, 3)})
    return EXIT_OK if failed is None else EXIT_FINDING


def _backing_check(loop: callers.Loop | callers.LoopFs | callers.Overlay | callers.Nfs,
                   model: Model) -> Outcome | None:
    """The caller let go: a loop device's backing file, an overlay's upper file, the
    NFS export's file must hold the model's bytes; a file system on a loop device must
    check clean."""
    why = loop.detach()
    if why and isinstance(loop, callers.LoopFs) and why.startswith("e2fsck"):
        return Outcome("failed", "fsck", f"ext4 on the loop device over {loop.backing}: {why}")
    if why:
        return Outcome("failed", "error:caller", why)
    if isinstance(loop, callers.Loop):
        got = loop.backing_bytes(model.size)
        return check_bytes(got, model, 0, f"the loop device's backing file {loop.backing}")
    if isinstance(loop, (callers.Overlay, callers.Nfs)):
        what = ("the overlay's upper file" if isinstance(loop, callers.Overlay)
                else "the NFS export's file") + " on the dataset"
        got = loop.upper_bytes(model.size + 1)
        if len(got) != model.size:
            return Outcome("failed", "size", f"{what} has {len(got)} bytes, the model "
                           f"{model.size}")
        return check_bytes(got, model, 0, what)
    return None


def zvol_device(path: str, name: str, wait_s: float) -> str | None:
    """The device to run on for zvol ``name``: ``path`` when it serves that zvol
    (or is a regular file standing in for one: it cannot be asked), else the
    ``/dev/zdN`` that does, looked up by name (None: none within ``wait_s``)."""
    try:
        st = os.stat(path)
        if not stat.S_ISBLK(st.st_mode) or zvol_name(path) == name:
            return path
    except OSError:
        pass
    return wait_zvol(name, wait_s)


def cmd_explore_run(args: argparse.Namespace) -> int:
    try:
        seq, steps = load_sequence(args.sequence)
    except (OSError, ValueError, TypeError) as e:
        emit({"event": "error", "stage": "sequence", "error": f"{type(e).__name__}: {e}"})
        return EXIT_USAGE
    blockdev = args.blockdev or bool(args.zvol)
    if blockdev and not args.scratch:
        emit({"event": "error", "stage": "sequence",
              "error": "--blockdev needs --scratch PREFIX (scratch files on the dataset)"})
        return EXIT_USAGE
    path = args.file
    if args.zvol:
        found = zvol_device(path, args.zvol, min(60.0, args.op_timeout))
        if found is None:
            emit({"event": "error", "stage": "setup", "error": f"no /dev/zdN serves zvol "
                  f"{args.zvol} ({path} does not): create it first (zfs create -V)"})
            return EXIT_FAILED
        if found != path:
            emit({"event": "zvol", "name": args.zvol, "dev": found, "given": path})
        path = found
    zfs = None
    if args.zfs_dataset:
        zfs = ZfsTools(args.zfs_dataset, args.zfs_cmd, args.zpool_cmd, args.zfs_libdir,
                       args.op_timeout)
    return run_sequence(seq, steps, path, args.scratch or path, blockdev,
                        args.op_timeout, args.keep, args.tamper_after_data, zfs,
                        args.power_cut_wait, args.zvol, args.drop_caches, args.warn_after_data)


def add_commands(sub: Any) -> None:
    e = sub.add_parser("explore-run", help="run a sequence of ops against one file, each "
                       "checked against a byte model (suite explore)")
    e.add_argument("sequence", help="sequence JSON file (suite/explore/ops.py writes them)")
    e.add_argument("--file", required=True, help="the target (created, or truncated)")
    e.add_argument("--blockdev", action="store_true",
                   help="the target is a block device: written over, never truncated")
    e.add_argument("--zvol", default=None, metavar="NAME",
                   help="the target is this zvol (implies --blockdev): when --file is not its "
                        "device, its /dev/zdN is found by name (a replay in another guest)")
    e.add_argument("--scratch", default=None, metavar="PREFIX",
                   help="scratch files PREFIX.src and PREFIX.shm (default: the target's path)")
    e.add_argument("--op-timeout", type=float, default=DEFAULT_OP_TIMEOUT_S,
                   help="seconds an async request or a ZFS command may take before it is a hang")
    e.add_argument("--keep", action="store_true",
                   help="keep the files of a passing run (and every run's snapshots)")
    z = e.add_argument_group("the ZFS ops (snapshot, rollback, txg_sync); without "
                             "--zfs-dataset they are unsupported")
    z.add_argument("--zfs-dataset", default=None, metavar="NAME",
                   help="the dataset the target lives on")
    z.add_argument("--zfs-cmd", default="zfs", metavar="PATH", help="the build's zfs")
    z.add_argument("--zpool-cmd", default="zpool", metavar="PATH", help="the build's zpool")
    z.add_argument("--zfs-libdir", default=None, metavar="DIR",
                   help="LD_LIBRARY_PATH for them (the build's .libs)")
    e.add_argument("--warn-after-data", type=int, default=None, metavar="TOKEN",
                   help="self-check: print a kernel WARNING once the write of data TOKEN "
                        "landed (the host must stop the sequence there)")
    e.add_argument("--drop-caches", action="store_true",
                   help="evict with the kernel's drop_caches as well (a guest of its own: "
                        "posix_fadvise evicts nothing on older OpenZFS)")
    e.add_argument("--power-cut-wait", type=float, default=0.0, metavar="S",
                   help="a power_cut op waits S seconds for the host to cut the guest's "
                        "power (0: no host will: the op is unsupported)")
    e.add_argument("--tamper-after-data", type=int, default=None, metavar="TOKEN",
                   help="self-test hook: after the write of data TOKEN, overwrite its first "
                        "byte behind the model's back (a later read must fail)")
    e.set_defaults(func=cmd_explore_run)
