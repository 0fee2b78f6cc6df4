"""Explore, the I/O half: a buffer from each source, the target's two descriptors
(buffered and O_DIRECT, opened separately), and one request issued sync, through
libaio, through io_uring, or through io_uring with the target's descriptors and
the request's buffer registered (``io_uring_fixed``; the queues of
:mod:`suite.ioengine.queues` and :mod:`suite.ioengine.queues_fixed`).

Buffer sources (``buf`` of an op):

* ``heap``: a ``bytearray`` (malloc'd by Python), the buffer page-aligned inside it;
* ``anon``: a fresh private anonymous mmap, never touched before a read;
* ``anon_offset``: an anonymous mmap (:class:`SegmentBuffers`) with the buffer
  ``buf_off`` bytes into its first page, so it straddles a page boundary;
* ``shared_file``: a ``MAP_SHARED`` mapping of a scratch file beside the target;
* ``hugepage``: an anonymous mmap with ``madvise(MADV_HUGEPAGE)``, the buffer
  2 MiB-aligned; where that is refused it is ``anon`` and says so (``used``);
* ``racing``: anonymous memory like ``anon``, which another thread keeps
  changing while the request is in flight (:mod:`.race`);
* ``holed``: anonymous memory like ``anon`` with one page in the middle of the
  buffer made ``PROT_NONE`` while the request runs (:meth:`IoBuffer.arm`): Direct
  I/O cannot pin it and a copy faults on it, so the request fails with EFAULT or
  stops short at the hole (``hole``: the bytes ahead of that page).

``buf_off`` moves any buffer that many bytes off its alignment. Reads fill the
buffer's surroundings with the canary first (except ``anon``: untouched is the
point) and count canary bytes the kernel overwrote past the buffer.
"""
from __future__ import annotations

import ctypes
import errno as errno_mod
import mmap
import os
import threading
import time
from typing import Any, Callable

from ..plan import CANARY, DIO_ALIGN, PAGE, Segment
from . import origins
from .origins import ORIGINS, Want
from ..queues import (ABANDONED, IoOp, IoUringQueue, IoVec, LibaioQueue, SegmentBuffers,
                     make_queue, round_up, sys_)
from ..queues_fixed import FixedIoUringQueue, RegisterError

HUGE = 2 << 20
SOURCES = ("heap", "anon", "anon_offset", "shared_file", "hugepage", "racing", "holed")
# Every buffer an op may name: the sources above, and the page origins of :mod:`.origins`.
ALL_SOURCES = SOURCES + ORIGINS
PROT_NONE = 0                   # <sys/mman.h>; the mmap module has no name for it
_ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
_RW = mmap.PROT_READ | mmap.PROT_WRITE
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x01, 0x02, 0x10
UNSUPPORTED = (errno_mod.EOPNOTSUPP, errno_mod.ENOSYS, errno_mod.EXDEV)


def _address(buf: Any) -> tuple[int, Any]:
    """Address of a writable buffer, and the ctypes object that pins it."""
    anchor = (ctypes.c_char * len(buf)).from_buffer(buf)
    return ctypes.addressof(anchor), anchor


class Region:
    """``n`` bytes at offset ``start`` of a larger backing buffer."""

    def __init__(self, backing: Any, start: int, n: int, used: str,
                 anchors: list[Any], closers: list[Callable[[], None]]) -> None:
        self.full = memoryview(backing)
        self.base, anchor = _address(backing)
        self.start, self.n, self.used = start, n, used
        self._anchors = [anchor, *anchors]
        self._closers = closers
        self.view = self.full[start:start + n]

    @property
    def addr(self) -> int:
        return self.base + self.start

    def prefill(self) -> None:
        """The canary over the backing pages around the buffer (touches them)."""
        lo = self.start - self.start % PAGE
        hi = min(len(self.full), round_up(self.start + self.n, PAGE))
        self.full[lo:hi] = bytes([CANARY]) * (hi - lo)

    def overrun(self) -> int:
        """Canary bytes changed in the buffer's first and last page, outside it."""
        lo = self.start - self.start % PAGE
        hi = min(len(self.full), round_up(self.start + self.n, PAGE))
        head, tail = self.full[lo:self.start], self.full[self.start + self.n:hi]
        return len(head) - bytes(head).count(CANARY) + len(tail) - bytes(tail).count(CANARY)

    def close(self) -> None:
        self.view.release()
        self.full.release()
        self._anchors.clear()
        for c in self._closers:
            c()


