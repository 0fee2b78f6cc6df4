"""A running virtme-ng guest with emulated NVMe disks and SSH (see ``vng`` for
the command line it is started with).

vng's stdout/stderr is a pipe that a thread copies into ``workdir/console.log``
(qemu re-opens ``/proc/self/fd/2`` for several chardevs; with a regular file
each would get its own offset and truncate the others, with a pipe they
interleave in order). A HMP monitor on a unix socket lets the host press
Alt-SysRq keys when SSH is dead (needs an i8042 keyboard, hence
``--disable-microvm``).

Two VMs side by side do not collide: each has its own workdir (locked), its
own port (bind to port 0, then a per-port lock file, retried when qemu cannot
bind it) and its own monitor socket and disk images.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from suite.errors import BootStorm, BootTimeout, VMError
from suite.vm.ssh import Guest
from suite.vm import console
from suite.vm.accel import Accel
from suite.vm.console import ConsoleWatcher
from suite.vm.disks import (NVME_LISTING, NvmeSpec, check_disk_space, create_sparse,
                            nvme_qemu_opts, parse_nvme_listing, supports_odirect)
from suite.vm.monitor import Monitor
from suite.vm.ports import (PortLease, group_alive, group_listens, group_pids, lease_port,
                            port_listening)
from suite.vm.vng import (BASE_APPEND, KEEPALIVE_CMD, READY_FILE, VNG, check_safe_path, ensure_vng_ssh_keys,
                          HOSTFWD_FAILED, env_qemu_opts, qemu_binary_args,
                          require_tools)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- specs


@dataclass(kw_only=True)
class VMSpec:
    kernel_image: Path
    accel: Accel
    workdir: Path
    memory: str = "4G"
    cpus: int = 2
    nvme: NvmeSpec = field(default_factory=NvmeSpec)
    ssh_port: int | None = None  # None: pick a free one
    extra_qemu_opts: list[str] = field(default_factory=list)
    append: list[str] = field(default_factory=lambda: list(BASE_APPEND))
    extra_vng_args: list[str] = field(default_factory=list)
    name: str = "ozvm"
    force_9p: bool = True  # vng's virtiofsd fallback costs ~3s when only the C virtiofsd exists
    microvm: bool = False  # microvm (KVM only) has no i8042: no Alt-SysRq from the monitor
    reuse_images: bool = False  # boot on the NVMe images a previous guest left (after a power cut)


# --------------------------------------------------------------------------- helpers


_LIVE: "weakref.WeakSet[VM]" = weakref.WeakSet()


@atexit.register
def _kill_live_vms() -> None:
    for vm in list(_LIVE):
        try:
            vm.kill()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


# --------------------------------------------------------------------------- VM


class VM:
    """One guest. ``with VM(spec) as vm:`` boots it, waits for SSH and kills it after."""

    def __init__(self, spec: VMSpec) -> None:
        self.spec = spec
        self.workdir = Path(spec.workdir).absolute()
        self.console_path = self.workdir / "console.log"
        self.cmd_path = self.workdir / "vm.cmd"
        self.port: int | None = None
        self.boot_started: float | None = None
        self.boot_seconds: float | None = None
        self._proc: subprocess.Popen | None = None
        self._reaper: subprocess.Popen | None = None
        self._reaper_pipe: int | None = None
        self._reader: threading.Thread | None = None
        self._lease: PortLease | None = None
        self._wd_lock: IO[str] | None = None
        self._guest: Guest | None = None
        self._mon_dir: Path | None = None
        self._qemu_pid: int | None = None
        self.monitor_path: Path | None = None
        self.images: list[Path] = []
        self._nvme: dict[str, str] | None = None      # found whole once: fixed for this boot

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "VM":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def start(self) -> "VM":
        """Launch vng in the background; returns once qemu holds the SSH port."""
        if self._proc is not None:
            raise VMError("VM.start() called twice", fix="create a new VM object per boot")
        require_tools()
        kernel = Path(self.spec.kernel_image)
        if not kernel.is_file():
            raise VMError(f"kernel image {kernel} does not exist",
                          fix="build/install the kernel profile or pass an existing vmlinuz")
        self.workdir.mkdir(parents=True, exist_ok=True)
        check_safe_path(self.workdir, "VM workdir")
        self._lock_workdir()
        try:
            self._prepare_disks()
            self._prepare_monitor()
            ensure_vng_ssh_keys()
            self._launch_with_port_retry()
        except BaseException:
            self.kill()
            raise
        _LIVE.add(self)
        return self

    def _lock_workdir(self) -> None:
        fh = open(self.workdir / ".vm.lock", "w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise VMError(f"VM workdir {self.workdir} is used by another running VM",
                          fix="give each VM its own workdir (e.g. one per pytest worker)") from None
        self._wd_lock = fh

    def _prepare_disks(self) -> None:
        disks = self.spec.nvme.disks()
        if not disks:
            return
        check_disk_space(self.workdir, self.spec.nvme.total_mib)
        self.images = [self.workdir / f"nvme{d.index}.img" for d in disks]
        for d, img in zip(disks, self.images):
            if not self.spec.reuse_images:
                create_sparse(img, d.size_mib)
            elif not (img.is_file() and img.stat().st_size == d.size_mib << 20):
                raise VMError(f"cannot reuse {img}: missing or not {d.size_mib} MiB",
                              fix="a power-cut reboot needs the images the previous guest used")

    def _prepare_monitor(self) -> None:
        path = self.workdir / "monitor.sock"
        if len(str(path)) > 100:  # sun_path limit is 108 bytes
            self._mon_dir = Path(tempfile.mkdtemp(prefix="ozvm-mon-"))
            path = self._mon_dir / "m.sock"
        path.unlink(missing_ok=True)
        self.monitor_path = path

    def qemu_opts(self) -> list[str]:
        disks = self.spec.nvme.disks()
        cache = "none" if not self.images or supports_odirect(self.images[0]) else "writeback"
        opts = nvme_qemu_opts(disks, self.images, cache)
        if self.monitor_path is not None:
            opts += ["-monitor", f"unix:{self.monitor_path},server=on,wait=off"]
        return opts + list(self.spec.extra_qemu_opts) + env_qemu_opts(self.workdir)

    def vng_command(self, port: int) -> list[str]:
        s = self.spec
        cmd = [VNG, "--run", str(s.kernel_image), *s.accel.vng_args(),
               "--cpus", str(s.cpus), "--memory", s.memory, "--name", s.name,
               "--ssh", str(port), "--ssh-tcp", "--verbose"]
        if s.force_9p:
            cmd.append("--force-9p")
        if not s.microvm:
            cmd.append("--disable-microvm")
        for a in s.append:
            cmd += ["--append", a]
        cmd += s.extra_vng_args
        cmd += qemu_binary_args()
        # '=' matters: a value starting with '-' would otherwise be parsed as an option
        cmd.append("--qemu-opts=" + " ".join(self.qemu_opts()))
        return cmd + ["--", *KEEPALIVE_CMD]

    def _launch_with_port_retry(self, attempts: int = 5) -> None:
        for attempt in range(1, attempts + 1):
            self._lease = lease_port(self.spec.ssh_port)
            self.port = self._lease.port
            outcome = self._launch(self._lease.port)
            if outcome == "ok":
                return
            self._reap()
            self._lease.release()
            if outcome == "port-taken" and self.spec.ssh_port is None and attempt < attempts:
                log.info("port %d was taken before qemu bound it; retrying with another", self.port)
                continue
            raise VMError(f"qemu exited while starting (rc={self._proc.returncode if self._proc else '?'})",
                          fix="read the console tail below; check the kernel path and extra qemu/vng options",
                          detail=self.console_tail(40))
        raise VMError("could not start the guest: its SSH port kept being taken",
                      fix="check for leaked qemu processes (ss -ltnp)")

    def _launch(self, port: int) -> str:
        """Start vng; 'ok' once qemu listens on ``port``, else 'port-taken' / 'exited'."""
        cmd = self.vng_command(port)
        with open(self.cmd_path, "a") as f:
            f.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} accel={self.spec.accel.name} "
                    f"({self.spec.accel.reason})\n{shlex.join(cmd)}\n")
        launch_offset = self.console_size()
        with open(self.console_path, "ab") as f:
            f.write(f"\n===== ozvm: starting {self.spec.name} on port {port} =====\n".encode())
        rfd, wfd = os.pipe()
        self.boot_started = time.monotonic()
        # vng inherits the workdir lock: a leftover guest keeps its workdir busy
        keep = (self._wd_lock.fileno(),) if self._wd_lock else ()
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=wfd, stderr=wfd,
                                          cwd=self.workdir, start_new_session=True, pass_fds=keep)
        finally:
            os.close(wfd)
        self._spawn_reaper(self._proc.pid)
        self._reader = threading.Thread(target=self._copy_console, args=(rfd,),
                                        name=f"ozvm-console-{port}", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.spec.accel.deadline(20) + 20
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._reader.join(5)
                return "port-taken" if HOSTFWD_FAILED in self._console_since(launch_offset) else "exited"
            if group_listens(self._proc.pid, port):
                settle = time.monotonic() + 1.5   # qemu binds it before the machine: a bad device exits after
                while time.monotonic() < settle:
                    if self._proc.poll() is not None:
                        self._reader.join(5)
                        return "exited"
                    time.sleep(0.05)
                return "ok"
            time.sleep(0.1)
        raise VMError(f"qemu did not open the SSH forward on port {port} within the deadline",
                      fix="the host may be overloaded; see the console tail",
                      detail=self.console_tail(40))

    def _spawn_reaper(self, pgid: int) -> None:
        """A watchdog that kills the guest if this process dies without kill().

        It blocks reading a pipe only we hold the write end of; EOF means we are
        gone (even after SIGKILL), so it kills the qemu process group.
        """
        rfd, wfd = os.pipe()
        # dash's kill takes no "--"; "-PGID" addresses the process group
        script = (f"cat >/dev/null; kill -TERM -{pgid} 2>/dev/null || exit 0; "
                  f"sleep 5; kill -KILL -{pgid} 2>/dev/null; exit 0")
        try:
            self._reaper = subprocess.Popen(["/bin/sh", "-c", script], stdin=rfd,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True)
        finally:
            os.close(rfd)
        self._reaper_pipe = wfd

    def _stop_reaper(self) -> None:
        if self._reaper is not None:
            if self._reaper.poll() is None:
                self._reaper.kill()  # our own child, by pid
            self._reaper.wait(timeout=10)
            self._reaper = None
        if self._reaper_pipe is not None:
            os.close(self._reaper_pipe)
            self._reaper_pipe = None

    def _copy_console(self, rfd: int) -> None:
        with open(rfd, "rb", buffering=0) as src, open(self.console_path, "ab", buffering=0) as dst:
            while True:
                try:
                    data = src.read(65536)
                except OSError:
                    break
                if not data:
                    break
                dst.write(data)

    def wait_ready(self, timeout: float | None = None) -> Guest:
        """Wait until the guest answers over SSH and its setup script ran.

        VMError with the console tail if qemu exits or the kernel panics first,
        or if the deadline (default: 60 s scaled by the accelerator) passes.
        """
        if self._proc is None or self.port is None:
            raise VMError("VM.wait_ready() before start()", fix="call start() first")
        timeout = timeout if timeout is not None else self.spec.accel.deadline(60)
        watcher = ConsoleWatcher(self.console_path, offset=0)
        deadline = time.monotonic() + timeout
        last_err = "no attempt yet"
        guest = Guest(self.port, name=self.spec.name)
        while time.monotonic() < deadline:
            if not self.alive:
                guest.close()
                raise VMError(f"qemu exited (rc={self._proc.returncode}) before the guest's SSH answered",
                              fix="read the console tail below", detail=self.console_tail(60))
            trouble = console.boot_trouble(watcher.poll(), watcher.findings)
            if trouble:
                guest.close()
                raise (BootStorm if trouble.retry else VMError)(
                    trouble.what, fix=trouble.fix, detail=self.console_tail(80))
            if port_listening(self.port):
                try:
                    if not guest.connected:     # a loaded TCG host: sshd's banner is slow
                        guest.connect(timeout=min(self.spec.accel.deadline(10), 60))
                    r = guest.run(f"test -e {READY_FILE}", timeout=min(self.spec.accel.deadline(5), 60),
                                  check=False, log=False)
                    if r.rc == 0:
                        # sshd looks the login shell up once per connection: reconnect so
                        # commands get the /bin/sh the setup script just configured
                        guest.close()
                        guest.connect(timeout=min(self.spec.accel.deadline(10), 60))
                        guest.watch(self.health, self.heartbeat_silence)
                        self._guest = guest
                        self.boot_seconds = time.monotonic() - (self.boot_started or time.monotonic())
                        return guest
                    last_err = f"sshd answers but {READY_FILE} is missing (guest setup script not run yet)"
                except Exception as exc:  # noqa: BLE001 - sshd not up yet
                    last_err = str(exc).splitlines()[0]
                    guest.close()
            time.sleep(1.0)
        guest.close()
        raise BootTimeout(f"guest not ready within {timeout:.0f}s ({self.spec.accel.name}); last error: {last_err}",
                      fix="the host may be overloaded (raise OZFS_VMCI_DEADLINE_SCALE) or the guest hung; "
                          "see the console tail", detail=self.console_tail(60))

    def guest(self) -> Guest:
        """The guest's SSH handle (reconnects if the connection dropped)."""
        if self._guest is None:
            if self.port is None:
                raise VMError("VM.guest() before start()", fix="call start() and wait_ready() first")
            self._guest = Guest(self.port, name=self.spec.name)
            self._guest.watch(self.health, self.heartbeat_silence)
        return self._guest

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def heartbeat_silence(self) -> float:
        """How long the guest may not answer (20 s KVM, 120 s TCG: a loaded host slows sshd)."""
        return self.spec.accel.deadline(20)

    def health(self) -> str | None:
        """Host-side view: why the guest cannot be answering (None: qemu runs)."""
        if self._proc is None:
            return "the guest was never started"
        if self._proc.poll() is not None:
            return f"qemu exited (rc={self._proc.returncode})"
        state = self.qemu_state()
        if state in ("T", "t"):
            return "qemu is stopped (process state T): the guest is frozen"
        if state in ("Z", "X"):
            return "qemu is dead (zombie)"
        return None

    def qemu_state(self) -> str | None:
        """The qemu process's state letter (R, S, D, T, Z), None if not found."""
        pid = self._qemu_pid
        if pid is None and self._proc is not None:
            for p in group_pids(self._proc.pid):
                try:
                    if Path(f"/proc/{p}/comm").read_text().startswith("qemu-system"):
                        pid = self._qemu_pid = p
                        break
                except OSError:
                    continue
        if pid is None:
            return None
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def kill(self, grace: float = 5.0) -> None:
        """Stop qemu (its whole process group: vng, sh, qemu). Idempotent."""
        if self._guest is not None:
            self._guest.close()
        self._reap(grace)
        if self._lease is not None:
            self._lease.release()
        if self._wd_lock is not None:
            self._wd_lock.close()
            self._wd_lock = None
        if self._mon_dir is not None:
            shutil.rmtree(self._mon_dir, ignore_errors=True)
            self._mon_dir = None
        _LIVE.discard(self)

    def power_cut(self) -> None:
        """Stop the CPUs, kill qemu: guest memory is lost, the NVMe images stay."""
        with contextlib.suppress(Exception):      # the kill below is what counts
            self.monitor("stop", timeout=2.0)
        self.kill(grace=0.0)

    def _reap(self, grace: float = 5.0) -> None:
        self._stop_reaper()
        proc = self._proc
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                # the group may outlive vng for a moment (qemu is a grandchild)
                if not group_alive(proc.pid):
                    break
                time.sleep(0.2)
            except subprocess.TimeoutExpired:
                continue
        if proc.poll() is None:
            log.warning("vng pid %d survived SIGKILL", proc.pid)
        if self._reader is not None:
            self._reader.join(5)

    # ------------------------------------------------------------------ console

    def console_tail(self, n: int = 80) -> str:
        return console.tail(self.console_path, n)

    def _console_since(self, offset: int) -> str:
        return console.since(self.console_path, offset)

    def console_size(self) -> int:
        return console.size(self.console_path)

    # ------------------------------------------------------------------ monitor

    def monitor(self, command: str, timeout: float = 5.0) -> str:
        """Run a HMP command on qemu's monitor; returns its output."""
        if self.monitor_path is None or not self.alive:
            raise VMError("qemu monitor not available (VM not running)", fix="start the VM first")
        return Monitor(self.monitor_path).command(command, timeout)

    def sysrq(self, key: str, timeout: float = 5.0) -> None:
        """Press Alt-SysRq-``key`` on the guest keyboard (works even if SSH is dead)."""
        self.monitor(f"sendkey alt-sysrq-{key}", timeout=timeout)

    # ------------------------------------------------------------------ guest facts

    def nvme_devices(self, timeout: float | None = None) -> dict[str, str]:
        """{serial: '/dev/nvmeXn1'} as the guest sees it (waits for all spec'd disks).

        Asked once per boot: nothing hot-plugs a disk, and a VM object is one boot,
        so the map found complete is kept (it cost a round trip of 1.5-2 s under TCG
        at every case that reused its pool, for the reproducer's setup line)."""
        if self._nvme is not None:
            return dict(self._nvme)
        want = {d.serial for d in self.spec.nvme.disks()}
        timeout = timeout if timeout is not None else self.spec.accel.deadline(20)
        deadline = time.monotonic() + timeout
        found: dict[str, str] = {}
        while True:
            r = self.guest().run(NVME_LISTING, timeout=max(5.0, deadline - time.monotonic()))
            found = parse_nvme_listing(r.stdout)
            if want <= found.keys() or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        missing = want - found.keys()
        if missing:
            raise VMError(f"NVMe disks {sorted(missing)} did not show up in the guest (found {found})",
                          fix="check the console for nvme errors and that the kernel has CONFIG_BLK_DEV_NVME",
                          detail=self.console_tail(30))
        self._nvme = dict(found)
        return found


