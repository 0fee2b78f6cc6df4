"""io_uring with registered files and buffers (``io_uring_fixed``): the
descriptors and the request's buffer registered with the ring beforehand, so the
request reaches the filesystem as a bvec iterator, not user addresses. A
subclass of :class:`suite.ioengine.queues.IoUringQueue`, issued the same way.
"""
from __future__ import annotations

import ctypes
import errno as errno_mod
import os
from typing import Any, Sequence

from .queues import IoOp, IoUringQueue, IoVec

IORING_OP_READ_FIXED, IORING_OP_WRITE_FIXED = 4, 5
IOSQE_FIXED_FILE = 1
IORING_REGISTER_BUFFERS, IORING_UNREGISTER_BUFFERS = 0, 1
IORING_REGISTER_FILES, IORING_UNREGISTER_FILES = 2, 3


class RegisterError(OSError):
    """io_uring refused to register a file or a buffer: the kernel's limit (a
    long-term pin of file-backed memory, RLIMIT_MEMLOCK), not the request's."""


class FixedIoUringQueue(IoUringQueue):
    """io_uring with registered files (IORING_REGISTER_FILES, once: the
    descriptors given) and registered buffers (IORING_REGISTER_BUFFERS, per
    submission, unregistered when nothing is in flight). The kernel pins a
    registered buffer's pages once, at registration, and the request reaches
    the filesystem as a bvec iterator, not user addresses: Direct I/O takes its
    other page path (``iov_iter_get_pages``, not ``pin_user_pages``).

    A request with one segment is IORING_OP_READ_FIXED/WRITE_FIXED on its
    registered buffer. Vectored requests with more than one segment fall back
    to IORING_OP_READV/WRITEV on the registered file (IOSQE_FIXED_FILE) with
    plain buffers: the vectored fixed-buffer opcodes are too new to count on."""

    name = "io_uring_fixed"

    def __init__(self, entries: int, files: Sequence[int]) -> None:
        super().__init__(entries)
        self.files = {fd: i for i, fd in enumerate(files)}
        self.buf_index: dict[int, int] = {}     # op tag -> its registered buffer
        self._registered = False
        arr = (ctypes.c_int32 * len(files))(*files)
        try:
            self._register(IORING_REGISTER_FILES, arr, len(files))
        except RegisterError:
            super().close()
            raise

    def _register(self, opcode: int, arg: Any, nr: int) -> None:
        try:
            self.sys.call("io_uring_register", ctypes.c_uint(self.fd), ctypes.c_uint(opcode),
                          arg, ctypes.c_uint(nr))
        except OSError as e:
            raise RegisterError(e.errno, f"io_uring_register({opcode}): "
                                f"{os.strerror(e.errno)}") from None

    def _fixed_buffer(self, op: IoOp) -> bool:
        return not op.vectored or op.buffers.nr_segs == 1

    def submit(self, ops: Sequence[IoOp]) -> int:
        """Register the single-segment ops' buffers (one table for the batch), then submit."""
        fixed = [op for op in ops if self._fixed_buffer(op)]
        if fixed:
            if self._registered:
                raise RegisterError(errno_mod.EBUSY, "buffers still registered: a batch is "
                                    "in flight (submit one batch at a time)")
            iov = (IoVec * len(fixed))()
            for i, op in enumerate(fixed):
                iov[i].iov_base = op.buffers.addrs[0]
                iov[i].iov_len = op.buffers.segments[0].len
                self.buf_index[op.tag] = i
            self._register(IORING_REGISTER_BUFFERS, iov, len(fixed))
            self._registered = True
        try:
            return super().submit(ops)
        finally:
            if not self.inflight:
                self._unregister_buffers()

    def _sqe(self, op: IoOp) -> tuple[int, int, int, int, int, int]:
        index = self.files[op.fd]
        if op.tag in self.buf_index:
            opcode = IORING_OP_WRITE_FIXED if op.write else IORING_OP_READ_FIXED
            return (opcode, IOSQE_FIXED_FILE, index, op.buffers.addrs[0],
                    op.buffers.segments[0].len, self.buf_index[op.tag])
        opcode, _, _, addr, length, _ = super()._sqe(op)
        return opcode, IOSQE_FIXED_FILE, index, addr, length, 0

    def reap(self, min_nr: int, max_nr: int, timeout_s: float | None) -> list[tuple[int, int]]:
        out = super().reap(min_nr, max_nr, timeout_s)
        for tag, _ in out:
            self.buf_index.pop(tag, None)
        if not self.inflight:
            self._unregister_buffers()
        return out

    def _unregister_buffers(self) -> None:
        if self._registered:
            self._register(IORING_UNREGISTER_BUFFERS, None, 0)
            self._registered = False
            self.buf_index.clear()
