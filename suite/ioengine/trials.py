"""Files and trials: lay down a file from the generator, run each request of a
plan, verify what came back (``run`` and ``write-file`` commands).
"""
from __future__ import annotations

import argparse
import errno as errno_mod
import json
import mmap
import os
import resource
import signal
import stat
import sys
import time
from contextlib import contextmanager
from typing import IO, Any, Iterator

from .content import FileModel, compare, pattern
from .counters import ParamManager, counter_deltas, counter_spec, snapshot_counters
from .plan import (DEFAULT_PARAM_DIR, DIO_ALIGN, EXIT_FAILED, EXIT_OK, EXIT_USAGE, PAGE, FileSpec,
                   Plan, Request, Result, errno_name)
from .queues import (ABANDONED, IoOp, IoUringQueue, LibaioQueue, SegmentBuffers, make_queue,
                     round_up, sys_)


def open_flags(op: str, o_direct: bool) -> int:
    flags = os.O_RDONLY if op == "read" else os.O_RDWR
    if o_direct:
        flags |= os.O_DIRECT
    return flags


def open_trial_file(path: str, op: str, o_direct: bool) -> int:
    """Open for a trial. A FIFO opens O_RDWR without O_DIRECT: the open does
    not block and a read stays in flight forever (the self-tests' timeout)."""
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            return os.open(path, os.O_RDWR)
    except OSError:
        pass
    return os.open(path, open_flags(op, o_direct))


def file_size(path: str) -> int:
    """``st_size``, or for a block device (whose ``st_size`` is 0) its size."""
    st = os.stat(path)
    if not stat.S_ISBLK(st.st_mode):
        return st.st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def write_file(path: str, size: int, seed: Any, *, direct: bool = True,
               chunk: int = 1 << 20) -> dict[str, Any]:
    """Create ``path`` with exactly ``size`` bytes of ``pattern(seed)``.

    The aligned body is written with O_DIRECT where the fs allows it, the
    unaligned tail (or everything, on fallback) without, then fsync and
    ``posix_fadvise(DONTNEED)`` so no page cache stays behind.
    """
    t0 = time.monotonic()
    info: dict[str, Any] = {"event": "write-file", "path": path, "size": size, "seed": seed,
                            "o_direct": False, "direct_bytes": 0, "buffered_bytes": 0,
                            "fallback": None}
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    chunk = max(DIO_ALIGN, chunk - chunk % DIO_ALIGN)
    body = size - size % DIO_ALIGN if direct else 0
    done = 0
    if body:
        try:
            dfd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        except OSError as e:
            info["fallback"] = f"open O_DIRECT: {errno_name(e.errno)}"
        else:
            info["o_direct"] = True
            buf = mmap.mmap(-1, chunk)
            try:
                with memoryview(buf) as mv:
                    while done < body:
                        n = min(chunk, body - done)
                        buf[:n] = pattern(seed, done, n, cache=False)
                        try:
                            w = os.pwrite(dfd, mv[:n], done)
                        except OSError as e:
                            info["fallback"] = f"O_DIRECT write at {done}: {errno_name(e.errno)}"
                            break
                        if w <= 0:
                            break
                        done += w
                        if w % DIO_ALIGN:
                            info["fallback"] = f"short O_DIRECT write ({w}) at {done - w}"
                            break
                os.fsync(dfd)
            finally:
                buf.close()
                os.close(dfd)
    info["direct_bytes"] = done
    fd = os.open(path, os.O_WRONLY)
    try:
        pos = done
        while pos < size:
            n = min(chunk, size - pos)
            data = pattern(seed, pos, n, cache=False)
            view = memoryview(data)
            while view:
                w = os.pwrite(fd, view, pos)
                pos += w
                view = view[w:]
        info["buffered_bytes"] = size - done
        os.fsync(fd)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            info["fadvise"] = "dontneed"
        except OSError as e:
            info["fadvise"] = errno_name(e.errno)
    finally:
        os.close(fd)
    info["fsync"] = True
    info["actual_size"] = file_size(path)
    info["elapsed_s"] = round(time.monotonic() - t0, 4)
    return info


