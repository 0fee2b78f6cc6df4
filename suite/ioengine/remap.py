"""Remaps in opposite directions: two processes clone blocks between the same two
files at once, one from A into B, the other from B into A.

A remap (``FICLONERANGE``, ``copy_file_range``) locks two inodes. Since Linux 4.20
the VFS leaves that to the filesystem, which must take them in one order
whatever the direction, or each process holds one inode and waits for the other
(an rwsem writer also queues behind readers, so a shared source lock is no
escape). Each file's first half is the source of one direction and never
written, its second half the destination of the other: every clone can succeed
with the sources clean, and at the end each destination must hold the other
file's first half, which is checked byte for byte.

``remap-cross`` prints one JSON line: per direction the clones done and their
errors, the processes still running at the deadline with their state and
``/proc/PID/stack``, and the byte check.
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from . import forked
from .content import pattern
from .explore.xfer import clone_range, copy_range
from .plan import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT
from .trials import emit, write_file

MOVERS = ("ficlonerange", "copy_file_range")


@dataclass
class Direction:
    """One process's side: clones from ``src`` into ``dst`` until told to stop."""
    name: str
    src: str
    dst: str
    done: int = 0
    errors: dict[str, int] = field(default_factory=dict)


def _move(mover: str, dst: int, src: int, off: int, half: int, length: int) -> int:
    """One remap of ``length`` bytes from src[off] to dst[half + off]: 0 or the errno."""
    if mover == "ficlonerange":
        return clone_range(dst, src, half + off, off, length)
    moved, err = copy_range(dst, src, half + off, off, length)
    return err if err else (0 if moved == length else -1)


def _side(d: Direction, mover: str, half: int, record: int, until: float) -> Direction:
    """The loop of one process: record after record, round and round."""
    src = os.open(d.src, os.O_RDONLY)
    dst = os.open(d.dst, os.O_WRONLY)
    off = 0
    while time.monotonic() < until:
        err = _move(mover, dst, src, off, half, record)
        if err == 0:
            d.done += 1
        else:
            key = "short" if err < 0 else os.strerror(err)
            d.errors[key] = d.errors.get(key, 0) + 1
        off = (off + record) % half
    os.close(src)
    os.close(dst)
    return d


def proc_state(pid: int) -> dict[str, str]:
    """What a process is doing: its state letter, wchan and kernel stack (root only)."""
    def read(name: str) -> str:
        try:
            with open(f"/proc/{pid}/{name}", encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError as e:
            return f"<{e.strerror}>"
    stat = read("stat")
    state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
    return {"state": state, "wchan": read("wchan").strip(), "stack": read("stack")}


def check_swapped(a: str, b: str, seeds: tuple[str, str], half: int) -> dict[str, int]:
    """Wrong bytes in each file's second half, which must now hold the other
    file's first half (every clone copies whole records of it)."""
    wrong = {}
    for path, other in ((a, seeds[1]), (b, seeds[0])):
        with open(path, "rb") as f:
            f.seek(half)
            got = f.read(half)
        want = pattern(other, 0, half)
        wrong[os.path.basename(path)] = (sum(x != y for x, y in zip(got, want))
                                         + abs(len(want) - len(got)))
    return wrong


def cmd_remap_cross(args: argparse.Namespace) -> int:
    half = args.records * args.record
    a, b = os.path.join(args.dir, "remap-a.bin"), os.path.join(args.dir, "remap-b.bin")
    seeds = ("remap-a", "remap-b")
    for path, seed in ((a, seeds[0]), (b, seeds[1])):
        write_file(path, 2 * half, seed, direct=False)
    os.sync()       # clean sources: a clone of dirty blocks may wait for or refuse them
    t0 = time.monotonic()
    until = t0 + args.seconds
    sides = (Direction("a-to-b", a, b), Direction("b-to-a", b, a))
    children = {}
    for d in sides:
        pid, rfd = forked.fork_json(
            lambda d=d: asdict(_side(d, args.mover, half, args.record, until)),
            lambda e, d=d: {**asdict(d), "crash": f"{type(e).__name__}: {e}"})
        children[pid] = rfd
    bufs, running = forked.collect(children, until + args.deadline_s)
    stuck = {str(pid): proc_state(pid) for pid in running}
    forked.reap(children, running)
    reports = [forked.report(bufs[pid], {"pid": pid, "crash": "no report"}) for pid in children]
    out: dict[str, Any] = {"event": "remap-cross", "mover": args.mover, "record": args.record,
                           "records": args.records, "seconds": args.seconds,
                           "elapsed_s": round(time.monotonic() - t0, 3),
                           "sides": reports, "stuck": stuck}
    if not running:
        out["wrong_bytes"] = check_swapped(a, b, seeds, half)
    emit(out)
    if running:
        return EXIT_TIMEOUT
    return EXIT_FAILED if any("crash" in r for r in reports) else EXIT_OK


def add_commands(sub: Any) -> None:
    r = sub.add_parser("remap-cross", help="two processes clone between two files in "
                                           "opposite directions at once")
    r.add_argument("--dir", required=True)
    r.add_argument("--mover", choices=MOVERS, default="ficlonerange")
    r.add_argument("--record", type=int, default=131072, help="bytes per clone (the recordsize)")
    r.add_argument("--records", type=int, default=4, help="records in each file's half")
    r.add_argument("--seconds", type=float, default=5.0, help="how long both keep cloning")
    r.add_argument("--deadline-s", type=float, default=60.0,
                   help="past --seconds, how long a side may take to finish its last clone")
    r.set_defaults(func=cmd_remap_cross)
