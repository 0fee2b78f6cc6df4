"""Pick the accelerator a guest runs under (KVM or TCG) and scale deadlines to it.

``/dev/kvm`` existing is no proof that KVM works: in a nested guest it can open
fine and then qemu either aborts ("failed to set MSR ...") or the guest hangs
right after the BIOS ("Probing EDD"). So ``choose("auto", kernel)`` boots the
kernel for a few seconds under ``-accel kvm`` and only trusts KVM if the
console shows ``Linux version``. The verdict is cached per (kernel, qemu
version, host kernel) so each pytest worker does not pay the probe.

Every deadline in the suite goes through ``Accel.deadline(seconds)``: TCG is
about 6x slower than KVM, and ``OZFS_VMCI_DEADLINE_SCALE`` overrides the factor.

A hold is not a deadline. A deadline is slack: generous costs nothing while the
guest is well. A hold (how long ``zinject -E`` keeps an I/O in flight so a
barrier, a teardown or a second request can race it) is waited out in full by
every case that arms one, and it only has to outlast the few guest steps of the
race. ``Accel.hold(seconds)`` stretches it by its own, smaller factor (TCG x2;
``OZFS_VMCI_HOLD_SCALE`` overrides). Every case that holds I/O proves the race
ran inside the hold (the I/O still outstanding when its racer began) and says
*not armed*, never passes, when it did not; the fix it names is a larger
``OZFS_VMCI_HOLD_SCALE``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from suite.build.kernel import slowdown
from suite.errors import VMError
from suite.locks import file_lock
from suite.paths import cache_root

log = logging.getLogger(__name__)

AccelName = Literal["kvm", "tcg"]

DEFAULT_SCALE: dict[str, float] = {"kvm": 1.0, "tcg": 6.0}
SCALE_ENV = "OZFS_VMCI_DEADLINE_SCALE"
# Measured here (2 cores, two 1-vCPU TCG guests): a guest command costs 0.3 s and
# every held-I/O proof of the quick tier passed at x2 (README, "Holds").
DEFAULT_HOLD_SCALE: dict[str, float] = {"kvm": 1.0, "tcg": 2.0}
HOLD_SCALE_ENV = "OZFS_VMCI_HOLD_SCALE"
CACHE_TTL_ENV = "OZFS_VMCI_ACCEL_TTL"  # seconds; default below
DEFAULT_CACHE_TTL = 4 * 3600.0
PROBE_DEADLINE = 12.0  # seconds for "Linux version" to show up under KVM
PROBE_MARKER = b"Linux version"
QEMU = "qemu-system-x86_64"
QEMU_BIN_ENV = "OZFS_VMCI_QEMU"      # another qemu-system-x86_64 for the guests (vng --qemu)


def guest_qemu() -> str:
    """The qemu the guests run on (and the KVM probe tries): $OZFS_VMCI_QEMU or PATH's."""
    return os.environ.get(QEMU_BIN_ENV) or QEMU


class AccelWarning(UserWarning):
    """KVM was asked for implicitly ('auto') but cannot be used: running under TCG."""


@dataclass(frozen=True)
class Accel:
    name: AccelName
    scale: float
    reason: str
    hold_scale: float = 1.0

    def slowed(self, factor: float, why: str) -> "Accel":
        """Deadlines and holds stretched ``factor`` more for a slower kernel; neither
        when the user set its variable (their factor is the whole one)."""
        if factor == 1:
            return self
        scale = self.scale if os.environ.get(SCALE_ENV) else self.scale * factor
        hold = self.hold_scale if os.environ.get(HOLD_SCALE_ENV) else self.hold_scale * factor
        if (scale, hold) == (self.scale, self.hold_scale):
            return self
        return Accel(self.name, scale, f"{self.reason}; x{factor:g} for {why}", hold)

    def deadline(self, seconds: float) -> float:
        """``seconds`` measured under KVM, stretched for this accelerator."""
        return seconds * self.scale

    def hold(self, seconds: float) -> float:
        """How long to keep an I/O in flight for a race that takes ``seconds`` of
        hold under KVM: stretched by the hold factor, not the deadline's."""
        return seconds * self.hold_scale

    def vng_args(self) -> list[str]:
        """Flags that make vng use this accelerator."""
        return ["--disable-kvm"] if self.name == "tcg" else []


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str
    seconds: float


# --------------------------------------------------------------------------- scale


