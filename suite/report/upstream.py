"""Findings on stock upstream OpenZFS that the default selection meets on every run
(``patches/upstream/findings.toml``). A failing case that is one of them is
reported as an expected failure (xfail, suite/plugin/expected.py) naming the
finding, and the run's verdict counts the new failures apart from it.

A finding is matched by its **signature**, never by a kind alone: a symptom of one
of its own ``kinds`` whose signed text (``kind: detail @ frames``,
suite/signatures.py) matches its ``signature``; a finding of a catch-all kind (a
kernel report, a hang, a task in D state) must carry one. What follows from the
bug (a command that never returned, tasks left waiting: ``also``) is accepted only
beside a symptom of its own. What the harness failed to prove is never a finding:
a ``no-result`` or a lost guest with no matched report of the finding's own stays
unexplained, and the run is inconclusive. A finding upstream has since fixed
(``fixed_by``) is known only for builds whose source lacks that commit (a series
on an older base); where the build has the fix, the same failure is new."""
from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from suite.errors import SuiteError
from suite.paths import patches_dir
from suite.signatures import matches
from suite.symptoms import INFRASTRUCTURE

if TYPE_CHECKING:
    from suite.report.page.model import Case

FINDINGS_FILE = "upstream/findings.toml"     # not *.toml at the top: those are series


@dataclass(frozen=True)
class UpstreamFinding:
    id: str
    title: str
    cases: tuple[str, ...]               # test names, as after "::" in a node id, or patterns
    kinds: tuple[str, ...]               # the symptom kinds that are this finding's own
    seen: str = ""
    where: str = ""
    # A regular expression each symptom of its own kinds must match (its signed text:
    # ``kind: detail @ frames``), where a kind alone says too little: every panic is
    # ``kernel:spl_panic``, every lockdep report ``kernel:lockdep``. Required for a
    # catch-all kind (:data:`CATCH_ALL`).
    signature: str = ""
    # The upstream commit that fixes it: the finding is known only for a build whose
    # source lacks that commit (a series whose base predates the fix).
    fixed_by: str = ""
    # Explore: ops whose hang is this finding (``hang`` trips in them), on kernels
    # older than ``linux_before`` (e.g. "6.5"; empty: every kernel). Explore avoids
    # such an op from its first hang on (suite/explore/crashes/avoid.py).
    explore_hangs: tuple[str, ...] = ()
    linux_before: str = ""
    # Explore: ops in which a kernel report of this finding's (by its signature) comes
    # on every fresh guest (lockdep's: once a boot). Avoided from its first report on,
    # so a debug kernel's guests are not each spent on it (crashes/avoid.py).
    explore_report_ops: tuple[str, ...] = ()
    # Explore: ops whose failure of one of ``kinds`` is this finding (on kernels older
    # than ``linux_before``): counted and named as known, not shrunk again in a new shape.
    explore_ops: tuple[str, ...] = ()
    # ... or any op through one of these callers (``nfs``: nfsd reads by splice)
    explore_callers: tuple[str, ...] = ()
    explore_after: tuple[str, ...] = ()     # ... and only when the op that last changed
    #                                         the first wrong byte is of these kinds
    # What follows from the bug, accepted only beside a symptom of its own: the command
    # a panic killed never returned (``no-result``), the tasks that waited on it.
    also: tuple[str, ...] = ()
    # Explore: the failing op was Direct I/O (O_DIRECT, or the dataset's direct=always).
    explore_direct: bool = False
    # Explore: a hang is this finding only when its tasks' stacks match this.
    explore_hang_stack: str = ""
    # A signature per kind (``[findings.signatures]``: kind = regex), where one
    # expression cannot say each of its own kinds; the others take ``signature``.
    signatures: tuple[tuple[str, str], ...] = ()
    # Explore: a failure of ``explore_ops`` is this finding only when what the engine
    # said of it (the verdict's text) matches this (e.g. the bytes a write left).
    explore_why: str = ""
    # Upstream status (:data:`STATUSES`): new, known (``status_ref``: the issue), fixed
    # (``status_ref``: master's commit), false-positive; ``status_why``: the evidence.
    status: str = ""
    status_ref: str = ""
    status_why: str = ""
    # What a build without --enable-debug does (ASSERTs compiled out), as measured
    # (``suite build --production``, on the KASAN kernel where memory is at stake).
    production: str = ""
    # ``private``: a memory-safety result, reported through OpenZFS's security policy
    # (GitHub's "Report a vulnerability"); export writes no public issue body for it.
    disclosure: str = ""
    # The folder of our candidate fix under patches/upstream/fixes/ (default: the id;
    # one fix may serve two findings).
    fix: str = ""
    # A module parameter set at load (``NAME=VALUE``) without which it does not stand
    # (a pull request's switch): its case passing on a run without it is no news.
    stands_with: str = ""
    # Who meets it in practice, as measured (a real caller: an NFS client, a VM's disk),
    # with the script beside repro.sh that shows it.
    impact: str = ""

    @property
    def private(self) -> bool:
        return self.disclosure == "private"

    def signature_of(self, kind: str) -> str:
        return dict(self.signatures).get(kind, self.signature)

    def lists(self, nodeid: str) -> bool:
        """The case is one of this finding's: named, or matched by a ``*`` pattern
        (a finding every case of a kind meets, e.g. ``test_zvol_*``)."""
        test = nodeid.rsplit("::", 1)[-1]
        return any(test == c or ("*" in c and fnmatch.fnmatchcase(test, c))
                   for c in self.cases)

    def accounts(self, symptom: str) -> bool:
        """This symptom (its signed text, "kind [row]: detail @ frames", or a bare
        kind) is this finding's own: one of its kinds, matching its signature."""
        kind = symptom_kind(symptom)
        if kind not in self.kinds:
            return False
        sig = self.signature_of(kind)
        return not sig or matches(sig, symptom)

    def follows(self, symptom: str) -> bool:
        """This symptom may follow from the finding (``also``), beside one of its own."""
        return symptom_kind(symptom) in self.also

    def covers(self, nodeid: str, symptoms: list[str]) -> bool:
        """The case is one of this finding's and failed by its symptoms alone: at
        least one of its own, the rest its own or what follows from it."""
        return (self.lists(nodeid) and any(self.accounts(s) for s in symptoms)
                and all(self.accounts(s) or self.follows(s) for s in symptoms))


