"""Explore, who issues the requests to OpenZFS: the engine itself (a user iovec from
this process), or an in-kernel caller between the engine and the file.

``loop``: the sequence's file on the dataset backs a loop device (``losetup``, with
``--direct-io=on|off`` and ``--sector-size 512|4096`` as the sequence drew them); the
ops go to ``/dev/loopN`` as to any block device, and the loop driver's kworker hands
OpenZFS bvec iterators with no user memory behind them (with direct-io on, as
O_DIRECT requests). When the ops are done the device is let go and the backing file
itself must hold what the model says.

A caller is data in the sequence (``"caller": {"kind": "loop", "dio": 1, "lbs":
4096}``); none means the engine itself.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

CALLERS = ("loop",)
LOOP_SECTOR_SIZES = (512, 4096)


class CallerError(OSError):
    """The caller could not be set up (no loop module, losetup refused): the run is
    a setup error, not a finding."""


@dataclass
class Loop:
    backing: str
    size: int
    dio: bool
    lbs: int
    device: str = ""

    def attach(self, timeout_s: float = 60.0) -> str:
        """The backing file made (sparse, ``size`` bytes) and a loop device over it."""
        fd = os.open(self.backing, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, self.size)
        finally:
            os.close(fd)
        subprocess.run(["modprobe", "loop"], capture_output=True, timeout=timeout_s)
        argv = ["losetup", "--find", "--show", f"--direct-io={'on' if self.dio else 'off'}",
                "--sector-size", str(self.lbs), self.backing]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        if p.returncode != 0 or not p.stdout.strip():
            raise CallerError(p.returncode or 1, f"{' '.join(argv)}: {p.stderr.strip()}")
        self.device = p.stdout.strip()
        return self.device

    def detach(self, timeout_s: float = 60.0) -> str:
        """The device let go (its cached writes flushed to the file first); '' or why not."""
        if not self.device:
            return ""
        subprocess.run(["blockdev", "--flushbufs", self.device], capture_output=True,
                       timeout=timeout_s)
        p = subprocess.run(["losetup", "-d", self.device], capture_output=True, text=True,
                           timeout=timeout_s)
        self.device = ""
        return "" if p.returncode == 0 else f"losetup -d: {p.stderr.strip()}"

    def backing_bytes(self, n: int) -> bytes:
        """The first ``n`` bytes of the backing file, read through the page cache."""
        with open(self.backing, "rb") as f:
            return f.read(n)


def make(caller: dict[str, Any] | None, path: str, size: int) -> Loop | None:
    """The caller a sequence names over its file ``path``, or None (the engine itself)."""
    if not caller:
        return None
    if caller.get("kind") != "loop":
        raise ValueError(f"unknown caller {caller.get('kind')!r} (known: {', '.join(CALLERS)})")
    lbs = int(caller.get("lbs", 4096))
    if lbs not in LOOP_SECTOR_SIZES:
        raise ValueError(f"loop sector size {lbs} is not one of {LOOP_SECTOR_SIZES}")
    return Loop(path, size, bool(caller.get("dio")), lbs)