def scale_for(name: AccelName) -> float:
    """Deadline factor for ``name``; ``OZFS_VMCI_DEADLINE_SCALE`` wins if set."""
    return _factor(SCALE_ENV, DEFAULT_SCALE[name], "a factor such as 1 (KVM) or 6 (TCG)")


def _factor(var: str, default: float, example: str) -> float:
    """The positive number in ``var``, else ``default``."""
    env = os.environ.get(var, "").strip()
    if not env:
        return default
    try:
        value = float(env)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise VMError(f"{var}={env!r} is not a positive number",
                      fix=f"set {var} to {example}, or unset it")
    return value


def hold_scale_for(name: AccelName) -> float:
    """Hold factor for ``name``; ``OZFS_VMCI_HOLD_SCALE`` wins if set."""
    return _factor(HOLD_SCALE_ENV, DEFAULT_HOLD_SCALE[name],
                   "a factor such as 1 (KVM) or 2 (TCG; raise it on a slower host)")


def make(name: AccelName, reason: str) -> Accel:
    return Accel(name=name, scale=scale_for(name), reason=reason,
                 hold_scale=hold_scale_for(name))


# --------------------------------------------------------------------------- cache


def host_fingerprint(kernel: Path) -> dict[str, str]:
    """What the KVM verdict depends on: the guest kernel, qemu, the host kernel."""
    st = kernel.stat()
    return {
        "kernel": str(kernel.resolve()),
        "kernel_stat": f"{st.st_size}:{int(st.st_mtime)}",
        "qemu": qemu_version(),
        "host": platform.release(),
    }


