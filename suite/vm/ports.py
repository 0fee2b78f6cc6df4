"""Host-side resources a guest holds: its SSH port and its process group.

Two VMs side by side do not collide: a port is leased (bind to port 0, then a
per-port lock file, retried when qemu cannot bind it), and a VM's processes are
found through its process group (is our qemu the one listening?).
"""
from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from suite.errors import VMError


def ports_dir() -> Path:
    d = Path(tempfile.gettempdir()) / f"ozvm-ports-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


@dataclass
class PortLease:
    """A TCP port held by a lock file until ``release``; other suite VMs skip it."""

    port: int
    _fh: IO[str] | None = None

    def release(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def lease_port(port: int | None = None, attempts: int = 50) -> PortLease:
    """Lease ``port`` or, if None, a free one (bind to 0, then lock; retry on collision)."""
    for _ in range(attempts):
        p = port if port is not None else _ephemeral_port()
        fh = open(ports_dir() / f"{p}.lock", "w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            if port is not None:
                raise VMError(f"SSH port {port} is already used by another suite VM",
                              fix="leave VMSpec.ssh_port unset so a free port is picked")
            continue
        if not _port_free(p):
            fh.close()
            if port is not None:
                raise VMError(f"SSH port {port} is in use on 127.0.0.1",
                              fix="leave VMSpec.ssh_port unset so a free port is picked")
            continue
        return PortLease(p, fh)
    raise VMError("could not find a free TCP port for the guest's SSH forward",
                  fix="check for leaked qemu processes holding ports (ss -ltnp)")


def _ephemeral_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on 127.0.0.1/0.0.0.0:``port`` (from /proc/net/tcp)."""
    inodes = set()
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return inodes
    for line in lines:
        f = line.split()
        if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(f[9])
    return inodes


def group_pids(pgid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid:
            pids.append(int(stat.parent.name))
    return pids


def group_listens(pgid: int, port: int) -> bool:
    """True if a process of group ``pgid`` (qemu) holds the listening socket on ``port``.

    Checking ownership (not just that something listens) tells our qemu apart
    from another program that grabbed the port after we leased it.
    """
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    for pid in group_pids(pgid):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return True
    return False


def port_listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
