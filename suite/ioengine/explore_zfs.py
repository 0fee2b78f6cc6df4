"""Explore, the ops that need the guest's ZFS commands: ``snapshot`` and
``rollback`` of the dataset the target lives on, ``txg_sync`` (``zpool sync``).

The host passes the build's programs (``--zfs-dataset NAME --zfs-cmd PATH
--zpool-cmd PATH [--zfs-libdir DIR]``); without them these ops are unsupported
and the generator never emits them. A command that does not return within the
op timeout is a hang (the review thread's rollback deadlock is one): it is
killed, not waited for, since a process stuck in the kernel may never exit.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolRun:
    argv: list[str]
    rc: int | None              # None: it did not return in time (killed)
    out: str = ""
    err: str = ""

    @property
    def line(self) -> str:
        return shlex.join(self.argv)


def _run_id() -> str:
    """Unique among the runs on one dataset: the pid and the second it started."""
    return f"{os.getpid()}-{int(time.time())}"


@dataclass(frozen=True)
class ZfsTools:
    """The build's ``zfs`` and ``zpool`` (with the library directory they
    need), the dataset the target lives on, and how long a command may take."""
    dataset: str
    zfs: str = "zfs"
    zpool: str = "zpool"
    libdir: str | None = None
    timeout_s: float = 60.0
    run_id: str = field(default_factory=_run_id)

    @property
    def pool(self) -> str:
        return self.dataset.split("/", 1)[0]

    def snapshot_name(self, n: int) -> str:
        """The run's ``n``-th snapshot in its chain (names free again after a
        ``rollback -r`` destroyed the later ones)."""
        return f"{self.dataset}@explore-{self.run_id}-{n}"

    def run(self, tool: str, *args: str) -> ToolRun:
        argv = [self.zfs if tool == "zfs" else self.zpool, *args]
        env = {**os.environ, "LD_LIBRARY_PATH": self.libdir} if self.libdir else None
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
        try:
            out, err = p.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()                # not waited for: it may be stuck in the kernel
            return ToolRun(argv, None)
        return ToolRun(argv, p.returncode, out, err)


@dataclass(frozen=True)
class Snap:
    """A snapshot a run took: the op's data token, its name, the model then."""
    tag: int
    name: str
    model: bytes
