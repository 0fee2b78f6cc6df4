"""O_DIRECT requests whose user buffer has a page that cannot be pinned.

Direct I/O pins the caller's pages before it moves a byte; when pinning fails
part way (a page ``PROT_NONE`` in the middle of the buffer), the pages already
pinned must be released and the request must fail (EFAULT) or, where a
filesystem falls back to a copy, stop short at the hole. It must never report
bytes it did not move or move them wrong, never write bytes that are neither the
old nor the new ones, and leave nothing pinned or freed twice behind it (the
after-case judges, KASAN and kmemleak on the debug kernel). No case issued that shape before: line coverage
of async-dio on the debug kernel showed the series' error branch of
``zfs_uio_get_dio_pages_alloc`` never reached.

``unpinnable`` runs one trial per (interface, op, segments, hole) and prints a
JSON line each: the result, what the file or buffer holds after it, and a
control request on the same descriptor with the buffer whole again (the error
path left the file's state sane).
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import mmap
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .content import pattern
from .plan import EXIT_FAILED, EXIT_OK, PAGE, errno_name
from .queues import IoOp, SegmentBuffers, make_queue
from .stress import split_segments
from .trials import emit, write_file

INTERFACES = ("sync", "libaio", "io_uring")
PROT_NONE = 0                   # <sys/mman.h>; the mmap module has no name for it
OPS = ("read", "write")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


@dataclass
class Trial:
    interface: str
    op: str
    nsegs: int
    length: int
    hole: int                   # byte offset in the request of the page that cannot be pinned
    res: int = 0                # bytes, or -errno
    error: str = ""
    problems: list[str] = field(default_factory=list)
    control: int = 0            # the same request again, the buffer whole

    @property
    def ok(self) -> bool:
        return not self.problems


def protect(bufs: SegmentBuffers, at: int, prot: int) -> None:
    """mprotect the page holding request byte ``at`` (segments in order)."""
    for addr, seg in zip(bufs.addrs, bufs.segments):
        if at < seg.len:
            page = (addr + at) & ~(PAGE - 1)
            if _libc.mprotect(page, PAGE, prot) != 0:
                raise OSError(ctypes.get_errno(), "mprotect")
            return
        at -= seg.len
    raise ValueError(f"hole at {at} past the request")


def issue(interface: str, write: bool, fd: int, bufs: SegmentBuffers, timeout_s: float) -> int:
    """One request at offset 0: bytes moved, or -errno."""
    views = bufs.views()
    if interface == "sync":
        try:
            return os.pwritev(fd, views, 0) if write else os.preadv(fd, views, 0)
        except OSError as e:
            return -(e.errno or errno.EIO)
        finally:
            for v in views:
                v.release()
    for v in views:
        v.release()
    q = make_queue(interface, 1)
    try:
        q.submit([IoOp(0, write, fd, 0, bufs, bufs.nr_segs > 1)])
        got = q.reap(1, 1, timeout_s)
        if not got:
            return -errno.ETIMEDOUT
        return got[0][1]
    except OSError as e:           # refused at submission
        return -(e.errno or errno.EIO)
    finally:
        q.close()


def judge(t: Trial, before_hole: int, moved: bytes, expect: bytes) -> None:
    """What a request with a hole at ``t.hole`` may return: EFAULT, or a short count
    that stops at the hole (``before_hole``: the bytes ahead of its page)."""
    if t.res < 0:
        if -t.res != errno.EFAULT:
            t.problems.append(f"failed {t.error}, not EFAULT")
    elif t.res > before_hole:
        t.problems.append(f"returned {t.res} bytes, past the unpinnable page at {before_hole}")
    n = max(t.res, 0)
    if moved[:n] != expect[:n]:
        wrong = sum(a != b for a, b in zip(moved[:n], expect[:n]))
        t.problems.append(f"{wrong} wrong bytes in the {n} it reported")


def run_trial(path: str, t: Trial, seed: str, timeout_s: float) -> Trial:
    write = t.op == "write"
    old, new = pattern(seed, 0, t.length), pattern(f"{seed}:new", 0, t.length)
    write_file(path, t.length, seed)
    bufs = SegmentBuffers(split_segments(t.length, t.nsegs))
    fd = os.open(path, (os.O_RDWR if write else os.O_RDONLY) | os.O_DIRECT)
    try:
        if write:
            bufs.fill(new)
        protect(bufs, t.hole, PROT_NONE)
        t.res = issue(t.interface, write, fd, bufs, timeout_s)
        protect(bufs, t.hole, mmap.PROT_READ | mmap.PROT_WRITE)
        t.error = (errno_name(-t.res) or str(-t.res)) if t.res < 0 else ""
        before_hole = t.hole - t.hole % PAGE
        if write:
            with open(path, "rb") as f:
                now = f.read()
            judge(t, before_hole, now, new)
            # Past what it reported the range is unspecified after a failed write (Linux's
            # iomap writes the pages ahead of the fault and returns EFAULT), but every
            # byte is the old or the new one, and the file keeps its size.
            n = max(t.res, 0)
            torn = sum(1 for a, b, c in zip(now[n:], old[n:], new[n:]) if a not in (b, c))
            if torn or len(now) != t.length:
                t.problems.append(f"{torn} bytes past the {n} reported are neither old nor new; "
                                  f"size {len(now)}")
        else:
            judge(t, before_hole, bufs.gather(t.length), old)
        t.control = issue(t.interface, write, fd, bufs, timeout_s)
        if t.control != t.length:
            t.problems.append(f"the control request with the buffer whole returned {t.control}")
        elif not write and bufs.gather(t.length) != old:
            t.problems.append("the control read returned wrong bytes")
    finally:
        os.close(fd)
        bufs.close()
    return t


def cmd_unpinnable(args: argparse.Namespace) -> int:
    holes = [h * PAGE for h in args.hole_page or (0, 5)]
    failed = 0
    for interface in args.interface or INTERFACES:
        for op in args.op or OPS:
            for nsegs in args.nsegs or (1, 4):
                for hole in holes:
                    t = Trial(interface, op, nsegs, args.len, hole)
                    try:
                        run_trial(args.file, t, args.seed, args.timeout_s)
                    except OSError as e:
                        t.problems.append(f"harness: {e}")
                    failed += not t.ok
                    emit({"event": "unpinnable", **asdict(t), "ok": t.ok})
    return EXIT_FAILED if failed else EXIT_OK


def add_commands(sub: Any) -> None:
    u = sub.add_parser("unpinnable", help="O_DIRECT requests whose buffer has a PROT_NONE page")
    u.add_argument("--file", required=True)
    u.add_argument("--interface", action="append", choices=INTERFACES)
    u.add_argument("--op", action="append", choices=OPS)
    u.add_argument("--nsegs", type=int, action="append", help="segments (repeat; default 1 and 4)")
    u.add_argument("--len", type=int, default=16 * PAGE)
    u.add_argument("--hole-page", type=int, action="append",
                   help="page of the request that cannot be pinned (repeat; default 0 and 5)")
    u.add_argument("--seed", default="unpinnable")
    u.add_argument("--timeout-s", type=float, default=60.0)
    u.set_defaults(func=cmd_unpinnable)
