"""Buffers with canaries and the three ways to issue a request: sync syscalls,
libaio (raw io_setup/io_submit/io_getevents) and io_uring (mmapped rings).
io_uring with registered files and buffers is :mod:`.queues_fixed`.
"""
from __future__ import annotations

import ctypes
import errno as errno_mod
import mmap
import os
import platform
import select
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

from .plan import CANARY, PAGE, Segment


def round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class SegmentBuffers:
    """One page-aligned anonymous mmap per segment, pre-filled with a canary."""

    def __init__(self, segments: Sequence[Segment], fill: int = CANARY) -> None:
        self.segments = list(segments)
        self.maps: list[mmap.mmap] = []
        self.addrs: list[int] = []
        self._anchors: list[Any] = []
        for seg in self.segments:
            size = max(PAGE, round_up(seg.page_offset + seg.len, PAGE))
            m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                          prot=mmap.PROT_READ | mmap.PROT_WRITE)
            m[:] = bytes([fill]) * size
            anchor = ctypes.c_char.from_buffer(m)
            self.maps.append(m)
            self._anchors.append(anchor)
            self.addrs.append(ctypes.addressof(anchor) + seg.page_offset)
        self.iov = (IoVec * max(1, len(self.segments)))()
        for i, seg in enumerate(self.segments):
            self.iov[i].iov_base = self.addrs[i]
            self.iov[i].iov_len = seg.len

    @property
    def nr_segs(self) -> int:
        return len(self.segments)

    @property
    def iov_addr(self) -> int:
        return ctypes.addressof(self.iov)

    def views(self) -> list[memoryview]:
        return [memoryview(m)[s.page_offset:s.page_offset + s.len]
                for m, s in zip(self.maps, self.segments)]

    def fill(self, data: bytes) -> None:
        pos = 0
        for m, s in zip(self.maps, self.segments):
            m[s.page_offset:s.page_offset + s.len] = data[pos:pos + s.len]
            pos += s.len

    def gather(self, nbytes: int) -> bytes:
        parts, left = [], nbytes
        for m, s in zip(self.maps, self.segments):
            if left <= 0:
                break
            take = min(left, s.len)
            parts.append(m[s.page_offset:s.page_offset + take])
            left -= take
        return b"".join(parts)

    def overrun_bytes(self) -> int:
        """Canary bytes changed outside the segments (kernel wrote past a buffer)."""
        bad = 0
        for m, s in zip(self.maps, self.segments):
            head = m[:s.page_offset]
            tail = m[s.page_offset + s.len:]
            bad += len(head) - head.count(CANARY) + len(tail) - tail.count(CANARY)
        return bad

    def close(self) -> None:
        self._anchors.clear()
        for m in self.maps:
            m.close()
        self.maps.clear()


# ---------------------------------------------------------------------------
# Raw syscalls
# ---------------------------------------------------------------------------

_SYSCALLS = {
    "x86_64": {"io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209,
               "io_cancel": 210, "io_uring_setup": 425, "io_uring_enter": 426,
               "io_uring_register": 427},
    "aarch64": {"io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_cancel": 3,
                "io_getevents": 4, "io_uring_setup": 425, "io_uring_enter": 426,
                "io_uring_register": 427},
}


class Sys:
    """libc ``syscall()`` with errno turned into OSError."""

    def __init__(self) -> None:
        machine = platform.machine()
        if machine not in _SYSCALLS:
            raise OSError(errno_mod.ENOSYS, f"no syscall table for {machine}")
        self.nr = _SYSCALLS[machine]
        self.libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = self.libc.syscall
        self._syscall.restype = ctypes.c_long
        self.pread64 = self.libc.pread64
        self.pread64.restype = ctypes.c_ssize_t
        self.pread64.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]

    def call(self, name: str, *args: Any) -> int:
        while True:
            r = self._syscall(ctypes.c_long(self.nr[name]), *args)
            if r != -1:
                return r
            err = ctypes.get_errno()
            if err != errno_mod.EINTR:
                raise OSError(err, f"{name}: {os.strerror(err)}")

    def pread(self, fd: int, addr: int, n: int, offset: int) -> int:
        r = self.pread64(fd, addr, n, offset)
        if r < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return r


