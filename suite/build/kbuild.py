"""A kernel built from a Debian source package, for a profile with a ``[build]`` table.

``ensure(spec)`` returns the kernel a profile describes, building it once: the
source package's tarball (``linux-source-6.1``: ``/usr/src/linux-source-6.1.tar.xz``)
is unpacked into ``<cache>/kernels/<key>/linux``, configured with virtme-ng's
minimal config (``virtme-configkernel --defconfig``, what ``vng --kconfig`` runs)
plus the profile's fragments, checked (every item a fragment asks for must be in
the final ``.config``: Kconfig drops what a dependency forbids without a word),
then ``make bzImage modules`` + ``modules_prepare`` (what OpenZFS's configure
needs of ``--with-linux``), ``modules_install`` into ``<key>/lib/modules/<release>``
and the image linked to ``<key>/boot/vmlinuz-<release>``. virtme-ng finds a
kernel's modules by walking up from the image to a ``lib/modules``: given that
image it links ``<key>/lib/modules/<release>`` into the guest as its
``/lib/modules`` (given ``arch/x86/boot/bzImage`` inside the tree it would write
``.virtme_mods`` into the cached tree at every boot, in a race between workers).

The key hashes the source package and its installed version, the fragments'
items, virtme-ng's base config (its ``--dry-run`` text), the compiler and this
recipe's version. ``record.json`` is written last: a key folder without it is a
half build, wiped before the next attempt (its log kept under ``kernels/failed/``).
One lock per key: xdist workers wait for the one that builds.

Nothing here knows the suite's ``Profile`` or ``Kernel``: ``suite.build.kernel``
turns a ``Built`` into a ``Kernel``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from suite import paths
from suite.errors import BuildError, KernelError
from suite.locks import file_lock
from suite.build.steps import ccache_stats, discard, publish_record, run_step

RECIPE_VERSION = 1
# A kernel build at nice 19 beside TCG guests on two cores takes hours: the make
# step, and a worker waiting for another's build, give up after this (seconds).
BUILD_TIMEOUT = float(os.environ.get("OZFS_VMCI_KERNEL_BUILD_TIMEOUT", str(24 * 3600)))
APT_TIMEOUT = 1800
ITEM = re.compile(r'^CONFIG_[A-Za-z0-9_]+=(y|n|m|-?\d+|0x[0-9a-fA-F]+|"[^"]*")$')
CONFIG_TOOL = "virtme-configkernel"


@dataclass(frozen=True)
class Fragment:
    name: str
    reason: str
    config: tuple[str, ...]


@dataclass(frozen=True)
class BuildSpec:
    """A profile's ``[build]`` table."""
    profile: str
    source_package: str
    tarball: str
    packages: tuple[str, ...] = ()          # apt packages the build needs besides the source
    fragments: tuple[Fragment, ...] = ()

    @classmethod
    def from_toml(cls, profile: str, data: dict) -> "BuildSpec":
        frags = []
        for f in data.get("fragment", []):
            name = str(f.get("name", "")).strip()
            if not name or not str(f.get("reason", "")).strip():
                raise KernelError(f"kernel profile {profile}: every [[build.fragment]] needs a "
                                  f"name and a reason", fix=f"give a reason for {name or f!r}")
            bad = [i for i in f.get("config", []) if not ITEM.match(i)]
            if bad or not f.get("config"):
                raise KernelError(f"kernel profile {profile}: fragment {name} has no items or "
                                  f"malformed ones: {bad}",
                                  fix='write items as CONFIG_NAME=y|n|m|number|"string"')
            frags.append(Fragment(name, f["reason"].strip(), tuple(f["config"])))
        if not data.get("source_package") or not data.get("tarball"):
            raise KernelError(f"kernel profile {profile}: [build] needs source_package and tarball",
                              fix="e.g. source_package = \"linux-source-6.1\", tarball = "
                                  "\"/usr/src/linux-source-6.1.tar.xz\"")
        return cls(profile, data["source_package"], data["tarball"],
                   tuple(data.get("packages", ())), tuple(frags))

    def items(self) -> list[str]:
        return [i for f in self.fragments for i in f.config]

    def fragment_text(self) -> str:
        """The file virtme-configkernel appends to its base (``--custom``)."""
        out = [f"# ozfs-vmci kernel profile {self.profile}"]
        for f in self.fragments:
            out.append(f"##: {f.name}: {f.reason.splitlines()[0]}")
            out.extend(f.config)
        return "\n".join(out) + "\n"

    def fragment_hash(self) -> str:
        """What the fragments ask for (names and items, in order; not the reasons)."""
        blob = json.dumps([[f.name, *f.config] for f in self.fragments]).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass
class Built:
    """``record.json`` of a kernel build."""
    key: str
    profile: str
    release: str
    vmlinuz: str
    tree: str
    modules: str
    inputs: dict
    created: str
    log: str
    seconds: dict[str, float] = field(default_factory=dict)
    objects: int = 0
    jobs: int = 0
    nice: int = 0
    ccache: dict[str, str] = field(default_factory=dict)
    config_sha: str = ""

    @classmethod
    def load(cls, path: Path) -> "Built":
        return cls(**json.loads(path.read_text()))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    def usable(self) -> bool:
        tree = Path(self.tree)
        return all(p.exists() for p in (Path(self.vmlinuz), tree / "Makefile",
                                        tree / "Module.symvers", tree / ".config",
                                        Path(self.modules) / "modules.dep"))


# -- inputs and the cache ---------------------------------------------------------

def kernels_dir() -> Path:
    return paths.cache_root() / "kernels"


def installed_version(package: str) -> str | None:
    try:
        p = subprocess.run(["dpkg-query", "-W", "-f", "${Status}\t${Version}", package],
                           capture_output=True, text=True, timeout=60)
    except FileNotFoundError:       # not Debian: nothing is installed the apt way
        return None
    status, _, version = p.stdout.partition("\t")
    return version.strip() if p.returncode == 0 and "install ok installed" in status else None


def base_config() -> str:
    """virtme-ng's own items (what ``vng --kconfig`` adds to the defconfig)."""
    if shutil.which(CONFIG_TOOL) is None:
        raise KernelError(f"{CONFIG_TOOL} not found (it comes with virtme-ng)",
                          fix="pip install virtme-ng")
    p = subprocess.run([CONFIG_TOOL, "--defconfig", "--dry-run"], capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        raise KernelError(f"{CONFIG_TOOL} --dry-run failed", fix="reinstall virtme-ng",
                          detail=p.stderr[-1500:])
    return p.stdout


def compiler() -> str:
    p = subprocess.run(["gcc", "--version"], capture_output=True, text=True, timeout=60)
    return (p.stdout.splitlines() or ["none"])[0]


def inputs(spec: BuildSpec, version: str) -> dict:
    return {"recipe": RECIPE_VERSION, "source_package": spec.source_package,
            "source_version": version, "fragments": spec.fragment_hash(),
            "base": hashlib.sha256(base_config().encode()).hexdigest()[:16],
            "compiler": compiler()}


def key_of(inp: dict) -> str:
    return hashlib.sha256(json.dumps(inp, sort_keys=True).encode()).hexdigest()[:16]


def cached(key: str) -> Built | None:
    rec = kernels_dir() / key / "record.json"
    try:
        built = Built.load(rec)
    except (OSError, ValueError, TypeError):
        return None
    return built if built.usable() else None


def list_built() -> list[Built]:
    out = []
    for rec in sorted(kernels_dir().glob("*/record.json")):
        try:
            out.append(Built.load(rec))
        except (ValueError, TypeError):
            continue
    return out


# -- apt ------------------------------------------------------------------------------

def can_install() -> bool:
    return bool(os.geteuid() == 0 and shutil.which("apt-get")
                and not os.environ.get("OZFS_VMCI_NO_INSTALL"))


def install(spec: BuildSpec) -> None:
    """Install the source package and the build's packages with apt (root only), or
    raise KernelError with the exact command that would."""
    missing = [p for p in (spec.source_package, *spec.packages) if installed_version(p) is None]
    if missing:
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
        if not can_install():
            raise KernelError(f"kernel profile {spec.profile} builds its kernel from "
                              f"{spec.source_package} and needs {' '.join(missing)} (not installed)",
                              fix=" ".join(cmd))
        print(f"installing for kernel profile {spec.profile}: {' '.join(missing)}", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT)
        if p.returncode != 0:           # stale lists: update once and try again
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True,
                           timeout=APT_TIMEOUT)
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT)
        if p.returncode != 0:
            raise KernelError(f"apt-get could not install {' '.join(missing)}", fix=" ".join(cmd),
                              detail=p.stdout[-2000:] + p.stderr[-2000:])
    if not Path(spec.tarball).is_file():
        raise KernelError(f"{spec.source_package} is installed but {spec.tarball} is missing",
                          fix=f"apt-get install --reinstall {spec.source_package}")


