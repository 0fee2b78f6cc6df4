"""Explore, where a request's pages come from (``buf`` of a read or a write):
memory the process never wrote, mappings of other files and of the target itself,
huge pages, memfds, pages populated late by a userfaultfd handler, memory shared
copy-on-write with a child forked while the request is in flight.

Each origin makes a :class:`~.requests.Region` and says what a write from it
carries (:meth:`Origin.content`), so the model knows what lands:

* ``zero``: anonymous memory never touched; a write from it writes zeros;
* ``zero_read``: anonymous memory only ever read (each page holds the kernel's
  shared zero page); a write writes zeros, a read breaks the sharing;
* ``map_private_tmpfs`` / ``map_shared_tmpfs``: a mapping of a file on tmpfs
  (``/dev/shm``), its bytes written with ``write(2)`` before it was mapped, so the
  request's pages are that file's page cache, never touched through the mapping;
* ``map_private_zfs`` / ``map_shared_zfs``: the same with a file beside the target,
  on the same dataset: the pages are OpenZFS's own page cache;
* ``map_target``: a ``MAP_SHARED`` mapping of the very range of the target the
  request reads or writes (a write writes the bytes back; a read reads them into
  their own page cache pages). Outside the file's size: plain ``anon``, said so;
* ``memfd`` / ``memfd_sealed``: a memfd written with ``write(2)`` and mapped; sealed
  against writes (``F_SEAL_WRITE``, mapped read-only) for a write's buffer, against
  growing and shrinking for a read's (a sealed-write memfd cannot be read into);
* ``hugetlb``: ``MAP_HUGETLB`` (from the pool the harness reserves in the guest,
  ``RESERVE_HUGEPAGES``); where the kernel has none to give: ``anon``, said so;
* ``uffd``: anonymous memory registered with userfaultfd: no page exists until the
  kernel touches it, and a helper process resolves each fault (``UFFDIO_COPY``) with the
  op's bytes (zeros for a read): the pin meets a fault another thread resolves.
  Where the kernel has no userfaultfd: ``anon``, said so;
* ``fork``: anonymous memory; while the request is in flight the process forks
  and the child writes over its copy of the buffer, then exits: the request must
  move the parent's bytes.

Which were used is the op line's ``buf`` (an origin that fell back says ``anon``).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import select
import struct
from dataclasses import dataclass
from typing import Any, Callable

from ..plan import PAGE
from ..queues import round_up

ORIGINS = ("zero", "zero_read", "map_private_tmpfs", "map_shared_tmpfs", "map_private_zfs",
           "map_shared_zfs", "map_target", "memfd", "memfd_sealed", "hugetlb", "uffd", "fork")
TMPFS = "/dev/shm"
HUGE = 2 << 20
_ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
_RW = mmap.PROT_READ | mmap.PROT_WRITE
MAP_HUGETLB = 0x40000
F_ADD_SEALS, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE = 1033, 0x2, 0x4, 0x8
NR_USERFAULTFD = 323                    # x86_64
UFFDIO_API, UFFDIO_REGISTER, UFFDIO_UNREGISTER = 0xC018AA3F, 0xC020AA00, 0x8010AA01
UFFDIO_COPY = 0xC028AA03
UFFD_EVENT_PAGEFAULT = 0x12


@dataclass
class Want:
    """What the buffer is for: ``n`` bytes at ``buf_off``; a write's ``data`` (None
    for a read); where scratch files go; the target's descriptor and the request's
    offset and the target's size (``map_target``)."""
    n: int
    buf_off: int
    scratch: str
    data: bytes | None = None
    target_fd: int | None = None
    offset: int = 0
    target_size: int = 0

    @property
    def for_read(self) -> bool:
        return self.data is None


class Origin:
    """A region from one origin: ``backing`` (an mmap), the buffer's ``start`` in
    it, what it is (``used``), what closes it, what a write from it carries, and a
    hook run once the request is in flight (``in_flight``) and after it (``after``)."""

    def __init__(self, backing: Any, start: int, used: str, content: bytes | None,
                 closers: list[Callable[[], None]] | None = None) -> None:
        self.backing, self.start, self.used = backing, start, used
        self.content = content          # a write's bytes as the buffer holds them (None: fill it)
        self.closers = closers or []

    def in_flight(self) -> None:
        """Called once the request was submitted (the ``fork`` origin forks here)."""

    def after(self) -> None:
        """Called once the request completed (before the buffer is looked at)."""


def _anon(w: Want, used: str = "anon") -> Origin:
    m = mmap.mmap(-1, round_up(w.n + w.buf_off, PAGE), flags=_ANON, prot=_RW)
    return Origin(m, w.buf_off, used, None, [m.close])