_SYS: Sys | None = None


def sys_() -> Sys:
    global _SYS
    if _SYS is None:
        _SYS = Sys()
    return _SYS


@dataclass
class IoOp:
    """One async request: the buffers stay owned by the caller until reaped."""

    tag: int
    write: bool
    fd: int
    offset: int
    buffers: SegmentBuffers
    vectored: bool
    rw_flags: int = 0


# -- libaio ------------------------------------------------------------------

IOCB_CMD_PREAD, IOCB_CMD_PWRITE, IOCB_CMD_PREADV, IOCB_CMD_PWRITEV = 0, 1, 7, 8

if sys.byteorder == "little":
    _KEY_FIELDS = [("aio_key", ctypes.c_uint32), ("aio_rw_flags", ctypes.c_uint32)]
else:
    _KEY_FIELDS = [("aio_rw_flags", ctypes.c_uint32), ("aio_key", ctypes.c_uint32)]


class IoCb(ctypes.Structure):
    """struct iocb from linux/aio_abi.h (64 bytes)."""

    _fields_ = [("aio_data", ctypes.c_uint64)] + _KEY_FIELDS + [
        ("aio_lio_opcode", ctypes.c_uint16), ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32), ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64), ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64), ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32)]


class IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_int64)]

    @classmethod
    def of(cls, seconds: float) -> "Timespec":
        seconds = max(0.0, seconds)
        sec = int(seconds)
        return cls(sec, int((seconds - sec) * 1e9))


class LibaioQueue:
    name = "libaio"

    def __init__(self, depth: int = 64) -> None:
        self.sys = sys_()
        ctx = ctypes.c_ulong(0)
        self.sys.call("io_setup", ctypes.c_long(depth), ctypes.byref(ctx))
        self.ctx = ctx.value
        self.depth = depth
        self.inflight: dict[int, tuple[IoCb, IoOp]] = {}

    def submit(self, ops: Sequence[IoOp]) -> int:
        """Submit ``ops``; returns how many the kernel took (OSError if none)."""
        cbs = []
        for op in ops:
            cb = IoCb()
            cb.aio_data = op.tag
            cb.aio_fildes = op.fd
            cb.aio_offset = op.offset
            cb.aio_rw_flags = op.rw_flags
            if op.vectored:
                cb.aio_lio_opcode = IOCB_CMD_PWRITEV if op.write else IOCB_CMD_PREADV
                cb.aio_buf = op.buffers.iov_addr
                cb.aio_nbytes = op.buffers.nr_segs
            else:
                cb.aio_lio_opcode = IOCB_CMD_PWRITE if op.write else IOCB_CMD_PREAD
                cb.aio_buf = op.buffers.addrs[0]
                cb.aio_nbytes = op.buffers.segments[0].len
            cbs.append(cb)
        arr = (ctypes.POINTER(IoCb) * len(cbs))(*[ctypes.pointer(cb) for cb in cbs])
        done = self.sys.call("io_submit", ctypes.c_ulong(self.ctx), ctypes.c_long(len(cbs)), arr)
        for cb, op in zip(cbs[:done], ops[:done]):
            self.inflight[op.tag] = (cb, op)
        return done

    def reap(self, min_nr: int, max_nr: int, timeout_s: float | None) -> list[tuple[int, int]]:
        """Up to ``max_nr`` completions as (tag, res); waits for ``min_nr`` or timeout."""
        events = (IoEvent * max_nr)()
        ts = ctypes.byref(Timespec.of(timeout_s)) if timeout_s is not None else None
        n = self.sys.call("io_getevents", ctypes.c_ulong(self.ctx), ctypes.c_long(min_nr),
                          ctypes.c_long(max_nr), events, ts)
        out = []
        for ev in events[:n]:
            self.inflight.pop(ev.data, None)
            out.append((int(ev.data), int(ev.res)))
        return out

    def cancel(self, tag: int) -> bool:
        item = self.inflight.get(tag)
        if item is None:
            return False
        ev = IoEvent()
        try:
            self.sys.call("io_cancel", ctypes.c_ulong(self.ctx), ctypes.byref(item[0]),
                          ctypes.byref(ev))
            return True
        except OSError:
            return False

    def close(self) -> None:
        """io_destroy waits for outstanding requests: only call with none left."""
        if self.ctx:
            self.sys.call("io_destroy", ctypes.c_ulong(self.ctx))
            self.ctx = 0


