"""Reading a file through a shared mapping without dying of it.

A page the kernel cannot read (a block with a checksum error: a Direct I/O write
refused by write verify leaves one) fails the page fault, and the process reading
the mapping gets ``SIGBUS``: Python cannot catch it, and the engine died without a
word in the middle of a sequence (the harness saw "ended without a status", a
no-result, where the buffered read of the same page says ``EIO``). The mapping is
read in a forked child that sends the bytes through a pipe; a child killed by a
signal is an ``OSError(EIO)`` naming it, as a read(2) of the page would say.
"""
from __future__ import annotations

import errno
import faulthandler
import mmap
import os
import signal


def read_mapped(fd: int, length: int, offset: int = 0) -> bytes | OSError:
    """``length`` bytes of ``fd`` from ``offset`` (page-aligned) read through a shared
    read-only mapping, or the error a fault on it came to."""
    if length <= 0:
        return b""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                        # the child: only the mapping, the pipe, _exit
        code = 0
        try:
            os.close(r)
            faulthandler.disable()      # its SIGBUS is the answer, not a crash to dump
            with mmap.mmap(fd, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ,
                           offset=offset) as m:
                view = memoryview(m)
                pos = 0
                while pos < length:
                    pos += os.write(w, view[pos:pos + (1 << 20)])
                view.release()
        except OSError as e:
            code = 100 + (e.errno or errno.EIO) % 100
        except BaseException:           # (mmap's own refusals are ValueError)
            code = 100 + errno.EINVAL
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        while chunk := f.read(1 << 20):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        return OSError(errno.EIO, f"the mapping's read died of {sig} (a page the kernel "
                                  f"could not read)")
    if os.WEXITSTATUS(status):
        code = os.WEXITSTATUS(status) - 100
        return OSError(code, os.strerror(code))
    got = b"".join(chunks)
    if len(got) != length:
        return OSError(errno.EIO, f"the mapping gave {len(got)} of {length} bytes")
    return got