def _zero(w: Want) -> Origin:
    o = _anon(w, "zero")
    o.content = bytes(w.n)
    return o


def _zero_read(w: Want) -> Origin:
    o = _anon(w, "zero_read")
    for p in range(0, len(o.backing), PAGE):    # a read maps the shared zero page
        o.backing[p]
    o.content = bytes(w.n)
    return o


def _file_backed(path: str, w: Want, shared: bool, used: str) -> Origin:
    """A mapping of a scratch file holding the write's bytes at ``buf_off`` (written
    with write(2), never through the mapping); a read's file holds zeros."""
    size = round_up(w.n + w.buf_off, PAGE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        if w.data is not None:
            os.pwrite(fd, w.data, w.buf_off)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE,
                      prot=_RW)
    finally:
        os.close(fd)
    return Origin(m, w.buf_off, used, w.data, [m.close, lambda: _unlink(path)])


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _tmpfs(shared: bool) -> Callable[[Want], Origin]:
    kind = "map_shared_tmpfs" if shared else "map_private_tmpfs"
    return lambda w: _file_backed(f"{TMPFS}/explore-{os.getpid()}-{kind}", w, shared, kind)


def _zfs(shared: bool) -> Callable[[Want], Origin]:
    kind = "map_shared_zfs" if shared else "map_private_zfs"
    return lambda w: _file_backed(f"{w.scratch}.{kind}", w, shared, kind)


def _map_target(w: Want) -> Origin:
    """The target's own range, mapped shared: the buffer's byte i is the file's byte
    ``offset + i`` (the mapping starts at the page holding ``offset``)."""
    lo = w.offset - w.offset % PAGE
    if w.target_fd is None or w.offset + w.n > w.target_size or w.n == 0:
        return _anon(w)
    m = mmap.mmap(w.target_fd, round_up(w.offset + w.n, PAGE) - lo, flags=mmap.MAP_SHARED,
                  prot=_RW, offset=lo)
    start = w.offset - lo
    content = None if w.data is None else bytes(m[start:start + w.n])
    return Origin(m, start, "map_target", content, [m.close])


def _memfd(sealed: bool) -> Callable[[Want], Origin]:
    def make(w: Want) -> Origin:
        if not hasattr(os, "memfd_create"):
            return _anon(w)
        size = round_up(w.n + w.buf_off, PAGE)
        fd = os.memfd_create("explore", os.MFD_ALLOW_SEALING if sealed else 0)
        try:
            os.ftruncate(fd, size)
            if w.data is not None:
                os.pwrite(fd, w.data, w.buf_off)
            if sealed:
                seals = F_SEAL_SHRINK | F_SEAL_GROW
                if not w.for_read:          # a write only reads its buffer
                    seals |= F_SEAL_WRITE
                _fcntl(fd, F_ADD_SEALS, seals)
            if sealed and not w.for_read:   # read-only: Python's mmap cannot lend its address
                backing, close = _map_read_only(fd, size)
                return Origin(backing, w.buf_off, "memfd_sealed", w.data, [close])
            m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=_RW)
        finally:
            os.close(fd)
        return Origin(m, w.buf_off, "memfd_sealed" if sealed else "memfd", w.data, [m.close])
    return make


def _map_read_only(fd: int, size: int) -> tuple[Any, Callable[[], None]]:
    """A shared read-only mapping of ``fd`` as a ctypes array (its bytes are never
    written from here), and what unmaps it."""
    libc = _libc()
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap: {os.strerror(err)}")
    return (ctypes.c_char * size).from_address(addr), lambda: libc.munmap(addr, size)


def _fcntl(fd: int, cmd: int, arg: int) -> None:
    if _libc().fcntl(fd, cmd, arg) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fcntl({cmd}): {os.strerror(err)}")


def _hugetlb(w: Want) -> Origin:
    """``MAP_HUGETLB`` pages from the pool the harness reserved in the guest
    (``reserve_hugepages``); none to give: ``anon``, said so."""
    try:
        m = mmap.mmap(-1, round_up(w.n + w.buf_off, HUGE), flags=_ANON | MAP_HUGETLB,
                      prot=_RW)
    except OSError:
        return _anon(w)
    return Origin(m, w.buf_off, "hugetlb", None, [m.close])


# The guest command that reserves 2 MiB pages for ``hugetlb`` buffers (the harness
# runs it once per guest; the engine never changes a system setting itself).
RESERVE_HUGEPAGES = "echo 64 > /proc/sys/vm/nr_hugepages"


