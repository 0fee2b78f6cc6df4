"""Sources: one local git object cache for every OpenZFS URL or directory used.

Everything is plain git, so a user's ``url.<mirror>.insteadOf`` configuration
applies untouched: the suite always speaks real URLs
(``https://github.com/openzfs/zfs``) and git decides where they really come
from.

The cache is a bare repository (``paths.git_cache()``). It is seeded by
``git clone --bare`` of the first source, never by ``init`` + ``fetch``: a
snapshot that lacks a blob can still be cloned locally but not fetched whole.
Fetched refs are stored under ``refs/ozfs/<slug>/<ref>`` so a later run that asks
for a commit already present fetches nothing.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from suite import paths
from suite.errors import SourceError, SourceUnreachable
from suite.locks import file_lock

DEFAULT_URL = "https://github.com/openzfs/zfs"
DEFAULT_REF = "master"
# A branch fetched less than this many seconds ago is not fetched again.
FETCH_TTL = float(os.environ.get("OZFS_VMCI_FETCH_TTL", "3600"))
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
GIT_TIMEOUT = float(os.environ.get("OZFS_VMCI_GIT_TIMEOUT", "1800"))


def git(*args: str, cwd: Path | None = None, git_dir: Path | None = None,
        env: dict[str, str] | None = None, input: str | bytes | None = None,
        check: bool = True, text: bool = True) -> subprocess.CompletedProcess:
    """Run git; on failure raise SourceError with git's own message."""
    cmd = ["git"]
    if git_dir is not None:
        cmd.append(f"--git-dir={git_dir}")
    cmd.extend(args)
    full_env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    if env:
        full_env.update(env)
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=full_env, input=input,
                              capture_output=True, text=text, timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise SourceError(f"git {' '.join(args[:3])} ran past its {GIT_TIMEOUT:.0f}s deadline",
                          fix="the source may be unreachable or very slow; raise "
                              "OZFS_VMCI_GIT_TIMEOUT or use a local mirror (insteadOf)") from e
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise SourceError(f"git {' '.join(args[:3])} failed", detail=err.strip())
    return proc


def is_commit_id(ref: str) -> bool:
    return bool(_HEX.match(ref))


