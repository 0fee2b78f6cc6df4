"""Patch series: manifests in ``patches/``, selection, and application.

A manifest names a series by where it lives (a fork URL and branch) and pins
it (head commit, the upstream base it was written on). It holds no patch
text: commits are fetched at run time.

Selection syntax (``--series``, repeatable or comma separated, stacked in
order):

- ``async-dio``            the pinned head of the series
- ``async-dio@<commit>``   the series up to that commit (any commit inside it)
- ``async-dio@branch``     the live branch head (fetched), instead of the pin
- ``./dir/`` or ``dir``    a folder of local ``*.patch`` files, applied in name order

Application happens in a temporary git index inside the object cache (``git
apply --cached``) and ends in a commit object; a patch that does not apply
raises SeriesError naming the patch, the file and the hunk, and nothing is
left behind.
"""
from __future__ import annotations

import os
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from suite import paths
from suite.errors import SeriesError, SourceError
from suite.symptoms import SymptomSpec
from suite.source.objects import ObjectCache, Resolved, git, is_commit_id


@dataclass(frozen=True)
class KnownBug:
    """A bug the series had at some commit, and the commit that fixed it.

    ``bad`` is a commit of the series that has the bug; ``fixed`` the first one
    without it. Cases name the bug they target, so a case can be shown failing
    at ``bad`` and passing at ``fixed`` (and the gate can bisect).
    """
    id: str
    title: str
    bad: str
    fixed: str
    cases: tuple[str, ...] = ()
    symptom: SymptomSpec | None = None      # what counts as catching it
    # Why no case can show it yet and what would (e.g. "kasan: a use-after-free
    # that leaves the bytes right"): the bug is recorded, not run.
    deferred: str = ""
    # The kernel profile its cases need (e.g. "debian-6.1-debug": a use-after-free
    # that leaves the bytes right shows only as a KASAN report); "" = the run's own.
    kernel: str = ""


@dataclass(frozen=True)
class Manifest:
    name: str
    title: str
    url: str
    branch: str
    head: str
    base: str
    base_url: str
    pr: str = ""
    description: str = ""
    features: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    bugs: tuple[KnownBug, ...] = ()
    path: Path | None = None

    def bug_tags(self, commit: str) -> str:
        """``[has a, b]  [fixes c]`` for a commit of the series: every known bug it
        has (a commit may have several) and every one it fixes."""
        has = [b.id for b in self.bugs if b.bad == commit]
        fixes = [b.id for b in self.bugs if b.fixed == commit]
        return "".join(f"  [{verb} {', '.join(ids)}]"
                       for verb, ids in (("has", has), ("fixes", fixes)) if ids)


def load_manifest(path: Path) -> Manifest:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SeriesError(f"cannot read series manifest {path}: {e}",
                          fix="fix the TOML syntax (see patches/README.md)") from e
    required = ("name", "url", "branch", "head", "base")
    missing = [k for k in required if not data.get(k)]
    if missing:
        raise SeriesError(f"series manifest {path} lacks {', '.join(missing)}",
                          fix="every manifest needs name, url, branch, head and base")
    for k in ("head", "base"):
        if not is_commit_id(str(data[k])) or len(str(data[k])) != 40:
            raise SeriesError(f"{path}: '{k}' must be a full 40-hex commit id, "
                              f"got {data[k]!r}", fix="pin the series with full commit ids")
    try:
        bugs = tuple(KnownBug(id=b["id"], title=b.get("title", ""), bad=b["bad"],
                              fixed=b["fixed"], cases=tuple(b.get("cases", ())),
                              symptom=SymptomSpec.from_dict(b["symptom"])
                              if "symptom" in b else None, deferred=b.get("deferred", ""),
                              kernel=b.get("kernel", ""))
                     for b in data.get("bugs", []))
    except (KeyError, ValueError, TypeError) as e:
        raise SeriesError(f"{path}: a [[bugs]] entry is malformed: {e}",
                          fix="each bug needs id, bad, fixed, cases and a [bugs.symptom] "
                              "with kinds (see patches/README.md)") from e
    return Manifest(
        name=data["name"], title=data.get("title", ""), url=data["url"],
        branch=data["branch"], head=data["head"], base=data["base"],
        base_url=data.get("base_url", "https://github.com/openzfs/zfs"),
        pr=data.get("pr", ""), description=data.get("description", "").strip(),
        features=tuple(data.get("features", ())), params=tuple(data.get("params", ())),
        bugs=bugs, path=path)


