"""Which OpenZFS functions each case reached: the map test impact selection reads.

On a gcov build (the ``debian-6.1-debug`` profile) the harness copies a guest's
counters at the end of every case into ``coverage/cases/<build>/<guest>/<NNN>-<case>/``
(``suite/guest/lifecycle.py``). Counters only grow while a guest lives, so what a
case reached is what grew since the previous copy of the same guest (the first case
of a guest also owns the module's load and its pool's creation: more, never less).
The map is ``{case slug: {"module/zfs/zfs_vnops.c:zfs_read", ...}}`` with the build
and commit it was made on; a case seen in several runs or guests is their union.
"""
from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from suite.coverage import gcovdata, merge

SNAPSHOT = re.compile(r"^(\d{3,})-(.+)$")


@dataclass
class CaseMap:
    build: str                                  # the build key the counters came from
    commit: str                                 # its commit (the functions' names are its)
    cases: dict[str, set[str]] = field(default_factory=dict)

    def reaching(self, functions: set[str]) -> dict[str, set[str]]:
        """Each case that reaches one of ``functions``, with those it reaches."""
        return {c: got & functions for c, got in self.cases.items() if got & functions}

    def reached(self) -> set[str]:
        return set().union(*self.cases.values()) if self.cases else set()

    def to_json(self) -> str:
        return json.dumps({"build": self.build, "commit": self.commit,
                           "cases": {c: sorted(f) for c, f in sorted(self.cases.items())}},
                          indent=1) + "\n"

    @classmethod
    def load(cls, path: Path) -> "CaseMap":
        d = json.loads(path.read_text())
        return cls(d["build"], d["commit"], {c: set(f) for c, f in d["cases"].items()})


def function_counts(counts: gcovdata.Counts) -> dict[str, int]:
    """``file:function`` -> times it ran (a header's inline functions summed)."""
    out: dict[str, int] = {}
    for path, fc in counts.files.items():
        for fn in fc.functions.values():
            key = f"{path}:{fn.name}"
            out[key] = out.get(key, 0) + fn.count
    return out


def grown(before: dict[str, int], after: dict[str, int]) -> set[str]:
    """The functions that ran between two copies of one guest's counters."""
    return {f for f, n in after.items() if n > before.get(f, 0)}


def snapshots(build_dir: Path) -> dict[str, list[tuple[int, str, Path]]]:
    """Per guest, its copies in order: (number, case slug, folder)."""
    out: dict[str, list[tuple[int, str, Path]]] = {}
    for guest in sorted(p for p in build_dir.iterdir() if p.is_dir()):
        for d in guest.iterdir():
            m = SNAPSHOT.match(d.name)
            if m and d.is_dir():
                out.setdefault(guest.name, []).append((int(m.group(1)), m.group(2), d))
        out.get(guest.name, []).sort()
    return out


def read_snapshot(d: Path, src_dir: Path) -> dict[str, int]:
    """One copy of a guest's counters as function counts."""
    with tempfile.TemporaryDirectory(prefix="ozfs-casemap.") as tmp:
        merge.normalise(d, Path(tmp), str(src_dir))
        return function_counts(gcovdata.read(src_dir, Path(tmp)))


RAN = ("passed", "failed", "xfailed", "xpassed")


def ran_body(run_dir: Path, case: str) -> bool:
    """The case ran its body (its verdict passed or failed): one that errored in its
    setup (a pool not made) or was skipped reached only the setup's functions."""
    f = run_dir / "cases" / case / "verdict.json"
    try:
        return json.loads(f.read_text()).get("outcome") in RAN
    except (OSError, ValueError):
        return False


def build_map(build_dirs: list[Path], src_dir: Path, build: str, commit: str,
              read=read_snapshot, ran=lambda bdir, case: True) -> CaseMap:
    """The map from every guest's copies under ``build_dirs`` (one build's); a case
    ``ran`` says did not run its body stays out (unknown: kept by any selection)."""
    m = CaseMap(build, commit)
    for bdir in build_dirs:
        for guest, snaps in snapshots(bdir).items():
            before: dict[str, int] = {}
            for _, case, d in snaps:
                after = read(d, src_dir)
                if not any(after.values()):     # a copy that failed: the case stays unknown
                    continue
                if any(after.get(f, 0) < n for f, n in before.items()):
                    before = {}                 # counters restarted (a power cut's new guest)
                if ran(bdir, case):
                    m.cases.setdefault(case, set()).update(grown(before, after))
                before = after
    return m