def _heap(n: int, buf_off: int, shm_path: str) -> Region:
    arr = bytearray(n + buf_off + 2 * DIO_ALIGN)
    addr, anchor = _address(arr)
    return Region(arr, round_up(addr, DIO_ALIGN) - addr + buf_off, n, "heap", [anchor], [])


def _anon(n: int, buf_off: int, shm_path: str) -> Region:
    m = mmap.mmap(-1, round_up(n + buf_off, PAGE), flags=_ANON, prot=_RW)
    return Region(m, buf_off, n, "anon", [], [m.close])


def _anon_offset(n: int, buf_off: int, shm_path: str) -> Region:
    sb = SegmentBuffers([Segment(n, buf_off)])      # canary-filled, buffer at buf_off
    return Region(sb.maps[0], buf_off, n, "anon_offset", [], [sb.close])


def _shared_file(n: int, buf_off: int, shm_path: str) -> Region:
    size = round_up(n + buf_off, PAGE)
    fd = os.open(shm_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 0)                          # no page of an earlier buffer left
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=_RW)
    finally:
        os.close(fd)
    return Region(m, buf_off, n, "shared_file", [], [m.close])


def _hugepage(n: int, buf_off: int, shm_path: str) -> Region:
    m = mmap.mmap(-1, round_up(n + buf_off, HUGE) + HUGE, flags=_ANON, prot=_RW)
    used = "hugepage"
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError):
        used = "anon"
    addr, anchor = _address(m)
    return Region(m, round_up(addr, HUGE) - addr + buf_off, n, used, [anchor], [m.close])


def _racing(n: int, buf_off: int, shm_path: str) -> Region:
    """Plain anonymous memory: what races is the op's :class:`~.race.Racer`."""
    region = _anon(n, buf_off, shm_path)
    region.used = "racing"
    return region


def _holed(n: int, buf_off: int, shm_path: str) -> Region:
    """Plain anonymous memory; its hole is made by :meth:`IoBuffer.arm`."""
    region = _anon(n, buf_off, shm_path)
    region.used = "holed"
    return region


ALLOCATORS: dict[str, Callable[[int, int, str], Region]] = {
    "heap": _heap, "anon": _anon, "anon_offset": _anon_offset,
    "shared_file": _shared_file, "hugepage": _hugepage, "racing": _racing, "holed": _holed}


def hole_page(buf_off: int, n: int) -> int:
    """Which page of a ``holed`` buffer's mapping goes ``PROT_NONE``: the middle one
    of those the buffer touches (its only one when it touches one)."""
    first, last = 0, (buf_off + max(n, 1) - 1) // PAGE
    return (first + last + 1) // 2 if last > first else 0


def _protect(addr: int, prot: int) -> None:
    if libc().mprotect(ctypes.c_void_p(addr), ctypes.c_size_t(PAGE), prot) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mprotect: {os.strerror(err)}")


