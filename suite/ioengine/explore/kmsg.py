"""What the kernel logged while one op ran, read by the engine itself.

The host reads the guest's console once a second, so by the time it sees a
WARNING several fast ops may have gone by: the op in flight then is not the op
that raised it. The engine reads ``/dev/kmsg`` (non-blocking, from its end when
the run starts) after each op and puts the records of warning level or worse on
that op's line (``kmsg``); the host names the op whose line carries the report
(suite/explore/crashes/stream.py). Where ``/dev/kmsg`` cannot be read (not root,
no such device) nothing is recorded.
"""
from __future__ import annotations

import errno
import os

KMSG = "/dev/kmsg"
WORST = 4               # KERN_WARNING: records of this level or worse are kept
KEEP = 8                # records kept per op


class KernelLog:
    """``/dev/kmsg`` from the moment it was opened."""

    def __init__(self, path: str = KMSG) -> None:
        try:
            self.fd: int | None = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            self.fd = None

    def new(self) -> list[str]:
        """The records of warning level or worse logged since the last call."""
        out: list[str] = []
        while self.fd is not None:
            try:
                rec = os.read(self.fd, 8192)
            except OSError as e:
                if e.errno == errno.EPIPE:      # overwritten before it was read: go on
                    continue
                break                           # EAGAIN: nothing more
            if not rec:
                break
            text = rec.decode(errors="replace")
            head, _, msg = text.partition(";")
            try:
                level = int(head.split(",", 1)[0]) & 7
            except ValueError:
                continue
            if level <= WORST and len(out) < KEEP:
                out.append(msg.split("\n", 1)[0].strip())
        return out

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