class _Faults(Origin):
    """userfaultfd: every page of the region missing until a fault, which a helper
    process resolves with the staged bytes. A process of its own, not a thread: the
    kernel may fault on these pages in this process's context while it holds the
    interpreter's lock (io_uring task work runs on the way back to user space), and a
    thread of this interpreter could then never take it to answer."""

    def __init__(self, w: Want, uffd: int, m: mmap.mmap) -> None:
        super().__init__(m, w.buf_off, "uffd", w.data, [self._close])
        self.uffd = uffd
        staged = bytearray(len(m))
        if w.data is not None:
            staged[w.buf_off:w.buf_off + w.n] = w.data
        base = ctypes.addressof((ctypes.c_char * len(m)).from_buffer(m))
        self._base, self._len = base, len(m)
        stop_r, self._stop_w = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:              # the helper: serve until the parent closes the pipe
            code = 1
            try:
                os.close(self._stop_w)
                _serve_faults(uffd, stop_r, base, staged)
                code = 0
            finally:
                os._exit(code)
        os.close(stop_r)

    def _close(self) -> None:
        os.close(self._stop_w)
        try:
            os.waitpid(self._pid, 0)
        except ChildProcessError:
            pass
        rng = struct.pack("=QQ", self._base, self._len)
        _libc().ioctl(self.uffd, UFFDIO_UNREGISTER, ctypes.create_string_buffer(rng))
        os.close(self.uffd)
        self.backing.close()


def _serve_faults(uffd: int, stop: int, base: int, staged: bytearray) -> None:
    """Answer each missing-page fault of the region at ``base`` with the page of
    ``staged`` at the same offset (``UFFDIO_COPY``), until ``stop`` reads end-of-file."""
    src = ctypes.addressof((ctypes.c_char * len(staged)).from_buffer(staged))
    libc = _libc()
    while True:
        ready, _, _ = select.select([uffd, stop], [], [])
        if stop in ready:
            return
        try:
            msg = os.read(uffd, 32)
        except BlockingIOError:
            continue
        if len(msg) < 32 or msg[0] != UFFD_EVENT_PAGEFAULT:
            continue
        addr = struct.unpack_from("=Q", msg, 16)[0] & ~(PAGE - 1)
        copy = struct.pack("=QQQQq", addr, src + (addr - base), PAGE, 0, 0)
        libc.ioctl(uffd, UFFDIO_COPY, ctypes.create_string_buffer(copy))


def _uffd(w: Want) -> Origin:
    libc = _libc()
    fd = libc.syscall(NR_USERFAULTFD, os.O_CLOEXEC | os.O_NONBLOCK)
    if fd < 0:
        return _anon(w)
    api = ctypes.create_string_buffer(struct.pack("=QQQ", 0xAA, 0, 0))
    m = mmap.mmap(-1, round_up(w.n + w.buf_off, PAGE), flags=_ANON, prot=_RW)
    base = ctypes.addressof((ctypes.c_char * len(m)).from_buffer(m))
    reg = ctypes.create_string_buffer(struct.pack("=QQQQ", base, len(m), 1, 0))
    if libc.ioctl(fd, UFFDIO_API, api) != 0 or libc.ioctl(fd, UFFDIO_REGISTER, reg) != 0:
        os.close(fd)
        m.close()
        return _anon(w)
    return _Faults(w, fd, m)


class _Forked(Origin):
    """Anonymous memory shared copy-on-write with a child forked once the request
    is in flight; the child scribbles over its copy and exits."""

    def __init__(self, w: Want) -> None:
        m = mmap.mmap(-1, round_up(w.n + w.buf_off, PAGE), flags=_ANON, prot=_RW)
        super().__init__(m, w.buf_off, "fork", None, [m.close])
        self.n, self.child = w.n, 0

    def in_flight(self) -> None:
        if self.child:
            return
        pid = os.fork()
        if pid == 0:                    # the child: its copy changes, the parent's may not
            try:
                self.backing[self.start:self.start + self.n] = b"\xc5" * self.n
            finally:
                os._exit(0)
        self.child = pid

    def after(self) -> None:
        if self.child:
            try:
                os.waitpid(self.child, 0)
            except ChildProcessError:
                pass
            self.child = -1


MAKERS: dict[str, Callable[[Want], Origin]] = {
    "zero": _zero, "zero_read": _zero_read,
    "map_private_tmpfs": _tmpfs(False), "map_shared_tmpfs": _tmpfs(True),
    "map_private_zfs": _zfs(False), "map_shared_zfs": _zfs(True), "map_target": _map_target,
    "memfd": _memfd(False), "memfd_sealed": _memfd(True), "hugetlb": _hugetlb,
    "uffd": _uffd, "fork": _Forked}


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
        _LIBC.mmap.restype = ctypes.c_void_p
        _LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_long]
        _LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _LIBC.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    return _LIBC


def make(source: str, w: Want) -> Origin:
    """The region of origin ``source`` for ``w``."""
    return MAKERS[source](w)
