"""Build: a debug OpenZFS build for a kernel, cached by its inputs.

A build lives in ``<cache>/builds/<key>/`` where ``key`` hashes everything that
changes its output (kernel identity, source tree id, series commits, configure
flags, make targets, this recipe's version). ``record.json`` is written last,
atomically: a directory without it is a half build (interrupted, failed, disk
full) and is wiped before the next attempt, so the cache never hands out a half
build under a valid key. A lock file serialises builds of one key across
processes (pytest-xdist workers).

The tree is exported without ``.git`` and with ``.nogitrelease``, so the version
string comes from META and does not change with every commit: that keeps ccache
effective across the commits of a series. The exact commit is still recorded
(``include/zfs_gitrev.h`` and the build record).
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterator

from suite import paths
from suite.errors import BuildError
from suite.build import incremental
from suite.build.kernel import Kernel
from suite.build.steps import ccache_stats, discard, publish_record, run_step
from suite.build import gcov as coverage_flags
from suite.locks import file_lock
from suite.progress import step
from suite.source.series import SourceTree
from suite.source.objects import ObjectCache

RECIPE_VERSION = 1
DEFAULT_FLAGS = ("--enable-debug",)
# User-space programs the cases use (their libraries are built as dependencies).
USER_TARGETS = ("zfs", "zpool", "zinject")
# zdb needs libzpool (all of ZFS again, in user space: ~4 of a cold build's 12
# minutes here): built only when asked (--with-zdb; --thorough asks for it).
ZDB = "zdb"
# Paths of the source a module + commands build needs (a snapshot lacking a file
# elsewhere, e.g. a ZTS data file, does not stop it).
NEEDED_PREFIXES = ("module/", "include/", "lib/", "cmd/", "config/", "scripts/",
                   "Makefile.am", "configure.ac", "META", "autogen.sh", "udev/", "etc/",
                   "man/", "contrib/", "rpm/")
MODULES = ("spl", "zfs")
# A build step still running after this long is killed (a hung compiler, a
# configure test that never returns): no wait without an end.
STEP_TIMEOUT = float(os.environ.get("OZFS_VMCI_BUILD_STEP_TIMEOUT", "7200"))


@dataclass(frozen=True)
class BuildRequest:
    kernel: Kernel
    tree: SourceTree
    flags: tuple[str, ...] = DEFAULT_FLAGS
    zts: bool = False
    zdb: bool = False

    @property
    def targets(self) -> tuple[str, ...]:
        return ("all",) if self.zts else USER_TARGETS + ((ZDB,) if self.zdb else ())

    @property
    def commands(self) -> tuple[str, ...]:
        """The programs the build leaves (``all`` has zdb too)."""
        return USER_TARGETS + ((ZDB,) if self.zdb or self.zts else ())

    def inputs(self) -> dict:
        return {
            "recipe": RECIPE_VERSION,
            "kernel": self.kernel.identity(),
            "source_tree": self.tree.tree,
            "series": [{"name": s.name, "commits": list(s.commits)} for s in self.tree.series],
            "configure_flags": list(self.flags),
            "targets": list(self.targets),
        }

    @property
    def key(self) -> str:
        blob = json.dumps(self.inputs(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass
class ModuleInfo:
    path: str
    srcversion: str
    version: str


@dataclass
class BuildRecord:
    key: str
    build_dir: str
    src_dir: str
    created: str
    inputs: dict
    source: dict
    kernel: dict
    zfs_version: str
    modules: dict[str, ModuleInfo]
    commands: dict[str, str]
    log: str
    seconds: dict[str, float] = field(default_factory=dict)
    ccache: dict[str, str] = field(default_factory=dict)
    missing_files: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    incremental: dict = field(default_factory=dict)    # {"donor": key, "changed": [paths]}

    @classmethod
    def load(cls, path: Path) -> "BuildRecord":
        data = json.loads(path.read_text())
        data["modules"] = {k: ModuleInfo(**v) for k, v in data["modules"].items()}
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @property
    def path(self) -> Path:
        return Path(self.build_dir)

    def summary(self) -> str:
        series = ", ".join(f"{s['name']}@{s['commits'][-1][:11]}"
                           for s in self.inputs.get("series", [])) or "none"
        kind = "debug" if "--enable-debug" in self.inputs.get("configure_flags", []) \
            else "production"
        return (f"build {self.key}  zfs {self.zfs_version} ({kind})  kernel {self.kernel['release']}\n"
                f"  source {self.source['describe']} (tree {self.inputs['source_tree'][:11]}),"
                f" series: {series}\n"
                f"  zfs.ko srcversion {self.modules['zfs'].srcversion}\n"
                f"  dir {self.build_dir}")


# -- cache ---------------------------------------------------------------------

def build_dir(key: str) -> Path:
    return paths.builds_dir() / key


def cached(key: str) -> BuildRecord | None:
    rec = build_dir(key) / "record.json"
    if not rec.exists():
        return None
    try:
        record = BuildRecord.load(rec)
    except (ValueError, TypeError, KeyError):
        return None
    if all(Path(m.path).exists() for m in record.modules.values()):
        return record
    return None


def supersets(req: BuildRequest) -> list[BuildRequest]:
    """Requests whose build has everything ``req``'s has, and more: the same modules
    and tools plus zdb. A run that needs no zdb takes such a build rather than
    paying a cold build for less (an explore run after a --thorough one)."""
    if req.zdb or req.zts:
        return []
    return [replace(req, zdb=True)]


def cached_superset(req: BuildRequest) -> BuildRecord | None:
    return next((rec for r in supersets(req) if (rec := cached(r.key))), None)


def get_or_build(req: BuildRequest, cache: ObjectCache, force: bool = False,
                 jobs: int | None = None) -> tuple[BuildRecord, bool]:
    """Return (record, built_now). The same inputs never build twice."""
    key = req.key
    if not force and (rec := cached(key) or cached_superset(req)):
        return rec, False
    with file_lock(paths.builds_dir() / f"{key}.lock", f"another build of {key} "
                   f"({req.tree.describe})"):
        if not force and (rec := cached(key)):
            return rec, False
        return _build(req, cache, jobs or os.cpu_count() or 2), True


# -- the build ---------------------------------------------------------------------

def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PATH": f"/usr/lib/ccache:{env.get('PATH', '')}",
        "CCACHE_DIR": str(paths.ccache_dir()),
        "CCACHE_BASEDIR": str(src),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_MAXSIZE": env.get("CCACHE_MAXSIZE", "8G"),
        "LC_ALL": "C",
    })
    return env


def _run_logged(cmd: list[str], cwd: Path, env: dict, log: Path, name: str,
                timeout: float | None = None) -> None:
    """Run a build step, appending to the log and showing progress; kill it (its
    whole process group) if it runs past ``timeout`` seconds."""
    timeout = STEP_TIMEOUT if timeout is None else timeout
    r = run_step(cmd, cwd, env, log, name, timeout, obj=_compiled,
                 note=lambda line: line.strip()[:70] if line.startswith("checking ") else None)
    if r.expired:
        raise BuildError(f"{name} ran past its {timeout:.0f}s deadline and was killed",
                         fix=f"see the last lines of {log}; raise OZFS_VMCI_BUILD_STEP_TIMEOUT "
                             f"on a slow machine", detail=log.read_text(errors="replace")[-1500:])
    if r.rc != 0:
        raise BuildError(f"{name} failed (exit {r.rc})", fix=_fix_for(log),
                         detail=failing_lines(log.read_text(errors="replace")))


def _compiled(line: str) -> str | None:
    """The object an OpenZFS make line built (kbuild's CC, libtool's CCLD/LD)."""
    return line.split()[-1] if re.match(r"\s+(CC|CCLD|LD)\b", line) else None


def _fix_for(log: Path) -> str:
    text = log.read_text(errors="replace")[-200000:]
    if "No space left on device" in text:
        return (f"free disk space under {paths.cache_root()} (or set OZFS_VMCI_CACHE to a "
                f"bigger disk); the half build was removed. Full log: {log}")
    return f"full log: {log}"


def failing_lines(log_text: str, context: int = 2, limit: int = 40) -> str:
    """The compiler/linker lines that explain a failed build, not the whole log."""
    lines = log_text.splitlines()
    pat = re.compile(r"(error:|Error \d+|undefined reference|fatal error|No space left|"
                     r"configure: error|cannot find|Killed signal)", re.I)
    picked: list[int] = []
    for i, ln in enumerate(lines):
        if pat.search(ln):
            picked.extend(range(max(0, i - context), min(len(lines), i + 1)))
    seen: list[int] = sorted(set(picked))
    out = [lines[i] for i in seen][:limit]
    if not out:
        out = lines[-15:]
    return "\n".join(out)


def _modinfo(ko: Path, field_: str) -> str:
    p = subprocess.run(["/sbin/modinfo", "-F", field_, str(ko)], capture_output=True, text=True,
                       timeout=60)
    return p.stdout.strip()


def _build(req: BuildRequest, cache: ObjectCache, jobs: int) -> BuildRecord:
    key = req.key
    bdir = build_dir(key)
    if bdir.exists():
        what = "previous build (forced rebuild)" if (bdir / "record.json").exists() else "half build"
        print(f"removing {what} {bdir}", file=sys.stderr)
        shutil.rmtree(bdir)
    src = bdir / "src"
    log = bdir / "build.log"
    bdir.mkdir(parents=True)
    seconds: dict[str, float] = {}
    env = _env(src)
    if shutil.which("ccache") is None:
        env["PATH"] = os.environ.get("PATH", "")
    seeded: incremental.Seeded | None = None
    try:
        pick = None
        if os.environ.get("OZFS_VMCI_INCREMENTAL", "1") != "0":
            # A ZTS tree is used in place: its changed test scripts count too.
            pick = incremental.pick_donor(req.inputs(), req.tree.commit, list_builds(), cache,
                                          NEEDED_PREFIXES + (("tests/",) if req.zts else ()))
        stats0 = ccache_stats(env)
        t = time.monotonic()
        if pick is not None:
            donor, diff = pick
            with step(f"seed from build {donor.key}: {len(diff)} files differ"):
                seeded = incremental.seed_tree(donor, diff, cache, req.tree.commit, bdir)
            missing = list(donor.missing_files)
            seconds["seed"] = time.monotonic() - t
        else:
            with step(f"export {req.tree.describe} -> {src}"):
                src.mkdir()
                missing = cache.export(req.tree.commit, src, needed=NEEDED_PREFIXES)
                (src / ".nogitrelease").touch()
                if req.zts:
                    stand_in_for_test_data(src, missing)
            seconds["export"] = time.monotonic() - t
        gitrev = src / "include" / "zfs_gitrev.h"
        text = f'#define\tZFS_META_GITREV "{req.tree.describe}"\n'
        if not gitrev.exists() or gitrev.read_text() != text:
            gitrev.write_text(text)
        if req.kernel.zfs_license:
            relabel(src, req.kernel.zfs_license)
        if seeded is not None and seeded.regenerate:
            t = time.monotonic()
            mks = seeded.makefiles(src)
            _run_logged(["automake", *mks], src, env, log, f"automake {' '.join(mks)}")
            _run_logged(["./config.status", *mks], src, env, log, "config.status")
            seconds["regenerate"] = time.monotonic() - t
        if seeded is None:
            t = time.monotonic()
            _run_logged(["sh", "autogen.sh"], src, env, log, "autogen")
            seconds["autogen"] = time.monotonic() - t
            t = time.monotonic()
            _run_logged(["./configure", *req.flags, "--with-config=all",
                         f"--with-linux={req.kernel.source}",
                         f"--with-linux-obj={req.kernel.headers}"], src, env, log, "configure")
            seconds["configure"] = time.monotonic() - t
        t = time.monotonic()
        gcov = coverage_flags.make_args(req.kernel)     # GCOV_PROFILE=y, or nothing
        kmake = (*gcov, *req.kernel.zfs_make)           # and what the kernel's profile needs
        _run_logged(["make", f"-j{jobs}", *kmake, *req.targets], src, env, log,
                    f"make {' '.join(req.targets)}")
        if not req.zts:
            _run_logged(["make", f"-j{jobs}", *kmake, "-C", "module"], src, env, log,
                        "make modules" + (" (gcov)" if gcov else ""))
        if gcov:
            coverage_flags.check_instrumented(src, log)
        seconds["make"] = time.monotonic() - t
        record = _record(req, bdir, src, log, seconds, missing, env, stats0)
        if seeded is not None:
            record.incremental = {"donor": seeded.donor, "changed": seeded.changed}
    except BaseException as e:
        _discard(bdir, log, key, e)
        raise
    publish_record(bdir, record.to_json())
    return record


def relabel(src: Path, license_: str) -> bool:
    """META's ``License:`` for a kernel profile that asks for it (its ``[zfs]``
    table says why: a CDDL module turns a debug kernel's lockdep off at insmod).
    Changes only the build tree, before autogen; True if it changed the file."""
    meta = src / "META"
    text = meta.read_text()
    new, n = re.subn(r"^(License:\s*).*$", lambda m: m.group(1) + license_, text, count=1,
                     flags=re.M)
    if n != 1:
        raise BuildError(f"{meta} has no License: line to set to {license_}",
                         fix="the kernel profile's [zfs] license needs OpenZFS's META format")
    if new != text:
        meta.write_text(new)
    return new != text


def stand_in_for_test_data(src: Path, missing: list[str]) -> list[str]:
    """A ZTS build: ``make all`` wants every ZTS data file to exist, though it
    builds none of them. A file the snapshot lacks under ``tests/`` gets an empty
    stand-in, so the build goes on; the build record lists it (``missing_files``)
    and the ZTS lane reports the tests that read it as not valid here."""
    made = []
    for rel in missing:
        if rel.startswith("tests/"):
            f = src / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"")
            made.append(rel)
    return made


def _discard(bdir: Path, log: Path, key: str, err: BaseException) -> None:
    discard(bdir, log, key, err, paths.builds_dir() / "failed")


def _record(req: BuildRequest, bdir: Path, src: Path, log: Path, seconds: dict,
            missing: list[str], env: dict, stats0: dict) -> BuildRecord:
    modules = {}
    for name in MODULES:
        ko = src / "module" / f"{name}.ko"
        if not ko.exists():
            raise BuildError(f"the build produced no {ko}", fix=f"see {log}")
        modules[name] = ModuleInfo(str(ko), _modinfo(ko, "srcversion"), _modinfo(ko, "version"))
    commands = {}
    for cmd in req.commands:
        p = src / cmd
        if not p.exists():
            raise BuildError(f"the build produced no {p}", fix=f"see {log}")
        commands[cmd] = str(p)
    stats1 = ccache_stats(env)
    ccache = {k: str(int(stats1.get(k, 0)) - int(stats0.get(k, 0))) for k in stats1}
    t = req.tree
    return BuildRecord(
        key=req.key, build_dir=str(bdir), src_dir=str(src),
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), inputs=req.inputs(),
        source={"base_url": t.base.url, "base_ref": t.base.ref, "base_commit": t.base.commit,
                "commit": t.commit, "tree": t.tree, "describe": t.describe,
                "series": [{"selection": s.selection, "name": s.name, "url": s.url,
                            "commits": list(s.commits), "subjects": list(s.subjects)}
                           for s in t.series]},
        kernel={"profile": req.kernel.profile, "release": req.kernel.release,
                "vmlinuz": str(req.kernel.vmlinuz), "headers": str(req.kernel.headers),
                **({"zfs_license": req.kernel.zfs_license} if req.kernel.zfs_license else {})},
        zfs_version=modules["zfs"].version, modules=modules, commands=commands,
        log=str(log), seconds={k: round(v, 1) for k, v in seconds.items()},
        ccache=ccache, missing_files=missing, features=list(t.features))


def list_builds() -> Iterator[BuildRecord]:
    for rec in sorted(paths.builds_dir().glob("*/record.json")):
        try:
            yield BuildRecord.load(rec)
        except (ValueError, TypeError, KeyError):
            continue