# -- io_uring ----------------------------------------------------------------

IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_READ, IORING_OP_WRITE = 1, 2, 22, 23
IORING_OFF_SQ_RING, IORING_OFF_CQ_RING, IORING_OFF_SQES = 0, 0x8000000, 0x10000000
IORING_ENTER_GETEVENTS, IORING_ENTER_EXT_ARG = 1, 8
IORING_FEAT_SINGLE_MMAP, IORING_FEAT_EXT_ARG = 1, 1 << 8
_SQE = struct.Struct("<BBHiQQIIQHHiQQ")   # 64 bytes
_CQE = struct.Struct("<QiI")              # 16 bytes
_U32 = struct.Struct("<I")


class SqringOffsets(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in (
        "head", "tail", "ring_mask", "ring_entries", "flags", "dropped", "array", "resv1")] + [
        ("user_addr", ctypes.c_uint64)]


class CqringOffsets(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in (
        "head", "tail", "ring_mask", "ring_entries", "overflow", "cqes", "flags", "resv1")] + [
        ("user_addr", ctypes.c_uint64)]


class IoUringParams(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in (
        "sq_entries", "cq_entries", "flags", "sq_thread_cpu", "sq_thread_idle", "features",
        "wq_fd")] + [("resv", ctypes.c_uint32 * 3), ("sq_off", SqringOffsets),
                     ("cq_off", CqringOffsets)]


class GetEventsArg(ctypes.Structure):
    _fields_ = [("sigmask", ctypes.c_uint64), ("sigmask_sz", ctypes.c_uint32),
                ("min_wait_usec", ctypes.c_uint32), ("ts", ctypes.c_uint64)]


