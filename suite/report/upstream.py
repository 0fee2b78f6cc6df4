"""Findings on stock upstream OpenZFS that the default selection meets on every run
(``patches/upstream/findings.toml``). A failing case that is one of them, failing
only by the finding's symptom kinds, stays a failure: the verdict names it a known
upstream finding and counts the new failures apart from it."""
from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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

    def lists(self, nodeid: str) -> bool:
        """The case is one of this finding's: named, or matched by a ``*`` pattern
        (a finding every case of a kind meets, e.g. ``test_zvol_*``)."""
        test = nodeid.rsplit("::", 1)[-1]
        return any(test == c or ("*" in c and fnmatch.fnmatchcase(test, c))
                   for c in self.cases)

    def covers(self, nodeid: str, kinds: list[str]) -> bool:
        """The case is one of this finding's and failed by its symptoms alone."""
        return self.lists(nodeid) and bool(kinds) and set(kinds) <= set(self.kinds)


def load(path: Path | None = None) -> list[UpstreamFinding]:
    path = path or patches_dir() / FINDINGS_FILE
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text())
    return [UpstreamFinding(f["id"], f["title"], tuple(f["cases"]), tuple(f["kinds"]),
                            f.get("seen", ""), f.get("where", ""))
            for f in data.get("findings", [])]


def symptom_kind(symptom: str) -> str:
    """The kind of a symptom as a Case holds it ("kind [row]: detail")."""
    return symptom.split(": ", 1)[0].split(" [", 1)[0].strip()     # kinds hold ":" too


def covering(nodeid: str, kinds: list[str],
             findings: list[UpstreamFinding]) -> list[UpstreamFinding]:
    """The findings that together account for every one of a failed case's symptom
    kinds (one finding, or several that list the case: a corpus sequence can meet
    wrong bytes and, on a debug kernel, a lockdep report of another cause); [] when
    some kind is none of theirs."""
    one = next((f for f in findings if f.covers(nodeid, kinds)), None)
    if one is not None:
        return [one]
    listing = [f for f in findings if f.lists(nodeid)]
    used = [f for f in listing if set(kinds) & set(f.kinds)]
    covered = set().union(*(f.kinds for f in used)) if used else set()
    return used if kinds and set(kinds) <= covered else []


def mark(cases: list["Case"], findings: list[UpstreamFinding] | None = None) -> None:
    """Name each failed case that is a known upstream finding (``Case.known``)."""
    findings = load() if findings is None else findings
    for c in cases:
        if c.status != "fail":
            continue
        kinds = [symptom_kind(s) for s in c.symptoms]
        found = covering(c.nodeid, kinds, findings)
        if found:
            c.known = "+".join(f.id for f in found)
            said = "; ".join(f"{f.id} ({f.seen}; {f.where})" for f in found)
            c.why = f"known upstream finding {said}: {c.why}"