# Kinds that say too little alone: any panic, any hang. A finding of one of them
# carries a signature (the report's title and frames, the stack it waits in).
CATCH_ALL = ("kernel:", "hang", "D-state", "killed", "teardown", "error:")
# What may follow from a finding, beside a symptom of its own: never a finding alone.
CONSEQUENCES = frozenset({"no-result", "hang", "D-state", "kernel:hung_task", "guest-lost",
                          "backstop"})


def catch_all(kind: str) -> bool:
    return any(kind == c or (c.endswith(":") and kind.startswith(c)) for c in CATCH_ALL)


STATUSES = ("new", "known", "fixed", "false-positive")


def check(f: UpstreamFinding) -> list[str]:
    """What is wrong with a finding's entry (empty: nothing): an infrastructure
    kind of its own, a catch-all kind without a signature, a consequence that is
    not one, a signature that is not a regular expression."""
    out = []
    for k in f.kinds:
        if k in INFRASTRUCTURE:
            out.append(f"kind {k!r}: what the harness failed to prove is never a finding "
                       f"(put it in also = [...], beside a symptom of its own)")
        elif catch_all(k) and not f.signature_of(k):
            out.append(f"kind {k!r} says too little alone: give a signature (the report's "
                       f"title or frames, the stack it waits in)")
    for k in f.also:
        if k not in CONSEQUENCES:
            out.append(f"also {k!r}: only {', '.join(sorted(CONSEQUENCES))} may follow from a "
                       f"finding")
    for k in dict(f.signatures):
        if k not in f.kinds:
            out.append(f"signatures.{k}: not one of its kinds")
    for what, rx in (("signature", f.signature), ("explore_hang_stack", f.explore_hang_stack),
                     ("explore_why", f.explore_why),
                     *((f"signatures.{k}", v) for k, v in f.signatures)):
        try:
            re.compile(rx)
        except re.error as e:
            out.append(f"{what} {rx!r} is not a regular expression: {e}")
    if f.status and f.status not in STATUSES:
        out.append(f"status {f.status!r}: one of {', '.join(STATUSES)}, with status_why")
    elif f.status and not f.status_why or (f.status in ("known", "fixed") and not f.status_ref):
        out.append(f"status {f.status}: say why (status_why)" +
                   (" and give the issue or commit (status_ref)"
                    if f.status in ("known", "fixed") else ""))
    if f.disclosure not in ("", "public", "private"):
        out.append(f"disclosure {f.disclosure!r}: public or private")
    if f.private and not f.production:
        out.append("disclosure private: say what a production build does (production)")
    if f.explore_hangs and not f.explore_hang_stack:
        out.append("explore_hangs needs explore_hang_stack: an op is avoided only after a "
                   "hang whose stacks match the known one")
    return out


