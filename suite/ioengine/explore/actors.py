"""Explore, several actors at once: the ``actors`` op.

``{"op": "actors", "off": W, "len": N, "segs": A, "size": K, "data": T}``: A actors
(2-4), processes or threads, each issue K requests on the window ``[W, W+N)`` of the
target at the same time, released together. Their programs are not in the op: they
are drawn from ``"<seed>:actors:<T>"``, so the op is data and a replay issues the
same requests (only their timing differs, as in any race). Roles:

- actor 0 writes with O_DIRECT (falls back to buffered where O_DIRECT is refused);
- actor 1 writes buffered, or through a shared mapping (one program in three);
- actor 2 reads, by O_DIRECT, buffered and mmap reads;
- actor 3 punches holes, copies (``copy_file_range``: clones where it can) from the
  run's source file, or truncates the window's tail away and back (a file whose size
  ends at the window; no mapping then: a page past EOF is SIGBUS), and reads.

Every request is page-aligned. Each is timed on CLOCK_MONOTONIC (one clock for every
process) and judged afterwards by :mod:`.history`: each block a read returned is the
bytes before or those of a write that overlapped it; once all are done the buffered,
O_DIRECT and mmap reads of the window agree and hold a legal last write per block.
The model then takes the window's end state.
"""
from __future__ import annotations

import mmap
import os
import pickle
import random
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..content import pattern
from ..plan import PAGE, errno_name
from .history import Read, Violation, Written, check_final, check_read
from .model import Ctx, Outcome, failed
from .requests import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, UNSUPPORTED, fallocate

MAX_ACTORS = 4
WRITERS = ("dio_write", "buf_write", "mmap_write")
READERS = ("dio_read", "buf_read", "mmap_read")
OTHERS = ("punch", "copy", "truncate")
# A refused request is no write: the file system may decline these.
DECLINED = {"copy": ("EXDEV", "EINVAL", "EOPNOTSUPP", "ENOSYS", "EBADF"),
            "punch": ("EOPNOTSUPP", "ENOSYS")}


class ActorError(RuntimeError):
    """An actor died on its own (not a request's error): the harness's, not a finding."""


@dataclass(frozen=True)
class Req:
    """One request of one actor's program."""
    kind: str
    off: int
    len: int
    key: str = ""                   # a write's pattern key
    src_off: int = 0                # a copy's offset in the source file


@dataclass(frozen=True)
class Plan:
    threads: bool
    programs: tuple[tuple[Req, ...], ...]

    def kinds(self) -> set[str]:
        return {r.kind for p in self.programs for r in p}


def _range(rng: random.Random, off: int, n: int) -> tuple[int, int]:
    pages = n // PAGE
    first = rng.randrange(pages)
    count = rng.choice((1, 1, 2, 4, pages))
    return off + first * PAGE, min(count, pages - first) * PAGE


