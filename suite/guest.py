"""Run commands in a booted guest over SSH (paramiko), with deadlines that hold.

Every remote command runs as ``bash -c CMD`` behind a one-line preamble that
reports its PID on stderr. sshd makes each exec'd command a session and group
leader, so on timeout the whole group/session is SIGKILLed from a second
channel before the error is raised. Nothing here blocks without a deadline: a
guest whose kernel deadlocked keeps the TCP connection (slirp answers) but
never replies, so waits are either polled against a deadline or guarded by a
watchdog that closes the channel.

``set_log(path)`` appends every command, its exit code, duration and output,
with timestamps, to a per-case log.
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import re
import shlex
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import paramiko

from .errors import GuestError

log = logging.getLogger(__name__)

# paramiko logs a traceback at ERROR for every refused banner while a guest
# boots; our GuestErrors carry the reason instead. OZFS_VMCI_SSH_DEBUG=1 keeps them.
if not os.environ.get("OZFS_VMCI_SSH_DEBUG"):
    logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)

T = TypeVar("T")

VIRTME_KEY = Path.home() / ".cache" / "virtme-ng" / ".ssh" / "id_virtme"
PID_LINE = re.compile(rb"\x1eOZVM-PID (\d+)\n")
LOG_OUTPUT_LIMIT = 16_000  # characters of stdout/stderr kept per command in the case log
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


def virtme_key() -> Path:
    """The private key vng generates for ``--ssh`` (override: OZFS_VMCI_SSH_KEY)."""
    return Path(os.environ.get("OZFS_VMCI_SSH_KEY", VIRTME_KEY))


def wrap(cmd: str) -> str:
    """The remote command line: report our PID on stderr, then become ``bash -c cmd``.

    ``--norc``: bash started by sshd would otherwise source ~/.bashrc even
    non-interactively (Debian builds bash with SSH_SOURCE_BASHRC).
    """
    return f"printf '\\036OZVM-PID %s\\n' $$ >&2; exec bash --norc -c {shlex.quote(cmd)}"


def _stamp() -> str:
    return _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _clip(text: str, limit: int = LOG_OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


class _AcceptAny(paramiko.MissingHostKeyPolicy):
    """Guest host keys are ephemeral: accept whatever the guest presents."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        return None


def _with_deadline(fn: Callable[[], T], timeout: float, what: str, on_timeout: Callable[[], None] | None = None) -> T:
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
                             detail=_tail_detail(r))
        if self._ex.lost:
            raise GuestError(f"connection lost while running: {self.cmd}",
                             fix="the guest may have crashed: check console.log", detail=_tail_detail(r))
        if check and r.rc != 0:
            raise _failed(r)
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


def _tail_detail(r: CmdResult, n: int = 40) -> str:
    parts = []
    if r.stdout.strip():
        parts.append("stdout (tail):\n" + "\n".join(r.stdout.splitlines()[-n:]))
    if r.stderr.strip():
        parts.append("stderr (tail):\n" + "\n".join(r.stderr.splitlines()[-n:]))
    return "\n".join(parts)


def _failed(r: CmdResult) -> GuestError:
    err = GuestError(f"guest command failed (rc={r.rc}, {r.duration:.1f}s): {r.cmd}",
                     fix="see stderr below and the case log", detail=_tail_detail(r))
    err.result = r  # type: ignore[attr-defined]
    return err


