"""Writes in flight: ``inflight`` (async writes, a barrier issued while they are
in flight, writes submitted after it), ``append`` (several O_APPEND writes in
one submission), ``owners`` (whose bytes a range holds) and ``fsync-files``.

Everything is timed on one monotonic clock and emitted as it happens, so the
host can act the moment a barrier returns (for example: cut the guest's power
while a write the barrier should have waited for is still held).

``inflight`` events: ``submitted`` (per write: tag, file, offset, len, t),
``probe`` (which writes were still outstanding when the barrier started: the
proof the overlap was real), ``barrier-start``, ``late-submitted``,
``barrier-end`` (t, error, the writes submitted before it still outstanding),
``completion`` (tag, res, t), ``settled`` (every write and the barrier done,
before the read-back, which waits for ``--read-back-after``'s file), then ``done``
with every write's outcome and which write's bytes each 4 KiB block of each written
range holds afterwards.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .content import pattern
from .plan import DIO_ALIGN, EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, Segment, errno_name
from .queues import ABANDONED, IoOp, SegmentBuffers, make_queue
from .trials import emit, file_size_limit, readback

BLOCK = 4096


@dataclass
class WriteSpec:
    """``PATH:OFFSET:LEN:SEED``: LEN bytes of ``pattern(SEED)`` at OFFSET."""
    path: str
    offset: int
    length: int
    seed: str
    tag: int = 0
    t_submit: float | None = None
    t_done: float | None = None
    res: int | None = None

    @classmethod
    def parse(cls, text: str) -> "WriteSpec":
        path, off, n, seed = text.split(":", 3)
        return cls(path, int(off), int(n), seed)

    def to_dict(self) -> dict[str, Any]:
        return {"tag": self.tag, "file": self.path, "offset": self.offset, "len": self.length,
                "seed": self.seed, "res": self.res, "errname": errno_name(-self.res)
                if self.res is not None and self.res < 0 else None,
                "t_submit": self.t_submit, "t_done": self.t_done}


@dataclass
class Clock:
    t0: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)


def _segments(length: int, nsegs: int) -> list[Segment]:
    if nsegs <= 1:
        return [Segment(length, 0)]
    each = length // nsegs
    return [Segment(each, 0)] * (nsegs - 1) + [Segment(length - each * (nsegs - 1), 0)]


class Writer:
    """Async writes on one queue, with their fds and buffers."""

    def __init__(self, interface: str, nsegs: int, depth: int, append: bool = False) -> None:
        self.q = make_queue(interface, depth)
        self.nsegs = nsegs
        self.append = append
        self.fds: dict[str, int] = {}
        self.ops: dict[int, tuple[IoOp, WriteSpec]] = {}
        self._tag = 0

    def fd(self, path: str) -> int:
        if path not in self.fds:
            flags = os.O_WRONLY | os.O_DIRECT | os.O_CREAT | (os.O_APPEND if self.append else 0)
            self.fds[path] = os.open(path, flags, 0o644)
        return self.fds[path]

    def op(self, w: WriteSpec, data_offset: int | None = None) -> IoOp:
        self._tag += 1
        w.tag = self._tag
        bufs = SegmentBuffers(_segments(w.length, self.nsegs))
        bufs.fill(pattern(w.seed, w.offset if data_offset is None else data_offset, w.length))
        op = IoOp(w.tag, True, self.fd(w.path), w.offset, bufs, self.nsegs >= 1)
        self.ops[w.tag] = (op, w)
        return op

    def submit(self, writes: list[WriteSpec], clock: Clock, one_call: bool = False) -> int:
        ops = [self.op(w, 0 if self.append else None) for w in writes]
        done = 0
        batches = [ops] if one_call else [[o] for o in ops]
        for batch in batches:
            t = clock.now()
            n = self.q.submit(batch)
            for o in batch[:n]:
                self.ops[o.tag][1].t_submit = t
            done += n
            if n < len(batch):
                break
        return done

    def reap(self, clock: Clock, timeout_s: float) -> list[WriteSpec]:
        out = []
        for tag, res in self.q.reap(0, max(len(self.ops), 1), timeout_s):
            w = self.ops[tag][1]
            w.res, w.t_done = res, clock.now()
            out.append(w)
        return out

    def outstanding(self) -> list[WriteSpec]:
        return [w for _, w in self.ops.values() if w.t_submit is not None and w.t_done is None]

    def close(self, abandon: bool) -> None:
        if abandon:
            ABANDONED.extend([self.q, self.ops, self.fds])
            return
        for op, _ in self.ops.values():
            op.buffers.close()
        self.q.close()
        for fd in self.fds.values():
            os.close(fd)


def _barrier(kind: str, path: str) -> int:
    """Run the barrier; 0 or the errno it failed with."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if kind == "fsync":
            os.fsync(fd)
        elif kind == "fdatasync":
            os.fdatasync(fd)
        elif kind == "syncfs":
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.syncfs(fd) != 0:
                return ctypes.get_errno()
        return 0
    except OSError as e:
        return e.errno or -1
    finally:
        os.close(fd)


def block_owners(path: str, offset: int, length: int, writes: list[WriteSpec],
                 base_seed: str | None) -> list[str]:
    """For each 4 KiB block of ``[offset, offset+length)``: the seed of the write
    whose bytes it holds, ``base`` (the file's original bytes), ``zero``, ``?``
    (none of these: a mix or garbage) or ``missing`` (past EOF)."""
    data, _ = readback(path, offset, length)
    owners = []
    for i in range(0, length, BLOCK):
        got, at = data[i:i + BLOCK], offset + i
        n = len(got)
        found = "?" if n else "missing"
        for x in writes:
            if x.path == path and x.offset <= at < x.offset + x.length and n \
                    and got == pattern(x.seed, at, n):
                found = x.seed
                break
        else:
            if n and base_seed is not None and got == pattern(base_seed, at, n):
                found = "base"
            elif n and got == bytes(n):
                found = "zero"
        owners.append(found)
    return owners


def _wait_for_file(path: str, wait_s: float) -> bool:
    """Wait until ``path`` exists (the host's go-ahead), at most ``wait_s``."""
    stop = time.monotonic() + wait_s
    while not os.path.exists(path):
        if time.monotonic() >= stop:
            return False
        time.sleep(0.02)
    return True


def cmd_inflight(args: argparse.Namespace) -> int:
    clock = Clock()
    writes = [WriteSpec.parse(s) for s in args.write]
    late = [WriteSpec.parse(s) for s in args.late or []]
    try:
        w = Writer(args.interface, args.nsegs, len(writes) + len(late) + 1)
        for spec in writes + late:
            w.fd(spec.path)
    except OSError as e:
        emit({"event": "error", "stage": "setup", "errname": errno_name(e.errno), "error": str(e)})
        return EXIT_FAILED
    try:
        n = w.submit(writes, clock)
    except OSError as e:
        emit({"event": "error", "stage": "submit", "errname": errno_name(e.errno), "error": str(e)})
        return EXIT_FAILED
    emit({"event": "submitted", "pid": os.getpid(), "t": clock.now(), "submitted": n,
          "writes": [x.to_dict() for x in writes]})
    deadline = time.monotonic() + args.deadline_s
    wait_until = time.monotonic() + args.barrier_after_ms / 1000.0
    while time.monotonic() < wait_until:
        for x in w.reap(clock, min(0.05, max(0.0, wait_until - time.monotonic()))):
            emit({"event": "completion", "tag": x.tag, "res": x.res, "t": x.t_done})
    before = [x.tag for x in w.outstanding()]
    emit({"event": "probe", "t": clock.now(), "outstanding": before})
    state: dict[str, Any] = {}
    barrier_thread = None
    if args.barrier != "none":
        target = args.barrier_file or writes[0].path

        def run_barrier() -> None:
            state["start"] = clock.now()
            state["error"] = _barrier(args.barrier, target)
            state["end"] = clock.now()
        emit({"event": "barrier-start", "t": clock.now(), "barrier": args.barrier,
              "file": target})
        barrier_thread = threading.Thread(target=run_barrier, daemon=True)
        barrier_thread.start()
    t_late = time.monotonic() + args.late_after_ms / 1000.0
    schedule = [(t_late + i * args.late_every_ms / 1000.0, x) for i, x in enumerate(late)]
    reported_end = False
    while time.monotonic() < deadline:
        due = [x for t, x in schedule if t <= time.monotonic()]
        if due:
            schedule = schedule[len(due):]
            w.submit(due, clock)
            emit({"event": "late-submitted", "t": clock.now(),
                  "writes": [x.to_dict() for x in due]})
        for x in w.reap(clock, 0.02):
            emit({"event": "completion", "tag": x.tag, "res": x.res, "t": x.t_done})
        if barrier_thread is not None and not reported_end and "end" in state:
            reported_end = True
            pending = [x.tag for x in writes if x.t_done is None]
            emit({"event": "barrier-end", "t": state["end"], "error": errno_name(state["error"])
                  if state["error"] else None, "pending": pending})
        if not schedule and not w.outstanding() and (barrier_thread is None or reported_end):
            break
    left = w.outstanding()
    out: dict[str, Any] = {"writes": [x.to_dict() for x in writes],
                           "late": [x.to_dict() for x in late], "barrier": args.barrier,
                           "barrier_start": state.get("start"), "barrier_end": state.get("end"),
                           "barrier_error": errno_name(state["error"]) if state.get("error")
                           else None, "outstanding_at_barrier": before}
    if left or (barrier_thread is not None and not reported_end):
        out.update(event="timeout", outstanding=[x.tag for x in left],
                   barrier_returned=reported_end, deadline_s=args.deadline_s)
        emit(out)
        w.close(abandon=True)
        return EXIT_TIMEOUT
    w.close(abandon=False)
    # Every write and the barrier are done: the host may release what held them
    # (a zinject delay on reads would otherwise hold each read-back below too).
    emit({"event": "settled", "t": clock.now()})
    if args.read_back_after:
        _wait_for_file(args.read_back_after, args.read_back_wait_s)
    ranges = sorted({(x.path, x.offset, x.length) for x in writes + late})
    out["contents"] = []
    for p, o, n in ranges:
        try:
            blocks: Any = block_owners(p, o, n, writes + late, args.base_seed)
        except OSError as e:            # the file went away (a teardown, a rollback)
            blocks = f"unreadable: {errno_name(e.errno)}"
        out["contents"].append({"file": p, "offset": o, "len": n, "blocks": blocks})
    out["event"] = "done"
    emit(out)
    return EXIT_OK


