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


def test_every_finding_says_its_upstream_status_with_evidence():
    """new / known (the issue) / fixed (master's commit) / false-positive (why): each
    with its evidence, and the manual's table says the same."""
    findings = upstream.load()
    manual = (ROOT / "docs" / "findings.md").read_text()
    for f in findings:
        assert f.status in upstream.STATUSES and f.status_why, f.id
        if f.status in ("known", "fixed"):
            assert f.status_ref, f.id
        row = next(ln for ln in manual.splitlines() if ln.startswith(f"| `{f.id}` |"))
        assert f"| {f.status}" in row, (f.id, row)
    bad = upstream.UpstreamFinding("x", "t", ("c",), ("wrong-bytes",), status="fixed",
                                   status_why="w")
    assert any("status_ref" in w for w in upstream.check(bad))
    assert upstream.check(upstream.UpstreamFinding("x", "t", ("c",), ("wrong-bytes",),
                                                   status="maybe"))


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
            m = re.fullmatch(r"(\w+)(?:\[(.+)\])?", name)
            assert m, f"{f.id}: {name!r} is no test name"
            func, param = m.groups()
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


FIXED = upstream.UpstreamFinding("deadlock", "a deadlock fixed upstream since", ("test_x[a]",),
                                 ("hang", "D-state"), seen="at head h", fixed_by="f1x")


def _is_ancestor(graph: dict[str, set[str]]):
    """A stand-in for git: ``graph[commit]`` is the set of commits it contains;
    a commit not in it is one the object cache does not hold."""
    return lambda fix, commit: (fix in graph[commit]) if commit in graph else None


def test_a_fixed_finding_is_known_only_where_the_build_lacks_the_fix():
    graph = {"old": {"base"}, "new": {"base", "f1x"}}
    hang = "hang: A->B beside B->A: still running"
    for commits, known, note in ((["old"], "deadlock", "the build lacks upstream's fix f1x"),
                                 (["new"], "", ""),
                                 (["old", "new"], "", ""),
                                 (["gone", "new"], "", ""),
                                 (["gone"], "deadlock", "could not tell whether the build")):
        case = _case("test_x[a]", "fail", hang, "D-state: 886 (python3)")
        upstream.mark([case], [FIXED], lacks=upstream.lacks_in(commits, _is_ancestor(graph)))
        assert case.known == known, commits
        assert note in case.why and (not known or "at head h" in case.why), commits


def test_without_an_answer_a_fixed_finding_stands_and_says_so():
    [f] = upstream.applying([FIXED], None)
    assert f.id == "deadlock" and "could not tell" in f.seen
    assert upstream.lacks_in([], _is_ancestor({}))("f1x") is None


def test_build_commits_are_read_from_each_sessions_build_records(tmp_path):
    from suite.report.page.disk import build_commits
    for name, commit in (("s1", "aaa"), ("s2", "bbb"), ("s3", "aaa")):
        (tmp_path / name / "build").mkdir(parents=True)
        (tmp_path / name / "build" / "record-k.json").write_text(
            f'{{"source": {{"commit": "{commit}"}}}}')
    (tmp_path / "s4" / "build").mkdir(parents=True)
    (tmp_path / "s4" / "build" / "record-k.json").write_text("not json")
    sessions = [tmp_path / n for n in ("s1", "s2", "s3", "s4")]
    assert build_commits(sessions) == ["aaa", "bbb"]


def test_every_fixed_by_names_a_commit_id():
    for f in upstream.load():
        if f.fixed_by:
            assert re.fullmatch(r"[0-9a-f]{7,40}", f.fixed_by), f.id


def test_git_answers_from_the_object_cache(tmp_path, monkeypatch):
    import subprocess
    repo = tmp_path / "cache" / "git" / "objects.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)

    def commit(msg: str, *parents: str) -> str:
        tree = subprocess.run(["git", "--git-dir", str(repo), "mktree"], input="",
                              capture_output=True, text=True, check=True).stdout.strip()
        args = [a for p in parents for a in ("-p", p)]
        return subprocess.run(["git", "--git-dir", str(repo), "commit-tree", tree, "-m", msg,
                               *args], capture_output=True, text=True, check=True,
                              env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                   "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
                              ).stdout.strip()
    base = commit("base")
    fix = commit("fix", base)
    series = commit("series", base)
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    assert upstream.git_lacks([series])(fix) is True
    assert upstream.git_lacks([fix])(fix) is False
    assert upstream.git_lacks([series, fix])(fix) is False
    assert upstream.git_lacks(["0" * 40])(fix) is None