def readback(path: str, offset: int, length: int) -> tuple[bytes, str]:
    """File bytes ``[offset, offset+length)`` read with O_DIRECT into an aligned
    buffer (buffered if the fs refuses O_DIRECT); returns (data, how)."""
    lo = offset - offset % DIO_ALIGN
    hi = round_up(offset + length, DIO_ALIGN)
    buf = mmap.mmap(-1, max(hi - lo, PAGE))
    how = "readback-direct"
    try:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError:
            fd, how = os.open(path, os.O_RDONLY), "readback-buffered"
        try:
            with memoryview(buf) as mv:
                try:
                    got = os.preadv(fd, [mv[:hi - lo]], lo)
                except OSError as e:
                    if e.errno != errno_mod.EINVAL or how != "readback-direct":
                        raise
                    os.close(fd)
                    fd, how = os.open(path, os.O_RDONLY), "readback-buffered"
                    got = os.preadv(fd, [mv[:hi - lo]], lo)
        finally:
            os.close(fd)
        start = offset - lo
        return bytes(buf[start:min(got, start + length)]) if got > start else b"", how
    finally:
        buf.close()


# ---------------------------------------------------------------------------
# Trials
# ---------------------------------------------------------------------------

class Engine:
    """State shared by the trials of one ``run``: file models, queues, params."""

    def __init__(self, param_dir: str = DEFAULT_PARAM_DIR) -> None:
        self.files: dict[str, FileModel] = {}
        self.queues: dict[str, LibaioQueue | IoUringQueue] = {}
        self.params = ParamManager(param_dir)
        self._tag = 0

    def next_tag(self) -> int:
        self._tag += 1
        return self._tag

    def add_file(self, spec: FileSpec) -> dict[str, Any]:
        if spec.create:
            info = write_file(spec.path, spec.size, spec.seed)
        else:
            info = {"event": "file", "path": spec.path, "size": spec.size, "seed": spec.seed}
            try:
                info["actual_size"] = file_size(spec.path)
            except OSError as e:
                info["actual_size"] = None
                info["error"] = errno_name(e.errno)
        info["size_mismatch"] = info.get("actual_size") != spec.size
        model = self.files[spec.path] = FileModel(spec.path, spec.seed, spec.size)
        for off, n, seed in spec.overlays:
            model.record_write(off, n, seed)
        return info

    def queue(self, interface: str) -> LibaioQueue | IoUringQueue:
        q = self.queues.get(interface)
        if q is None:
            q = self.queues[interface] = make_queue(interface, 8)
        return q

    def abandon(self, interface: str, *keep: Any) -> None:
        """A request timed out: never reuse or free its queue or buffers."""
        q = self.queues.pop(interface, None)
        ABANDONED.extend([q, *keep])

    def close(self) -> None:
        for q in self.queues.values():
            try:
                q.close()
            except OSError:
                pass
        self.queues.clear()

    # -- one trial ----------------------------------------------------------

    def run(self, req: Request) -> Result:
        r = Result(id=req.id, condition=req.condition, interface=req.interface, op=req.op,
                   vectored=req.vectored, nr_segs=len(req.segments), total_len=req.total_len,
                   offset=req.offset, o_direct=req.o_direct)
        model = self.files.get(req.file)
        problems = req.problems()
        if model is None:
            problems.append(f"file {req.file!r} is not in the plan's files")
        if problems:
            r.stage, r.error = "plan", "; ".join(problems)
            return r
        try:
            specs = {n: counter_spec(s) for n, s in req.counters.items()}
        except ValueError as e:
            r.stage, r.error = "plan", str(e)
            return r
        r.params_applied, r.params_unavailable, r.params_errors = self.params.apply(req.params)
        if req.op == "read":
            r.expected_len = max(0, min(req.total_len, model.size - max(req.offset, 0)))
        else:
            r.expected_len = req.total_len
        try:
            fd = open_trial_file(req.file, req.op, req.o_direct)
        except OSError as e:
            r.set_error(e.errno, "open")
            return r
        bufs = SegmentBuffers(req.segments)
        abandoned = False
        try:
            wseed = req.write_seed if req.write_seed is not None else f"{model.seed}@{req.id}"
            if req.op == "write":
                bufs.fill(pattern(wseed, max(req.offset, 0), req.total_len))
                r.size_before = os.fstat(fd).st_size
            elif req.flush:         # buffered read: from the device, not the page cache
                os.posix_fadvise(fd, max(req.offset, 0), req.total_len, os.POSIX_FADV_DONTNEED)
            before = snapshot_counters(specs)
            t0 = time.perf_counter_ns()
            with file_size_limit(req.rlimit_fsize):
                res, err, stage = self._issue(req, fd, bufs)
            if req.flush and req.op == "write" and not err and stage != "timeout":
                try:                # buffered write: the device write happens here
                    os.fdatasync(fd)
                except OSError as e:
                    res, err, stage = -e.errno, e.errno, "fdatasync"
            r.latency_us = round((time.perf_counter_ns() - t0) / 1000, 1)
            r.counters = counter_deltas(before, snapshot_counters(specs))
            if req.op == "write" and stage != "timeout":
                r.size_after = os.fstat(fd).st_size
                landed = req.offset + max(res or 0, 0)
                r.beyond_bytes = max(0, r.size_after - max(r.size_before or 0, landed))
            if stage == "timeout":
                abandoned = True
                self.abandon(req.interface, bufs, fd)
                r.stage, r.error = "timeout", f"no completion within {req.timeout_s}s"
                if req.op == "write":
                    model.record_write(req.offset, req.total_len, None)
                return r
            if err:
                r.set_error(err, stage)
                if req.op == "write" and err not in (errno_mod.EINVAL, errno_mod.EFAULT,
                                                     errno_mod.EBADF, errno_mod.EAGAIN,
                                                     errno_mod.EOPNOTSUPP):
                    model.record_write(req.offset, req.total_len, None)
            else:
                r.res = res
            r.len_ok = res is not None and res >= 0 and res == r.expected_len
            if res is not None and res > 0:
                self._verify(req, r, model, bufs, res, wseed)
            r.correct = bool(r.len_ok and not err and r.wrong_bytes == 0
                             and r.overrun_bytes == 0 and r.beyond_bytes == 0)
            return r
        finally:
            if not abandoned:
                bufs.close()
                os.close(fd)

    def _issue(self, req: Request, fd: int,
               bufs: SegmentBuffers) -> tuple[int | None, int, str | None]:
        """Issue the request; returns (res, errno, stage) with res=-errno on error."""
        write = req.op == "write"
        if req.interface == "sync":
            try:
                if req.vectored:
                    views = bufs.views()
                    try:
                        if write:
                            res = os.pwritev(fd, views, req.offset, req.rw_flags)
                        else:
                            res = os.preadv(fd, views, req.offset, req.rw_flags)
                    finally:
                        for v in views:
                            v.release()
                elif write:
                    with bufs.views()[0] as v:
                        res = os.pwrite(fd, v, req.offset)
                else:
                    res = sys_().pread(fd, bufs.addrs[0], req.segments[0].len, req.offset)
                return res, 0, None
            except OSError as e:
                return -e.errno, e.errno, "syscall"
        try:
            q = self.queue(req.interface)
        except OSError as e:
            return None, e.errno, "setup"
        op = IoOp(self.next_tag(), write, fd, req.offset, bufs, req.vectored, req.rw_flags)
        try:
            if q.submit([op]) != 1:
                return None, errno_mod.EAGAIN, "submit"
        except OSError as e:
            return -e.errno, e.errno, "submit"
        deadline = time.monotonic() + req.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if isinstance(q, LibaioQueue):
                    q.cancel(op.tag)
                return None, 0, "timeout"
            for tag, res in q.reap(1, 8, min(left, 1.0)):
                if tag == op.tag:
                    return (res, -res, "complete") if res < 0 else (res, 0, None)

    def _verify(self, req: Request, r: Result, model: FileModel, bufs: SegmentBuffers,
                res: int, wseed: Any) -> None:
        if req.op == "read":
            n = min(res, r.expected_len or 0)
            data = bufs.gather(n)
            r.verify = "buffer"
            r.overrun_bytes = bufs.overrun_bytes()
        else:
            model.record_write(req.offset, res, wseed)
            n = res
            data, r.verify = readback(req.file, req.offset, res)
            if len(data) < n:
                r.error = f"readback returned {len(data)} of {n} bytes"
                r.wrong_bytes += n - len(data)
                r.first_wrong_byte = req.offset + len(data)
        expected, unknown = model.expected(req.offset, n)
        c = compare(data, expected, req.offset, unknown)
        if c.wrong_bytes:
            r.wrong_bytes += c.wrong_bytes
            r.first_wrong_byte = c.first_wrong_byte
            r.wrong_kind, r.wrong_sample = c.wrong_kind, c.wrong_sample
        r.unverified_bytes = c.unverified_bytes


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """RLIMIT_FSIZE = ``limit`` (0: leave it) with SIGXFSZ ignored, so a write
    past it is cut short or fails with EFBIG instead of killing the engine."""
    if limit <= 0:
        yield
        return
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_sig = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, old_sig)


