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
import shlex
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Callable

import paramiko

from suite.errors import GuestError, KernelTripped
from suite.vm.channel import (Background, CmdResult, _Exec, failed, tail_detail, with_deadline,
                                 wrap)

log = logging.getLogger(__name__)

# paramiko logs a traceback at ERROR for every refused banner while a guest
# boots; our GuestErrors carry the reason instead. OZFS_VMCI_SSH_DEBUG=1 keeps them.
if not os.environ.get("OZFS_VMCI_SSH_DEBUG"):
    logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)


VIRTME_KEY = Path.home() / ".cache" / "virtme-ng" / ".ssh" / "id_virtme"
LOG_OUTPUT_LIMIT = 16_000  # characters of stdout/stderr kept per command in the case log


def virtme_key() -> Path:
    """The private key vng generates for ``--ssh`` (override: OZFS_VMCI_SSH_KEY)."""
    return Path(os.environ.get("OZFS_VMCI_SSH_KEY", VIRTME_KEY))


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
        self._tripwire: Callable[[], str | None] | None = None
        # The guest side of the I/O engine (suite/casekit/engine.py): its resident
        # server (a Background) once started, and its upload folder once made.
        self.resident_engine: Background | None = None
        self.engine_dir_made = False

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

    def set_tripwire(self, fn: Callable[[], str | None] | None) -> None:
        """``fn()`` is asked while commands run; a reason (the kernel reported a
        dead thread) ends the wait with KernelTripped. None: no tripwire."""
        self._tripwire = fn

    def check_alive(self, ex: "_Exec | None" = None) -> None:
        """GuestError if the guest is known to be dead or silent for too long;
        KernelTripped if the tripwire fired while ``ex`` ran."""
        if ex is not None and self._tripwire is not None:
            why = self._tripwire()
            if why:
                try:
                    ex.chan.close()
                except Exception:  # noqa: BLE001
                    pass
                raise KernelTripped(f"the kernel reported {why} while running: {ex.cmd[:120]}",
                                    fix="a kernel thread died with the command's I/O in its "
                                        "hands: see the console and the D-state stacks")
        if self._dead is None and self._health is not None:
            why = self._health()
            if why:
                self._dead = why
        if self._dead is None and self._silence and ex is not None:
            # Silence counts only while a command runs: an idle guest is not a silent one.
            # Output from the command itself counts as an answer.
            quiet = time.monotonic() - max(self._last_ok, ex.started, ex.last_output)
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

    def answers(self, timeout: float = 30.0) -> bool:
        """Does the guest still run a command? After a channel closed without an exit
        status this tells a command killed by a signal (sshd sends ``exit-signal``,
        which paramiko drops) from a guest that went away."""
        try:
            if not self.connected:
                return False
            ex = self._open("true", timeout)
            return ex.pump_until(time.monotonic() + timeout, watch=False) and ex.rc == 0
        except Exception:  # noqa: BLE001 - no answer is the answer
            return False

    def lost_or_killed(self, cmd: str, r: "CmdResult") -> GuestError:
        """The error for a command whose channel closed without an exit status."""
        self.check_alive()      # says why, when the host can tell (qemu exited, stopped)
        if self.answers():
            return GuestError(f"killed by a signal while running: {cmd}",
                              fix="the guest still answers, so a signal ended the command "
                                  "(SIGSEGV, SIGKILL, ...): look for 'traps:' or 'segfault' "
                                  "lines on the console",
                              detail=tail_detail(r))
        return GuestError(f"SSH connection lost while running: {cmd}",
                          fix="the guest may have crashed or hung: check console.log and "
                              "collect evidence",
                          detail=tail_detail(r))

    # ------------------------------------------------------------------ connection

    def connect(self, timeout: float = 30.0) -> None:
        """Open the SSH connection (replacing a dead one). GuestError if it fails."""
        if not self.key.is_file():
            raise GuestError(f"SSH key {self.key} does not exist",
                             fix="start the VM with vng --ssh once (it generates the key) or set OZFS_VMCI_SSH_KEY")
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_AcceptAny())
        try:
            with_deadline(lambda: client.connect(
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
                self.check_alive()     # a gone guest says so, rather than "cannot SSH"
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
            with_deadline(lambda: chan.exec_command(wrap(cmd)), left, "ssh exec request", chan.close)
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

    def mark(self, text: str) -> None:
        """A line in the command log that runs nothing (e.g. where a case ends)."""
        self._log(f"[{_stamp()}] {self.name} $ # {text}")

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
        except GuestError as e:
            partial = ex.result()
            e.partial_stdout = partial.stdout       # what it printed before it was cut off
            if log:
                self._log_result(partial, lost=True)
            raise
        if finished and not ex.lost:
            self._last_ok = time.monotonic()
        r = ex.result()
        if not finished:
            return self._timed_out(ex, timeout, log)
        if log:
            self._log_result(r, lost=ex.lost)
        if ex.lost:
            raise self.lost_or_killed(cmd, r)
        if check and r.rc != 0:
            raise failed(r)
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
                         detail=tail_detail(r))
        err.result = r  # type: ignore[attr-defined]
        raise err

    def background(self, cmd: str, timeout: float = 30.0, waited: bool = False) -> Background:
        """Start ``cmd`` and return at once; the Background collects output until it
        exits. ``waited``: the caller polls it to its end before it runs anything
        else (a command watched as it goes), so the command log and a reproducer
        show it as a foreground step."""
        self._log_start(cmd, tag="" if waited else "background")
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
            return with_deadline(lambda: self.run("true", timeout=timeout, log=False).ok,
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
                self._sftp = with_deadline(lambda: paramiko.SFTPClient.from_transport(transport),
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
