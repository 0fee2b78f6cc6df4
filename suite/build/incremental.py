"""Build another commit of a series from a sibling's tree: only what changed.

A bisection builds commit after commit of one series, and a gate a pull request's
head after its base. Each differs from a neighbour in a few files, yet a fresh tree pays ``autogen`` and ``configure``
(minutes here) and kbuild's full walk every time. When a finished build exists
with the same kernel, flags and targets, for a tree whose build system files
(``configure.ac``, ``config/``, ``*.am``, ``*.in``, ``*.m4``, ``META``; a ZTS
``Makefile.am`` is regenerated from instead) are the same as the new tree's, its build tree is copied, its absolute paths moved to
the new folder (same length: the keys are 16 hex digits; files keep their
mtimes), and only the files that differ between the two commits are written.
``make`` then rebuilds what depends on them and nothing else.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from suite.source.objects import ObjectCache

BUILD_SYSTEM = re.compile(r"^(configure\.ac|autogen\.sh|META|config/.*|.*Makefile\.(am|in)|"
                          r".*\.m4|.*\.in|module/Kbuild.*)$")
# Build-system files a seeded tree can take with ``automake`` + ``config.status``
# (seconds) instead of autogen + configure: a series adding a ZTS helper program
# or test touches only these (tests/**/Makefile.am).
REGENERATED = re.compile(r"^tests/.*Makefile\.am$")


def blocks_seeding(path: str) -> bool:
    """A changed path that needs a fresh autogen + configure."""
    return bool(BUILD_SYSTEM.match(path)) and not REGENERATED.match(path)


@dataclass
class Seeded:
    donor: str                # key of the build the tree came from
    changed: list[str]        # paths written or removed

    @property
    def regenerate(self) -> bool:
        """A ZTS Makefile.am changed: automake + config.status must run before
        make (the tree is not in maintainer mode, so make will not)."""
        return any(REGENERATED.match(p) for p in self.changed)

    def makefiles(self, src: Path) -> list[str]:
        """The Makefiles to regenerate: a changed ``X/Makefile.am`` with its own
        ``X/Makefile.in`` is that Makefile; one included by the top-level
        Makefile.am (non-recursive parts) is the top ``Makefile``. Only these:
        config.status run for everything would touch what kbuild reads and
        rebuild every module object."""
        out: list[str] = []
        for p in self.changed:
            if REGENERATED.match(p):
                mk = p.removesuffix(".am")
                name = mk if (src / f"{mk}.in").exists() else "Makefile"
                if name not in out:
                    out.append(name)
        return out


def comparable(inputs: dict) -> dict:
    """The build inputs a donor must share: everything but the tree and the series
    that made it. What a series changes is in its tree, and the tree's diff is what
    is written (a pull request's head seeds from its base's build: a gate builds the
    head from the base's tree, only what the pull request changed)."""
    return {k: v for k, v in inputs.items() if k not in ("source_tree", "series")}


def changed_paths(cache: ObjectCache, a: str, b: str) -> list[tuple[str, str]]:
    """(status, path) between commits ``a`` and ``b`` (A, M, D; no renames)."""
    p = cache.run("diff", "--name-status", "--no-renames", a, b)
    return [(ln.split("\t", 1)[0][0], ln.split("\t", 1)[1])
            for ln in p.stdout.splitlines() if "\t" in ln]


def pick_donor(inputs: dict, commit: str, records: Iterable, cache: ObjectCache,
               needed: tuple[str, ...]) -> tuple[object, list[tuple[str, str]]] | None:
    """The newest finished build sharing ``inputs`` whose tree differs from
    ``commit`` in no build-system file (and in fewest files)."""
    want = comparable(inputs)
    best = None
    for rec in records:
        if comparable(rec.inputs) != want or not rec.source.get("commit"):
            continue
        if not cache.has_commit(rec.source["commit"]):
            continue
        diff = [(s, p) for s, p in changed_paths(cache, rec.source["commit"], commit)
                if p.startswith(needed)]
        if any(blocks_seeding(p) for _, p in diff):
            continue
        if best is None or len(diff) < len(best[1]):
            best = (rec, diff)
    return best


def _retarget(tree: Path, old: str, new: str) -> int:
    """Replace ``old`` with ``new`` (same length) in the text files under ``tree``,
    keeping each file's mtime so make sees nothing new. Returns files changed."""
    assert len(old) == len(new)
    p = subprocess.run(["grep", "-rlIZF", "--", old, str(tree)], capture_output=True)
    n = 0
    for raw in p.stdout.split(b"\0"):
        if not raw:
            continue
        f = Path(os.fsdecode(raw))
        st = f.lstat()
        if not f.is_file() or f.is_symlink():
            continue
        data = f.read_bytes()
        f.write_bytes(data.replace(old.encode(), new.encode()))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        n += 1
    return n


def _relink(tree: Path, old: str, new: str) -> int:
    """Point every symlink under ``tree`` whose target is inside ``old`` at the
    same path inside ``new``. A copied tree keeps its absolute links: ZTS's
    tests/zfs-tests/bin links to the build's commands, and a seeded build
    ran the donor's zpool and test helpers through them."""
    n = 0
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            f = Path(dirpath) / name
            if not f.is_symlink():
                continue
            target = os.readlink(f)
            if target == old or target.startswith(old + os.sep):
                f.unlink()
                f.symlink_to(new + target[len(old):])
                n += 1
    return n


def seed_tree(donor, diff: list[tuple[str, str]], cache: ObjectCache, commit: str,
              bdir: Path) -> Seeded:
    """Copy the donor's tree into ``bdir/src``, move its paths, apply ``diff``."""
    src = bdir / "src"
    shutil.copytree(Path(donor.src_dir), src, symlinks=True)
    _retarget(src, str(Path(donor.build_dir)), str(bdir))
    _relink(src, str(Path(donor.build_dir)), str(bdir))
    modes = tree_modes(cache, commit, [p for s, p in diff if s != "D"])
    for status, path in diff:
        dest = src / path
        if status == "D":
            dest.unlink(missing_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        blob = cache.run("cat-file", "-p", f"{commit}:{path}", text=False).stdout
        dest.unlink(missing_ok=True)            # a fresh inode and mtime: make rebuilds it
        if modes.get(path) == "120000":         # a symlink: the blob is its target
            dest.symlink_to(os.fsdecode(blob))
            continue
        dest.write_bytes(blob)
        # git's mode, not the umask's: ZTS's runner skips a test group whose
        # setup.ksh is not executable ("failed verification").
        dest.chmod(0o755 if modes.get(path) == "100755" else 0o644)
    return Seeded(donor.key, [p for _, p in diff])


def tree_modes(cache: ObjectCache, commit: str, paths: list[str]) -> dict[str, str]:
    """path -> git mode (100644, 100755, 120000) of ``paths`` at ``commit``."""
    out: dict[str, str] = {}
    for i in range(0, len(paths), 200):
        p = cache.run("ls-tree", commit, "--", *paths[i:i + 200])
        for line in p.stdout.splitlines():
            meta, _, name = line.partition("\t")
            out[name] = meta.split()[0]
    return out