class Guest:
    """SSH access to one guest: root@host:port with virtme-ng's key."""

    def __init__(self, port: int, host: str = "127.0.0.1", user: str = "root",
                 key: Path | None = None, name: str = "guest") -> None:
        self.port = port
        self.host = host
        self.user = user
        self.key = key or virtme_key()
        self.name = name
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self.sftp_ok: bool | None = None  # None: not tried; False: fall back to cat
        self._lock = threading.RLock()
        self._log_path: Path | None = None
        self._log_lock = threading.Lock()
        # Liveness while commands run (set by the VM, see watch()).
        self._health: Callable[[], str | None] | None = None
        self._silence: float | None = None
        self._last_ok = time.monotonic()
        self._heartbeat: threading.Thread | None = None
        self._dead: str | None = None

    # ------------------------------------------------------------------ liveness

    def watch(self, health: Callable[[], str | None] | None, silence: float | None) -> None:
        """Notice a dead or frozen guest while a command runs, not at its deadline.

        ``health`` is a host-side check (is qemu running, not stopped?) returning
        a reason when the guest is gone; ``silence`` is how long the guest may go
        without answering a heartbeat (``true`` over a second channel) before
        every running command fails with "guest stopped answering".
        """
        self._health, self._silence = health, silence
        self._dead = None
        self._last_ok = time.monotonic()

    def check_alive(self, ex: "_Exec | None" = None) -> None:
        """GuestError if the guest is known to be dead or silent for too long."""
        if self._dead is None and self._health is not None:
            why = self._health()
            if why:
                self._dead = why
        if self._dead is None and self._silence:
            quiet = time.monotonic() - self._last_ok
            if quiet > self._silence:
                self._dead = f"no answer to a heartbeat for {quiet:.0f}s"
            elif quiet > self._silence / 4:
                self._beat()
        if self._dead is not None:
            if ex is not None:
                try:
                    ex.chan.close()
                except Exception:  # noqa: BLE001
                    pass
            raise GuestError(f"guest stopped answering: {self._dead}"
                             + (f" (while running: {ex.cmd[:120]})" if ex is not None else ""),
                             fix="the guest is dead or frozen: see the console tail and "
                                 "the evidence in the case folder")

    def _beat(self) -> None:
        if self._heartbeat is not None and self._heartbeat.is_alive():
            return

        def beat() -> None:
            try:
                deadline = time.monotonic() + (self._silence or 30.0)
                ex = self._open("true", self._silence or 30.0)
                if ex.pump_until(deadline, watch=False) and ex.rc == 0:
                    self._last_ok = time.monotonic()
            except Exception:  # noqa: BLE001 - a failed beat is the absence of news
                pass

        self._heartbeat = threading.Thread(target=beat, name=f"ozvm-heartbeat-{self.port}",
                                           daemon=True)
        self._heartbeat.start()

    # ------------------------------------------------------------------ connection

    def connect(self, timeout: float = 30.0) -> None:
        """Open the SSH connection (replacing a dead one). GuestError if it fails."""
        if not self.key.is_file():
            raise GuestError(f"SSH key {self.key} does not exist",
                             fix="start the VM with vng --ssh once (it generates the key) or set OZFS_VMCI_SSH_KEY")
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_AcceptAny())
        try:
            _with_deadline(lambda: client.connect(
                self.host, port=self.port, username=self.user, key_filename=str(self.key),
                timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                look_for_keys=False, allow_agent=False), timeout + 5, "ssh connect", client.close)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            raise GuestError(f"cannot SSH to {self.user}@{self.host}:{self.port}: {exc}",
                             fix="check that the guest booted (console.log) and sshd started") from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(15)
        with self._lock:
            self.close()
            self._client = client

    def close(self) -> None:
        with self._lock:
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:  # noqa: BLE001
                    pass
                self._sftp = None
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> "Guest":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        t = self._client.get_transport() if self._client else None
        return bool(t and t.is_active())

    def _transport(self, timeout: float) -> paramiko.Transport:
        with self._lock:
            if not self.connected:
                self.connect(timeout=min(timeout, 30.0))
            assert self._client is not None
            t = self._client.get_transport()
            assert t is not None
            return t

    def _open(self, cmd: str, timeout: float) -> _Exec:
        """A channel running ``cmd`` (wrapped); GuestError if the guest does not answer in time."""
        t0 = time.monotonic()
        transport = self._transport(timeout)
        try:
            chan = transport.open_session(timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise GuestError(f"cannot open an SSH channel to the guest: {exc}",
                             fix="the guest may be hung or sshd died: collect evidence and kill the VM") from exc
        left = max(1.0, timeout - (time.monotonic() - t0))
        try:
            _with_deadline(lambda: chan.exec_command(wrap(cmd)), left, "ssh exec request", chan.close)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            chan.close()
            raise GuestError(f"guest refused to start {cmd!r}: {exc}",
                             fix="the guest may be hung or sshd died: collect evidence and kill the VM") from exc
        return _Exec(self, chan, cmd)

    # ------------------------------------------------------------------ logging

    def set_log(self, path: Path | None) -> None:
        """Append every command and its result to ``path`` (None: stop logging)."""
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_lock:
            self._log_path = path

    def _log(self, text: str) -> None:
        with self._log_lock:
            if self._log_path is None:
                return
            with open(self._log_path, "a", encoding="utf-8", errors="replace") as f:
                f.write(text if text.endswith("\n") else text + "\n")

    def _log_start(self, cmd: str, tag: str = "") -> None:
        self._log(f"[{_stamp()}] {self.name}{' ' + tag if tag else ''} $ {cmd}")

    def _log_result(self, r: CmdResult, lost: bool = False, timed_out: bool = False, tag: str = "") -> None:
        status = "TIMEOUT" if timed_out else "LOST" if lost else f"rc={r.rc}"
        lines = [f"[{_stamp()}] {self.name}{' ' + tag if tag else ''} {status} {r.duration:.2f}s  ({r.cmd[:80]})"]
        for prefix, text in (("  | ", r.stdout), ("  ! ", r.stderr)):
            if text:
                lines += [prefix + ln for ln in _clip(text).splitlines()]
        self._log("\n".join(lines))

    # ------------------------------------------------------------------ commands

    def run(self, cmd: str, timeout: float = 60.0, check: bool = True,
            stdin: bytes | str | None = None, log: bool = True) -> CmdResult:
        """Run ``cmd`` (bash) in the guest and wait for it.

        GuestError if it overruns ``timeout`` (the remote process group is then
        SIGKILLed) or, with ``check``, if it exits nonzero. Safe to call from
        several threads at once: each call gets its own channel.
        """
        if log:
            self._log_start(cmd)
        self.check_alive()
        deadline = time.monotonic() + timeout
        ex = self._open(cmd, timeout)
        if stdin is not None:
            self._feed(ex, stdin.encode() if isinstance(stdin, str) else stdin, deadline)
        try:
            finished = ex.pump_until(deadline)
        except GuestError:
            if log:
                self._log_result(ex.result(), lost=True)
            raise
        if finished and not ex.lost:
            self._last_ok = time.monotonic()
        r = ex.result()
        if not finished:
            return self._timed_out(ex, timeout, log)
        if log:
            self._log_result(r, lost=ex.lost)
        if ex.lost:
            raise GuestError(f"SSH connection lost while running: {cmd}",
                             fix="the guest may have crashed or hung: check console.log and collect evidence",
                             detail=_tail_detail(r))
        if check and r.rc != 0:
            raise _failed(r)
        return r

    def _feed(self, ex: _Exec, data: bytes, deadline: float) -> None:
        ex.chan.settimeout(max(1.0, deadline - time.monotonic()))
        try:
            view = memoryview(data)
            while view:
                n = ex.chan.send(view[:32768])
                view = view[n:]
            ex.chan.shutdown_write()
        except (socket.timeout, OSError, paramiko.SSHException) as exc:
            ex.chan.close()
            raise GuestError(f"could not send input to {ex.cmd!r}: {exc}",
                             fix="the guest may be hung or out of space") from exc
        finally:
            ex.chan.settimeout(None)

    def _timed_out(self, ex: _Exec, timeout: float, log: bool) -> CmdResult:
        killed = "remote process group SIGKILLed"
        if ex.pid is None:  # the PID line comes after the login shell's rc files
            end = time.monotonic() + 5
            while ex.pid is None and time.monotonic() < end and not ex.step():
                pass
        if ex.pid is None and not ex.done:
            killed = "remote PID unknown, not killed"
        try:
            ex.kill("KILL")
        except GuestError as exc:
            killed = f"could not kill the remote command ({exc.what})"
        ex.pump_until(time.monotonic() + 2)
        r = ex.result()
        try:
            ex.chan.close()
        except Exception:  # noqa: BLE001
            pass
        if log:
            self._log_result(r, timed_out=True)
        err = GuestError(f"guest command overran its {timeout:.0f}s deadline ({killed}): {ex.cmd}",
                         fix="a task may be stuck in D state: see the evidence in the case directory",
                         detail=_tail_detail(r))
        err.result = r  # type: ignore[attr-defined]
        raise err

    def background(self, cmd: str, timeout: float = 30.0) -> Background:
        """Start ``cmd`` and return at once; the Background collects output until it exits."""
        self._log_start(cmd, tag="background")
        return Background(self, self._open(cmd, timeout))

    def signal_pid(self, pid: int, sig: str | int = "TERM", group: bool = True, timeout: float = 15.0) -> None:
        """Send ``sig`` to ``pid`` (its process group and session if ``group``)."""
        s = str(sig).upper().removeprefix("SIG") if isinstance(sig, str) else str(int(sig))
        if group:
            cmd = f"kill -s {s} -- -{pid} 2>/dev/null; pkill -{s} -s {pid} 2>/dev/null; kill -s {s} {pid} 2>/dev/null; true"
        else:
            cmd = f"kill -s {s} {pid}"
        self.run(cmd, timeout=timeout, check=not group)

    def alive(self, timeout: float = 5.0) -> bool:
        """True if the guest runs a trivial command within ``timeout`` seconds."""
        try:
            return _with_deadline(lambda: self.run("true", timeout=timeout, log=False).ok,
                                  timeout + 2, "alive check")
        except (GuestError, paramiko.SSHException, OSError, EOFError):
            return False

    # ------------------------------------------------------------------ files

    def _sftp_client(self, timeout: float) -> paramiko.SFTPClient | None:
        with self._lock:
            if self.sftp_ok is False:
                return None
            if self._sftp is not None and self.connected:
                return self._sftp
            transport = self._transport(timeout)
            try:
                self._sftp = _with_deadline(lambda: paramiko.SFTPClient.from_transport(transport),
                                            timeout, "sftp start")
                self.sftp_ok = True
            except (paramiko.SSHException, OSError, EOFError, GuestError) as exc:
                log.info("guest has no usable sftp subsystem (%s); falling back to cat over exec", exc)
                self.sftp_ok = False
                self._sftp = None
            return self._sftp

    def put(self, local: Path | str, remote: str, timeout: float = 120.0) -> None:
        """Copy a host file into the guest (keeps the mode bits)."""
        local = Path(local)
        mode = stat.S_IMODE(local.stat().st_mode)
        self._log(f"[{_stamp()}] {self.name} put {local} -> {remote}")
        sftp = self._sftp_client(timeout)
        if sftp is not None:
            try:
                sftp.get_channel().settimeout(timeout)
                sftp.put(str(local), remote)
                sftp.chmod(remote, mode)
                return
            except (OSError, paramiko.SSHException, EOFError) as exc:
                raise GuestError(f"sftp put {local} -> {remote} failed: {exc}",
                                 fix="check that the guest directory exists and is writable") from exc
        self.run(f"cat > {shlex.quote(remote)} && chmod {mode:o} {shlex.quote(remote)}",
                 timeout=timeout, stdin=local.read_bytes(), log=False)

    def get(self, remote: str, local: Path | str, timeout: float = 120.0) -> Path:
        """Copy a guest file to the host; returns the local path."""
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        self._log(f"[{_stamp()}] {self.name} get {remote} -> {local}")
        sftp = self._sftp_client(timeout)
        if sftp is not None:
            try:
                sftp.get_channel().settimeout(timeout)
                sftp.get(remote, str(local))
                return local
            except (OSError, paramiko.SSHException, EOFError) as exc:
                raise GuestError(f"sftp get {remote} -> {local} failed: {exc}",
                                 fix="check that the guest file exists") from exc
        deadline = time.monotonic() + timeout
        ex = self._open(f"cat {shlex.quote(remote)}", timeout)
        if not ex.pump_until(deadline):
            self._timed_out(ex, timeout, log=True)
        if ex.rc != 0:
            raise GuestError(f"cannot read guest file {remote}: {ex.err.decode(errors='replace').strip()}",
                             fix="check that the guest file exists")
        local.write_bytes(bytes(ex.out))
        return local
