"""Workers forked by one engine command, each sending back one JSON report.

``flood``'s submitters and ``remap-cross``'s two sides run as child processes so
they really run at once. A worker may get stuck in the kernel (the bug a case is
after): then it can neither report nor exit, and two things must not follow from
it. It must not hold the command's stdout (the caller would wait for an EOF that
never comes, past the report), so a worker's fds 0-2 are ``/dev/null``; and the
command must not wait for it (``waitpid`` on a task in D state never returns), so
a stuck worker is sent SIGKILL and left, and named in the report.
"""
from __future__ import annotations

import json
import os
import select
import sys
import time
from typing import Any, Callable


def fork_json(work: Callable[[], dict[str, Any]],
              on_crash: Callable[[BaseException], dict[str, Any]]) -> tuple[int, int]:
    """Run ``work()`` in a child: (its pid, the read end its JSON report comes on).
    An exception becomes ``on_crash(e)``'s report (exit status 1)."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        quiet = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(quiet, fd)
        code = 0
        try:
            out = work()
        except BaseException as e:  # report, never fall back into the parent's loop
            out, code = on_crash(e), 1
        data = json.dumps(out, default=str).encode()
        while data:
            data = data[os.write(wfd, data):]
        os._exit(code)
    os.close(wfd)
    return pid, rfd


def collect(children: dict[int, int], deadline: float, interval: float = 0.5,
            tick: Callable[[], None] | None = None) -> tuple[dict[int, bytes], list[int]]:
    """Read every child's report until all pipes close or ``deadline`` (monotonic)
    passes, calling ``tick()`` every ``interval`` s: (reports by pid, pids still open)."""
    bufs = {pid: b"" for pid in children}
    open_fds = dict(children)
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_fds.values()), [], [], interval)
        for pid, fd in list(open_fds.items()):
            if fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    bufs[pid] += chunk
                else:
                    del open_fds[pid]
        if tick is not None:
            tick()
    return bufs, list(open_fds)


def reap(children: dict[int, int], running: list[int]) -> None:
    """Wait for the children that finished; SIGKILL and leave those still running."""
    for pid, rfd in children.items():
        if pid in running:
            os.kill(pid, 9)
        else:
            os.waitpid(pid, 0)
        os.close(rfd)


def report(buf: bytes, fallback: dict[str, Any]) -> dict[str, Any]:
    """A child's parsed report, or ``fallback`` when it sent none."""
    try:
        return json.loads(buf)
    except ValueError:
        return fallback
