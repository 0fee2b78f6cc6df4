"""The gate's explore lane, sequence by sequence (suite/campaign/gate_explore.py): the
head runs the base's sequences, and each sequence is classed on its own, so a fix
the base met, and a new failure the head met past it, are not hidden behind one
``test_explore`` verdict that "still fails" on both sides."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.campaign import gate, gate_explore
from suite.campaign.gate import classify, run_gate

EXTRA = ["-m", "explore or not explore", "--explore-budget", "10m", "--explore-seed", "1"]
SEEDS = (101, 202, 303, 404)


def _session(results: Path, runs: list[dict], trips: list[dict] = (), seqs=SEEDS) -> None:
    case = results / "20260101-000000-x" / "cases" / "test_explore"
    (case / "explore").mkdir(parents=True, exist_ok=True)
    (case / "engine").mkdir(parents=True, exist_ok=True)
    for k, seed in enumerate(seqs):
        ops = [{"op": "pwrite"}, {"op": "pread"}, {"op": "punch_hole"}, {"op": "verify"}]
        (case / "engine" / f"explore-{seed}-{k + 1:04d}-s{k}.seq.json").write_text(
            json.dumps({"version": 1, "seed": seed, "ops": ops}))
    (case / "explore" / "summary.json").write_text(json.dumps(
        {"runs": runs, "trips": list(trips)}))


def run(seed, state="passed", kind=None, at=None, known=None):
    return {"seed": seed, "state": state, "kind": kind, "failed_at": at, "known": known}


def test_each_sequence_is_classed_on_its_own(tmp_path: Path):
    base, head = tmp_path / "base", tmp_path / "series"
    _session(base, [run(101, "failed", "error:EFAULT", 1), run(202),
                    run(303, "failed", "wrong-bytes", 3, known="rollback-keeps-cached-pages")],
             [{"seed": 404, "kind": "hang", "headline": "no progress", "op": 2,
               "op_kind": "punch_hole"}])
    _session(head, [run(101), run(202, "failed", "wrong-bytes", 3),
                    run(303, "failed", "wrong-bytes", 3, known="rollback-keeps-cached-pages")])
    b, h = gate_explore.verdicts(base), gate_explore.verdicts(head)
    assert list(b) == [f"explore:{s}" for s in SEEDS]
    got = {n: classify(n, b.get(n), h.get(n)).cls for n in b}
    assert got == {"explore:101": "fixed", "explore:202": "regression",
                   "explore:303": "still failing", "explore:404": "inconclusive"}
    assert "op 1 pread" in str(b["explore:101"].symptoms[0])
    assert h["explore:404"].outcome == "error", "never finished on the head: not a pass"


def test_another_op_is_another_signature(tmp_path: Path):
    base, head = tmp_path / "base", tmp_path / "series"
    _session(base, [run(101, "failed", "wrong-bytes", 1)])
    _session(head, [run(101, "failed", "wrong-bytes", 2)])
    c = classify("explore:101", gate_explore.verdicts(base)["explore:101"],
                 gate_explore.verdicts(head)["explore:101"])
    assert c.cls == "regression" and "op 2 punch_hole" in c.why


def test_the_head_replays_the_bases_sequences(tmp_path: Path, monkeypatch):
    calls = []

    def fake(args, results, extra=(), timeout=0, targets=None, inner="1"):
        calls.append((results.name, list(args), targets, list(extra)))
        replayed = [json.loads(Path(args[i + 1]).read_text())["seed"]
                    for i, a in enumerate(args) if a == "--explore-replay"]
        seqs = tuple(replayed) or (101, 202)
        on_base = "--zfs-ref" in args and "--series" not in args
        _session(results, [run(s, "failed", "error:EFAULT", 1) if s == 101 and on_base
                           else run(s) for s in seqs], seqs=seqs)
        return 1, "", 1.0

    monkeypatch.setattr(gate, "run_cases", fake)
    g = run_gate("pr", "e" * 40, ["-k", "explore"], EXTRA, reruns=2, root=tmp_path / "g")
    base_args, series_args = calls[0][1], calls[1][1]
    assert "--explore-findings" in base_args and "--explore-replay" not in base_args
    replays = [series_args[i + 1] for i, a in enumerate(series_args) if a == "--explore-replay"]
    assert [json.loads(Path(p).read_text())["seed"] for p in replays] == [101, 202]
    classes = {c.nodeid: c.cls for c in g.classes}
    assert classes == {"explore:101": "fixed", "explore:202": "unchanged pass"}
    # the fixed sequence, and only it, replayed alone on both sides as its control
    assert [c[0] for c in calls] == ["base", "series", "rerun1-base", "rerun1-series",
                                     "rerun2-base", "rerun2-series"]
    # the base explores for its time; a replay runs all it was given, however slow
    budgets = [c[3][c[3].index("--explore-budget") + 1] for c in calls]
    assert budgets == ["10m", "2x", "1x", "1x", "1x", "1x"], budgets
    for _, args, targets, _ in calls[2:]:
        again = [a for i, a in enumerate(args) if i and args[i - 1] == "--explore-replay"]
        assert len(again) == 1 and "-101-" in again[0], args
        assert [t.endswith(gate_explore.NODE) for t in targets] == [True], targets
        assert args[args.index("--explore-shrink") + 1] == "1", "a rerun does not shrink"
    (c,) = [c for c in g.classes if c.nodeid == "explore:101"]
    assert c.reruns == {"base": ["fail", "fail"], "series": ["pass", "pass"]}, c
    assert "not rerun" not in c.why, c.why


def test_a_sequence_fixed_by_timing_alone_is_flaky(tmp_path: Path, monkeypatch):
    base_runs = iter(["failed", "passed", "failed"])

    def fake(args, results, extra=(), timeout=0, targets=None, inner="1"):
        on_base = "--zfs-ref" in args and "--series" not in args
        got = next(base_runs) if on_base else "passed"
        _session(results, [run(101, "failed", "error:EFAULT", 1) if got == "failed"
                           else run(101)], seqs=(101,))
        return 1, "", 1.0

    monkeypatch.setattr(gate, "run_cases", fake)
    g = run_gate("pr", "e" * 40, ["-k", "explore"], EXTRA, reruns=2, root=tmp_path / "g")
    (c,) = [c for c in g.classes if c.nodeid == "explore:101"]
    assert c.cls == "flaky" and c.reruns["base"] == ["pass", "fail"], c


def test_a_gate_that_explores_refuses_a_selection_without_the_explore_case():
    """``--explore`` with a ``-k`` that leaves ``test_explore`` out explored nothing and
    said nothing (a gate of #18795): it is refused before anything is built."""
    from suite.campaign.gate_explore import explore_selected
    from suite.errors import SuiteError
    with pytest.raises(SuiteError, match="leaves out cases/test_explore.py::test_explore"):
        explore_selected("zinject or smoke")
    explore_selected("zinject or (test_explore and not corpus)")