def available(directory: Path | None = None) -> dict[str, Manifest]:
    directory = directory or paths.patches_dir()
    out: dict[str, Manifest] = {}
    for p in sorted(directory.glob("*.toml")):
        m = load_manifest(p)
        out[m.name] = m
    return out


# -- selection ---------------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    """One element of ``--series``: a named series (maybe at a commit) or a patch dir."""
    name: str | None = None
    at: str | None = None           # commit prefix, "branch", or None for the pin
    patch_dir: Path | None = None

    def __str__(self) -> str:
        if self.patch_dir:
            return str(self.patch_dir)
        return f"{self.name}@{self.at}" if self.at else str(self.name)


def parse_selection(spec: str | list[str] | None) -> list[Selection]:
    """Parse ``--series`` values: 'a,b@c', ['a', 'dir/'] ..."""
    if not spec:
        return []
    items = spec if isinstance(spec, list) else [spec]
    out: list[Selection] = []
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            if part in ("none", "stock", "base"):
                continue
            if "/" in part or part.endswith(".patch") or Path(part).is_dir():
                d = Path(part).expanduser()
                if not d.is_dir():
                    raise SeriesError(f"patch folder {d} does not exist",
                                      fix="pass a folder of *.patch files or a series name")
                out.append(Selection(patch_dir=d.resolve()))
                continue
            name, _, at = part.partition("@")
            if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
                raise SeriesError(f"bad series name {name!r}",
                                  fix="use a name from patches/*.toml, e.g. async-dio")
            if at and at != "branch" and not is_commit_id(at):
                raise SeriesError(f"'{part}': after @ comes a commit id (7-40 hex) or 'branch'",
                                  fix=f"e.g. --series {name}@<commit from `python -m suite "
                                      f"series {name}`>")
            out.append(Selection(name=name, at=at or None))
    return out


# -- resolution -----------------------------------------------------------------

@dataclass(frozen=True)
class AppliedSeries:
    """What a selection resolved to: the commits applied, in order."""
    selection: str
    name: str
    url: str
    commits: tuple[str, ...]
    subjects: tuple[str, ...]
    features: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceTree:
    """The final tree to build: a commit in the object cache and how it was made."""
    base: Resolved
    commit: str
    tree: str
    describe: str
    series: tuple[AppliedSeries, ...] = ()
    missing_files: tuple[str, ...] = field(default=())

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(f for s in self.series for f in s.features)


def series_commits(cache: ObjectCache, m: Manifest, at: str | None,
                   offline: bool = False) -> list[str]:
    """Commits of series ``m`` from its base up to ``at`` (inclusive)."""
    if at == "branch":
        head = cache.resolve(m.url, m.branch, offline=offline).commit
    else:
        if not cache.has_commit(m.head) and not offline:
            cache.resolve(m.url, m.branch)
            if not cache.has_commit(m.head):
                try:
                    cache.fetch(m.url, m.head)
                except SourceError:
                    pass
        if not cache.has_commit(m.head):
            raise SeriesError(
                f"series {m.name}: pinned head {m.head[:11]} is not on branch {m.branch} "
                f"of {m.url} any more (force-pushed?)",
                fix=f"use --series {m.name}@branch for the live branch, or update "
                    f"head in {m.path}")
        head = m.head
    if not cache.has_commit(m.base):
        cache.resolve(m.base_url, m.base, offline=offline)
    commits = cache.rev_list(m.base, head)
    if not commits:
        raise SeriesError(f"series {m.name}: no commits between base {m.base[:11]} and "
                          f"head {head[:11]}", fix=f"check base/head in {m.path}")
    if at in (None, "branch"):
        return commits
    matches = [c for c in commits if c.startswith(at.lower())]
    if len(matches) != 1:
        listing = "\n".join(f"  {c[:11]} {cache.subject(c)}" for c in commits)
        what = "is ambiguous in" if matches else "is not a commit of"
        raise SeriesError(f"'{at}' {what} series {m.name}",
                          fix="pick one of the series' commits (oldest first):",
                          detail=listing)
    return commits[: commits.index(matches[0]) + 1]


