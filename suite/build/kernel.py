"""Kernel profiles (``vmimages/*.toml``): the kernel a guest boots and the
headers OpenZFS is built against.

``resolve_kernel("debian-6.1")`` finds the newest installed release matching
the profile; if none is installed it installs the packages with apt (when
running as root with apt available and ``OZFS_VMCI_NO_INSTALL`` unset) or
raises KernelError with the exact command that would.

A profile with a ``[build]`` table (``debian-6.1-debug``) builds its kernel
instead, from a Debian source package (``suite.build.kbuild``), once per key;
its ``[zfs]`` table says how OpenZFS must be built to be tested on it.
"""
from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from suite import paths
from suite.build import kbuild
from suite.locks import file_lock
from suite.errors import KernelError

DEFAULT_PROFILE = "debian-6.1"
APT_TIMEOUT = 1800      # seconds for one apt-get call


@dataclass(frozen=True)
class Profile:
    name: str
    description: str = ""
    release_glob: str = ""
    apt_release: str = ""
    apt_source: str = ""
    metapackages: tuple[str, ...] = ()
    vmlinuz: str = ""
    headers: str = ""
    modules: str = ""
    build: kbuild.BuildSpec | None = None      # [build]: the kernel is built, not installed
    zfs_license: str = ""                       # [zfs] license: OpenZFS's META License for it
    zfs_gcov: bool = False                      # [zfs] gcov: OpenZFS's modules built with gcov
    append: tuple[str, ...] = ()                # [vm] append: its guests' kernel command line
    slowdown: float = 1.0                       # [vm] slowdown: its guests' deadlines stretched
    zfs_make: tuple[str, ...] = ()              # [zfs] make: VAR=VALUE on OpenZFS's make lines


@dataclass(frozen=True)
class Kernel:
    """A resolved kernel: everything the build and the VM need."""
    profile: str
    release: str
    vmlinuz: Path
    headers: Path          # the kernel build dir (obj), what --with-linux-obj takes
    source: Path           # the kernel source headers, what --with-linux takes
    modules: Path          # /lib/modules/<release>
    zfs_license: str = ""  # OpenZFS built with this META License (a debug kernel's lockdep)
    zfs_gcov: bool = False  # OpenZFS's modules built with gcov (suite/build/gcov.py)
    zfs_make: tuple[str, ...] = ()  # VAR=VALUE on OpenZFS's make lines (a kernel's needs)

    def identity(self) -> dict[str, str]:
        """What makes a build for this kernel different from another's."""
        ident = {"release": self.release}
        if self.zfs_license:
            ident["zfs_license"] = self.zfs_license
        if self.zfs_gcov:
            ident["zfs_gcov"] = "GCOV_PROFILE=y"
        if self.zfs_make:
            ident["zfs_make"] = " ".join(self.zfs_make)
        for f in ("Module.symvers", ".config"):
            p = self.headers / f
            if p.exists():
                import hashlib
                ident[f] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        return ident