class IoUringQueue:
    name = "io_uring"

    def __init__(self, entries: int = 64) -> None:
        self.sys = sys_()
        p = IoUringParams()
        self.fd = self.sys.call("io_uring_setup", ctypes.c_ulong(entries), ctypes.byref(p))
        self.p = p
        try:
            self._map(p)
        except Exception:
            os.close(self.fd)
            raise
        self.inflight: dict[int, IoOp] = {}

    def _map(self, p: IoUringParams) -> None:
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        sq_size = p.sq_off.array + p.sq_entries * 4
        cq_size = p.cq_off.cqes + p.cq_entries * _CQE.size
        if p.features & IORING_FEAT_SINGLE_MMAP:
            self.sq = mmap.mmap(self.fd, max(sq_size, cq_size), flags=flags, prot=prot,
                                offset=IORING_OFF_SQ_RING)
            self.cq = self.sq
        else:
            self.sq = mmap.mmap(self.fd, sq_size, flags=flags, prot=prot, offset=IORING_OFF_SQ_RING)
            self.cq = mmap.mmap(self.fd, cq_size, flags=flags, prot=prot, offset=IORING_OFF_CQ_RING)
        self.sqes = mmap.mmap(self.fd, p.sq_entries * _SQE.size, flags=flags, prot=prot,
                              offset=IORING_OFF_SQES)
        self.sq_mask = _U32.unpack_from(self.sq, p.sq_off.ring_mask)[0]
        self.cq_mask = _U32.unpack_from(self.cq, p.cq_off.ring_mask)[0]

    def _enter(self, to_submit: int, min_complete: int, flags: int,
               arg: Any = None, argsz: int = 0) -> int:
        return self.sys.call("io_uring_enter", ctypes.c_uint(self.fd), ctypes.c_uint(to_submit),
                             ctypes.c_uint(min_complete), ctypes.c_uint(flags),
                             arg, ctypes.c_size_t(argsz))

    def submit(self, ops: Sequence[IoOp]) -> int:
        off = self.p.sq_off
        head = _U32.unpack_from(self.sq, off.head)[0]
        tail = _U32.unpack_from(self.sq, off.tail)[0]
        queued = 0
        for op in ops:
            if (tail - head) & 0xFFFFFFFF >= self.p.sq_entries:
                break
            idx = tail & self.sq_mask
            opcode, flags, fd, addr, length, buf_index = self._sqe(op)
            _SQE.pack_into(self.sqes, idx * _SQE.size, opcode, flags, 0, fd,
                           op.offset & 0xFFFFFFFFFFFFFFFF, addr, length, op.rw_flags, op.tag,
                           buf_index, 0, 0, 0, 0)
            _U32.pack_into(self.sq, off.array + idx * 4, idx)
            tail = (tail + 1) & 0xFFFFFFFF
            queued += 1
        _U32.pack_into(self.sq, off.tail, tail)
        done = 0
        while done < queued:
            n = self._enter(queued - done, 0, 0)
            if n == 0:
                break
            done += n
        for op in ops[:done]:
            self.inflight[op.tag] = op
        return done

    def _sqe(self, op: IoOp) -> tuple[int, int, int, int, int, int]:
        """(opcode, flags, fd, addr, len, buf_index) of ``op``'s SQE: plain
        files and buffers here; :class:`.queues_fixed.FixedIoUringQueue` has its own."""
        if op.vectored:
            opcode = IORING_OP_WRITEV if op.write else IORING_OP_READV
            return opcode, 0, op.fd, op.buffers.iov_addr, op.buffers.nr_segs, 0
        opcode = IORING_OP_WRITE if op.write else IORING_OP_READ
        return opcode, 0, op.fd, op.buffers.addrs[0], op.buffers.segments[0].len, 0

    def _peek(self, max_nr: int) -> list[tuple[int, int]]:
        off = self.p.cq_off
        head = _U32.unpack_from(self.cq, off.head)[0]
        tail = _U32.unpack_from(self.cq, off.tail)[0]
        out = []
        while head != tail and len(out) < max_nr:
            user_data, res, _flags = _CQE.unpack_from(self.cq, off.cqes + (head & self.cq_mask) * _CQE.size)
            out.append((int(user_data), int(res)))
            self.inflight.pop(user_data, None)
            head = (head + 1) & 0xFFFFFFFF
        _U32.pack_into(self.cq, off.head, head)
        return out

    def reap(self, min_nr: int, max_nr: int, timeout_s: float | None) -> list[tuple[int, int]]:
        out = self._peek(max_nr)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(out) < min_nr:
            want = min_nr - len(out)
            if deadline is None:
                self._enter(0, want, IORING_ENTER_GETEVENTS)
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not self._wait(want, left):
                    out += self._peek(max_nr - len(out))
                    break
            out += self._peek(max_nr - len(out))
        return out

    def _wait(self, want: int, seconds: float) -> bool:
        """Wait for ``want`` CQEs up to ``seconds``; False on timeout."""
        if self.p.features & IORING_FEAT_EXT_ARG:
            ts = Timespec.of(seconds)
            arg = GetEventsArg(0, 0, 0, ctypes.addressof(ts))
            try:
                self._enter(0, want, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
                            ctypes.byref(arg), ctypes.sizeof(arg))
            except OSError as e:
                if e.errno == errno_mod.ETIME:
                    return False
                raise
            return True
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        return bool(poller.poll(seconds * 1000))

    def close(self) -> None:
        for m in {id(x): x for x in (self.sqes, self.cq, self.sq)}.values():
            m.close()
        os.close(self.fd)


def make_queue(interface: str, depth: int) -> LibaioQueue | IoUringQueue:
    if interface == "libaio":
        return LibaioQueue(depth)
    if interface == "io_uring":
        return IoUringQueue(_round_pow2(depth))
    raise ValueError(f"no async queue for interface {interface!r}")


def _round_pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


# Objects the kernel may still DMA into after a timeout: never freed.
ABANDONED: list[Any] = []


# ---------------------------------------------------------------------------