def test_the_repository_findings_match_by_signature_never_by_kind_alone():
    for f in upstream.load():          # load() refuses an entry check() finds wrong
        for k in f.kinds:
            assert k not in upstream.INFRASTRUCTURE, (f.id, k)
            if upstream.catch_all(k):
                assert f.signature_of(k), f"{f.id}: {k} without a signature"
        assert set(f.also) <= upstream.CONSEQUENCES, f.id
        if f.explore_hangs:
            assert f.explore_hang_stack, f.id


def _real(fid: str) -> upstream.UpstreamFinding:
    return next(f for f in upstream.load() if f.id == fid)


def test_a_real_pin_finding_claims_its_own_panic_and_what_follows_only_beside_it():
    f = _real("io-uring-dio-write-past-quota-pin-mismatch")
    node = "cases/test_write_short.py::test_write_cut_by_quota[io_uring-128K]"
    own = "kernel:spl_panic: [ 88.1] VERIFY0(len) failed (-131072) @ zfs_uio_pin_user_pages"
    died = "no-result: the kernel reported spl_panic while running: python3 -m suite.ioengine"
    other = "kernel:spl_panic: [ 88.1] VERIFY(zio->io_abd != NULL) failed @ zio_done"
    assert upstream.covering(node, [own, died, "D-state: 901 (python3) @ zfs_dio_wait"], [f])
    assert not upstream.covering(node, [other, died], [f]), "a panic of another title"
    assert not upstream.covering(node, ["no-result: KeyError: 'rows'"], [f]), "the harness's"
    assert not upstream.covering(node, ["D-state: 901 (python3) @ zfs_dio_wait"], [f])
    rl = _real("dio-write-cut-by-rlimit-fsize-pin-mismatch")
    node = "cases/test_write_short.py::test_write_cut_by_rlimit_fsize[libaio-pwrite]"
    assert not upstream.covering(node, ["D-state: 77 (python3) @ zfs_dio_wait"], [rl])


def test_a_real_deadlock_finding_claims_its_stack_and_no_other():
    f = _real("remap-opposite-directions-deadlock")
    node = "cases/test_remap_order.py::test_remaps_in_opposite_directions[ficlonerange]"
    hang = ("hang: ficlonerange A->B beside B->A: still running 45s past their 5s: 886 D in "
            "zpl_clone_file_range_impl; stack: zpl_clone_file_range_impl < zpl_remap_file_range")
    assert upstream.covering(node, [hang, "kernel:hung_task: task python3 blocked for more "
                                          "than 120 seconds"], [f])
    assert not upstream.covering(node, ["hang: ficlonerange: still running; stack: "
                                        "zfs_rangelock_enter < zfs_clone_range"], [f])
    assert not upstream.covering(node, ["kernel:hung_task: task python3 blocked"], [f])


def test_a_known_finding_beside_a_part_the_harness_did_not_prove_is_inconclusive():
    """A corpus replay that returned no result beside replays with the finding's own
    symptom: neither a new failure (FAIL) nor the finding alone (XFAIL)."""
    c = _case("test_x[a]", "fail", "wrong-bytes: replay 1: 16 wrong bytes",
              "no-result: replay 2: the engine never said it was done (rc=137)")
    other = _case("test_x[a]", "fail", "EFAULT: op 1", "no-result: replay 2: rc=137")
    upstream.mark([c, other], [FINDING])
    assert c.status == "inconclusive" and c.known == "stale-read"
    assert "proved nothing: no-result" in c.why
    assert other.status == "fail" and not other.known, "a new symptom stays a failure"
    assert run_verdict([c], []).status == "inconclusive"


def test_every_candidate_fix_serves_a_finding_and_the_manual_names_it():
    """A folder under patches/upstream/fixes/ is a finding's id or another finding's
    ``fix``; every finding it serves says so in the manual's row, and holds only the
    changed lines (a zero-context diff: never OpenZFS's own text around them)."""
    findings = upstream.load()
    manual = (ROOT / "docs" / "findings.md").read_text()
    served = {f.id: (f.fix or f.id) for f in findings}
    for folder in sorted((ROOT / "patches" / "upstream" / "fixes").iterdir()):
        users = [i for i, fx in served.items() if fx == folder.name]
        assert users, f"{folder.name}: no finding has this id or names it as its fix"
        for i in users:
            row = next(ln for ln in manual.splitlines() if ln.startswith(f"| `{i}` |"))
            assert f"fixes/{folder.name}/" in row, (i, row)
        for patch in folder.glob("*.patch"):
            hunks = [ln for ln in patch.read_text().splitlines() if ln.startswith("@@")]
            assert hunks and all(re.match(r"@@ -\d+(,\d+)? \+\d+(,\d+)? @@", h) for h in hunks)
            text = patch.read_text()
            diff = text[text.index("diff --git"):].splitlines()
            body = [ln for ln in diff if ln and ln[0] == " "]   # context lines: -U0 has none
            assert body == [], f"{patch}: context lines (use git diff -U0)"
