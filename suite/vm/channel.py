"""One remote command on one SSH channel: its output, its PID, its end.

Every remote command runs as ``bash -c CMD`` behind a one-line preamble that
reports its PID on stderr (``wrap``), so a command that overruns its deadline
can be killed with its whole process group from a second channel. ``_Exec``
pumps one channel; ``Background`` is a command left running with a thread
collecting its output; ``with_deadline`` runs a blocking paramiko call in a
helper thread that is abandoned at the deadline.
"""
from __future__ import annotations

import re
import shlex
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import paramiko

from suite.errors import GuestError

if TYPE_CHECKING:
    from suite.vm.ssh import Guest

T = TypeVar("T")
PID_LINE = re.compile(rb"\x1eOZVM-PID (\d+)\n")
POLL = 0.02
WATCH_EVERY = 1.0  # seconds between liveness checks while a command runs


@dataclass(frozen=True)
class CmdResult:
    cmd: str
    rc: int | None
    stdout: str
    stderr: str
    duration: float

    @property
    def ok(self) -> bool:
        return self.rc == 0


def wrap(cmd: str) -> str:
    """The remote command line: report our PID on stderr, then become ``bash -c cmd``.

    ``--norc``: bash started by sshd would otherwise source ~/.bashrc even
    non-interactively (Debian builds bash with SSH_SOURCE_BASHRC).
    """
    return f"printf '\\036OZVM-PID %s\\n' $$ >&2; exec bash --norc -c {shlex.quote(cmd)}"


