"""O_DIRECT writes the file refuses after they were allowed to open it.

An immutable or append-only flag set (``FS_IOC_SETFLAGS``, as ``chattr +i``/``+a``
does) on a file already open for writing makes a later write at offset 0 fail with
EPERM. OpenZFS checks that in ``zfs_write``; the async series checks it once more
before queuing a write to its taskq, after the request's pages may already be pinned
and its iovec copied. A refusal must leave the file's bytes as they were and nothing
behind it: no pinned page, no in-flight byte of the admission budget, no task that
runs later (the after-case judges and, on the debug kernel, kmemleak and KASAN).
No case refused a Direct I/O write before: the series' refusal branches were never
reached on the debug kernel.

``refused`` runs one trial per (interface, segments, flag): the refused write, the
file read back, then the flag cleared and the same write issued again (the control:
full length, the new bytes) -- and counts the tasks dispatched to the pool's
``zpl_async_*`` taskqs around each, so the case can tell which path its rows took.
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import os
import struct
from dataclasses import asdict, dataclass, field
from typing import Any

from .content import pattern
from .counters import read_counter
from .plan import EXIT_FAILED, EXIT_OK, PAGE, errno_name
from .queues import SegmentBuffers
from .stress import split_segments
from .trials import emit, write_file
from .unpinnable import issue

INTERFACES = ("sync", "libaio", "io_uring")
FS_IOC_GETFLAGS = 0x80086601        # _IOR('f', 1, long)
FS_IOC_SETFLAGS = 0x40086602        # _IOW('f', 2, long)
FLAGS = {"immutable": 0x10, "append": 0x20}    # FS_IMMUTABLE_FL, FS_APPEND_FL
TASKQS = "/proc/spl/kstat/taskq/zpl_async_*_{pool}.*"


@dataclass
class Trial:
    interface: str
    nsegs: int
    flag: str
    length: int
    res: int = 0                    # bytes, or -errno
    error: str = ""
    control: int = 0                # the same write with the flag cleared
    tasks: int | None = None        # dispatched to the async taskqs by the refused write
    control_tasks: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def set_flags(fd: int, flags: int) -> None:
    """FS_IOC_SETFLAGS on an open descriptor (root: CAP_LINUX_IMMUTABLE)."""
    old = struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0)))[0]
    keep = old & ~sum(FLAGS.values())
    fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", keep | flags))


def clear(path: str) -> None:
    """Take a flag a failed trial left off the file, so it can be laid down again."""
    if os.path.exists(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            set_flags(fd, 0)
        finally:
            os.close(fd)


def tasks(pool: str) -> int | None:
    return read_counter({"glob": TASKQS.format(pool=pool), "field": "tasks_dispatched"})


def _delta(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else b - a


def run_trial(path: str, pool: str, t: Trial, seed: str, timeout_s: float) -> Trial:
    old, new = pattern(seed, 0, t.length), pattern(f"{seed}:new", 0, t.length)
    clear(path)
    write_file(path, t.length, seed)
    bufs = SegmentBuffers(split_segments(t.length, t.nsegs))
    bufs.fill(new)
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    try:
        set_flags(fd, FLAGS[t.flag])
        before = tasks(pool)
        t.res = issue(t.interface, True, fd, bufs, timeout_s)
        after = tasks(pool)
        t.tasks = _delta(before, after)
        t.error = (errno_name(-t.res) or str(-t.res)) if t.res < 0 else ""
        if t.res >= 0:
            t.problems.append(f"accepted: wrote {t.res} bytes at offset 0 of a file "
                              f"made {t.flag} after it was opened")
        elif -t.res != errno.EPERM:
            t.problems.append(f"failed {t.error}, not EPERM")
        with open(path, "rb") as f:
            now = f.read()
        if t.res < 0 and now != old:
            wrong = sum(a != b for a, b in zip(now, old)) + abs(len(now) - len(old))
            t.problems.append(f"refused, yet {wrong} bytes of the file changed")
        set_flags(fd, 0)
        t.control = issue(t.interface, True, fd, bufs, timeout_s)
        t.control_tasks = _delta(after, tasks(pool))
        if t.control != t.length:
            t.problems.append(f"the control write with the flag cleared returned {t.control}")
        else:
            with open(path, "rb") as f:
                if f.read() != new:
                    t.problems.append("the control write left wrong bytes")
    finally:
        try:
            set_flags(fd, 0)
        finally:
            os.close(fd)
            bufs.close()
    return t


def cmd_refused(args: argparse.Namespace) -> int:
    failed = 0
    for interface in args.interface or INTERFACES:
        for nsegs in args.nsegs or (1, 4):
            for flag in args.flag or tuple(FLAGS):
                t = Trial(interface, nsegs, flag, args.len)
                try:
                    run_trial(args.file, args.pool, t, args.seed, args.timeout_s)
                except OSError as e:
                    t.problems.append(f"harness: {e}")
                failed += not t.ok
                emit({"event": "refused", **asdict(t), "ok": t.ok})
    clear(args.file)
    return EXIT_FAILED if failed else EXIT_OK


def add_commands(sub: Any) -> None:
    r = sub.add_parser("refused", help="O_DIRECT writes to a file made immutable or "
                                       "append-only after it was opened")
    r.add_argument("--file", required=True)
    r.add_argument("--pool", required=True, help="its pool (the async taskqs' name)")
    r.add_argument("--interface", action="append", choices=INTERFACES)
    r.add_argument("--nsegs", type=int, action="append", help="segments (repeat; default 1, 4)")
    r.add_argument("--flag", action="append", choices=tuple(FLAGS))
    r.add_argument("--len", type=int, default=16 * PAGE)
    r.add_argument("--seed", default="refused")
    r.add_argument("--timeout-s", type=float, default=60.0)
    r.set_defaults(func=cmd_refused)