def cmd_append(args: argparse.Namespace) -> int:
    """K O_APPEND writes of distinct records in one io_submit (or K sync writes)."""
    clock = Clock()
    path, k, n = args.file, args.k, args.len
    records = [WriteSpec(path, 0, n, f"{args.seed}#{i}") for i in range(k)]
    size0 = os.stat(path).st_size if os.path.exists(path) else 0
    with file_size_limit(args.rlimit_fsize):
        if args.interface == "sync":
            fd = os.open(path, os.O_WRONLY | os.O_DIRECT | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                for r in records:
                    bufs = SegmentBuffers(_segments(n, 1))
                    bufs.fill(pattern(r.seed, 0, n))
                    r.t_submit = clock.now()
                    try:
                        with bufs.views()[0] as v:
                            r.res = os.write(fd, v)
                    except OSError as e:
                        r.res = -(e.errno or 1)
                    r.t_done = clock.now()
                    bufs.close()
            finally:
                os.close(fd)
        else:
            w = Writer(args.interface, 0, k + 1, append=True)
            try:
                w.submit(records, clock, one_call=True)
            except OSError as e:
                emit({"event": "error", "stage": "submit", "errname": errno_name(e.errno),
                      "error": str(e)})
                return EXIT_FAILED
            deadline = time.monotonic() + args.deadline_s
            while w.outstanding() and time.monotonic() < deadline:
                w.reap(clock, 0.1)
            if w.outstanding():
                emit({"event": "timeout", "records": [r.to_dict() for r in records]})
                w.close(abandon=True)
                return EXIT_TIMEOUT
            w.close(abandon=False)
    size = os.stat(path).st_size
    found = []
    for off in range(size0, size, n):
        data, _ = readback(path, off, n)
        owner = next((i for i, r in enumerate(records) if data == pattern(r.seed, 0, n)), None)
        found.append({"offset": off, "record": owner, "len": len(data)})
    emit({"event": "done", "size_before": size0, "size_after": size, "len": n, "k": k,
          "interface": args.interface, "rlimit_fsize": args.rlimit_fsize,
          "records": [r.to_dict() for r in records], "layout": found,
          "elapsed_s": clock.now()})
    return EXIT_OK


def cmd_owners(args: argparse.Namespace) -> int:
    """Which write's bytes each 4 KiB block of a range holds (see block_owners)."""
    off, n = (int(x) for x in args.range.split(":"))
    writes = [WriteSpec(args.file, off, n, s) for s in args.seed or []]
    emit({"event": "owners", "file": args.file, "offset": off, "len": n,
          "blocks": block_owners(args.file, off, n, writes, args.base_seed)})
    return EXIT_OK


def cmd_fsync_files(args: argparse.Namespace) -> int:
    """Create N files of one page each and fsync each; report every latency."""
    lat = []
    for i in range(args.n):
        path = os.path.join(args.dir, f"fsync{i}.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, pattern(f"fsync{i}", 0, DIO_ALIGN))
            t = time.monotonic()
            emit({"event": "fsync-start", "i": i, "file": path})
            os.fsync(fd)
            lat.append(round(time.monotonic() - t, 4))
        finally:
            os.close(fd)
    emit({"event": "done", "n": args.n, "latency_s": lat, "max_s": max(lat, default=0.0)})
    return EXIT_OK


def add_commands(sub: Any) -> None:
    o = sub.add_parser("owners", help="which write's bytes each block of a range holds")
    o.add_argument("--file", required=True)
    o.add_argument("--range", required=True, metavar="OFFSET:LEN")
    o.add_argument("--seed", action="append", help="seed of a write that covered the range")
    o.add_argument("--base-seed", default=None)
    o.set_defaults(func=cmd_owners)

    fs = sub.add_parser("fsync-files", help="create N small files and fsync each, timed")
    fs.add_argument("--dir", required=True)
    fs.add_argument("-n", type=int, default=16)
    fs.set_defaults(func=cmd_fsync_files)

    i = sub.add_parser("inflight", help="async writes in flight, a barrier among them")
    i.add_argument("--interface", choices=("libaio", "io_uring"), default="libaio")
    i.add_argument("--write", action="append", required=True, metavar="PATH:OFFSET:LEN:SEED",
                   help="a write submitted before the barrier (repeat; one io_submit each)")
    i.add_argument("--late", action="append", metavar="PATH:OFFSET:LEN:SEED",
                   help="a write submitted after the barrier started")
    i.add_argument("--nsegs", type=int, default=0, help=">=1: PWRITEV with that many segments")
    i.add_argument("--barrier", choices=("fsync", "fdatasync", "syncfs", "none"), default="none")
    i.add_argument("--barrier-file", default=None, help="file the barrier is called on")
    i.add_argument("--barrier-after-ms", type=float, default=0.0)
    i.add_argument("--late-after-ms", type=float, default=200.0)
    i.add_argument("--late-every-ms", type=float, default=0.0,
                   help="space the late writes this far apart (0: all at once)")
    i.add_argument("--base-seed", default=None, help="seed of the files' original content")
    i.add_argument("--deadline-s", type=float, default=120.0)
    i.add_argument("--read-back-after", default=None, metavar="PATH",
                   help="once settled, wait for PATH to exist before reading the ranges back "
                        "(the host releases what held the writes first)")
    i.add_argument("--read-back-wait-s", type=float, default=60.0,
                   help="wait at most this long for --read-back-after")
    i.set_defaults(func=cmd_inflight)

    a = sub.add_parser("append", help="K O_APPEND O_DIRECT writes in one submission")
    a.add_argument("--file", required=True)
    a.add_argument("--seed", required=True)
    a.add_argument("-k", type=int, default=4)
    a.add_argument("--len", type=int, default=DIO_ALIGN * 16)
    a.add_argument("--interface", choices=("sync", "libaio", "io_uring"), default="libaio")
    a.add_argument("--rlimit-fsize", type=int, default=0)
    a.add_argument("--deadline-s", type=float, default=120.0)
    a.set_defaults(func=cmd_append)
