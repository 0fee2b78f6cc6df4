"""xfstests, the kernel's file system suite, built once per pinned commit.

The manifest ``patches/xfstests/source.toml`` names the fork with ZFS support (URL,
branch, commit). Its commit is fetched through the git object cache (so a
``url.<mirror>.insteadOf`` works as for OpenZFS), its tree exported to
``<cache>/xfstests/<commit>/`` and built there with ``make``; a ``.built`` marker
holding the commit says the tree is complete. Another commit is another folder: a
changed pin rebuilds, an unchanged one never does. The guest runs the tree in place
(the host's root is the guest's); results go elsewhere (``RESULT_BASE``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from suite import paths
from suite.errors import BuildError, SuiteError
from suite.locks import file_lock
from suite.progress import step
from suite.source.objects import ObjectCache

MANIFEST = paths.PROJECT_ROOT / "patches" / "xfstests" / "source.toml"
MARKER = ".built"
# What its build needs beyond the OpenZFS build's (also in ci/apt-packages.txt).
APT = ("libacl1-dev", "libgdbm-dev", "xfslibs-dev", "libtool-bin", "liburing-dev",
       "libcap-dev", "xfsprogs", "attr", "acl", "quota", "gdisk", "parted", "dbench")


@dataclass(frozen=True)
class Source:
    url: str
    branch: str
    commit: str


@dataclass(frozen=True)
class Tree:
    """A built xfstests tree."""
    commit: str
    path: Path

    @property
    def check(self) -> Path:
        return self.path / "check"

    def archive(self) -> Path:
        """The tree as one tar file beside it, made once: a guest unpacks it where tests
        may write (copying the 4,500 files one by one over 9p took 160 s under TCG)."""
        dest = self.path.with_name(f"{self.commit}.tar")
        if dest.exists():
            return dest
        with file_lock(self.path.with_name(f"{self.commit}.lock"), "archiving xfstests"):
            if not dest.exists():
                tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
                with tarfile.open(tmp, "w") as t:
                    t.add(self.path, arcname=".")
                tmp.replace(dest)
        return dest


def manifest(path: Path = MANIFEST) -> Source:
    try:
        d = tomllib.loads(path.read_text())
        return Source(d["url"], d.get("branch", ""), d["commit"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as e:
        raise SuiteError(f"cannot read the xfstests manifest {path}: {e}",
                         fix="restore patches/xfstests/source.toml (url, branch, commit)")


def root() -> Path:
    return paths.cache_root() / "xfstests"


def built(commit: str) -> Tree | None:
    """The tree of ``commit`` if a complete build of it is in the cache."""
    d = root() / commit
    marker = d / MARKER
    if marker.exists() and marker.read_text().strip() == commit and (d / "check").exists():
        return Tree(commit, d)
    return None


def ensure(src: Source | None = None, cache: ObjectCache | None = None, offline: bool = False,
           jobs: int | None = None) -> Tree:
    """The built tree of the manifest's commit: from the cache, else fetched and built."""
    src = src or manifest()
    if (tree := built(src.commit)) is not None:
        return tree
    cache = cache or ObjectCache()
    with file_lock(root() / f"{src.commit}.lock", f"building xfstests {src.commit[:12]}"):
        if (tree := built(src.commit)) is not None:      # another process built it
            return tree
        with step(f"fetch xfstests {src.commit[:12]} ({src.url} {src.branch})"):
            got = cache.resolve(src.url, src.commit, offline=offline)
        dest = root() / src.commit
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        cache.export(got.commit, dest)
        with step(f"build xfstests in {dest}") as s:
            log = dest / "build.log"
            with open(log, "w") as out:
                p = subprocess.run(["make", f"-j{jobs or os.cpu_count() or 2}"], cwd=dest,
                                   stdout=out, stderr=subprocess.STDOUT)
            if p.returncode != 0:
                tail = log.read_text(errors="replace").splitlines()[-15:]
                raise BuildError(f"xfstests make failed (exit {p.returncode}) after "
                                 f"{s.elapsed:.0f} s: see {log}",
                                 fix="install its packages: " + " ".join(APT) +
                                     " (python -m suite doctor --install)",
                                 detail="\n".join(tail))
        (dest / MARKER).write_text(src.commit + "\n")
        return Tree(src.commit, dest)