def split_lengths(n: int, segs: int) -> list[int]:
    """``n`` bytes in ``segs`` segments: whole pages each where ``n`` allows."""
    segs = max(1, min(segs, n))
    unit = DIO_ALIGN if n % DIO_ALIGN == 0 and n // DIO_ALIGN >= segs else 1
    each = (n // unit) // segs * unit
    return [each] * (segs - 1) + [n - each * (segs - 1)]


class IoBuffer:
    """A region cut into iovec segments: what :class:`IoOp` reads (``addrs``,
    ``segments``, ``iov_addr``, ``nr_segs``), plus views for ``os.preadv``."""

    def __init__(self, source: str, n: int, buf_off: int, segs: int, shm_path: str,
                 for_read: bool, want: Want | None = None) -> None:
        """``want``: what an origin of :mod:`.origins` needs besides (a write's bytes,
        the target's descriptor, offset and size)."""
        self.origin: origins.Origin | None = None
        if source in ORIGINS:
            self.origin = origins.make(source, want or Want(n, buf_off, shm_path))
            self.region = Region(self.origin.backing, self.origin.start, n, self.origin.used,
                                 [], self.origin.closers)
        else:
            self.region = ALLOCATORS[source](n, buf_off, shm_path)
        # The bytes ahead of the page a ``holed`` buffer loses while armed (None: no hole).
        self.hole = (max(0, hole_page(buf_off, n) * PAGE - buf_off)
                     if source == "holed" else None)
        self._armed = False
        # Canaries around a read's buffer, where its surroundings are ours to write (not
        # an origin's: a file's bytes, the target's, pages no one may touch first).
        self.guarded = for_read and source not in ("anon", "holed", *ORIGINS)
        if self.guarded:
            self.region.prefill()
        lengths = split_lengths(n, segs)
        self.segments = [Segment(x) for x in lengths]
        self.addrs, pos = [], 0
        self._views = []
        for x in lengths:
            self.addrs.append(self.region.addr + pos)
            self._views.append(self.region.view[pos:pos + x])
            pos += x
        self.iov = (IoVec * len(lengths))()
        for i, x in enumerate(lengths):
            self.iov[i].iov_base, self.iov[i].iov_len = self.addrs[i], x

    @property
    def used(self) -> str:
        return self.region.used

    def arm(self) -> None:
        """Make a ``holed`` buffer's hole (after it was filled; nothing else has one)."""
        if self.hole is not None and not self._armed:
            _protect(self._hole_addr(), PROT_NONE)
            self._armed = True

    def disarm(self) -> None:
        """The hole readable again, before the buffer is looked at or let go."""
        if self._armed:
            _protect(self._hole_addr(), mmap.PROT_READ | mmap.PROT_WRITE)
            self._armed = False

    def _hole_addr(self) -> int:
        return self.region.base + hole_page(self.region.start, self.region.n) * PAGE

    @property
    def iov_addr(self) -> int:
        return ctypes.addressof(self.iov)

    @property
    def nr_segs(self) -> int:
        return len(self.segments)

    def views(self) -> list[memoryview]:
        return list(self._views)

    def fill(self, data: bytes) -> None:
        self.region.view[:] = data

    def load(self, data: bytes) -> bytes:
        """A write's buffer holding ``data``, or, for an origin that holds bytes of its
        own (zeros, a file's, the target's, staged for a fault), those: what the write
        carries."""
        if self.origin is None or self.origin.content is None:
            self.fill(data)
            return data
        return self.origin.content

    def in_flight(self) -> None:
        """The request was submitted (an origin may act: ``fork`` forks)."""
        if self.origin is not None:
            self.origin.in_flight()

    def done(self) -> None:
        if self.origin is not None:
            self.origin.after()

    def gather(self, n: int) -> bytes:
        return bytes(self.region.view[:n])

    def overrun_bytes(self) -> int:
        return self.region.overrun() if self.guarded else 0

    def aligned(self, offset: int) -> bool:
        """Offset, length and every segment's address and length on DIO_ALIGN."""
        return offset % DIO_ALIGN == 0 and all(
            a % DIO_ALIGN == 0 and s.len % DIO_ALIGN == 0
            for a, s in zip(self.addrs, self.segments))

    def close(self) -> None:
        self.disarm()
        for v in self._views:
            v.release()
        self.region.close()


_LIBC: Any = None


def libc() -> Any:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.fallocate64.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                                      ctypes.c_int64]
        _LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return _LIBC


