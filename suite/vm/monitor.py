"""qemu's human monitor (HMP) on a unix socket: status, stop/cont, Alt-SysRq keys.

It lets the host act on a guest whose SSH is dead (press sysrq-w so the
console shows the blocked tasks).
"""
from __future__ import annotations

import re
import socket
from pathlib import Path

from suite.errors import VMError


class Monitor:
    def __init__(self, path: Path) -> None:
        self.path = path

    def command(self, command: str, timeout: float = 5.0) -> str:
        """Run a HMP command; returns its output."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            try:
                s.connect(str(self.path))
                _read_until_prompt(s)
                s.sendall(command.encode() + b"\n")
                out = _read_until_prompt(s)
            except OSError as exc:
                raise VMError(f"qemu monitor command {command!r} failed: {exc}",
                              fix="qemu may be wedged; kill the VM") from exc
        return clean_hmp_output(out)


def clean_hmp_output(raw: bytes) -> str:
    """HMP output without the echoed command line (redrawn per key) and the prompt."""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw.decode(errors="replace"))
    lines = text.replace("\r\n", "\n").split("\n")[1:]  # line 0: the echo
    return "\n".join(ln.rstrip("\r") for ln in lines if ln.strip() and ln.strip() != "(qemu)")


def _read_until_prompt(s: socket.socket) -> bytes:
    buf = b""
    while not buf.rstrip().endswith(b"(qemu)"):
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf
