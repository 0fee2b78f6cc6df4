"""``suite bugs``' lanes: one ``Lane`` interface, one table builder. A fifth lane is
one class (here, a toy that runs nothing); its table comes from the shared builder and
``run_bugs`` runs it at each bad commit like the four (no VM)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from suite.campaign import bugs as knownbugs
from suite.campaign.lanes import Lane, cases, table
from suite.source.series import KnownBug, Manifest
from suite.symptoms import SymptomSpec

BAD = "b" * 40


@dataclass
class Toy(Lane):
    """A fifth lane in a few lines: what it runs at a commit, and its cell."""
    name, label, column, file, title = "toy", "toy", "toy at bad", "toy-at-bad.md", "toy"
    only: bool = True

    def at(self, series, commit, root, extra, base=False):
        return f"looked at {series}@{commit[:7]}"

    def cell(self, bug):
        return self.run(bug) or "not run"


def bug(id: str, bad: str = BAD, deferred: str = "") -> KnownBug:
    return KnownBug(id, "t", bad, "f" * 40, ("t",), SymptomSpec(("EFAULT",)), deferred)


def test_a_toy_lane_gets_its_row_from_the_shared_builder(tmp_path):
    m = Manifest("s", "", "u", "b", "h" * 40, "0" * 40, "u", bugs=(bug("a"), bug("z", "c" * 40)))
    toy = Toy()
    toy.visit(m, m.bugs[0], "bad", BAD, tmp_path, [])
    assert table(list(m.bugs), [toy]) == ("| bug | bad commit | toy at bad |\n|---|---|---|\n"
                                          f"| `a` | {BAD[:11]} | looked at s@bbbbbbb |\n"
                                          f"| `z` | {'c' * 11} | not run |\n")


def test_run_bugs_runs_a_new_lane_once_per_bad_commit_and_writes_its_table(tmp_path,
                                                                           monkeypatch):
    m = Manifest("s", "", "u", "b", "h" * 40, "0" * 40, "u",
                 bugs=(bug("a"), bug("b"), bug("d", "d" * 40, deferred="kasan: x")))
    monkeypatch.setattr(knownbugs.series, "available", lambda: {"s": m})
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    monkeypatch.setattr(cases, "run_cases", lambda *a, **k: pytest.fail("ran suite cases"))
    seen: list[str] = []

    class Counting(Toy):
        def at(self, series, commit, root, extra, base=False):
            seen.append(commit)
            return super().at(series, commit, root, extra, base)
    assert knownbugs.run_bugs("s", [], "", [], lanes=[Counting()]) == 0
    assert seen == [BAD]                    # shared by a and b; the deferred bug not run
    md = next(tmp_path.glob("bugs-*/toy-at-bad.md")).read_text()
    assert f"| `a` | {BAD[:11]} | looked at s@bbbbbbb |" in md
    assert f"| `d` | {'d' * 11} | not run |" in md


def test_lane_names_the_old_flags_alias(monkeypatch):
    """``--lane`` picks lanes; the old flags say the same, and a lane named without
    ``cases`` runs alone."""
    from suite.bugs_cmd import LANES, add_parser
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers())

    def lanes(*argv: str) -> dict[str, bool]:
        args = ap.parse_args(["bugs", "async-dio", *argv])
        return {lane.name: lane.only for lane in (mod.from_args(args) for mod in LANES) if lane}
    assert lanes() == {}
    assert lanes("--lane", "zts") == lanes("--zts-only") == {"zts": True}
    assert lanes("--lane", "cases", "--lane", "zts") == lanes("--zts") == {"zts": False}
    assert lanes("--lane", "explore", "--explore", "15m") == lanes("--explore", "15m",
                                                                  "--explore-only")
    assert lanes("--lane", "xfstests") == {"xfstests": True}
    assert lanes("--lane", "cases", "--lane", "xfstests", "--xfstests", "dio") == \
        lanes("--xfstests", "dio") == {"xfstests": False}
    from suite.errors import SuiteError
    with pytest.raises(SuiteError, match="--lane explore runs nothing without a budget"):
        lanes("--lane", "explore")