def fallocate(fd: int, mode: int, offset: int, length: int) -> int:
    """0, or the errno ``fallocate(2)`` failed with."""
    return 0 if libc().fallocate64(fd, mode, offset, length) == 0 else ctypes.get_errno()


def syncfs(fd: int) -> int:
    return 0 if libc().syncfs(fd) == 0 else ctypes.get_errno()


class Target:
    """The file (or block device) under test: a buffered and an O_DIRECT
    descriptor, the async queues, and where the scratch files go."""

    def __init__(self, path: str, scratch: str, blockdev: bool, timeout_s: float) -> None:
        self.path, self.blockdev, self.timeout_s = path, blockdev, timeout_s
        self._open(create=not blockdev)
        self.shm_path, self.src_path = scratch + ".shm", scratch + ".src"
        self.src_fd: int | None = None
        self.queues: dict[str, LibaioQueue | IoUringQueue] = {}
        self.hung = False
        self._tag = 0

    def _open(self, create: bool) -> None:
        """The buffered descriptor (created and truncated: a fresh file) and the O_DIRECT one."""
        self.fd = os.open(self.path, os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0),
                          0o644)
        self.dfd: int | None = None
        self.no_direct = ""
        try:
            self.dfd = os.open(self.path, os.O_RDWR | os.O_DIRECT)
        except OSError as e:
            self.no_direct = f"O_DIRECT open refused: {errno_mod.errorcode.get(e.errno, e.errno)}"

    def reopen(self) -> None:
        """Close everything and open the target again, as it is now (after a
        rollback the files changed under the descriptors, the queues' registered
        files with them); the source file is written again when next needed,
        since a rollback may have taken it away."""
        self._close_all()
        self.queues.clear()
        self.src_fd = None
        self._open(create=False)

    def open_source(self, data: bytes) -> int:
        """The source of copy_file_range, FICLONERANGE, sendfile and splice: a
        scratch file holding ``data``, written (and synced) when first needed."""
        if self.src_fd is None:
            fd = os.open(self.src_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            self.src_fd = fd
        return self.src_fd

    def issue(self, write: bool, iface: str, direct: bool, offset: int, buf: IoBuffer,
              vectored: bool, rw_flags: int = 0) -> tuple[int | None, int, str | None]:
        """(res, errno, stage): res bytes, or -errno; stage says where it failed
        (syscall|setup|register|submit|complete|timeout). ``rw_flags``: the call's
        ``RWF_*`` (``preadv2``/``pwritev2``, ``aio_rw_flags``, the SQE's)."""
        fd = self.dfd if direct else self.fd
        assert fd is not None
        try:
            return self._issue(fd, write, iface, offset, buf, vectored, rw_flags)
        finally:
            buf.done()

    def _issue(self, fd: int, write: bool, iface: str, offset: int, buf: IoBuffer,
               vectored: bool, rw_flags: int = 0) -> tuple[int | None, int, str | None]:
        if iface == "sync":
            # No moment between submit and completion to act in: a thread acts as the
            # call starts (an origin that forks forks beside it).
            t = threading.Thread(target=buf.in_flight, name="explore-in-flight", daemon=True)
            t.start()
            try:
                return _sync(fd, write, offset, buf, vectored, rw_flags)
            finally:
                t.join()
        q = self.queues.get(iface)
        if q is None:
            try:
                q = self.queues[iface] = self._make_queue(iface)
            except OSError as e:
                return None, e.errno, "setup"
        self._tag += 1
        op = IoOp(self._tag, write, fd, offset, buf, vectored,  # type: ignore[arg-type]
                  rw_flags=rw_flags)
        try:
            if q.submit([op]) != 1:
                return None, errno_mod.EAGAIN, "submit"
        except RegisterError as e:      # the buffer cannot be registered: the kernel's limit
            return None, e.errno, "register"
        except OSError as e:
            return -e.errno, e.errno, "submit"
        buf.in_flight()
        deadline = time.monotonic() + self.timeout_s
        while (left := deadline - time.monotonic()) > 0:
            for tag, res in q.reap(1, 4, min(left, 1.0)):
                if tag == op.tag:
                    return (res, -res, "complete") if res < 0 else (res, 0, None)
        if isinstance(q, LibaioQueue):
            q.cancel(op.tag)
        self.hung = True                 # the kernel may still write into buf: keep it
        ABANDONED.extend([self.queues.pop(iface), buf])
        return None, 0, "timeout"

    def issue_together(self, iface: str, bufs: list[IoBuffer],
                       rw_flags: int = 0) -> list[tuple[int | None, int]]:
        """Every buffer an O_DIRECT write with ``rw_flags`` (its offset 0: an append's
        is the kernel's), all handed to ``iface`` in one submit; (res, errno) each in
        submission order (res None: not reaped before the deadline; the queue and the
        buffers are then kept, the kernel may still read them)."""
        assert self.dfd is not None
        q = self.queue(iface)
        ops = []
        for b in bufs:
            self._tag += 1
            ops.append(IoOp(self._tag, True, self.dfd, 0, b, False,  # type: ignore[arg-type]
                            rw_flags=rw_flags))
        took = q.submit(ops)
        got = {op.tag: -errno_mod.EAGAIN for op in ops[took:]}
        deadline = time.monotonic() + self.timeout_s
        while len(got) < len(ops) and (left := deadline - time.monotonic()) > 0:
            for tag, res in q.reap(1, len(ops), min(left, 1.0)):
                got[tag] = res
        if len(got) < len(ops):
            self.hung = True
            ABANDONED.extend([self.queues.pop(iface), *bufs])
        return [(None, 0) if (r := got.get(op.tag)) is None else (r, -r) if r < 0 else (r, 0)
                for op in ops]

    def queue(self, iface: str) -> LibaioQueue | IoUringQueue:
        """The target's queue of ``iface``, made on first use (OSError: it cannot be)."""
        q = self.queues.get(iface)
        if q is None:
            q = self.queues[iface] = self._make_queue(iface)
        return q

    def _make_queue(self, iface: str) -> LibaioQueue | IoUringQueue:
        if iface == "io_uring_fixed":
            return FixedIoUringQueue(4, [fd for fd in (self.fd, self.dfd) if fd is not None])
        return make_queue(iface, 4)

    def close(self) -> None:
        self._close_all()

    def _close_all(self) -> None:
        if not self.hung:
            for q in self.queues.values():
                q.close()
        for fd in (self.fd, self.dfd, self.src_fd):
            if fd is not None and fd >= 0:
                os.close(fd)
        self.fd, self.dfd, self.src_fd = -1, None, None     # closed: reopen() opens them

    def release(self) -> None:
        """Every descriptor of the target closed (its pool can be exported); reopen()
        opens them again."""
        self._close_all()
        self.queues.clear()


def _sync(fd: int, write: bool, offset: int, buf: IoBuffer,
          vectored: bool, rw_flags: int = 0) -> tuple[int | None, int, str | None]:
    try:
        if rw_flags:            # pwritev2 / preadv2 (one segment or several)
            views = buf.views()
            res = os.pwritev(fd, views, offset, rw_flags) if write else \
                os.preadv(fd, views, offset, rw_flags)
        elif vectored:
            views = buf.views()
            res = os.pwritev(fd, views, offset) if write else os.preadv(fd, views, offset)
        elif write:
            res = os.pwrite(fd, buf.views()[0], offset)
        else:
            res = sys_().pread(fd, buf.addrs[0], buf.segments[0].len, offset)
        return res, 0, None
    except OSError as e:
        return -e.errno, e.errno, "syscall"
