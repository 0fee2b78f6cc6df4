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
    # sorted again from its folder (gate --resort): the same classes, nothing run
    (tmp_path / "g" / "gate.json").write_text(g.to_json())
    n = len(calls)
    again = gate.resort(tmp_path / "g")
    assert [(c.nodeid, c.cls, c.why) for c in again.classes] == \
        [(c.nodeid, c.cls, c.why) for c in g.classes] and len(calls) == n


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


def test_past_the_bug_it_fixes_the_head_meets_only_known_findings_fixed(tmp_path: Path):
    """#17006's gate: the base fails a sequence at op 1 (the bug the pull request fixes);
    the head runs op 1, and fails at op 3 only by a known upstream finding the base never
    reached. That is the fix, not a regression; confirmed when the base fails so again."""
    base, head = tmp_path / "base", tmp_path / "series"
    _session(base, [run(101, "failed", "error:EFAULT", 1)])
    _session(head, [run(101, "failed", "hang", 3, known="sendfile-moves-nothing")],
             [{"seed": 101, "kind": "hang", "headline": "no progress", "op": 3,
               "op_kind": "verify"}])
    b, h = gate_explore.verdicts(base)["explore:101"], gate_explore.verdicts(head)["explore:101"]
    assert all(gate_explore.is_known(x) for x in h.symptoms), "the trip in that op is the finding's"
    c = classify("explore:101", b, h)
    assert c.cls == "fixed" and "not rerun" in c.why and "sendfile-moves-nothing" in c.why
    sig = "error:EFAULT [op 1 pread]"
    c = classify("explore:101", b, h, {"base": ["fail", "fail"], "series": ["fail", "fail"]},
                 {"base": [sig], "series": ["hang [op 3 verify]"]})
    assert c.cls == "fixed" and "2 of 2" in c.why
    c = classify("explore:101", b, h, {"base": ["fail", "pass"], "series": ["fail", "fail"]},
                 {"base": [sig], "series": []})
    assert c.cls == "flaky"
    # the head failing further on by anything else: a new signature, as before
    _session(head, [run(101, "failed", "wrong-bytes", 3)])
    h = gate_explore.verdicts(head)["explore:101"]
    assert classify("explore:101", b, h).cls == "regression"
    # the head failing before the base's op: not past it
    _session(head, [run(101, "failed", "short", 0, known="sendfile-moves-nothing")])
    h = gate_explore.verdicts(head)["explore:101"]
    assert classify("explore:101", b, h).cls == "regression"


def test_a_run_past_a_known_finding_names_its_ops_as_the_generated_sequence(tmp_path: Path):
    """A run again past a known finding leaves that op out: its op 2 is the generated
    sequence's op 3. The summary's ``at`` keeps one numbering for every run, so a
    rerun's signature is the first run's."""
    from suite.explore.ops import Op, Sequence
    from suite.explore.resume import carried, original, past_known
    from suite.explore.judge import Verdict
    seq = Sequence(seed=7, props={}, params={}, ops=(Op("pwrite"), Op("sendfile"),
                                                     Op("pread"), Op("punch_hole"), Op("verify")))
    v = Verdict(state="failed", kind="short", why="", failed_at=1)
    again = past_known(seq, v, 0)
    origin = carried(seq, again, tuple(range(5)))
    assert [o.op for o in again.ops] == ["pwrite", "pread", "punch_hole", "verify"]
    assert origin == (0, 2, 3, 4) and original(origin, 2) == 3
    base = tmp_path / "base"
    _session(base, [{**run(101, "failed", "wrong-bytes", 2), "at": 3}])
    assert gate_explore.verdicts(base)["explore:101"].symptoms[0].row == "op 3 verify"


def test_test_explore_compares_what_its_after_case_judges_found(tmp_path: Path):
    """test_explore fails by each sequence's failure (compared one by one) and by its
    after-case judges. The head, getting further, drove abdstats below zero (a known
    upstream finding the base carries too: it lacks the fix); the base, stopped by a
    panic on a replaced guest, never showed it. Not the series'."""
    from suite.report.upstream import load
    from suite.symptoms import CaseVerdict, Symptom
    node = gate_explore.NODE
    seq = Symptom("kernel:bug", "explore seed 5 op 0 (pwrite): BUG: NULL pointer", "row")
    wrap = Symptom("kstat:wrap", "abdstats scatter_cnt = 18446744073709551612 (= -4 as "
                                 "signed): below zero, was 1 before the case")
    base = CaseVerdict(node, "failed", [seq], str(seq))
    head = CaseVerdict(node, "failed", [wrap], str(wrap))
    standing = tuple(f for f in load() if f.id == "abd-stats-direct-io-asymmetry")
    assert gate_explore.after_case(base).outcome == "passed"
    c = classify(node, base, head, standing=standing)
    assert c.cls == "still failing" and "abd-stats-direct-io-asymmetry" in c.why
    assert classify(node, base, head).cls == "regression", "where it does not stand: the series'"
    odd = Symptom("kstat:wrap", "arcstats hdr_size below zero")
    other = CaseVerdict(node, "failed", [wrap, odd], str(wrap))
    assert classify(node, base, other, standing=standing).cls == "regression"


def test_a_sequence_both_sides_fail_only_by_known_findings_still_fails(tmp_path: Path):
    """#17006's head hung at op 5 in a splice (a known finding) where its base had
    panicked (another known finding): stock bugs on both sides, not the series'."""
    base, head = tmp_path / "base", tmp_path / "series"
    _session(base, [run(101, "failed", "kernel:spl_panic", 2, known="quota-pin-mismatch")])
    _session(head, [run(101, "failed", "hang", 2, known="sendfile-moves-nothing")])
    b, h = gate_explore.verdicts(base)["explore:101"], gate_explore.verdicts(head)["explore:101"]
    c = classify("explore:101", b, h)
    assert c.cls == "still failing" and "quota-pin-mismatch" in c.why
    _session(head, [run(101, "failed", "hang", 2)])
    h = gate_explore.verdicts(head)["explore:101"]
    assert classify("explore:101", b, h).cls == "regression"


def test_a_test_skipped_alike_on_both_sides_is_not_applicable():
    """#18844's gate with the xfstests direct profile: 8 tests the kernel cannot run or
    the exclude list names skipped on both sides alike, and the gate said INCONCLUSIVE."""
    from suite.symptoms import CaseVerdict
    why = "notrun: device block size: 4096 greater than 512"
    b = CaseVerdict("xfstests:generic/114[direct]", "skipped", [], why)
    c = classify(b.nodeid, b, CaseVerdict(b.nodeid, "skipped", [], why))
    assert c.cls == "not applicable"
    c = classify(b.nodeid, b, CaseVerdict(b.nodeid, "skipped", [], "notrun: another reason"))
    assert c.cls == "inconclusive"
