"""OpenZFS release lines: the newest tag of each supported line, and master.

Direct I/O fixes are backported to the stable lines (zfs-2.3.x, zfs-2.4.x); a
line's newest release is what its users run. The release lane of the workflow
runs the stock selection on each (``python -m suite lines newest`` names them)
and puts the results side by side (``python -m suite lines table``).
"""
from __future__ import annotations

import re
import subprocess

from suite.errors import SourceError

UPSTREAM = "https://github.com/openzfs/zfs"
# The lines maintained now (README: "Release lines"); add one when it branches.
SUPPORTED = ("2.3", "2.4")
# zfs-X.Y.Z, optionally -rcN; X.Y.99 marks master after a branch, not a release.
TAG = re.compile(r"^zfs-(\d+)\.(\d+)\.(\d+)(?:-rc(\d+))?$")


def version(tag: str) -> tuple[int, int, int, int] | None:
    """Sortable (major, minor, patch, rc) of a release tag; rc 0 sorts before any
    final (a final release is rc=inf), None for a tag that is not a release."""
    m = TAG.match(tag)
    if not m or m.group(3) == "99":
        return None
    major, minor, patch, rc = m.groups()
    return int(major), int(minor), int(patch), int(rc) if rc else 1 << 30


def newest(tags: list[str], line: str, rc: bool = False) -> str | None:
    """The newest release tag of ``line`` ("2.3"): finals only unless ``rc``."""
    best: tuple[tuple[int, int, int, int], str] | None = None
    for t in tags:
        v = version(t)
        if v is None or f"{v[0]}.{v[1]}" != line or (v[3] != 1 << 30 and not rc):
            continue
        if best is None or v > best[0]:
            best = (v, t)
    return best[1] if best else None


def remote_tags(url: str = UPSTREAM, timeout: float = 60) -> list[str]:
    """Tag names of ``url`` (``git ls-remote``: git's insteadOf applies)."""
    try:
        r = subprocess.run(["git", "ls-remote", "--tags", "--refs", url, "zfs-*"],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise SourceError(f"git ls-remote {url} did not answer in {timeout:.0f}s",
                          fix="check the network, or point git at a mirror with "
                              "url.<mirror>.insteadOf") from e
    if r.returncode != 0:
        raise SourceError(f"git ls-remote {url} failed: {r.stderr.strip()[-300:]}",
                          fix="check the URL and the network, or point git at a mirror "
                              "with url.<mirror>.insteadOf")
    return [line.split("refs/tags/", 1)[1] for line in r.stdout.splitlines()
            if "refs/tags/" in line]


def refs_to_test(tags: list[str], lines: tuple[str, ...] = SUPPORTED,
                 master: bool = True) -> list[str]:
    """The refs of the release lane: each line's newest release, then master. A
    line with no release yet is left out (its rcs are not what users run)."""
    out = [t for t in (newest(tags, line) for line in lines) if t]
    return out + (["master"] if master else [])