def load(path: Path | None = None) -> list[UpstreamFinding]:
    """The findings of ``path`` (default: the repository's), each checked
    (:func:`check`): an entry that would match by kind alone is refused."""
    path = path or patches_dir() / FINDINGS_FILE
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text())
    out = [_entry(f) for f in data.get("findings", [])]
    wrong = [f"{f.id}: {w}" for f in out for w in check(f)]
    if wrong:
        raise SuiteError(f"{path}: {len(wrong)} finding entr{'y' if len(wrong) == 1 else 'ies'} "
                         f"would match more than their bug", fix="\n".join(wrong))
    return out


_TUPLES = ("cases", "kinds", "explore_hangs", "explore_report_ops", "explore_ops", "explore_callers", "explore_after", "also")


def _entry(f: dict) -> UpstreamFinding:
    """One ``[[findings]]`` table as a finding: lists as tuples, ``[findings.signatures]``
    as sorted pairs; a key the dataclass does not know is refused by name."""
    known = set(UpstreamFinding.__dataclass_fields__)
    unknown = sorted(set(f) - known)
    if unknown:
        raise SuiteError(f"finding {f.get('id', '?')}: unknown key(s) {', '.join(unknown)}",
                         fix=f"use the fields of UpstreamFinding: {', '.join(sorted(known))}")
    kw = {k: tuple(v) if k in _TUPLES else v for k, v in f.items()}
    kw["signatures"] = tuple(sorted((f.get("signatures") or {}).items()))
    kw["explore_direct"] = bool(f.get("explore_direct", False))
    return UpstreamFinding(**kw)


def symptom_kind(symptom: str) -> str:
    """The kind of a symptom as a Case holds it ("kind [row]: detail")."""
    return symptom.split(": ", 1)[0].split(" [", 1)[0].strip()     # kinds hold ":" too


def covering(nodeid: str, symptoms: list[str],
             findings: list[UpstreamFinding]) -> list[UpstreamFinding]:
    """The findings that together account for every one of a failed case's symptoms
    (one finding, or several that list the case: a corpus sequence can meet wrong
    bytes and, on a debug kernel, a lockdep report of another cause): each symptom
    a finding's own by kind and signature, or what follows from a finding one of
    whose own symptoms is there too; [] when some symptom is none of theirs (or
    the case has no symptom: nothing to match)."""
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
    for s in symptoms:
        if not any(f.accounts(s) for f in used) and not any(f.follows(s) for f in used):
            return []
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
            continue
        proved = [x for x in c.symptoms if symptom_kind(x) not in INFRASTRUCTURE]
        unproved = [x for x in c.symptoms if symptom_kind(x) in INFRASTRUCTURE]
        found = covering(c.nodeid, proved, findings) if proved and unproved else []
        if found:       # the finding's own symptoms, and a part the harness did not prove
            c.known = "+".join(f.id for f in found)
            c.status = "inconclusive"
            c.why = (f"known upstream finding {c.known} by its signature, but part of the "
                     f"case proved nothing: {unproved[0][:160]}")