def slug(url: str) -> str:
    """A stable, readable ref namespace for a URL or directory."""
    s = re.sub(r"^[a-z]+://", "", url.rstrip("/")).removesuffix(".git")
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_")
    return s[-60:] + "-" + hashlib.sha1(url.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Resolved:
    """A ref resolved to a commit in the object cache."""
    url: str
    ref: str
    commit: str

    @property
    def short(self) -> str:
        return self.commit[:11]


@dataclass
class ObjectCache:
    """The bare repository that holds the objects of every source."""
    path: Path = field(default_factory=paths.git_cache)

    def exists(self) -> bool:
        return (self.path / "HEAD").exists()

    def run(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return git(*args, git_dir=self.path, **kw)

    def has_commit(self, rev: str) -> str | None:
        """Full commit id if ``rev`` names a commit present here, else None."""
        if not self.exists():
            return None
        p = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        return p.stdout.strip() or None if p.returncode == 0 else None

    def lock(self, what: str):
        """One process at a time creates or fetches into the cache; the others wait
        and then reuse what it brought (xdist workers, two sessions at once)."""
        return file_lock(self.path.parent / "objects.lock", what)

    def seed(self, url: str) -> None:
        """Create the cache by cloning ``url`` (bare, all branches), once."""
        with self.lock(f"seeding the git object cache from {url}"):
            self._seed(url)

    def _seed(self, url: str) -> None:
        if self.exists():           # another process seeded it while we waited
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="objects.", dir=self.path.parent))
        try:
            p = git("clone", "--bare", "--quiet", url, str(tmp / "r.git"), check=False)
            if p.returncode != 0:
                raise unreachable(url, p.stderr)
            os.replace(tmp / "r.git", self.path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _stamp(self, url: str, ref: str) -> Path:
        return self.path / "ozfs-fetched" / slug(url) / ref.replace("/", "_")

    def fetch(self, url: str, ref: str) -> str:
        """Fetch ``ref`` of ``url`` into the cache; return the commit id."""
        with self.lock(f"fetching {ref} of {url}"):
            return self._fetch(url, ref)

    def _fetch(self, url: str, ref: str) -> str:
        if not self.exists():
            self._seed(url)
        local_ref = f"refs/ozfs/{slug(url)}/{ref}"
        src = ref if is_commit_id(ref) else (
            ref if ref.startswith("refs/") else f"refs/heads/{ref}")
        p = self.run("fetch", "--quiet", "--no-tags", url, f"+{src}:{local_ref}", check=False)
        if p.returncode != 0 and not ref.startswith("refs/") and not is_commit_id(ref):
            # Maybe a tag.
            p = self.run("fetch", "--quiet", "--no-tags", url,
                         f"+refs/tags/{ref}:{local_ref}", check=False)
        if p.returncode != 0:
            if "couldn't find remote ref" in p.stderr or "not our ref" in p.stderr:
                raise SourceError(
                    f"ref '{ref}' does not exist at {url}",
                    fix="check the branch/tag/commit name (git ls-remote "
                        f"{url} lists the branches and tags)",
                    detail=p.stderr.strip())
            raise unreachable(url, p.stderr)
        stamp = self._stamp(url, ref)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
        return self.run("rev-parse", f"{local_ref}^{{commit}}").stdout.strip()

    def resolve(self, url: str, ref: str, offline: bool = False) -> Resolved:
        """Resolve ``ref`` at ``url`` to a commit, fetching only if needed.

        A commit id already in the cache is used as is. A branch fetched
        within FETCH_TTL is reused. If a fetch fails but the branch was
        fetched before, the old commit is used with a warning on stderr.
        """
        present = self.has_commit(ref) if is_commit_id(ref) else None
        if present:
            return Resolved(url, ref, present)
        found = self._known(url, ref, offline)
        if found:
            return found
        with self.lock(f"fetching {ref} of {url}"):
            # Another process may have fetched it while we waited for the lock.
            found = self._known(url, ref, offline)
            if found:
                return found
            local_ref = f"refs/ozfs/{slug(url)}/{ref}"
            known = self.has_commit(local_ref)
            try:
                return Resolved(url, ref, self._fetch(url, ref))
            except SourceError as e:
                if known:
                    import sys
                    print(f"warning: could not refresh {ref} from {url}; using cached "
                          f"{known[:11]} ({e.what})", file=sys.stderr)
                    return Resolved(url, ref, known)
                raise

    def _known(self, url: str, ref: str, offline: bool) -> Resolved | None:
        """The cached commit of ``ref`` when it may be used without a fetch."""
        if is_commit_id(ref) and (present := self.has_commit(ref)):
            return Resolved(url, ref, present)
        known = self.has_commit(f"refs/ozfs/{slug(url)}/{ref}")
        stamp = self._stamp(url, ref)
        fresh = known and stamp.exists() and time.time() - stamp.stat().st_mtime < FETCH_TTL
        if known and (offline or fresh):
            return Resolved(url, ref, known)
        if offline:
            raise SourceError(f"{ref} of {url} is not in the local cache and --offline is set",
                              fix="run once without --offline")
        return None

    def commit_of_local_dir(self, directory: Path, ref: str | None) -> Resolved:
        """Bring a local checkout's commit (and uncommitted tracked changes) in."""
        directory = directory.resolve()
        if not (directory / ".git").exists():
            raise SourceError(f"{directory} is not a git checkout",
                              fix="pass a git checkout of OpenZFS (or a URL) as --zfs-source")
        rev = ref or "HEAD"
        dirty = ""
        if ref is None:
            # Include uncommitted changes to tracked files, like a developer expects.
            dirty = git("stash", "create", cwd=directory).stdout.strip()
        commit = dirty or git("rev-parse", "--verify", f"{rev}^{{commit}}", cwd=directory,
                              check=False).stdout.strip()
        if not commit:
            raise SourceError(f"ref '{rev}' does not exist in {directory}",
                              fix="pass an existing branch, tag or commit as --zfs-ref")
        with self.lock(f"fetching {commit[:11]} of {directory}"):
            if not self.exists():
                self._seed(str(directory))
            if not self.has_commit(commit):
                self.run("fetch", "--quiet", "--no-tags", str(directory), commit)
        return Resolved(str(directory), rev + (" (+uncommitted)" if dirty else ""), commit)

    # -- trees ---------------------------------------------------------------

    def tree_of(self, commit: str) -> str:
        return self.run("rev-parse", f"{commit}^{{tree}}").stdout.strip()

    def rev_list(self, base: str, head: str) -> list[str]:
        out = self.run("rev-list", "--reverse", "--topo-order", f"{base}..{head}").stdout
        return out.split()

    def subject(self, commit: str) -> str:
        return self.run("log", "-1", "--format=%s", commit).stdout.strip()

    def describe(self, commit: str) -> str:
        p = self.run("describe", "--always", "--long", "--tags", commit, check=False)
        return p.stdout.strip() or commit[:11]

    def export(self, commit: str, dest: Path, needed: Sequence[str] = ()) -> list[str]:
        """Write the tree of ``commit`` into ``dest`` (no .git inside).

        Files whose blob the cache lacks are left out and returned. If one of
        them lies under a ``needed`` prefix the export fails instead: the
        build would need that file.
        """
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(prefix="ozfs-idx.", delete=False) as f:
            index = f.name
        try:
            env = {"GIT_INDEX_FILE": index}
            self.run("read-tree", commit, env=env)
            p = git(f"--git-dir={self.path}", f"--work-tree={dest}", "checkout-index",
                    "-a", "-f", env=env, check=False)
        finally:
            os.unlink(index)
        missing = re.findall(r"unable to read sha1 file of (\S+)", p.stderr)
        if p.returncode != 0 and not missing:
            raise SourceError(f"could not export {commit[:11]} into {dest}",
                              detail=p.stderr.strip())
        bad = [m for m in missing if any(m.startswith(n) for n in needed)]
        if bad:
            raise SourceError(
                f"the source snapshot lacks files the build needs: {', '.join(bad)}",
                fix="fetch a complete copy of the repository (or a mirror that has them)")
        return missing


def unreachable(url: str, stderr: str) -> SourceUnreachable:
    return SourceUnreachable(
        url, f"cannot reach OpenZFS source {url}",
        fix=(f"make it reachable, or map it to a local mirror with "
             f"`git config --global url.<mirror>.insteadOf {url}`, "
             f"or pass --zfs-source <local git checkout>"),
        detail=stderr.strip())


def resolve_source(source: str | None, ref: str | None, cache: ObjectCache | None = None,
                   offline: bool = False) -> Resolved:
    """Resolve ``--zfs-source``/``--zfs-ref`` to a commit in the cache."""
    cache = cache or ObjectCache()
    src = source or DEFAULT_URL
    if "://" not in src and not src.startswith("git@") and Path(src).exists():
        return cache.commit_of_local_dir(Path(src), ref)
    return cache.resolve(src, ref or DEFAULT_REF, offline=offline)
