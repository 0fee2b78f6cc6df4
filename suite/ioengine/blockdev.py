"""Block devices in the guest: which ``/dev/zdN`` is a zvol, and a Direct I/O
write whose pages change while it is in flight (``zvol-dev``, ``flip-write``).
"""
from __future__ import annotations

import argparse
import fcntl
import glob
import hashlib
import json
import mmap
import os
import re
import threading
import time
from typing import Any

from .content import pattern
from .plan import EXIT_FAILED, EXIT_OK, errno_name

# include/sys/zvol.h (via linux/blkdev_compat): _IOR(0x12, 125, char[256]).
BLKZNAME = (2 << 30) | (256 << 16) | (0x12 << 8) | 125


def zvol_name(dev: str) -> str | None:
    """The dataset name a ``/dev/zdN`` serves (what udev's ``zvol_id`` asks)."""
    try:
        fd = os.open(dev, os.O_RDONLY)
    except OSError:
        return None
    try:
        buf = bytearray(256)
        fcntl.ioctl(fd, BLKZNAME, buf)
        return buf.split(b"\0", 1)[0].decode()
    except OSError:
        return None
    finally:
        os.close(fd)


def find_zvol(name: str) -> str | None:
    """``/dev/zdN`` of zvol ``name`` (partitions ``zdNpM`` skipped)."""
    for dev in sorted(glob.glob("/dev/zd*")):
        if re.fullmatch(r"/dev/zd\d+", dev) and zvol_name(dev) == name:
            return dev
    return None


def wait_zvol(name: str, wait_s: float) -> str | None:
    """:func:`find_zvol`, asked again until ``wait_s`` passed: minors are created
    asynchronously after ``zfs create -V``."""
    deadline = time.monotonic() + wait_s
    while True:
        dev = find_zvol(name)
        if dev or time.monotonic() > deadline:
            return dev
        time.sleep(0.2)


def cmd_zvol_dev(args: argparse.Namespace) -> int:
    dev = wait_zvol(args.name, args.wait_s)
    print(json.dumps({"event": "zvol", "name": args.name, "dev": dev}), flush=True)
    return EXIT_OK if dev else EXIT_FAILED


def flip_write(path: str, offset: int, length: int, writes: int, seed: Any) -> dict[str, Any]:
    """``writes`` O_DIRECT pwrites of one buffer while another thread keeps
    changing its bytes (what ZTS's manipulate_user_buffer does). Returns each
    write's result; the pages' final content is written once more, stably,
    so the range's expected bytes are known afterwards."""
    buf = mmap.mmap(-1, length)
    buf[:] = pattern(seed, offset, length)
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    results: list[Any] = []
    done = threading.Event()
    flipping = threading.Event()        # the writes begin once the bytes are changing

    def writer() -> None:
        flipping.wait(10)
        with memoryview(buf) as mv:
            for _ in range(writes):
                try:
                    results.append(os.pwrite(fd, mv, offset))
                except OSError as e:
                    results.append(errno_name(e.errno))
        done.set()

    t = threading.Thread(target=writer)
    flips = 0
    t.start()
    while not done.is_set():
        i = (flips * 4093) % length
        buf[i] = (buf[i] + 1) & 0xFF
        flips += 1
        flipping.set()
    t.join()
    with memoryview(buf) as mv:
        final = os.pwrite(fd, mv, offset)
    os.fsync(fd)
    os.close(fd)
    want = hashlib.sha256(buf).hexdigest()
    rfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:                        # read back from the device, into an aligned buffer
        buf[:] = b"\0" * length
        got_n = os.preadv(rfd, [buf], offset)
    finally:
        os.close(rfd)
    got = hashlib.sha256(buf[:got_n]).hexdigest()
    buf.close()
    errors = [r for r in results if not isinstance(r, int)]
    return {"event": "flip-write", "path": path, "offset": offset, "len": length,
            "writes": writes, "flips": flips, "results": results,
            "errors": len(errors), "first_error": errors[0] if errors else None,
            "short": sum(1 for r in results if isinstance(r, int) and r != length),
            "final_write": final, "readback_matches": got == want and got_n == length}


def cmd_flip_write(args: argparse.Namespace) -> int:
    out = flip_write(args.path, args.offset, args.len, args.writes, args.seed)
    print(json.dumps(out), flush=True)
    return EXIT_OK


def add_commands(sub: Any) -> None:
    z = sub.add_parser("zvol-dev", help="print the /dev/zdN of a zvol (waits for it)")
    z.add_argument("name")
    z.add_argument("--wait-s", type=float, default=30.0)
    z.set_defaults(func=cmd_zvol_dev)
    f = sub.add_parser("flip-write", help="O_DIRECT writes of a buffer changed in flight")
    f.add_argument("path")
    f.add_argument("--offset", type=int, default=0)
    f.add_argument("--len", type=int, required=True)
    f.add_argument("--writes", type=int, default=20)
    f.add_argument("--seed", default="flip")
    f.set_defaults(func=cmd_flip_write)
