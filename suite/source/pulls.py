"""A pull request as a series: its head fetched through the object cache (so
``insteadOf`` mirrors work), its base the merge-base with the branch it targets,
its commits exported as patches the gate applies on that base.

``--pr 18902`` is openzfs/zfs's ``refs/pull/18902/head``; ``--pr 18902@COMMIT`` the
pull request up to one of its commits (bisection, a review of an earlier push);
``--head URL@REF`` any fork's branch, tag or commit the same way. The patches are
written under the cache at run time, never into the project.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from suite import paths
from suite.errors import SeriesError
from suite.source.objects import ObjectCache, is_commit_id, slug

UPSTREAM = "https://github.com/openzfs/zfs"


@dataclass(frozen=True)
class PullHead:
    label: str                  # "openzfs/zfs#18902" or the URL@REF given
    url: str
    ref: str
    target: str                 # the branch its base was taken on
    base: str                   # merge-base of the head and the target
    commits: tuple[str, ...]    # base..head, oldest first (cut at @COMMIT)
    merged: str = ""            # the target's commit that says it closes this pull request


    @property
    def head(self) -> str:
        return self.commits[-1]

    def describe(self, cache: ObjectCache) -> str:
        return (f"{self.label}: {len(self.commits)} commit(s) on {self.base[:11]} (the "
                f"merge-base with {self.target}), head {self.head[:11]} "
                f"{cache.subject(self.head)}"
                + (f"; merged into {self.target} as {self.merged[:11]} "
                   f"{cache.subject(self.merged)}" if self.merged else ""))


def parse_pr(spec: str) -> tuple[int, str | None]:
    """``18902`` or ``18902@COMMIT`` (also ``#18902``)."""
    m = re.fullmatch(r"#?(\d+)(?:@([0-9a-fA-F]{7,40}))?", spec.strip())
    if not m:
        raise SeriesError(f"--pr {spec!r}: give a pull request number, optionally @COMMIT",
                          fix="e.g. --pr 18902, or --pr 18902@1a2b3c4d to stop at a commit")
    return int(m.group(1)), m.group(2)


def parse_head(spec: str) -> tuple[str, str, str | None]:
    """``URL@REF`` or ``URL@REF@COMMIT`` -> (url, ref, commit or None)."""
    parts = spec.rsplit("@", 2) if spec.count("@") >= 2 else spec.rsplit("@", 1)
    if len(parts) < 2 or "://" not in parts[0] and not Path(parts[0]).is_dir():
        raise SeriesError(f"--head {spec!r}: give URL@REF (a branch, tag or commit)",
                          fix="e.g. --head https://github.com/tiehexue/zfs@zvol-directio")
    at = parts[2] if len(parts) == 3 else None
    if at is not None and not is_commit_id(at):
        raise SeriesError(f"--head {spec!r}: after the second @ comes a commit id",
                          fix="URL@REF@COMMIT stops the series at that commit")
    return parts[0], parts[1], at


def resolve_pull(cache: ObjectCache, url: str, ref: str, at: str | None = None,
                 target: str = "master", upstream: str = UPSTREAM,
                 label: str = "", number: int | None = None) -> PullHead:
    """The head of ``url``'s ``ref``, its base on ``upstream``'s ``target``, and the
    commits between (up to ``at``)."""
    tip = cache.fetch(url, ref)
    onto = cache.fetch(upstream, target)
    base = cache.run("merge-base", tip, onto, check=False).stdout.strip()
    if not base:
        raise SeriesError(f"{label or url + '@' + ref} shares no history with {target} of "
                          f"{upstream}", fix="name the branch it targets with --target")
    commits = cache.rev_list(base, tip)
    if not commits:
        raise SeriesError(f"{label or ref}: no commit of its own on top of {target} "
                          f"(merged already?)", fix="gate an open pull request, or a commit "
                                                    "of it with @COMMIT")
    if at:
        hits = [c for c in commits if c.startswith(at.lower())]
        if len(hits) != 1:
            raise SeriesError(f"{at} is not a commit of {label or ref}",
                              fix="pick one of: " + ", ".join(c[:11] for c in commits))
        commits = commits[: commits.index(hits[0]) + 1]
    return PullHead(label or f"{url}@{ref}", url, ref, target, base, tuple(commits),
                    merged_as(cache, number, base, onto) if number is not None else "")


def pull_request(cache: ObjectCache, spec: str, target: str = "master",
                 upstream: str = UPSTREAM) -> PullHead:
    """``--pr N[@COMMIT]`` of openzfs/zfs."""
    number, at = parse_pr(spec)
    return resolve_pull(cache, upstream, f"refs/pull/{number}/head", at, target, upstream,
                        label=f"openzfs/zfs#{number}", number=number)


def merged_as(cache: ObjectCache, number: int, base: str, onto: str) -> str:
    """The commit of the target (after ``base``) that closes pull request ``number``:
    OpenZFS's squash merges say ``Closes #N`` in the body or ``(#N)`` in the subject.
    "" when none does (the pull request is open, or merged some other way)."""
    r = cache.run("log", "--format=%H", "-E", f"--grep=(Closes #{number}|\\(#{number}\\))$",
                  f"{base}..{onto}", check=False)
    hits = r.stdout.split()
    return hits[-1] if hits else ""



def export_patches(cache: ObjectCache, pull: PullHead, root: Path | None = None) -> Path:
    """The pull request's commits as ``*.patch`` files (git format-patch), in a
    folder of the cache named by its head: what ``--series FOLDER`` applies."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", pull.label.split("/")[-1])      # zfs#18902
    dest = (root or paths.cache_root() / "pulls") / slug(pull.url) / f"{name}-{pull.head[:12]}"
    if not any(dest.glob("*.patch")):
        dest.mkdir(parents=True, exist_ok=True)
        cache.run("format-patch", "--quiet", "-o", str(dest), f"{pull.base}..{pull.head}")
    return dest