def draw(seed: int, token: int, n_actors: int, per_actor: int, off: int, n: int,
         blockdev: bool, can_truncate: bool, src_size: int) -> Plan:
    """The actors' programs of op token ``token`` (the same on every machine)."""
    rng = random.Random(f"{seed}:actors:{token}")
    threads = rng.random() < 1 / 3
    mmap_writer = rng.random() < 1 / 3
    truncating = can_truncate and not blockdev and rng.random() < 0.3
    roles: list[tuple[str, ...]] = [("dio_write",), ("mmap_write",) if mmap_writer and not
                                    truncating else ("buf_write", "buf_write", "buf_read"),
                                    READERS if not truncating else ("dio_read", "buf_read"),
                                    (("punch", "copy") if not blockdev else ()) +
                                    (("truncate",) if truncating else ()) + ("dio_read", "buf_read")]
    programs = []
    for a in range(max(2, min(MAX_ACTORS, n_actors))):
        reqs = []
        for j in range(max(1, per_actor)):
            kind = rng.choice(roles[a])
            o, m = _range(rng, off, n)
            src = rng.randrange(max(1, (src_size - m) // PAGE)) * PAGE if kind == "copy" else 0
            reqs.append(Req(kind, o, m, f"{seed}:a{token}:{a}.{j}", src))
        programs.append(tuple(reqs))
    return Plan(threads, tuple(programs))


@dataclass
class Done:
    """What one request did: its bytes (a read's, a write's), when, and its result."""
    actor: int
    req: Req
    t0: int
    t1: int
    res: int                        # bytes moved, or -errno
    data: bytes = b""


class Actor:
    """One actor's descriptors and buffers (opened in the actor itself)."""

    def __init__(self, path: str, src_path: str, off: int, n: int, mapped: bool) -> None:
        self.fd = os.open(path, os.O_RDWR)
        try:
            self.dfd = os.open(path, os.O_RDWR | os.O_DIRECT)
        except OSError:
            self.dfd = self.fd
        self.src = os.open(src_path, os.O_RDONLY) if os.path.exists(src_path) else -1
        self.buf = mmap.mmap(-1, n)             # page-aligned: what O_DIRECT needs
        self.map = mmap.mmap(self.fd, off + n, flags=mmap.MAP_SHARED) if mapped else None

    def close(self) -> None:
        if self.map is not None:
            self.map.close()
        self.buf.close()
        for fd in {self.fd, self.dfd, self.src} - {-1}:
            os.close(fd)

    def do(self, r: Req, size_after_truncate: int) -> tuple[int, bytes]:
        mv = memoryview(self.buf)[:r.len]
        try:
            if r.kind in ("dio_write", "buf_write"):
                data = pattern(r.key, r.off, r.len)
                mv[:] = data
                fd = self.dfd if r.kind == "dio_write" else self.fd
                return os.pwritev(fd, [mv], r.off), data
            if r.kind == "mmap_write":
                data = pattern(r.key, r.off, r.len)
                assert self.map is not None
                self.map[r.off:r.off + r.len] = data
                return r.len, data
            if r.kind in ("dio_read", "buf_read"):
                got = os.preadv(self.dfd if r.kind == "dio_read" else self.fd, [mv], r.off)
                return got, bytes(mv[:got])
            if r.kind == "mmap_read":
                assert self.map is not None
                return r.len, bytes(self.map[r.off:r.off + r.len])
            if r.kind == "punch":
                res = fallocate(self.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, r.off, r.len)
                return (r.len if res == 0 else res), b""
            if r.kind == "copy":
                if self.src < 0:
                    return -95, b""
                return os.copy_file_range(self.src, self.fd, r.len, r.src_off, r.off), b""
            if r.kind == "truncate":
                os.ftruncate(self.fd, r.off)
                os.ftruncate(self.fd, size_after_truncate)
                return r.len, b""
        except OSError as e:
            return -(e.errno or 5), b""
        raise ValueError(f"unknown actor request {r.kind!r}")


def _act(a: int, plan: Plan, path: str, src_path: str, off: int, n: int, size: int,
         go: Any) -> list[Done]:
    actor = Actor(path, src_path, off, n, any(r.kind.startswith("mmap") for r in plan.programs[a]))
    out = []
    try:
        go()
        for r in plan.programs[a]:
            t0 = time.monotonic_ns()
            res, data = actor.do(r, size)
            out.append(Done(a, r, t0, time.monotonic_ns(), res, data))
    finally:
        actor.close()
    return out


def run(plan: Plan, path: str, src_path: str, off: int, n: int, size: int,
        timeout_s: float) -> list[Done]:
    """Every actor's requests, released together; threads or forked processes."""
    if plan.threads:
        gate = threading.Barrier(len(plan.programs))
        results: list[list[Done]] = [[] for _ in plan.programs]

        def body(a: int) -> None:
            results[a] = _act(a, plan, path, src_path, off, n, size, gate.wait)
        ts = [threading.Thread(target=body, args=(a,), daemon=True) for a in range(len(plan.programs))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout_s)
        if any(t.is_alive() for t in ts):
            raise TimeoutError(f"an actor thread still runs after {timeout_s:.0f} s")
        return [d for r in results for d in r]
    return _run_processes(plan, path, src_path, off, n, size, timeout_s)


def _run_processes(plan: Plan, path: str, src_path: str, off: int, n: int, size: int,
                   timeout_s: float) -> list[Done]:
    rd, wr = os.pipe()
    kids: dict[int, str] = {}
    for a in range(len(plan.programs)):
        out = tempfile.mkstemp(prefix=f"actor{a}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.close(out[0])
        pid = os.fork()
        if pid == 0:                                    # the actor
            code = 0
            try:
                os.close(wr)
                done = _act(a, plan, path, src_path, off, n, size, lambda: os.read(rd, 1))
                with open(out[1], "wb") as f:
                    pickle.dump(done, f)
            except BaseException as e:                  # noqa: BLE001 - a child never returns
                code = 3
                with open(out[1], "w", encoding="utf-8") as f:
                    f.write(f"{type(e).__name__}: {e}")
            os._exit(code)
        kids[pid] = out[1]
    os.close(rd)
    os.write(wr, b"g" * len(kids))                      # release them together
    os.close(wr)
    deadline = time.monotonic() + timeout_s
    done: list[Done] = []
    for pid, out in kids.items():
        raw = b""
        while True:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"actor process {pid} still runs after {timeout_s:.0f} s")
            time.sleep(0.01)
        try:
            with open(out, "rb") as f:
                raw = f.read()
            done += pickle.loads(raw)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            why = raw[:300].decode(errors="replace") if status and raw else str(e)
            raise ActorError(f"actor process {pid} (status {status:#x}) left no record: "
                             f"{why}") from None
        finally:
            os.unlink(out)
    return done


def history(done: list[Done], source: bytes, size: int) -> tuple[list[Written], list[Read], str | None]:
    """The writes and reads the requests made, or why one failed outright."""
    writes: list[Written] = []
    reads: list[Read] = []
    for d in done:
        r, who = d.req, f"actor {d.actor} {d.req.kind} {d.req.off}+{d.req.len}"
        if d.res < 0:
            name = errno_name(-d.res) or str(-d.res)
            if name in DECLINED.get(r.kind, ()) or name in UNSUPPORTED:
                continue
            return writes, reads, f"error:{name}|{who}: {name}"
        if r.kind in READERS:
            reads.append(Read(who, r.off, d.data, d.t0, d.t1, fine=r.kind == "mmap_read",
                              want=r.len))
        elif r.kind in WRITERS:
            if d.res != r.len:
                return writes, reads, f"short|{who}: {d.res} of {r.len} bytes written"
            writes.append(Written(who, r.off, d.data, d.t0, d.t1, mmap=r.kind == "mmap_write"))
        elif r.kind == "punch":
            writes.append(Written(who, r.off, bytes(r.len), d.t0, d.t1))
        elif r.kind == "copy" and d.res >= PAGE:
            moved = d.res - d.res % PAGE                # whole pages are judged
            writes.append(Written(who, r.off, source[r.src_off:r.src_off + moved], d.t0, d.t1))
        elif r.kind == "truncate":
            writes.append(Written(who, r.off, bytes(size - r.off), d.t0, d.t1))
    return writes, reads, None


def judge(done: list[Done], source: bytes, initial: bytes, off: int,
          size: int) -> Violation | str | None:
    """The first read no legal order explains (a short read only beside a truncate)."""
    writes, reads, bad = history(done, source, size)
    if bad:
        return bad
    truncs = [d for d in done if d.req.kind == "truncate" and d.res >= 0]
    for r in reads:
        if len(r.data) < r.want and not any(t.t0 < r.t1 and t.t1 > r.t0 for t in truncs):
            return f"short|{r.who}: {len(r.data)} of {r.want} bytes, no truncate beside it"
        v = check_read(r, writes, initial, off, PAGE)
        if v is not None:
            return v
    return None


def settle(t: Any, plan: Plan) -> str | None:
    """fsync each of the target's descriptors once the actors are done. Linux marks a
    file's mapping with EIO when an O_DIRECT write could not drop the cached pages a
    buffered or mmap writer dirtied beside it ("Page cache invalidation failure on
    direct I/O", dio_warn_stale_pagecache()): each open file then hears it once. Allowed
    where such writers met; anywhere else EIO is the finding (the text says why)."""
    collide = "dio_write" in plan.kinds() and bool(plan.kinds() & {"mmap_write", "buf_write"})
    for fd in {t.fd} | ({t.dfd} if t.dfd is not None else set()):
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno == 5 and collide:
                continue
            return f"fsync after the actors: {errno_name(e.errno) or e.errno} ({e})"
    return None


def end_state(ctx: Ctx, off: int, n: int) -> dict[str, bytes]:
    """The window read by the three paths once every actor is done."""
    t = ctx.target
    paths = {"buffered": os.pread(t.fd, n, off)}
    if t.dfd is not None:
        buf = mmap.mmap(-1, n)
        try:
            got = os.preadv(t.dfd, [buf], off)
            paths["O_DIRECT"] = bytes(buf[:got])
        finally:
            buf.close()
    with mmap.mmap(t.fd, off + n, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) as m:
        paths["mmap"] = bytes(m[off:off + n])
    return paths


def op_actors(ctx: Ctx, s: Any) -> Outcome:
    off, n = s.off - s.off % PAGE, max(PAGE, s.len - s.len % PAGE)
    t = ctx.target
    if not t.blockdev and ctx.model.size < off + n:     # the window exists before they start
        os.ftruncate(t.fd, off + n)
        ctx.model.resize(off + n)
    elif t.blockdev:
        n = min(n, ctx.model.size - off)
        if n < PAGE:
            return Outcome("skipped", why=f"window {off}+{s.len} past the device")
    size = ctx.model.size
    if ctx.source:
        t.open_source(ctx.source)
    plan = draw(ctx.seed, s.data, s.segs or 2, s.size or 4, off, n, t.blockdev,
                size == off + n, len(ctx.source))
    initial = ctx.model.read(off, n)
    os.fsync(t.fd)
    try:
        done = run(plan, t.path, t.src_path, off, n, size, t.timeout_s)
    except TimeoutError as e:
        return failed("hang", f"actors: {e}", extra={"actors": len(plan.programs)})
    except ActorError as e:
        return failed("actor-died", str(e), extra={"actors": len(plan.programs)})
    verdict = judge(done, ctx.source, initial, off, size)
    extra: dict[str, Any] = {"actors": len(plan.programs), "threads": plan.threads,
                             "kinds": sorted(plan.kinds()), "requests": len(done)}
    if isinstance(verdict, str):
        kind, why = verdict.split("|", 1)
        return failed(kind, why, extra=extra)
    if verdict is not None:
        return failed("wrong-bytes", f"{verdict.kind}: {verdict.why}",
                      first_wrong_byte=verdict.at, extra=extra)
    if (bad := settle(t, plan)) is not None:
        return failed("error:EIO", bad, extra=extra)
    st = os.fstat(t.fd).st_size
    if not t.blockdev and st != size:
        return failed("size", f"after the actors st_size is {st}, not {size}", extra=extra)
    paths = end_state(ctx, off, n)
    writes, _, _ = history(done, ctx.source, size)
    v = check_final(paths, writes, initial, off, PAGE)
    if v is not None:
        return failed("paths-disagree" if v.kind == "paths-disagree" else "wrong-bytes",
                      f"{v.kind}: {v.why}", first_wrong_byte=v.at, extra=extra)
    ctx.model.write(off, paths["buffered"])
    return Outcome(res=len(done), extra=extra)
