"""The stress modes: ``hold`` (requests held in flight, probed) and ``flood``
(several submitters at depth, with counter samples).
"""
from __future__ import annotations

import argparse
import os
import random
import stat
import time
from typing import Any

from . import forked
from .content import compare, pattern
from .counters import Sampler
from .plan import DIO_ALIGN, EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, Segment, errno_name
from .queues import ABANDONED, IoOp, SegmentBuffers, make_queue
from .trials import emit, open_trial_file

# hold: K async reads held in flight
# ---------------------------------------------------------------------------

def _open_target(path: str, direct: bool) -> tuple[int, bool]:
    """Open for reading (see :func:`open_trial_file` for FIFOs); (fd, is_fifo)."""
    try:
        is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_fifo = False
    return open_trial_file(path, "read", direct), is_fifo


def _file_size(fd: int, given: int | None) -> int:
    return given if given is not None else os.fstat(fd).st_size


def _check_read(seed: Any, size: int, offset: int, length: int, res: int,
                bufs: SegmentBuffers) -> dict[str, Any]:
    expected_len = max(0, min(length, size - offset))
    out: dict[str, Any] = {"res": res, "errno": -res if res < 0 else None,
                           "errname": errno_name(-res) if res < 0 else None,
                           "expected_len": expected_len, "first_wrong_byte": None,
                           "wrong_bytes": 0}
    if res > 0:
        n = min(res, expected_len)
        c = compare(bufs.gather(n), pattern(seed, offset, n), offset)
        out["first_wrong_byte"], out["wrong_bytes"] = c.first_wrong_byte, c.wrong_bytes
    out["correct"] = res == expected_len and out["wrong_bytes"] == 0
    return out


