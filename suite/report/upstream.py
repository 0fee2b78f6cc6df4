"""Findings on stock upstream OpenZFS that the default selection meets on every run
(``patches/upstream/findings.toml``). A failing case that is one of them, failing
only by the finding's symptom kinds, stays a failure: the verdict names it a known
upstream finding and counts the new failures apart from it."""
from __future__ import annotations

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
    cases: tuple[str, ...]               # test names, as after "::" in a node id
    kinds: tuple[str, ...]               # the symptom kinds that are this finding
    seen: str = ""
    where: str = ""

    def covers(self, nodeid: str, kinds: list[str]) -> bool:
        """The case is one of this finding's and failed by its symptoms alone."""
        return (nodeid.rsplit("::", 1)[-1] in self.cases and bool(kinds)
                and set(kinds) <= set(self.kinds))


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


def mark(cases: list["Case"], findings: list[UpstreamFinding] | None = None) -> None:
    """Name each failed case that is a known upstream finding (``Case.known``)."""
    findings = load() if findings is None else findings
    for c in cases:
        if c.status != "fail":
            continue
        kinds = [symptom_kind(s) for s in c.symptoms]
        f = next((f for f in findings if f.covers(c.nodeid, kinds)), None)
        if f is not None:
            c.known = f.id
            c.why = f"known upstream finding {f.id} ({f.seen}; {f.where}): {c.why}"
