"""The cases to run first for a change, and what was left out and why.

A case is kept when the map says it reached a function the change touches (or one
that uses a name it changes), or when the map does not know it (never run on a gcov
build: nothing says it is safe to leave out). A change the map cannot place keeps
everything: no C function changed (only build files, tests or scripts), or a name
used in more functions than ``BROAD`` (a widely used macro or type).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from suite.impact.casemap import CaseMap
from suite.impact.changed import Impact

BROAD = 150


@dataclass
class Choice:
    kept: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)     # case -> why kept
    notes: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)      # kept: not in the map
    unreached: list[str] = field(default_factory=list)    # changed, reached by no mapped case
    everything: str = ""                                  # why every case was kept, if so

    def summary(self) -> str:
        return (f"impact selection: {len(self.kept)} case(s) kept, {len(self.left)} left out"
                + "".join(f"\n  {n}" for n in self.notes))


def keep_all(cases: list[str], why: str) -> Choice:
    return Choice(list(cases), [], {c: why for c in cases}, [f"every case kept: {why}"],
                  everything=why)


def choose(cases: list[str], m: CaseMap, imp: Impact, slug=lambda c: c) -> Choice:
    """``cases`` (node ids; ``slug`` names them as the map does) split into kept and
    left out for the change ``imp``."""
    broad = sorted(n for n, fns in imp.users.items() if len(fns) > BROAD)
    if broad:
        return keep_all(cases, f"{', '.join(broad)} used in more than {BROAD} functions")
    targets = imp.all_functions()
    if not targets:
        return keep_all(cases, "no C function of module/ changes (build, tests, scripts"
                        f" or headers with no user: {', '.join(sorted(imp.files | imp.other)[:6])})")
    out = Choice()
    for c in cases:
        got = m.cases.get(slug(c))
        if got is None:
            out.kept.append(c)
            out.unknown.append(c)
            out.why[c] = "not in the map (never run on a gcov build)"
        elif got & targets:
            out.kept.append(c)
            out.why[c] = "reaches " + ", ".join(sorted(f.split(":")[-1] for f in got & targets)[:4])
        else:
            out.left.append(c)
    unreached = out.unreached = sorted(targets - m.reached())
    if unreached:
        out.notes.append(f"no mapped case reaches {len(unreached)} changed function(s): "
                         + ", ".join(f.split(":")[-1] for f in unreached[:8]))
    out.notes.append(f"map: build {m.build} at {m.commit[:11]}, {len(m.cases)} case(s)")
    return out