def cache_key(fingerprint: dict[str, str]) -> str:
    blob = json.dumps(fingerprint, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def cache_dir() -> Path:
    d = cache_root() / "accel"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cache_ttl() -> float:
    try:
        return float(os.environ.get(CACHE_TTL_ENV, DEFAULT_CACHE_TTL))
    except ValueError:
        return DEFAULT_CACHE_TTL


def read_cached(path: Path, ttl: float, now: float | None = None) -> ProbeResult | None:
    """The cached verdict in ``path`` if it is younger than ``ttl`` seconds."""
    try:
        data = json.loads(path.read_text())
        if (now if now is not None else time.time()) - float(data["time"]) > ttl:
            return None
        return ProbeResult(ok=bool(data["ok"]), reason=str(data["reason"]), seconds=float(data["seconds"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_cached(path: Path, result: ProbeResult, fingerprint: dict[str, str]) -> None:
    data = {"ok": result.ok, "reason": result.reason, "seconds": result.seconds,
            "time": time.time(), "fingerprint": fingerprint}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def cached_probe(kernel: Path, deadline: float = PROBE_DEADLINE) -> tuple[ProbeResult, bool]:
    """Probe KVM once per fingerprint and TTL; returns (result, came_from_cache).

    A lock file serialises workers so that only the first one boots the probe;
    the others wait and read its verdict.
    """
    fp = host_fingerprint(kernel)
    path = cache_dir() / f"kvm-{cache_key(fp)}.json"
    with file_lock(path.with_suffix(".lock"), "the KVM probe", timeout=deadline * 4 + 60):
        hit = read_cached(path, cache_ttl())
        if hit is not None:
            return hit, True
        result = probe_kvm(kernel, deadline)
        write_cached(path, result, fp)
        return result, False


# --------------------------------------------------------------------------- probe


def qemu_version(qemu: str | None = None) -> str:
    qemu = qemu or guest_qemu()
    try:
        out = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=20)
        return out.stdout.splitlines()[0].strip() if out.stdout else f"rc={out.returncode}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc.__class__.__name__})"


def kvm_device_problem() -> str | None:
    """Why /dev/kvm cannot be used, or None if it opens read-write."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return "/dev/kvm does not exist (no hardware virtualisation exposed to this host)"
    except PermissionError:
        return "/dev/kvm exists but is not accessible (add the user to group 'kvm')"
    except OSError as exc:
        return f"/dev/kvm cannot be opened: {exc}"
    os.close(fd)
    return None


def probe_command(kernel: Path, console: Path) -> list[str]:
    """Boot ``kernel`` with no root fs on the machine vng uses with KVM (--disable-microvm)."""
    return [
        guest_qemu(), "-machine", "accel=kvm", "-cpu", "host,topoext=on", "-m", "256M",
        "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-serial", f"file:{console}", "-kernel", str(kernel),
        "-append", "console=ttyS0 earlyprintk=serial,ttyS0,115200 panic=-1",
    ]


def probe_kvm(kernel: Path, deadline: float = PROBE_DEADLINE) -> ProbeResult:
    """Boot ``kernel`` under KVM until the console says ``Linux version``, or give up."""
    started = time.monotonic()
    problem = kvm_device_problem()
    if problem:
        return ProbeResult(False, problem, 0.0)
    if shutil.which(guest_qemu()) is None:
        return ProbeResult(False, f"{guest_qemu()} not found", 0.0)
    with tempfile.TemporaryDirectory(prefix="ozvm-kvmprobe-") as tmp:
        console = Path(tmp) / "console.log"
        console.touch()
        errlog = Path(tmp) / "qemu.err"
        with open(errlog, "wb") as err:
            proc = subprocess.Popen(probe_command(kernel, console), stdin=subprocess.DEVNULL,
                                    stdout=err, stderr=err, start_new_session=True)
        try:
            return _watch_probe(proc, console, errlog, started, deadline)
        finally:
            _kill_group(proc)


def _watch_probe(proc: subprocess.Popen, console: Path, errlog: Path,
                 started: float, deadline: float) -> ProbeResult:
    while True:
        elapsed = time.monotonic() - started
        if PROBE_MARKER in console.read_bytes():
            return ProbeResult(True, f"KVM boot probe printed 'Linux version' in {elapsed:.1f}s", elapsed)
        rc = proc.poll()
        if rc is not None:
            last = _last_line(errlog.read_text(errors="replace")) or _last_line(console.read_text(errors="replace"))
            return ProbeResult(False, f"qemu -accel kvm exited rc={rc} before the kernel ran: {last}", elapsed)
        if elapsed > deadline:
            last = _last_line(console.read_text(errors="replace")) or "(console empty)"
            return ProbeResult(False, f"KVM guest printed no 'Linux version' within {deadline:.0f}s "
                                      f"(last console line: {last!r}); nested KVM likely broken", elapsed)
        time.sleep(0.1)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("KVM probe qemu pid %d did not exit after SIGKILL", proc.pid)


# --------------------------------------------------------------------------- choose

_warned: set[str] = set()


def _warn_once(reason: str) -> None:
    if reason in _warned:
        return
    _warned.add(reason)
    msg = (f"KVM unusable, running guests under TCG (deadlines x{scale_for('tcg'):g}, "
           f"holds x{hold_scale_for('tcg'):g}): {reason}")
    log.info(msg)
    warnings.warn(msg, AccelWarning, stacklevel=3)


def choose(requested: str = "auto", kernel: Path | str = "") -> Accel:
    """Accelerator for guests booting ``kernel``.

    ``tcg``: always TCG. ``kvm``: KVM or a VMError saying why not. ``auto``: KVM
    if the (cached) boot probe succeeds, else TCG with one warning naming why.
    """
    if requested == "tcg":
        return make("tcg", "requested with --accel tcg")
    if requested not in ("auto", "kvm"):
        raise VMError(f"unknown accelerator {requested!r}", fix="use one of: auto, kvm, tcg")
    kernel = Path(kernel)
    if not kernel.is_file():
        raise VMError(f"kernel image {kernel} does not exist",
                      fix="pass the vmlinuz/bzImage of the kernel profile you want to boot")
    problem = kvm_device_problem()
    result = ProbeResult(False, problem, 0.0) if problem else cached_probe(kernel)[0]
    if result.ok:
        return make("kvm", result.reason)
    if requested == "kvm":
        raise VMError(f"KVM was requested but does not work here: {result.reason}",
                      fix="run with --accel tcg (or auto); on a VM host enable nested virtualisation")
    _warn_once(result.reason)
    return make("tcg", f"KVM unusable: {result.reason}")


def for_build(requested: str, kernel: dict) -> Accel:
    """:func:`choose` for a build record's kernel (``BuildRecord.kernel``), its
    profile's ``[vm] slowdown`` applied: what every caller that boots a build's
    guests uses (the pytest fixture, ``suite repro``, ``suite shell``)."""
    profile = kernel.get("profile", "")
    return choose(requested, Path(kernel["vmlinuz"])).slowed(
        slowdown(profile), f"kernel profile {profile}'s instrumentation")
