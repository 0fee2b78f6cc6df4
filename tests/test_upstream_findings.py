"""Known upstream findings in a run's verdict (suite/report/upstream.py): no VM."""
from __future__ import annotations

import re
from pathlib import Path

from suite.report import upstream
from suite.report.page.kinds import run_verdict
from suite.report.page.model import Case

ROOT = Path(__file__).resolve().parent.parent
FINDING = upstream.UpstreamFinding("stale-read", "a stale read", ("test_x[a]",),
                                   ("wrong-bytes", "paths-disagree"))


def _case(name: str, status: str, *symptoms: str) -> Case:
    return Case(f"cases/test_x.py::{name}", status, status, "why", symptoms=list(symptoms))


def test_symptom_kinds_keep_their_own_colons():
    assert upstream.symptom_kind("kernel:spl_panic: [ 171.1] VERIFY3U(...) failed") == \
        "kernel:spl_panic"
    assert upstream.symptom_kind("wrong-bytes [async=1]: 16 wrong bytes") == "wrong-bytes"
    assert upstream.symptom_kind("D-state") == "D-state"


def test_only_a_failure_by_the_findings_own_kinds_is_named_known():
    cases = [_case("test_x[a]", "fail", "wrong-bytes: 16 wrong bytes"),
             _case("test_x[a]", "fail", "wrong-bytes: x", "kernel:kasan: use-after-free"),
             _case("test_x[b]", "fail", "wrong-bytes: x"),
             _case("test_x[a]", "fail"),
             _case("test_x[a]", "inconclusive", "not-armed: could not arm")]
    upstream.mark(cases, [FINDING])
    assert [c.known for c in cases] == ["stale-read", "", "", "", ""]
    assert cases[0].why.startswith("known upstream finding stale-read")


def test_a_case_two_findings_list_is_known_only_for_kinds_of_theirs():
    lock = upstream.UpstreamFinding("lock-order", "a lockdep report", ("test_x[a]", "test_x[c]"),
                                    ("kernel:lockdep",))
    cases = [_case("test_x[a]", "fail", "wrong-bytes: x", "kernel:lockdep: recursive locking"),
             _case("test_x[a]", "fail", "kernel:lockdep: recursive locking"),
             _case("test_x[a]", "fail", "wrong-bytes: x", "kernel:lockdep: y", "kernel:kasan: z"),
             _case("test_x[b]", "fail", "wrong-bytes: x", "kernel:lockdep: y"),
             _case("test_x[c]", "fail", "wrong-bytes: x", "kernel:lockdep: y")]
    upstream.mark(cases, [FINDING, lock])
    assert [c.known for c in cases] == ["stale-read+lock-order", "lock-order", "", "", ""]
    assert "stale-read (" in cases[0].why and "lock-order (" in cases[0].why


def test_the_verdict_counts_new_failures_apart_and_still_fails():
    known = _case("test_x[a]", "fail", "wrong-bytes: x")
    new = _case("test_x[b]", "fail", "wrong-bytes: x")
    ok = _case("test_x[c]", "pass")
    upstream.mark([known, new], [FINDING])
    v = run_verdict([known, ok], [])
    assert v.status == "fail" and "all known upstream findings (stale-read): none new" in \
        v.headline
    v = run_verdict([known, new, ok], [])
    assert v.status == "fail" and "(1 known upstream findings: stale-read; 1 new)" in v.headline
    assert run_verdict([new, ok], []).headline == "1 case(s) failed"


def test_every_finding_names_cases_that_exist():
    findings = upstream.load()
    assert findings, "patches/upstream/findings.toml has no findings"
    corpus = {p.stem for p in (ROOT / "cases" / "explore_corpus").glob("*.json")}
    source = "".join(p.read_text() for p in (ROOT / "cases").glob("test_*.py"))
    for f in findings:
        assert f.title and f.kinds and f.where, f.id
        if f.signature:
            re.compile(f.signature)
        for name in f.cases:
            if "*" in name:         # a pattern: it must match some case function
                assert re.search(r"def " + name.split("[")[0].replace("*", r"\w*") + r"\(",
                                 source), name
                continue
            func, param = re.fullmatch(r"(\w+)\[(.+)\]", name).groups()
            assert f"def {func}(" in source, name
            if func == "test_explore_corpus":
                assert param in corpus, name


def test_a_pattern_lists_every_case_it_matches_and_no_other():
    f = upstream.UpstreamFinding("zv", "t", ("test_zvol_*",), ("kernel:lockdep",))
    cases = [_case("test_zvol_shape[4K-block-read]", "fail", "kernel:lockdep: bad unlock"),
             Case("cases/test_x.py::test_zvolume[a]", "fail", "fail", "why",
                  symptoms=["kernel:lockdep: y"]),
             _case("test_x[a]", "fail", "kernel:lockdep: z")]
    upstream.mark(cases, [f])
    assert [c.known for c in cases] == ["zv", "", ""]