def _check_names(selections: list[Selection], manifests: dict[str, Manifest]) -> None:
    for s in selections:
        if s.name and s.name not in manifests:
            raise SeriesError(f"unknown series '{s.name}'",
                              fix=f"known series: {', '.join(sorted(manifests)) or 'none'} "
                                  f"(manifests live in {paths.patches_dir()})")


def choose_base(cache: ObjectCache, selections: list[Selection],
                manifests: dict[str, Manifest] | None = None, source: str | None = None,
                ref: str | None = None, offline: bool = False) -> Resolved:
    """The OpenZFS commit a build starts from (the one rule for it):
    ``--zfs-source``/``--zfs-ref`` when given; else the first named series'
    pinned base, so ``--series async-dio`` builds exactly what its author
    pushed; else upstream master."""
    from suite.source.objects import resolve_source
    manifests = manifests if manifests is not None else available()
    _check_names(selections, manifests)
    first = next((manifests[s.name] for s in selections if s.name), None)
    if source or ref or first is None:
        return resolve_source(source, ref, cache, offline=offline)
    return cache.resolve(first.base_url, first.base, offline=offline)


def resolve(cache: ObjectCache, base: Resolved | None, selections: list[Selection],
            manifests: dict[str, Manifest] | None = None, offline: bool = False) -> SourceTree:
    """Resolve selections on top of ``base`` (None: ``choose_base``) into the final commit."""
    manifests = manifests if manifests is not None else available()
    _check_names(selections, manifests)
    if base is None:
        base = choose_base(cache, selections, manifests, offline=offline)
    current = base.commit
    applied: list[AppliedSeries] = []
    for s in selections:
        if s.patch_dir:
            current, names = apply_patch_dir(cache, current, s.patch_dir)
            applied.append(AppliedSeries(str(s), s.patch_dir.name, str(s.patch_dir),
                                         (current,), tuple(names)))
            continue
        m = manifests[s.name]  # type: ignore[index]
        commits = series_commits(cache, m, s.at, offline=offline)
        parent = cache.run("rev-parse", f"{commits[0]}^").stdout.strip()
        if parent == current:
            current = commits[-1]          # the series sits right here: use it as pushed
        else:
            for c in commits:
                current = cherry_pick(cache, current, c, m.name)
        applied.append(AppliedSeries(str(s), m.name, m.url, tuple(commits),
                                     tuple(cache.subject(c) for c in commits), m.features))
    return SourceTree(base=base, commit=current, tree=cache.tree_of(current),
                      describe=cache.describe(current), series=tuple(applied))


# -- application ------------------------------------------------------------------

def _apply_to_index(cache: ObjectCache, onto: str, patch: bytes, label: str) -> str:
    """Apply ``patch`` to the tree of ``onto`` in a throwaway index; return tree id."""
    fd, index = tempfile.mkstemp(prefix="ozfs-apply.")
    os.close(fd)
    try:
        env = {"GIT_INDEX_FILE": index}
        cache.run("read-tree", onto, env=env)
        zero = ["--unidiff-zero"] if zero_context(patch) else []
        p = git("apply", "--cached", "-v", "--whitespace=nowarn", *zero, git_dir=cache.path,
                env=env, input=patch, text=False, check=False)
        if p.returncode != 0:
            raise hunk_error(label, patch.decode(errors="replace"),
                             p.stderr.decode(errors="replace"))
        return cache.run("write-tree", env=env).stdout.strip()
    finally:
        os.unlink(index)