def load_plan(source: str) -> Plan:
    text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
    return Plan.from_dict(json.loads(text))


def emit(obj: dict[str, Any], out: IO[str] | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(obj, default=str) + "\n")
    out.flush()


def cmd_run(args: argparse.Namespace) -> int:
    try:
        plan = load_plan(args.plan)
    except (OSError, ValueError, KeyError, TypeError) as e:
        emit({"event": "error", "stage": "plan", "error": f"{type(e).__name__}: {e}"})
        return EXIT_USAGE
    engine = Engine(args.param_dir)
    t0 = time.monotonic()
    summary: dict[str, Any] = {"event": "summary", "trials": 0, "correct": 0, "wrong": 0,
                               "errors": {}, "timeouts": 0, "plan_errors": 0}
    try:
        for spec in plan.files:
            try:
                emit(engine.add_file(spec))
            except OSError as e:
                emit({"event": "file", "path": spec.path, "error": errno_name(e.errno),
                      "message": str(e)})
                engine.files[spec.path] = FileModel(spec.path, spec.seed, spec.size)
        hung = None
        for req in plan.trials:
            if hung is not None:        # the kernel did not complete a request: stop here
                r = Result(id=req.id, condition=req.condition, interface=req.interface,
                           op=req.op, stage="plan",
                           error=f"not run: trial {hung} never completed before it")
            else:
                # Said before it starts: if the kernel dies under it, the host
                # still knows which trial was in flight.
                emit({"event": "begin", "trial": req.id, "condition": req.condition})
                r = engine.run(req)
                hung = req.id if r.stage == "timeout" else None
            emit(r.to_dict())
            summary["trials"] += 1
            summary["correct"] += r.correct
            summary["wrong"] += r.wrong_bytes > 0
            summary["timeouts"] += r.stage == "timeout"
            summary["plan_errors"] += r.stage == "plan"
            if r.errname:
                summary["errors"][r.errname] = summary["errors"].get(r.errname, 0) + 1
    finally:
        if not args.keep_params:
            summary["params_restored"] = engine.params.restore_all()
        if not summary["timeouts"]:
            engine.close()
        summary["elapsed_s"] = round(time.monotonic() - t0, 4)
        emit(summary)
    return EXIT_OK


def cmd_write_file(args: argparse.Namespace) -> int:
    try:
        emit(write_file(args.path, args.size, args.seed, direct=not args.no_direct,
                        chunk=args.chunk))
    except OSError as e:
        emit({"event": "error", "stage": "write-file", "errno": e.errno,
              "errname": errno_name(e.errno), "error": str(e)})
        return EXIT_FAILED
    return EXIT_OK


# ---------------------------------------------------------------------------
