"""Explore, the kernel moving the target's bytes the other way, and user pages in
through a pipe: the other half of :mod:`.xfer`.

- ``sendfile_out``: sendfile from the target (its O_DIRECT descriptor for a
  ``direct`` op) into a file on tmpfs; the tmpfs file must then hold the model's bytes.
- ``splice_out``: splice from the target into a pipe, read back from the pipe.
- ``copy_out``: ``copy_file_range`` from the target into a file on another file system
  (tmpfs); the kernel may decline across file systems (EXDEV: said, allowed).
- ``vmsplice_in``: the op's bytes in user memory handed to a pipe with ``vmsplice``
  (the pipe holds references to the user pages), then spliced into the target: the
  target's ``write_iter`` gets a bvec of user pages no request of the engine pinned.

A read past EOF moves less: the model says how much there is, so a short move before
EOF is ``short``, one past EOF is right.
"""
from __future__ import annotations

import ctypes
import errno as errno_mod
import fcntl
import mmap
import os
from typing import TYPE_CHECKING, Callable

from .model import Ctx, Outcome, check_bytes, error, failed
from .requests import UNSUPPORTED, libc
from .xfer import _drain, _until, F_SETPIPE_SZ, PIPE_MAX
from ..plan import errno_name

if TYPE_CHECKING:
    from .step import Step

OUT_DIR = "/dev/shm"                # another file system than the dataset's


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _fd(ctx: Ctx, s: Step) -> int | Outcome:
    if s.direct and ctx.target.dfd is None:
        return Outcome("unsupported", why=ctx.target.no_direct)
    return ctx.target.dfd if s.direct else ctx.target.fd     # type: ignore[return-value]


def _want(ctx: Ctx, s: Step) -> int:
    """How many bytes a move of ``s.len`` from ``s.off`` finds before EOF."""
    return max(0, min(s.len, ctx.model.size - s.off))


def _judge(ctx: Ctx, s: Step, name: str, got: bytes, err: int) -> Outcome:
    want = _want(ctx, s)
    if err in UNSUPPORTED + (errno_mod.EXDEV,) and not got:
        return Outcome("unsupported", why=f"{name}: {errno_name(err)} (allowed)")
    if err == errno_mod.EINVAL and s.direct and (s.off % 4096 or s.len % 4096):
        return Outcome("einval", why=f"{name}: misaligned O_DIRECT refused (allowed)",
                       errname="EINVAL")
    if err:
        return error(err, f"{name} after {len(got)} bytes")
    if len(got) < want:
        return failed("short", f"{name} moved {len(got)} of the {want} bytes before EOF",
                      res=len(got))
    return check_bytes(got[:want], ctx.model, s.off, name) or Outcome(res=len(got))


def op_sendfile_out(ctx: Ctx, s: Step) -> Outcome:
    if isinstance(fd := _fd(ctx, s), Outcome):
        return fd
    got, err = _into_tmpfs("out", s.len, lambda out, d: os.sendfile(out, fd, s.off + d,
                                                                     s.len - d))
    return _judge(ctx, s, "sendfile out of the target", got, err)


def _into_tmpfs(name: str, length: int, move: Callable[[int, int], int]) -> tuple[bytes, int]:
    """(the bytes, errno) ``move(out, done)`` moved into a scratch file on tmpfs, called
    until ``length`` bytes moved (:func:`_until`); the file is removed after."""
    path = os.path.join(OUT_DIR, f"explore-{name}-{os.getpid()}")
    out = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        done, err = _until(length, lambda d: move(out, d))
        return (os.pread(out, done, 0) if done else b""), err
    finally:
        os.close(out)
        os.unlink(path)


def op_splice_out(ctx: Ctx, s: Step) -> Outcome:
    if isinstance(fd := _fd(ctx, s), Outcome):
        return fd
    r, w = os.pipe()
    chunks: list[bytes] = []
    err = 0
    try:
        try:
            os.set_blocking(r, False)
            fcntl.fcntl(w, F_SETPIPE_SZ, min(PIPE_MAX, max(s.len, 4096)))
        except OSError:
            pass
        done = 0
        while done < s.len:
            try:
                n = os.splice(fd, w, min(s.len - done, PIPE_MAX), offset_src=s.off + done)
            except OSError as e:
                err = e.errno or 0
                break
            if n == 0:
                break
            part = b""
            while len(part) < n:
                part += os.read(r, n - len(part))
            chunks.append(part)
            done += n
    finally:
        os.close(r)
        os.close(w)
    return _judge(ctx, s, "splice out of the target", b"".join(chunks), err)


def op_copy_out(ctx: Ctx, s: Step) -> Outcome:
    if isinstance(fd := _fd(ctx, s), Outcome):
        return fd
    got, err = _into_tmpfs("copy", s.len, lambda out, d: os.copy_file_range(
        fd, out, s.len - d, s.off + d, d))
    return _judge(ctx, s, "copy_file_range to tmpfs", got, err)


def op_vmsplice_in(ctx: Ctx, s: Step) -> Outcome:
    if isinstance(fd := _fd(ctx, s), Outcome):
        return fd
    data = ctx.data(s.data, s.off, s.len)
    buf = mmap.mmap(-1, max(4096, s.len))
    buf[:s.len] = data
    r, w = os.pipe()
    done, err = 0, 0
    try:
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, min(PIPE_MAX, max(s.len, 4096)))
        except OSError:
            pass
        while done < s.len:
            n = _vmsplice_at(w, buf, done, min(s.len - done, PIPE_MAX))
            if n <= 0:
                err = -n
                break
            moved, err = _drain(r, fd, s.off + done, n)
            done += moved
            if err or moved < n:
                break
    finally:
        os.close(r)
        os.close(w)
        buf.close()
    ctx.model.write(s.off, data[:done])
    if err in UNSUPPORTED and not done:
        return Outcome("unsupported", why=f"vmsplice into the target: {errno_name(err)}")
    if err == errno_mod.EINVAL and s.direct and (s.off % 4096 or s.len % 4096):
        return Outcome("einval", why="vmsplice: misaligned O_DIRECT refused (allowed)",
                       errname="EINVAL", res=done)
    if err:
        return error(err, f"vmsplice into the target after {done} bytes")
    if done < s.len:
        return failed("short", f"vmsplice into the target stopped at {done} of {s.len} bytes",
                      res=done)
    return Outcome(res=done)


def _vmsplice_at(w: int, buf: mmap.mmap, at: int, n: int) -> int:
    view = (ctypes.c_char * n).from_buffer(buf, at)
    iov = _Iovec(ctypes.addressof(view), n)
    f = libc().vmsplice
    f.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_uint]
    f.restype = ctypes.c_ssize_t
    res = f(w, ctypes.byref(iov), 1, 0)
    del view
    return res if res >= 0 else -ctypes.get_errno()


OUTWARD_OPS = {"sendfile_out": op_sendfile_out, "splice_out": op_splice_out,
               "copy_out": op_copy_out, "vmsplice_in": op_vmsplice_in}
