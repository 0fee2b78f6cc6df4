"""Cross-process file locks with a deadline and a progress line.

Everything a first run creates in the shared cache (the git object cache, a
build, a kernel install, virtme-ng's SSH keys, the KVM probe) is made by one
process while the others wait for it and then reuse it: xdist workers and two
pytest sessions started at once on the same cache must not race.

A wait never has no end: ``file_lock`` raises ``LockTimeout`` (saying who holds
the lock) after ``timeout`` seconds.
"""
from __future__ import annotations

import fcntl
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from suite.errors import SuiteError

# How long a process waits for another one's build/fetch/install before it gives up.
DEFAULT_TIMEOUT = float(os.environ.get("OZFS_VMCI_LOCK_TIMEOUT", "5400"))


class LockTimeout(SuiteError):
    """Another process held a lock for longer than the deadline."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        return "unknown"
    return text or "unknown"


@contextmanager
def file_lock(path: Path, what: str, timeout: float | None = None,
              poll: float = 0.5, report_every: float = 30.0) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the block; wait at most ``timeout``."""
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    try:
        start = time.monotonic()
        last_report = None
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited >= timeout:
                    raise LockTimeout(
                        f"waited {waited:.0f}s for {what} held by {_holder(path)}",
                        fix=f"if that process is gone, remove {path}; or raise "
                            f"OZFS_VMCI_LOCK_TIMEOUT") from None
                if last_report is None or time.monotonic() - last_report >= report_every:
                    last_report = time.monotonic()
                    print(f"waiting for {what} (held by {_holder(path)}, {waited:.0f}s so far)",
                          file=sys.stderr, flush=True)
                time.sleep(poll)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n")
        fh.flush()
        yield
    finally:
        fh.close()          # closing drops the lock