def load_profile(name: str) -> Profile:
    path = paths.vmimages_dir() / f"{name}.toml"
    if not path.exists():
        known = sorted(p.stem for p in paths.vmimages_dir().glob("*.toml"))
        raise KernelError(f"unknown kernel profile '{name}'",
                          fix=f"use one of {', '.join(known)}, or --kernel /path/to/vmlinuz")
    data = tomllib.loads(path.read_text())
    zfs = data.get("zfs", {})
    if zfs.get("license") and not str(zfs.get("reason", "")).strip():
        raise KernelError(f"kernel profile {name}: [zfs] license needs a reason",
                          fix=f"say in {path} why OpenZFS is relabelled for this kernel")
    if zfs.get("gcov") and not str(zfs.get("gcov_reason", "")).strip():
        raise KernelError(f"kernel profile {name}: [zfs] gcov needs a gcov_reason",
                          fix=f"say in {path} why OpenZFS is built with gcov for this kernel")
    if zfs.get("make") and not str(zfs.get("make_reason", "")).strip():
        raise KernelError(f"kernel profile {name}: [zfs] make needs a make_reason",
                          fix=f"say in {path} why OpenZFS's make lines need it for this kernel")
    bad = [a for a in zfs.get("make", ()) if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", str(a))]
    if bad:
        raise KernelError(f"kernel profile {name}: [zfs] make takes VAR=VALUE, not {bad}",
                          fix='e.g. make = ["KCFLAGS=-DNAME=1"]')
    vm = data.get("vm", {})
    if vm.get("append") and not str(vm.get("reason", "")).strip():
        raise KernelError(f"kernel profile {name}: [vm] append needs a reason",
                          fix=f"say in {path} why every guest of this kernel boots with it")
    slow = vm.get("slowdown", 1.0)
    if not isinstance(slow, (int, float)) or slow < 1 or \
            (slow != 1 and not str(vm.get("slowdown_reason", "")).strip()):
        raise KernelError(f"kernel profile {name}: [vm] slowdown must be a number >= 1 with "
                          f"a slowdown_reason, not {slow!r}",
                          fix=f"say in {path} how much slower its guests are and why")
    build = kbuild.BuildSpec.from_toml(data.get("name", name), data["build"]) \
        if "build" in data else None
    return Profile(name=data.get("name", name), description=data.get("description", ""),
                   release_glob=data.get("release_glob", ""),
                   apt_release=data.get("apt_release", ""),
                   apt_source=data.get("apt_source", ""),
                   metapackages=tuple(data.get("metapackages", ())),
                   vmlinuz=data.get("vmlinuz", ""), headers=data.get("headers", ""),
                   modules=data.get("modules", ""), build=build,
                   zfs_license=zfs.get("license", ""), zfs_gcov=bool(zfs.get("gcov", False)),
                   append=tuple(str(a) for a in vm.get("append", ())), slowdown=float(slow),
                   zfs_make=tuple(str(a) for a in zfs.get("make", ())))


def slowdown(profile: str) -> float:
    """How much slower than a distribution kernel its guests run (``[vm] slowdown``:
    a debug kernel's instrumentation); 1 for a kernel given as a path."""
    if not (paths.vmimages_dir() / f"{profile}.toml").exists():
        return 1.0
    return load_profile(profile).slowdown


def boot_append(profile: str) -> tuple[str, ...]:
    """What every guest of a profile adds to its kernel command line (``[vm] append``);
    nothing for a kernel given as a path."""
    if not (paths.vmimages_dir() / f"{profile}.toml").exists():
        return ()
    return load_profile(profile).append


def _version_key(release: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\-+]", release)]


def installed_releases(glob: str, boot: Path = Path("/boot")) -> list[str]:
    rels = [p.name.removeprefix("vmlinuz-") for p in boot.glob("vmlinuz-*")]
    return sorted((r for r in rels if fnmatch.fnmatch(r, glob)), key=_version_key)


def kernel_from_release(profile: str, release: str, vmlinuz: Path | None = None,
                        headers: Path | None = None) -> Kernel:
    vmlinuz = vmlinuz or Path(f"/boot/vmlinuz-{release}")
    modules = Path(f"/lib/modules/{release}")
    build = headers or modules / "build"
    if not vmlinuz.exists():
        raise KernelError(f"kernel image {vmlinuz} does not exist",
                          fix="install the kernel or point --kernel at a vmlinuz")
    if not (build / "Makefile").exists():
        raise KernelError(
            f"no headers for kernel {release} ({build} has no Makefile)",
            fix=f"apt-get install linux-headers-{release}  (or pass --kernel-headers DIR)")
    src = modules / "source"
    source = src.resolve() if src.exists() else _debian_common(build.resolve())
    return Kernel(profile, release, vmlinuz, build.resolve(), source, modules)


def _debian_common(build: Path) -> Path:
    """Debian splits headers into -<arch> (obj) and -common (source)."""
    common = Path(re.sub(r"-[a-z0-9]+$", "-common", str(build)))
    return common if common.exists() else build


def release_of_image(vmlinuz: Path) -> str:
    """Kernel release string from a bzImage header (like `file` prints)."""
    data = vmlinuz.read_bytes()[:0x10000]
    off = int.from_bytes(data[0x20E:0x210], "little") + 0x200
    m = re.match(rb"([^\s\x00]+)", data[off:off + 128])
    if not m:
        raise KernelError(f"cannot read the release of {vmlinuz}",
                          fix="pass a bzImage (arch/x86/boot/bzImage or /boot/vmlinuz-*)")
    return m.group(1).decode()


def apt_packages(profile: Profile) -> list[str]:
    """Concrete packages (linux-image-<rel>, linux-headers-<rel>) for a profile."""
    out = []
    for meta in profile.metapackages:
        target = f"{meta}/{profile.apt_release}" if profile.apt_release else meta
        p = subprocess.run(["apt-cache", "show", "--no-all-versions", target],
                           capture_output=True, text=True, timeout=APT_TIMEOUT)
        if p.returncode != 0:
            p = subprocess.run(["apt-cache", "-t", profile.apt_release, "show", meta],
                               capture_output=True, text=True, timeout=APT_TIMEOUT)
        deps = re.search(r"^Depends: (.*)$", p.stdout, re.M)
        concrete = [d.strip().split()[0] for d in deps.group(1).split(",")] if deps else []
        concrete = [d for d in concrete if d.startswith(("linux-image-", "linux-headers-"))]
        if not concrete:
            raise KernelError(f"apt does not know {target}",
                              fix=_source_fix(profile), detail=p.stderr.strip())
        out.append(concrete[0])
    return out


def _source_fix(profile: Profile) -> str:
    if profile.apt_source:
        return (f"echo '{profile.apt_source}' > /etc/apt/sources.list.d/"
                f"{profile.apt_release}.list && apt-get update")
    return "apt-get update"


def install(profile: Profile) -> None:
    """Install a profile's kernel and headers with apt (root only); for a profile that
    builds its kernel, its source package and build tools."""
    if profile.build is not None:
        kbuild.install(profile.build)
        return
    can = os.geteuid() == 0 and shutil.which("apt-get") and not os.environ.get(
        "OZFS_VMCI_NO_INSTALL")
    if profile.apt_source:
        listed = subprocess.run(["grep", "-rqs", profile.apt_release, "/etc/apt/sources.list",
                                 "/etc/apt/sources.list.d/"]).returncode == 0
        if not listed:
            if not can:
                raise KernelError(f"apt source for {profile.apt_release} missing",
                                  fix=_source_fix(profile))
            Path(f"/etc/apt/sources.list.d/{profile.apt_release}.list").write_text(
                profile.apt_source + "\n")
            subprocess.run(["apt-get", "update", "-q"], check=False, capture_output=True,
                           timeout=APT_TIMEOUT)
    try:
        pkgs = apt_packages(profile)
    except KernelError:
        if not can:
            raise
        subprocess.run(["apt-get", "update", "-q"], check=False, capture_output=True,
                           timeout=APT_TIMEOUT)
        pkgs = apt_packages(profile)
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *pkgs]
    if not can:
        raise KernelError(f"kernel profile {profile.name} is not installed",
                          fix=" ".join(cmd))
    print(f"installing kernel profile {profile.name}: {' '.join(pkgs)}", flush=True)
    p = subprocess.run(cmd, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
                       capture_output=True, text=True, timeout=APT_TIMEOUT)
    if p.returncode != 0:
        raise KernelError(f"apt-get could not install {' '.join(pkgs)}",
                          fix=" ".join(cmd), detail=p.stdout[-2000:] + p.stderr[-2000:])