def zero_context(patch: bytes) -> bool:
    """A ``git diff -U0`` patch (a fix of our own: only the lines it changes): no hunk
    line is context, so git must be told (``--unidiff-zero``) not to ask for any."""
    body = False
    for line in patch.splitlines():
        if line.startswith(b"@@"):
            body = True
        elif line.startswith(b"diff --git"):
            body = False
        elif body and line.startswith(b" "):
            return False
    return body


def hunk_error(label: str, patch: str, stderr: str) -> SeriesError:
    """Name the patch, file and hunk that did not apply."""
    m = re.search(r"patch failed: (\S+):(\d+)", stderr)
    where, hunk = "", ""
    if m:
        path, line = m.group(1), int(m.group(2))
        where = f" at {path}:{line}"
        hunk = find_hunk(patch, path, line)
    else:
        m2 = re.search(r"error: (\S+): (does not exist in index|already exists in index)", stderr)
        if m2:
            where = f" ({m2.group(1)} {m2.group(2)})"
    return SeriesError(f"patch {label} does not apply{where}",
                       fix="rebase the series onto this base, or pick the base it was "
                           "written on (--zfs-ref)",
                       detail=(hunk + "\n" if hunk else "") + stderr.strip())


def find_hunk(patch: str, path: str, line: int) -> str:
    """The hunk of ``path`` in ``patch`` whose old range starts at ``line``."""
    current = None
    lines = patch.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("diff --git "):
            current = ln.split(" b/", 1)[-1]
        m = re.match(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", ln)
        if m and current == path and int(m.group(1)) == line:
            end = i + 1
            while end < len(lines) and not lines[end].startswith(("@@", "diff --git ")):
                end += 1
            return "\n".join(lines[i:end])
    return ""


def cherry_pick(cache: ObjectCache, onto: str, commit: str, series: str) -> str:
    """Replay ``commit`` onto ``onto`` as a new commit (author and message kept)."""
    patch = cache.run("diff", "--binary", "--full-index", f"{commit}^", commit,
                      text=False).stdout
    tree = _apply_to_index(cache, onto, patch, f"{series}:{commit[:11]} "
                                               f"({cache.subject(commit)})")
    fmt = cache.run("log", "-1", "--format=%an%x00%ae%x00%aD%x00%B", commit).stdout
    an, ae, ad, msg = fmt.split("\x00", 3)
    env = {"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad,
           "GIT_COMMITTER_NAME": "ozfs-vmci", "GIT_COMMITTER_EMAIL": "ozfs-vmci@localhost",
           "GIT_COMMITTER_DATE": ad}
    return cache.run("commit-tree", tree, "-p", onto, "-m",
                     msg + f"\n(cherry picked from commit {commit})", env=env).stdout.strip()


def apply_patch_dir(cache: ObjectCache, onto: str, directory: Path) -> tuple[str, list[str]]:
    """Apply every ``*.patch``/``*.diff`` in ``directory`` in name order."""
    patches = sorted([*directory.glob("*.patch"), *directory.glob("*.diff")])
    if not patches:
        raise SeriesError(f"no *.patch files in {directory}",
                          fix="put git format-patch output (or plain diffs) there")
    current = onto
    env = {"GIT_AUTHOR_NAME": "local patch", "GIT_AUTHOR_EMAIL": "local@localhost",
           "GIT_COMMITTER_NAME": "ozfs-vmci", "GIT_COMMITTER_EMAIL": "ozfs-vmci@localhost",
           "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
    for p in patches:
        tree = _apply_to_index(cache, current, p.read_bytes(), p.name)
        current = cache.run("commit-tree", tree, "-p", current, "-m", f"local patch {p.name}",
                            env=env).stdout.strip()
    return current, [p.name for p in patches]