def ensure(spec: BuildSpec, allow_install: bool = True,
           jobs: int | None = None) -> tuple[Built, bool]:
    """The profile's built kernel: (record, built_now). Installs and builds only
    with ``allow_install``; otherwise a missing build is a KernelError."""
    version = installed_version(spec.source_package)
    if version is None or not Path(spec.tarball).is_file():
        if not allow_install:
            raise KernelError(f"kernel profile {spec.profile} is not built "
                              f"({spec.source_package} is not installed)",
                              fix=f"python -m suite build --kernel {spec.profile}")
        with file_lock(paths.cache_root() / "kernel-install.lock",
                       f"installing {spec.source_package}"):
            install(spec)
        version = installed_version(spec.source_package)
        if version is None:
            raise KernelError(f"{spec.source_package} still not installed after apt-get",
                              fix=f"apt-get install {spec.source_package}")
    inp = inputs(spec, version)
    key = key_of(inp)
    if built := cached(key):
        return built, False
    if not allow_install:
        raise KernelError(f"kernel profile {spec.profile} is not built yet (key {key})",
                          fix=f"python -m suite build --kernel {spec.profile}  (a whole "
                              f"kernel build)")
    with file_lock(kernels_dir() / f"{key}.lock", f"another build of kernel {spec.profile} ({key})",
                   timeout=BUILD_TIMEOUT):
        if built := cached(key):
            return built, False
        with file_lock(paths.cache_root() / "kernel-install.lock",
                       f"installing packages for {spec.profile}"):
            install(spec)               # the build's packages (flex, bison, ...)
        return build(spec, inp, key, jobs or os.cpu_count() or 2), True


# -- the build ---------------------------------------------------------------------------

def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, LC_ALL="C")
    if shutil.which("ccache") and os.environ.get("OZFS_VMCI_KERNEL_CCACHE", "1") != "0":
        env.update({"PATH": f"/usr/lib/ccache:{env.get('PATH', '')}",
                    "CCACHE_DIR": os.environ.get("OZFS_VMCI_KERNEL_CCACHE_DIR",
                                                 str(kernels_dir() / "ccache")),
                    "CCACHE_BASEDIR": str(tree), "CCACHE_NOHASHDIR": "1",
                    "CCACHE_MAXSIZE": env.get("OZFS_VMCI_KERNEL_CCACHE_SIZE", "20G")})
    return env


def run_logged(cmd: list[str], cwd: Path, env: dict, log: Path, name: str,
               timeout: float) -> int:
    """Run one step into the log with progress lines (objects compiled, the last
    one); kill its process group past ``timeout``. Returns the objects compiled."""
    r = run_step(cmd, cwd, env, log, name, timeout,
                 obj=lambda line: (line.split()[-1].removeprefix(f"{cwd}/")
                                   if re.match(r"\s+(CC|AS)( \[M\])?\s", line) else None),
                 note=lambda line: line.strip()[:70])
    if r.expired:
        raise BuildError(f"{name} ran past its {timeout:.0f}s deadline and was killed",
                         fix=f"raise OZFS_VMCI_KERNEL_BUILD_TIMEOUT on a slow machine; log {log}")
    if r.rc != 0:
        text = log.read_text(errors="replace")
        picked = [ln for ln in text.splitlines()[-4000:]
                  if re.search(r"error:|Error \d+|\*\*\*|not found|No space left", ln)]
        raise BuildError(f"{name} failed (exit {r.rc})", fix=f"full log: {log}",
                         detail="\n".join(picked[-30:] or text.splitlines()[-20:]))
    return r.objects


def read_config(path: Path) -> dict[str, str]:
    """``.config`` as {CONFIG_X: value}; ``# CONFIG_X is not set`` reads as ``n``."""
    out = {}
    for ln in path.read_text().splitlines():
        if m := re.match(r"^(CONFIG_\w+)=(.*)$", ln):
            out[m.group(1)] = m.group(2)
        elif m := re.match(r"^# (CONFIG_\w+) is not set$", ln):
            out[m.group(1)] = "n"
    return out


