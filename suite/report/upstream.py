"""Findings on stock upstream OpenZFS that the default selection meets on every run
(``patches/upstream/findings.toml``). A failing case that is one of them, failing
only by the finding's symptom kinds, stays a failure: the verdict names it a known
upstream finding and counts the new failures apart from it. A finding upstream has
since fixed (``fixed_by``) is known only for builds whose source lacks that commit
(a series on an older base); where the build has the fix, the same failure is new."""
from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from suite.paths import patches_dir

if TYPE_CHECKING:
    from suite.report.page.model import Case

FINDINGS_FILE = "upstream/findings.toml"     # not *.toml at the top: those are series


@dataclass(frozen=True)
class UpstreamFinding:
    id: str
    title: str
    cases: tuple[str, ...]               # test names, as after "::" in a node id, or patterns
    kinds: tuple[str, ...]               # the symptom kinds that are this finding
    seen: str = ""
    where: str = ""
    # A regular expression the symptom's text must match as well, where a kind alone
    # says too little: every lockdep report is ``kernel:lockdep``, and the known one of
    # the zvol cases must not hide a new lock-order report in the same case.
    signature: str = ""
    # The upstream commit that fixes it: the finding is known only for a build whose
    # source lacks that commit (a series whose base predates the fix).
    fixed_by: str = ""
    # Explore: ops whose hang is this finding (``hang`` trips in them), on kernels
    # older than ``linux_before`` (e.g. "6.5"; empty: every kernel). Explore avoids
    # such an op from its first hang on (suite/explore/crashes/avoid.py).
    explore_hangs: tuple[str, ...] = ()
    linux_before: str = ""
    # Explore: ops whose failure of one of ``kinds`` is this finding (on kernels older
    # than ``linux_before``): counted and named as known, not shrunk again in a new shape.
    explore_ops: tuple[str, ...] = ()
    explore_after: tuple[str, ...] = ()     # ... and only after an op of these kinds

    def lists(self, nodeid: str) -> bool:
        """The case is one of this finding's: named, or matched by a ``*`` pattern
        (a finding every case of a kind meets, e.g. ``test_zvol_*``)."""
        test = nodeid.rsplit("::", 1)[-1]
        return any(test == c or ("*" in c and fnmatch.fnmatchcase(test, c))
                   for c in self.cases)

    def accounts(self, symptom: str) -> bool:
        """This symptom ("kind [row]: detail", or a bare kind) is this finding's."""
        if symptom_kind(symptom) not in self.kinds:
            return False
        return not self.signature or re.search(self.signature, symptom) is not None

    def covers(self, nodeid: str, symptoms: list[str]) -> bool:
        """The case is one of this finding's and failed by its symptoms alone."""
        return (self.lists(nodeid) and bool(symptoms)
                and all(self.accounts(s) for s in symptoms))


def load(path: Path | None = None) -> list[UpstreamFinding]:
    path = path or patches_dir() / FINDINGS_FILE
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text())
    return [UpstreamFinding(f["id"], f["title"], tuple(f["cases"]), tuple(f["kinds"]),
                            f.get("seen", ""), f.get("where", ""), f.get("signature", ""),
                            f.get("fixed_by", ""), tuple(f.get("explore_hangs", ())),
                            f.get("linux_before", ""), tuple(f.get("explore_ops", ())),
                            tuple(f.get("explore_after", ())))
            for f in data.get("findings", [])]


def symptom_kind(symptom: str) -> str:
    """The kind of a symptom as a Case holds it ("kind [row]: detail")."""
    return symptom.split(": ", 1)[0].split(" [", 1)[0].strip()     # kinds hold ":" too


def covering(nodeid: str, symptoms: list[str],
             findings: list[UpstreamFinding]) -> list[UpstreamFinding]:
    """The findings that together account for every one of a failed case's symptoms
    (one finding, or several that list the case: a corpus sequence can meet wrong
    bytes and, on a debug kernel, a lockdep report of another cause), each symptom by
    a finding of its kind whose signature it matches; [] when some symptom is none
    of theirs."""
    one = next((f for f in findings if f.covers(nodeid, symptoms)), None)
    if one is not None:
        return [one]
    listing = [f for f in findings if f.lists(nodeid)]
    used: list[UpstreamFinding] = []
    for s in symptoms:
        by = next((f for f in listing if f.accounts(s)), None)
        if by is None:
            return []
        if by not in used:
            used.append(by)
    return used


# Whether the run's builds lack a commit: True (every build lacks it), False (some
# build has it), None (could not tell: a source not in the object cache).
Lacks = Callable[[str], "bool | None"]


def lacks_in(commits: Iterable[str], is_ancestor: Callable[[str, str], "bool | None"]) -> Lacks:
    """A ``Lacks`` for builds of these source commits; ``is_ancestor(fix, commit)``
    answers one pair (git merge-base --is-ancestor)."""
    commits = [c for c in commits if c]

    def lacks(fix: str) -> bool | None:
        answers = [is_ancestor(fix, c) for c in commits]
        if True in answers:                  # some build has the fix
            return False
        return None if not answers or None in answers else True
    return lacks


def git_lacks(commits: Iterable[str]) -> Lacks:
    """A ``Lacks`` answered by the suite's git object cache (where every build's
    source was fetched and its series applied)."""
    from suite.source.objects import ObjectCache
    cache = ObjectCache()

    def is_ancestor(fix: str, commit: str) -> bool | None:
        # 0: an ancestor, 1: not; anything else (an object or the cache missing): unknown
        rc = cache.run("merge-base", "--is-ancestor", fix, commit, check=False).returncode
        return {0: True, 1: False}.get(rc)
    return lacks_in(commits, is_ancestor)


def applying(findings: list[UpstreamFinding], lacks: Lacks | None) -> list[UpstreamFinding]:
    """The findings that stand for this run's builds: one upstream has fixed stands
    only where every build lacks the fix (where that cannot be told, it stands, and
    its ``seen`` says so)."""
    out = []
    for f in findings:
        if not f.fixed_by:
            out.append(f)
            continue
        answer = lacks(f.fixed_by) if lacks else None
        if answer is False:
            continue
        note = (f"the build lacks upstream's fix {f.fixed_by}" if answer else
                f"could not tell whether the build has upstream's fix {f.fixed_by}")
        out.append(replace(f, seen=f"{f.seen}; {note}" if f.seen else note))
    return out


def mark(cases: list["Case"], findings: list[UpstreamFinding] | None = None,
         lacks: Lacks | None = None) -> None:
    """Name each failed case that is a known upstream finding (``Case.known``);
    ``lacks`` tells which fixed findings still stand for the run's builds."""
    findings = applying(load() if findings is None else findings, lacks)
    for c in cases:
        if c.status not in ("fail", "known"):
            continue
        found = covering(c.nodeid, c.symptoms, findings)
        if found:
            c.known = "+".join(f.id for f in found)
            if c.status == "known":         # xfail: its reason names the finding already
                continue
            said = "; ".join(f"{f.id} ({f.seen}; {f.where})" for f in found)
            c.why = f"known upstream finding {said}: {c.why}"
