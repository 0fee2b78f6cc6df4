"""``python -m suite doctor``: check the machine, say exactly what to fix."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from suite import paths

APT_LIST = paths.PROJECT_ROOT / "ci" / "apt-packages.txt"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def apt_packages() -> list[str]:
    lines = APT_LIST.read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def missing_apt_packages() -> list[str]:
    pkgs = apt_packages()
    p = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *pkgs],
                       capture_output=True, text=True)
    installed = {ln.split()[0] for ln in p.stdout.splitlines() if "install ok installed" in ln}
    return [pkg for pkg in pkgs if pkg not in installed]


def _which(name: str, fix: str, required: bool = True) -> Check:
    path = shutil.which(name)
    return Check(name, bool(path), path or "not found", fix, required)


def _source_check() -> Check:
    from suite.source.objects import DEFAULT_URL
    try:
        p = subprocess.run(["git", "ls-remote", "--heads", DEFAULT_URL, "master"],
                           capture_output=True, text=True, timeout=20,
                           env=dict(os.environ, GIT_TERMINAL_PROMPT="0"))
        ok = p.returncode == 0 and bool(p.stdout.strip())
        detail = p.stdout.split()[0][:11] if ok else (p.stderr.strip().splitlines() or ["?"])[-1]
    except subprocess.TimeoutExpired:
        ok, detail = False, "timed out after 20 s"
    return Check("OpenZFS source", ok, f"{DEFAULT_URL}: {detail}",
                 f"map it to a mirror: git config --global url.<mirror>.insteadOf {DEFAULT_URL}"
                 " (or pass --zfs-source DIR)", required=False)


def _kernel_checks() -> list[Check]:
    from suite.build.kernel import resolve_kernel
    from suite.errors import KernelError
    out = []
    for prof in sorted(paths.vmimages_dir().glob("*.toml")):
        try:
            k = resolve_kernel(prof.stem, allow_install=False)
            out.append(Check(f"kernel {prof.stem}", True, f"{k.release} headers {k.headers}"))
        except KernelError as e:
            out.append(Check(f"kernel {prof.stem}", False, e.what, e.fix,
                             required=prof.stem == "debian-6.1"))
    return out


def _kvm_check(accel: str) -> Check:
    try:
        from suite.build.kernel import resolve_kernel
        from suite.vm.accel import choose
        a = choose(accel, resolve_kernel(None, allow_install=False).vmlinuz)
        return Check("accelerator", True, f"{a.name} (deadlines x{a.scale:g}, holds x{a.hold_scale:g}): "
                                             f"{a.reason}")
    except Exception as e:  # noqa: BLE001 - doctor reports, never crashes
        return Check("accelerator", False, str(e).splitlines()[0], "see the error", False)


QEMU_NVME_STALLS = ("7.",)   # qemu lines whose emulated NVMe was seen losing commands


def qemu_check(version: str) -> Check:
    """Which qemu the guests get: 7.x lost queued NVMe commands under TCG here (a pool
    suspended mid-case; patches/notes/async-dio-write-path.md, B), 10.0 did not."""
    ver = version.split("version", 1)[-1].strip().split()[0] if "version" in version else ""
    stalls = ver.startswith(QEMU_NVME_STALLS)
    return Check("qemu", bool(ver) and not stalls, f"{ver or 'unknown'}"
                 + (": its NVMe lost commands under TCG here (cases fail by "
                    "kernel:device_timeout)" if stalls else ""),
                 "bash ci/setup.sh (bookworm-backports' qemu 10.0), or OZFS_VMCI_QEMU=<a newer "
                 "qemu-system-x86_64>", required=False)


def collect(accel: str = "auto") -> list[Check]:
    apt_missing = missing_apt_packages()
    checks = [
        Check("apt packages", not apt_missing, "all present" if not apt_missing else
              "missing: " + " ".join(apt_missing),
              "apt-get install -y " + " ".join(apt_missing)),
        _which("qemu-system-x86_64", "apt-get install -y qemu-system-x86"),
        _which("vng", "pip install virtme-ng"),
        _which("ccache", "apt-get install -y ccache", required=False),
        Check("/dev/kvm", os.path.exists("/dev/kvm"), "present" if os.path.exists("/dev/kvm")
              else "absent: guests run under TCG (about 6x slower)", required=False),
        *_kernel_checks(),
        _source_check(),
    ]
    free = shutil.disk_usage(paths.cache_root()).free / 2**30
    checks.append(Check("disk", free > 10, f"{free:.0f} GiB free in {paths.cache_root()}",
                        "a build needs ~3 GiB, NVMe images up to a few GiB per guest; "
                        "set OZFS_VMCI_CACHE to a bigger disk"))
    from suite.vm.accel import guest_qemu, qemu_version
    if shutil.which(guest_qemu()):
        checks.append(qemu_check(qemu_version()))
        if shutil.which("vng"):
            checks.append(_kvm_check(accel))
    return checks


def install_missing() -> None:
    """Install missing apt packages and every kernel profile that is not installed."""
    from suite.build.kernel import install, load_profile, resolve_kernel
    from suite.errors import KernelError
    missing = missing_apt_packages()
    if missing:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], check=True, env=env)
    for prof in sorted(paths.vmimages_dir().glob("*.toml")):
        try:
            resolve_kernel(prof.stem, allow_install=False)
        except KernelError:
            try:
                install(load_profile(prof.stem))
            except KernelError as e:
                print(f"warning: kernel profile {prof.stem}: {e}")


def run_doctor(install: bool = False, accel: str = "auto") -> int:
    if install:
        install_missing()
    bad = 0
    for c in collect(accel):
        mark = "ok " if c.ok else ("FIX" if c.required else "warn")
        print(f"[{mark:4s}] {c.name:22s} {c.detail}")
        if not c.ok and c.fix:
            print(f"{'':30s}-> {c.fix}")
        bad += (not c.ok) and c.required
    print("machine ready" if not bad else f"{bad} thing(s) to fix")
    return 1 if bad else 0