def resolve_kernel(spec: str | None = None, headers: str | None = None,
                   allow_install: bool = True) -> Kernel:
    """``--kernel``: a profile name, or a path to a vmlinuz."""
    spec = spec or os.environ.get("OZFS_VMCI_KERNEL") or DEFAULT_PROFILE
    if "/" in spec:
        image = Path(spec).expanduser().resolve()
        if not image.exists():
            raise KernelError(f"kernel image {image} does not exist",
                              fix="pass a vmlinuz/bzImage path or a profile name")
        release = release_of_image(image)
        hdr = Path(headers).resolve() if headers else None
        return kernel_from_release(str(image), release, image, hdr)
    profile = load_profile(spec)
    if profile.build is not None:
        return built_kernel(profile, allow_install)
    if profile.vmlinuz:
        image = Path(profile.vmlinuz)
        return kernel_from_release(profile.name, release_of_image(image), image,
                                   Path(profile.headers) if profile.headers else None)
    releases = installed_releases(profile.release_glob)
    usable = [r for r in releases if (Path(f"/lib/modules/{r}/build/Makefile")).exists()]
    if not usable and allow_install:
        with file_lock(paths.cache_root() / "kernel-install.lock", f"installing {profile.name}"):
            releases = installed_releases(profile.release_glob)     # another process did it?
            if not any(Path(f"/lib/modules/{r}/build/Makefile").exists() for r in releases):
                install(profile)
        releases = installed_releases(profile.release_glob)
        usable = [r for r in releases if (Path(f"/lib/modules/{r}/build/Makefile")).exists()]
    if not usable:
        if releases:
            raise KernelError(f"kernel {releases[-1]} ({profile.name}) has no headers",
                              fix=f"apt-get install linux-headers-{releases[-1]}")
        raise KernelError(f"kernel profile {profile.name} is not installed "
                          f"(no /boot/vmlinuz-{profile.release_glob})",
                          fix="run `python -m suite doctor --install` or install the "
                              "profile's packages")
    return kernel_from_release(profile.name, usable[-1],
                               headers=Path(headers).resolve() if headers else None)


def built_kernel(profile: Profile, allow_install: bool = True) -> Kernel:
    """A profile whose kernel is built from source: the tree is both OpenZFS's
    ``--with-linux`` and ``--with-linux-obj``; the image sits beside the modules
    ``modules_install`` wrote, so virtme-ng links those into the guest."""
    assert profile.build is not None
    built, _ = kbuild.ensure(profile.build, allow_install=allow_install)
    tree = Path(built.tree)
    return Kernel(profile.name, built.release, Path(built.vmlinuz), tree, tree,
                  Path(built.modules), zfs_license=profile.zfs_license,
                  zfs_gcov=profile.zfs_gcov, zfs_make=profile.zfs_make)
