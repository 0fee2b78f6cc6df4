"""The report's model: what a maintainer reads, as records, before any rendering.

One ``Page`` per results folder, whatever made it (a plain pytest run, a gate, merged
shards, ``suite bugs``), so the HTML page, the step summary and the JUnit XML say the
same things in the same order. Every value is already a phrase or a table cell here:
a renderer never sees a record it could be tempted to dump.

Files are kept as absolute paths (``Link``); each renderer makes them relative to
the folder it writes into, so the uploaded artifact works when downloaded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

# A case's status, in the order a maintainer reads them: what failed first.
STATUS_ORDER = ("fail", "inconclusive", "flaky", "known", "pass", "skip")
# Verdict status -> exit code, the same for every kind of run.
EXIT = {"pass": 0, "fail": 1, "inconclusive": 2}


@dataclass(frozen=True)
class Link:
    """A file of the results folder a reader may open (absolute path)."""
    label: str
    path: Path


Cell = Union[str, Link]


@dataclass
class Grid:
    """A small table: a header and rows of phrases (or links)."""
    header: tuple[str, ...]
    rows: list[tuple[Cell, ...]] = field(default_factory=list)
    title: str = ""


@dataclass
class Verdict:
    status: str                          # pass | fail | inconclusive
    headline: str                        # "FAIL: 2 regression(s)", "1 case failed"
    reasons: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]

    @property
    def word(self) -> str:
        return self.status.upper()


@dataclass
class BuildRow:
    """One side's build, as the phrases of the builds table."""
    side: str
    kernel: str
    openzfs: str                         # describe (commit)
    series: str                          # "async-dio: 15 commits, head c7b7a98ba2b" | "(stock)"
    srcversion: str
    accelerator: str                     # "tcg x6.0 (KVM unusable)"
    build: str                           # "cached (built ...)" | "built in 38 min"
    capabilities: list[tuple[str, str]] = field(default_factory=list)   # name, value


@dataclass
class CaseTable:
    """A condition x outcome table of a case, as the case wrote it."""
    side: str
    markdown: str
    text: str
    source: Path                         # table-N.txt (or .md): linked


@dataclass
class SideResult:
    side: str
    result: str                          # pass | fail | skip | missing | ... or an outcome
    detail: str = ""


@dataclass
class Case:
    nodeid: str
    status: str                          # one of STATUS_ORDER
    label: str                           # what the run calls it: a gate class, an outcome
    why: str = ""
    sides: list[SideResult] = field(default_factory=list)
    symptoms: list[str] = field(default_factory=list)
    tables: list[CaseTable] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    evidence: str = ""                   # evidence/summary.txt of a failure
    output: str = ""                     # a non-VM case's failure text (from JUnit)
    seconds: float = 0.0
    group: str = ""                      # JUnit testsuite it belongs to
    known: str = ""                      # a known upstream finding's id (suite/report/upstream.py)

    @property
    def failing(self) -> bool:
        return self.status in ("fail", "inconclusive", "flaky")

    def extra_symptoms(self) -> list[str]:
        """The symptoms the case's one-line reason does not already say."""
        if len(self.symptoms) == 1 and self.symptoms[0] in self.why:
            return []
        return self.symptoms

    def order(self) -> tuple[int, str]:
        return STATUS_ORDER.index(self.status), self.nodeid


@dataclass
class Chart:
    title: str
    png: Path


@dataclass
class Section:
    """A part of the page that only some runs have (after-case findings, explore,
    ZTS, phases, coverage, perf, shards, known bugs)."""
    title: str
    key: str                             # short id: judges, explore, phases, perf, ...
    intro: list[str] = field(default_factory=list)       # sentences
    grids: list[Grid] = field(default_factory=list)
    markdown: list[str] = field(default_factory=list)    # our own markdown (tables, ZTS)
    texts: list[tuple[str, str]] = field(default_factory=list)   # (label, preformatted)
    charts: list[Chart] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    lead: bool = False                   # the run's own result (known bugs, shards): first


@dataclass
class Page:
    kind: str                            # plain | gate | merged | bugs
    subject: str                         # "gate async-dio against 869d805997"
    root: Path                           # the results folder read
    verdict: Verdict
    builds: list[BuildRow] = field(default_factory=list)
    selection: list[tuple[str, str]] = field(default_factory=list)
    times: list[tuple[str, str]] = field(default_factory=list)        # side, phrase
    sides: tuple[str, ...] = ()          # column names of each case's side results
    cases: list[Case] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    sessions: list[tuple[str, list[Path]]] = field(default_factory=list)  # side, its sessions

    def lead_sections(self) -> list[Section]:
        return [s for s in self.sections if s.lead]

    def other_sections(self) -> list[Section]:
        return [s for s in self.sections if not s.lead]

    def ordered_cases(self) -> list[Case]:
        return sorted(self.cases, key=Case.order)

    def count(self, status: str) -> int:
        return sum(1 for c in self.cases if c.status == status)

    def builds_grid(self) -> Grid:
        """The builds: a column per side where there are few (they read side by side at
        any width), a row per side where there are many (``suite bugs``)."""
        fields = ("kernel", "OpenZFS", "series", "zfs srcversion", "accelerator", "build")
        rows = [(b.kernel, b.openzfs, b.series, b.srcversion, b.accelerator, b.build)
                for b in self.builds]
        if len(self.builds) <= 3:
            return Grid(("", *(b.side for b in self.builds)),
                        [(f, *(r[i] for r in rows)) for i, f in enumerate(fields)])
        return Grid(("side", *fields), [(b.side, *r) for b, r in zip(self.builds, rows)])

    def capabilities(self) -> Grid | None:
        """Each side's capabilities as a column (a name a side lacks: ``-``)."""
        with_caps = [b for b in self.builds if b.capabilities]
        if not with_caps:
            return None
        names: list[str] = []
        for b in with_caps:
            names += [n for n, _ in b.capabilities if n not in names]
        rows = [(n, *(dict(b.capabilities).get(n, "-") for b in with_caps)) for n in names]
        return Grid(("capability", *(b.side for b in with_caps)), rows, "Capabilities")