def with_deadline(fn: Callable[[], T], timeout: float, what: str, on_timeout: Callable[[], None] | None = None) -> T:
    """Run ``fn`` in a helper thread; raise GuestError if it does not return in time."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            box["error"] = exc

    t = threading.Thread(target=target, name=f"ozvm-{what}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        if on_timeout:
            try:
                on_timeout()
            except Exception:  # noqa: BLE001 - best effort
                pass
        raise GuestError(f"{what} did not finish within {timeout:.0f}s",
                         fix="the guest may be hung: collect evidence (evidence.collect_evidence) and kill the VM")
    if "error" in box:
        raise box["error"]
    return box["value"]


class _Exec:
    """One remote command on one channel: collects output, knows the remote PID."""

    def __init__(self, guest: "Guest", chan: paramiko.Channel, cmd: str) -> None:
        self.guest = guest
        self.chan = chan
        self.cmd = cmd
        self.started = time.monotonic()
        self.last_output = self.started    # output is proof of life, like a heartbeat
        self.out = bytearray()
        self.err = bytearray()
        self._err_head = bytearray()  # stderr until the PID line has been seen
        self.pid: int | None = None
        self.rc: int | None = None
        self.done = False
        self.duration = 0.0
        self.lost = False  # channel/connection went away without an exit status
        self.lock = threading.Lock()

    def _take_stderr(self, data: bytes) -> None:
        """Append stderr, cutting out our PID line (login-shell noise may come before it)."""
        if self._err_head is None:
            self.err += data
            return
        self._err_head += data
        m = PID_LINE.search(self._err_head)
        if m is None:
            if len(self._err_head) > 65536:  # no marker coming: give up looking
                self.err += self._err_head
                self._err_head = None  # type: ignore[assignment]
            return
        self.pid = int(m[1])
        self.err += self._err_head[:m.start()] + self._err_head[m.end():]
        self._err_head = None  # type: ignore[assignment]

    def _drain(self) -> bool:
        got = self._drain_once()
        if got:
            self.last_output = time.monotonic()
        return got

    def _drain_once(self) -> bool:
        got = False
        while self.chan.recv_ready():
            data = self.chan.recv(65536)
            if not data:
                break
            self.out += data
            got = True
        while self.chan.recv_stderr_ready():
            data = self.chan.recv_stderr(65536)
            if not data:
                break
            self._take_stderr(data)
            got = True
        return got

    def step(self) -> bool:
        """Read what is available; True once the command has finished (or was lost)."""
        with self.lock:
            if self.done:
                return True
            got = self._drain()
            if self.chan.exit_status_ready():
                # sshd may send the exit status while output is still on its way
                # (flow-control window): read on until EOF, bounded.
                end = time.monotonic() + 10.0
                while not self.chan.eof_received and time.monotonic() < end:
                    if not self._drain():
                        time.sleep(POLL)
                self._drain()
                self.rc = self.chan.recv_exit_status()
                if self.rc == -1:   # paramiko: closed without an exit status (guest gone)
                    self.rc, self.lost = None, True
                self._finish()
                return True
            transport = self.chan.get_transport()
            if self.chan.closed or transport is None or not transport.is_active():
                self._drain()
                self.lost = True
                self._finish()
                return True
        if not got:
            time.sleep(POLL)
        return False

    def _finish(self) -> None:
        if self._err_head:  # command died before the PID line completed
            self.err += bytes(self._err_head)
            self._err_head = None  # type: ignore[assignment]
        self.done = True
        self.duration = time.monotonic() - self.started
        try:
            self.chan.close()
        except Exception:  # noqa: BLE001
            pass

    def pump_until(self, deadline: float, watch: bool = True) -> bool:
        """Collect output until the command ends or ``deadline``; with ``watch``,
        raise GuestError as soon as the guest is known to have gone silent."""
        next_check = time.monotonic() + WATCH_EVERY
        while time.monotonic() < deadline:
            if self.step():
                return True
            if watch and time.monotonic() >= next_check:
                next_check = time.monotonic() + WATCH_EVERY
                self.guest.check_alive(self)
        return self.step()

    def result(self) -> CmdResult:
        with self.lock:
            duration = self.duration if self.done else time.monotonic() - self.started
            return CmdResult(self.cmd, self.rc, self.out.decode(errors="replace"),
                             self.err.decode(errors="replace"), duration)

    def kill(self, sig: str = "KILL") -> None:
        """Signal the remote process group/session (from another channel)."""
        if self.pid is None:
            return
        self.guest.signal_pid(self.pid, sig, group=True)


class Background:
    """A command left running in the guest; a thread keeps collecting its output."""

    def __init__(self, guest: "Guest", ex: _Exec) -> None:
        self._guest = guest
        self._ex = ex
        self._thread = threading.Thread(target=self._pump, name=f"ozvm-bg-{ex.cmd[:20]}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while not self._ex.step():
            pass
        self._guest._log_result(self._ex.result(), lost=self._ex.lost, tag="background")

    @property
    def cmd(self) -> str:
        return self._ex.cmd

    @property
    def pid(self) -> int | None:
        return self._ex.pid

    @property
    def done(self) -> bool:
        return self._ex.done

    def output_so_far(self) -> tuple[str, str]:
        r = self._ex.result()
        return r.stdout, r.stderr

    def poll(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the command to end; True once it has. As
        :meth:`wait`, GuestError (KernelTripped) as soon as the guest is known to be
        dead or its kernel reported a dead thread."""
        self._thread.join(max(0.0, seconds))
        if self._thread.is_alive():
            self._guest.check_alive(self._ex)
            return False
        return True

    def result(self) -> CmdResult:
        """What it printed so far, its status once it has ended (``rc`` None
        before; ``lost`` is :attr:`lost`)."""
        return self._ex.result()

    @property
    def lost(self) -> bool:
        return self._ex.lost

    def wait(self, timeout: float, check: bool = False) -> CmdResult:
        """Wait for the command to end; GuestError if it is still running after
        ``timeout``, or as soon as the guest is known to have gone silent."""
        end = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < end:
            self._thread.join(min(WATCH_EVERY, max(0.0, end - time.monotonic())))
            if self._thread.is_alive():
                self._guest.check_alive(self._ex)
        r = self._ex.result()
        if not self._ex.done:
            raise GuestError(f"background command still running after {timeout:.0f}s: {self.cmd}",
                             fix="signal it (Background.signal) or raise the timeout",
                             detail=tail_detail(r))
        if self._ex.lost:
            self._guest.check_alive(self._ex)   # says why, when the host can tell
            raise self._guest.lost_or_killed(self.cmd, r)
        if check and r.rc != 0:
            raise failed(r)
        return r

    def signal(self, sig: str | int = "TERM") -> None:
        """Send ``sig`` (name like 'TERM'/'INT' or number) to the command's process group."""
        deadline = time.monotonic() + 10
        while self._ex.pid is None and not self._ex.done and time.monotonic() < deadline:
            time.sleep(POLL)
        if self._ex.pid is None:
            if self._ex.done:
                return
            raise GuestError(f"cannot signal {self.cmd!r}: its PID never arrived",
                             fix="the guest may be hung: collect evidence and kill the VM")
        self._guest.signal_pid(self._ex.pid, sig, group=True)


def tail_detail(r: CmdResult, n: int = 40) -> str:
    parts = []
    if r.stdout.strip():
        parts.append("stdout (tail):\n" + "\n".join(r.stdout.splitlines()[-n:]))
    if r.stderr.strip():
        parts.append("stderr (tail):\n" + "\n".join(r.stderr.splitlines()[-n:]))
    return "\n".join(parts)


def failed(r: CmdResult) -> GuestError:
    err = GuestError(f"guest command failed (rc={r.rc}, {r.duration:.1f}s): {r.cmd}",
                     fix="see stderr below and the case log", detail=tail_detail(r))
    err.result = r  # type: ignore[attr-defined]
    return err