def cmd_hold(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    try:
        fd, is_fifo = _open_target(args.file, not args.no_direct)
        q = make_queue(args.interface, max(args.k, 1))
    except OSError as e:
        emit({"event": "error", "stage": "setup", "errno": e.errno,
              "errname": errno_name(e.errno), "error": str(e)})
        return EXIT_FAILED
    size = _file_size(fd, args.size)
    stride = args.stride or args.len
    ops = []
    for i in range(args.k):
        bufs = SegmentBuffers([Segment(args.len, args.page_offset)])
        ops.append(IoOp(i + 1, False, fd, args.offset + i * stride, bufs, False))
    t0 = time.monotonic()
    try:
        submitted = q.submit(ops)
    except OSError as e:
        emit({"event": "error", "stage": "submit", "errno": e.errno,
              "errname": errno_name(e.errno), "error": str(e)})
        return EXIT_FAILED
    submit_us = round((time.monotonic() - t0) * 1e6, 1)
    emit({"event": "submitted", "pid": os.getpid(), "pids": [os.getpid()], "t": time.time(),
          "interface": args.interface, "k": args.k, "submitted": submitted,
          "submit_us": submit_us, "fifo": is_fifo})
    results: dict[int, int] = {}
    want = submitted
    if args.probe_inflight is not None:
        time.sleep(args.probe_inflight / 1000.0)
        for tag, res in q.reap(0, max(want, 1), 0):
            results[tag] = res
        emit({"event": "probe", "after_ms": args.probe_inflight, "t": time.time(),
              "completed": len(results), "outstanding": want - len(results)})
    deadline = t0 + args.deadline_s
    while len(results) < want:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for tag, res in q.reap(1, want, min(left, 0.5)):
            results[tag] = res
    elapsed = round(time.monotonic() - t0, 4)
    reqs = []
    for op in ops[:submitted]:
        item: dict[str, Any] = {"i": op.tag - 1, "offset": op.offset, "len": args.len}
        if op.tag in results:
            item.update(_check_read(args.seed, size, op.offset, args.len, results[op.tag],
                                    op.buffers))
        else:
            item["outstanding"] = True
        reqs.append(item)
    if len(results) < want:
        ABANDONED.extend([q, ops, fd])
        emit({"event": "timeout", "outstanding": want - len(results), "requests": reqs,
              "elapsed_s": elapsed, "deadline_s": args.deadline_s})
        return EXIT_TIMEOUT
    emit({"event": "completed", "requests": reqs, "elapsed_s": elapsed,
          "total_s": round(time.monotonic() - t_start, 4),
          "all_correct": all(x.get("correct") for x in reqs) and submitted == args.k})
    for op in ops:
        op.buffers.close()
    q.close()
    os.close(fd)
    return EXIT_OK


# ---------------------------------------------------------------------------
# flood: S submitters keeping D reads in flight
# ---------------------------------------------------------------------------

def parse_sample(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=PATH[#FIELD]`` -> (name, counter spec); a PATH with ``*`` is a glob
    whose matches are summed (e.g. every async taskq of a pool)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"--sample wants NAME=PATH[#FIELD], got {text!r}")
    path, _, fld = rest.partition("#")
    spec: dict[str, Any] = {"glob": path} if "*" in path else {"path": path}
    if fld:
        spec["field"] = fld
    return name, spec


def split_segments(total: int, nsegs: int, align: int = DIO_ALIGN) -> list[Segment]:
    """``nsegs`` page-aligned segments covering ``total`` bytes: each a multiple
    of ``align`` where possible, the last one taking the remainder."""
    each = total // nsegs
    if each >= align:
        each -= each % align
    return [Segment(each)] * (nsegs - 1) + [Segment(total - each * (nsegs - 1))]


def _flood_submitter(index: int, args: argparse.Namespace) -> dict[str, Any]:
    stats: dict[str, Any] = {"index": index, "pid": os.getpid(), "submitted": 0,
                             "completed": 0, "correct": 0, "wrong": 0, "short": 0,
                             "errors": {}, "bytes": 0, "stuck": 0}
    fd, _ = _open_target(args.file, not args.no_direct)
    size = _file_size(fd, args.size)
    q = make_queue(args.interface, args.depth)
    segs = split_segments(args.len, args.nsegs)
    slots = [SegmentBuffers(segs) for _ in range(args.depth)]
    free = list(range(args.depth))
    inflight: dict[int, int] = {}          # slot -> offset
    rng = random.Random(f"{args.seed}:{index}")
    span = max(0, size - args.len) // args.align
    t0 = time.monotonic()
    stop_at = t0 + args.duration if args.duration else None

    def more() -> bool:
        if args.requests and stats["submitted"] >= args.requests:
            return False
        return stop_at is None or time.monotonic() < stop_at

    while True:
        batch = []
        while free and more() and len(batch) + len(inflight) < args.depth:
            slot = free.pop()
            off = rng.randint(0, span) * args.align
            batch.append(IoOp(slot, False, fd, off, slots[slot], args.nsegs > 1))
            if args.requests and stats["submitted"] + len(batch) >= args.requests:
                break
        if batch:
            try:
                n = q.submit(batch)
            except OSError as e:
                name = errno_name(e.errno) or "?"
                stats["errors"][name] = stats["errors"].get(name, 0) + len(batch)
                n = 0
                if not inflight:
                    break
            for op in batch[:n]:
                inflight[op.tag] = op.offset
            free.extend(op.tag for op in batch[n:])
            stats["submitted"] += n
        if not inflight:
            if not more():
                break
            continue
        wait = 0.5 if more() else args.drain_s
        got = q.reap(1, args.depth, wait)
        if not got and not more():
            stats["stuck"] = len(inflight)
            break
        for slot, res in got:
            off = inflight.pop(slot)
            free.append(slot)
            stats["completed"] += 1
            if res < 0:
                name = errno_name(-res) or "?"
                stats["errors"][name] = stats["errors"].get(name, 0) + 1
                continue
            chk = _check_read(args.seed, size, off, args.len, res, slots[slot])
            stats["bytes"] += res
            stats["correct"] += chk["correct"]
            stats["short"] += res != chk["expected_len"]
            if chk["wrong_bytes"]:
                stats["wrong"] += 1
                stats.setdefault("first_wrong", {"offset": off,
                                                 "first_wrong_byte": chk["first_wrong_byte"]})
    stats["elapsed_s"] = round(time.monotonic() - t0, 4)
    if not stats["stuck"]:
        q.close()
    return stats


def cmd_flood(args: argparse.Namespace) -> int:
    samples = dict(args.sample or [])
    children: dict[int, int] = {}       # pid -> the read end of its report's pipe
    index_of: dict[int, int] = {}
    for index in range(args.submitters):
        pid, rfd = forked.fork_json(
            lambda index=index: _flood_submitter(index, args),
            lambda e, index=index: {"index": index, "pid": os.getpid(),
                                    "error": f"{type(e).__name__}: {e}"})
        children[pid], index_of[pid] = rfd, index
    sampler = Sampler(samples)
    stats, sample = sampler.stats, sampler.sample

    t0 = time.monotonic()
    deadline = t0 + (args.duration or 0) + args.drain_s + 60 + (0 if args.duration else 600)
    interval = args.sample_ms / 1000.0
    sample()
    bufs, running = forked.collect(children, deadline, interval, tick=sample)
    forked.reap(children, running)
    hung = [index_of[pid] for pid in running]
    subs = [forked.report(bufs[pid], {"index": index_of[pid], "pid": pid, "error": "no report"})
            for pid in children]
    subs.sort(key=lambda s: s["index"])
    totals = {k: sum(s.get(k, 0) for s in subs)
              for k in ("submitted", "completed", "correct", "wrong", "short", "bytes", "stuck")}
    errors: dict[str, int] = {}
    for s in subs:
        for k, v in s.get("errors", {}).items():
            errors[k] = errors.get(k, 0) + v
    totals["errors"] = errors
    emit({"event": "flood", "interface": args.interface, "submitters": subs, "totals": totals,
          "samples": stats, "hung": hung, "elapsed_s": round(time.monotonic() - t0, 4),
          "all_correct": not hung and all("error" not in s for s in subs)
          and totals["correct"] == totals["completed"] and not errors and totals["completed"] > 0})
    if hung or any(s.get("stuck") for s in subs):
        return EXIT_TIMEOUT
    return EXIT_FAILED if any("error" in s for s in subs) else EXIT_OK


# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# sample: counters sampled until told to stop
# ---------------------------------------------------------------------------

def cmd_sample(args: argparse.Namespace) -> int:
    """Sample counters every ``--every-ms`` until ``--stop-file`` exists (or the
    deadline); one ``sample`` line with min/max/first/last per counter."""
    sampler = Sampler(dict(args.sample))
    t0 = time.monotonic()
    emit({"event": "sampling", "pid": os.getpid()})
    while time.monotonic() - t0 < args.deadline_s and not os.path.exists(args.stop_file):
        sampler.sample()
        time.sleep(args.every_ms / 1000.0)
    sampler.sample()
    emit({"event": "sample", "samples": sampler.stats,
          "elapsed_s": round(time.monotonic() - t0, 3)})
    return EXIT_OK