def unmet(spec: BuildSpec, config: dict[str, str]) -> list[str]:
    """Items a fragment asks for that the final config does not have (``=n`` is met
    by a symbol that is off or absent)."""
    bad = []
    for f in spec.fragments:
        for item in f.config:
            name, want = item.split("=", 1)
            got = config.get(name, "n")
            if got != want:
                bad.append(f"{item} (got {got if name in config else 'absent'}; fragment {f.name})")
    return bad


def build(spec: BuildSpec, inp: dict, key: str, jobs: int) -> Built:
    kdir = kernels_dir() / key
    if kdir.exists():
        print(f"removing half build {kdir}", file=sys.stderr)
        shutil.rmtree(kdir)
    tree = kdir / "linux"
    tree.mkdir(parents=True)
    log = kdir / "build.log"
    env = _env(tree)
    seconds: dict[str, float] = {}
    stats0 = ccache_stats(env)
    try:
        t = time.monotonic()
        run_logged(["tar", "-xf", spec.tarball, "-C", str(tree), "--strip-components=1"],
                   kdir, env, log, f"unpack {spec.tarball}", 3600)
        seconds["unpack"] = time.monotonic() - t
        t = time.monotonic()
        frag = kdir / "fragment.config"
        frag.write_text(spec.fragment_text())
        run_logged([CONFIG_TOOL, "--defconfig", "--custom", str(frag)], tree, env, log,
                   "configure (virtme-ng defconfig + fragments)", 3600)
        missing = unmet(spec, read_config(tree / ".config"))
        if missing:
            raise BuildError(f"the kernel config lacks {len(missing)} item(s) the profile asks for",
                             fix="a dependency of each is off: add it to a fragment (see "
                                 "Kconfig's 'depends on'), or drop the item",
                             detail="\n".join(missing))
        seconds["configure"] = time.monotonic() - t
        t = time.monotonic()
        objects = run_logged(["make", f"-j{jobs}", "bzImage", "modules"], tree, env, log,
                             "make bzImage modules", BUILD_TIMEOUT)
        run_logged(["make", f"-j{jobs}", "modules_prepare"], tree, env, log,
                   "make modules_prepare", 3600)
        seconds["make"] = time.monotonic() - t
        t = time.monotonic()
        depmod = shutil.which("depmod") or "/sbin/depmod"
        run_logged(["make", f"INSTALL_MOD_PATH={kdir}", "INSTALL_MOD_STRIP=1", f"DEPMOD={depmod}",
                    "modules_install"], tree, env, log, "make modules_install", 3600)
        release = subprocess.run(["make", "-s", "kernelrelease"], cwd=tree, env=env,
                                 capture_output=True, text=True, timeout=600).stdout.strip()
        if not release:
            raise BuildError("make kernelrelease printed nothing", fix=f"see {log}")
        image = kdir / "boot" / f"vmlinuz-{release}"
        image.parent.mkdir(exist_ok=True)
        os.link(tree / "arch" / "x86" / "boot" / "bzImage", image)
        seconds["install"] = time.monotonic() - t
        stats1 = ccache_stats(env)
        built = Built(
            key=key, profile=spec.profile, release=release, vmlinuz=str(image), tree=str(tree),
            modules=str(kdir / "lib" / "modules" / release), inputs=inp,
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), log=str(log),
            seconds={k: round(v, 1) for k, v in seconds.items()}, objects=objects, jobs=jobs,
            nice=os.nice(0),
            ccache={k: str(int(stats1.get(k, 0)) - int(stats0.get(k, 0))) for k in stats1},
            config_sha=hashlib.sha256((tree / ".config").read_bytes()).hexdigest()[:16])
        if not built.usable():
            raise BuildError(f"the kernel build left no {built.vmlinuz}, Module.symvers or "
                             f"modules.dep", fix=f"see {log}")
    except BaseException as e:
        _discard(kdir, log, key, e)
        raise
    publish_record(kdir, built.to_json())
    total = sum(built.seconds.values())
    print(f"kernel {release} built in {total:.0f}s ({built.objects} objects, -j{jobs}, "
          f"nice {built.nice}): {kdir}", file=sys.stderr, flush=True)
    return built


def _discard(kdir: Path, log: Path, key: str, err: BaseException) -> None:
    discard(kdir, log, key, err, kernels_dir() / "failed")
