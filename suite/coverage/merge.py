"""Merge: the ``.gcda`` of several guests (and xdist workers, and sessions) of one
build summed into one tree, with gcc's ``gcov-tool merge``.

Each guest's copy sits at the object's absolute path as the kernel named it; that
path is the build tree's, or a sibling's when the build was seeded from one
(``suite/build/incremental.py`` copies objects, whose embedded gcda path then
names the donor). So every file is first placed at its path relative to the
build's source tree (``module/zfs/abd.gcda``), found by its ``module/`` component,
and the normalised trees are merged pairwise: ``gcov-tool merge -o OUT A B`` sums
the counters of files both have and keeps those only one has.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from suite.errors import SuiteError

TOOL = "gcov-tool"
# <cache>/builds/<16 hex>/src/<rel>: a build's tree, this one's or a donor's
BUILD_TREE = re.compile(r"(?:^|/)builds/[0-9a-f]{16}/src/(.+)$")


class CoverageError(SuiteError):
    """Coverage data is missing, unreadable, or a tool to read it is absent."""


def relative(path: str, src_dir: str = "", under: str = "module") -> str | None:
    """``path`` (as the kernel or gcov names it) relative to the build's source tree:
    below ``src_dir`` if it is there, else below a build tree of the cache, else from
    its first ``<under>/`` component. None: not the build's."""
    p = "/" + path.lstrip("/")
    if src_dir:
        root = "/" + src_dir.strip("/") + "/"
        if p.startswith(root):
            return p[len(root):]
    if m := BUILD_TREE.search(p):
        return m.group(1)
    i = p.find(f"/{under}/")
    return p[i + 1:] if i >= 0 else None


def normalise(guest_dir: Path, out: Path, src_dir: str = "") -> int:
    """Hard-link (or copy) every ``.gcda`` of a guest's copy to ``out/<relative>``;
    returns how many."""
    n = 0
    for f in sorted(guest_dir.rglob("*.gcda")):
        rel = relative(str(f.relative_to(guest_dir)), src_dir)
        if rel is None:
            continue
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, dest)
        except OSError:
            shutil.copyfile(f, dest)
        n += 1
    return n


@dataclass
class Merged:
    root: Path              # <root>/module/zfs/abd.gcda ...
    inputs: int             # guest copies merged
    files: int              # distinct .gcda


def tool() -> str:
    exe = shutil.which(TOOL)
    if exe is None:
        raise CoverageError(f"{TOOL} not found (it merges the guests' counters)",
                            fix="apt-get install -y --no-install-recommends gcc "
                                "(gcov-tool comes with gcc)")
    return exe


def merge(guest_dirs: list[Path], out: Path, src_dir: str = "") -> Merged:
    """Sum the counters of ``guest_dirs`` (each a guest's copy) into ``out``."""
    if not guest_dirs:
        raise CoverageError("no guest counters to merge",
                            fix="run the cases on a gcov kernel profile (--kernel "
                                "debian-6.1-debug) so guests leave coverage/gcda/")
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory(prefix="ozfs-gcov-merge.") as tmp:
        trees = []
        for i, g in enumerate(guest_dirs):
            t = Path(tmp) / f"in{i}"
            if normalise(g, t, src_dir):
                trees.append(t)
        if not trees:
            raise CoverageError(f"none of {len(guest_dirs)} guest copies holds a .gcda of "
                                "the build's tree", fix="see each copy's collected.json")
        acc = trees[0]
        for i, nxt in enumerate(trees[1:]):
            dest = Path(tmp) / f"acc{i}"
            p = subprocess.run([tool(), "merge", "-o", str(dest), str(acc), str(nxt)],
                               capture_output=True, text=True, timeout=1800)
            if p.returncode != 0:
                raise CoverageError(f"gcov-tool merge of {guest_dirs[i + 1]} failed "
                                    f"(exit {p.returncode})",
                                    fix="the copies may come from different builds: merge "
                                        "only one build key's guests",
                                    detail=(p.stderr or p.stdout)[-1500:])
            acc = dest
        shutil.copytree(acc, out)
    return Merged(out, len(trees), sum(1 for _ in out.rglob("*.gcda")))
