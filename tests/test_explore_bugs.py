"""``suite bugs SERIES --explore``: what the exerciser met at each bug's bad commit,
from results folders shaped like a real ``suite explore`` run's (a session with
``pytest.log``, a run folder ``<stamp>-<series>`` with ``build/record-*.json``, the
case ``cases/test_explore`` with ``verdict.json``, ``explore/summary.json`` and the
minimal sequence), made here without a VM."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.explore.gen import Choices, sequence_seed
from suite.explore.ops import Sequence
from suite.explore.budget import parse_budget
from suite.explore.session import Explorer, RunOutput, Settings
from suite.campaign import bugs as knownbugs
from suite.campaign.lanes import cases, table
from suite.campaign.lanes import explore as explorebugs
from suite.campaign.lanes.explore import ExploreAt, ExploreLane, read_explore_at, read_session
from suite.symptoms import CaseVerdict, Symptom, SymptomSpec
from suite.source.series import KnownBug, Manifest

BAD = "39991b06fea6787edbf421f30144a03330aa7d5a"
OTHER = "317cbaa578bea7a09873e5c709540981ba02f409"
SEED = 141129332537534
ROW = "compression=lz4 recordsize=4K zfs_async_dio_enabled=1"


def runs(n: int, failed_at: int | None = None, at_s: bool = True) -> list[dict]:
    out = []
    for k in range(n):
        bad = k == failed_at
        r = {"k": k, "seed": SEED if bad else 1000 + k, "state": "failed" if bad else "ok",
             "kind": "wrong-bytes" if bad else None, "failed_at": 29 if bad else None,
             "ops": 40, "einval": 0, "unsupported": 0, "refused": 0, "leaves": [],
             "seconds": 40.0}
        if at_s:
            r["at_s"] = 45.0 * (k + 1)
        out.append(r)
    return out


def explore_session(parent: Path, name: str, commit: str = BAD, *, target: str = "file",
                    n: int = 2, found: bool = False, at_s: bool = True,
                    no_result: bool = False, verdict: CaseVerdict | None = None,
                    write_verdict: bool = True, stamp: str = "20261201-204027",
                    known: int = 0) -> Path:
    """A ``suite explore`` results folder at ``commit`` of series ``async-dio``."""
    s = parent / name
    run = s / f"{stamp}-async-dio"
    case = run / "cases" / "test_explore"
    (case / "explore").mkdir(parents=True)
    (s / "pytest.log").write_text("")
    (run / "build").mkdir()
    (run / "build" / "record-de52770d1cdac40d.json").write_text(json.dumps({
        "key": "de52770d1cdac40d",
        "inputs": {"series": [{"name": "async-dio",
                               "commits": ["b" * 40, commit]}]}}))
    summary = {"master_seed": 1, "budget": "900s", "target": target, "sequences": n,
               "replays": n, "elapsed_s": 45.0 * n, "runs": runs(n, n - 1 if found else None,
                                                                   at_s),
               "findings": [], "no_result": [], **({"known": known} if known else {})}
    symptoms: list[Symptom] = []
    if found:
        txt = case / "explore" / f"minimal-{SEED}.txt"
        txt.write_text("explore #1: sequence ...\n")
        (case / "explore" / f"minimal-{SEED}.json").write_text("{}")
        summary["findings"] = [{"seed": SEED, "kind": "wrong-bytes", "confirmed": True,
                                "ops": 11, "tries": 42, "json": str(txt.with_suffix(".json")),
                                "txt": str(txt)}]
        summary["replays"] = n + 43
        symptoms = [Symptom("wrong-bytes", f"explore seed {SEED} op 10 (verify): 8160 wrong "
                                           "bytes from 4096", ROW)]
    if no_result:
        summary["no_result"] = [{"seed": 1000 + n - 1, "state": "no-result",
                                 "why": "the engine never said it was done (rc=-9)"}]
        symptoms = [Symptom("no-result", f"explore seed {1000 + n - 1}: the engine never "
                                         "said it was done (rc=-9)")]
    (case / "explore" / "summary.json").write_text(json.dumps(summary, indent=1))
    if verdict is None:
        verdict = CaseVerdict("cases/test_explore.py::test_explore",
                              "failed" if symptoms else "passed", symptoms)
    if write_verdict:
        (case / "verdict.json").write_text(verdict.to_json())
    return s


def bug(id: str = "eof-tail-efault", bad: str = BAD, kinds: tuple[str, ...] = ("EFAULT",
        "short", "wrong-bytes"), deferred: str = "") -> KnownBug:
    return KnownBug(id, "t", bad, "f" * 40, ("eof",),
                    SymptomSpec(kinds, rows="async=1") if kinds else None, deferred)


def explore_table(rows: list[tuple[KnownBug, ExploreAt | None]]) -> str:
    """The explore lane's table (from the one builder) of what it saw at each bug's commit."""
    lane = ExploreLane()
    lane.runs.update({b.bad[:11]: e for b, e in rows if e is not None})
    return table([b for b, _ in rows], [lane])


def row_of(md: str, bug_id: str) -> str:
    return next(ln for ln in md.splitlines() if f"`{bug_id}`" in ln)


# ---------------------------------------------------------------------------
# the table's rows, read from results folders
# ---------------------------------------------------------------------------

def test_found_gives_the_symptom_time_and_shrink_and_claims_only_a_kind_match(tmp_path: Path):
    explore_session(tmp_path, "explore-20261201-204025-seed1", found=True)
    e = read_explore_at(BAD, [tmp_path])
    own, other = bug(), bug("preadv-freed-iovec", kinds=("EINVAL", "served-by-ARC"))
    md = explore_table([(own, e), (other, e)])
    r = row_of(md, "eof-tail-efault")
    assert r.startswith(f"| `eof-tail-efault` | {BAD[:11]} | found: wrong-bytes after 90s "
                        "(shrunk 40 -> 11 ops) (matches the bug's symptom): ")
    assert f"explore seed {SEED} op 10 (verify): 8160 wrong bytes from 4096 [{ROW}]" in r
    r2 = row_of(md, "preadv-freed-iovec")
    # another kind: a failure met at the commit, never read as the bug found
    assert f"| {BAD[:11]} | not by its symptom (EINVAL, served-by-ARC) in " in r2
    assert "met instead: wrong-bytes after 90s (shrunk 40 -> 11 ops): explore seed" in r2
    assert "matches" not in r2 and "found:" not in r2
    assert "matches" not in explore_table([(bug("x", kinds=()), e)])   # no symptom declared


def test_an_unexpected_errno_matches_the_manifests_errno_kind():
    assert explorebugs.same_kind("error:EINVAL", ["EINVAL", "served-by-ARC"])
    assert explorebugs.same_kind("wrong-bytes", ["EFAULT", "short", "wrong-bytes"])
    assert not explorebugs.same_kind("error:EIO", ["EINVAL"])
    # a synced block lost at a crash point is the barrier cases' lost-after-barrier
    assert explorebugs.same_kind("crash-lost", ["early-barrier", "lost-after-barrier"])
    assert explorebugs.same_kind("crash-size", ["early-barrier", "lost-after-barrier"])
    assert not explorebugs.same_kind("crash-torn", ["lost-after-barrier"])
    assert not explorebugs.same_kind("EINVAL", ["error:EINVAL"])     # the manifest's own names


def test_the_failure_of_the_bugs_kind_leads_the_cell():
    from suite.campaign.lanes.explore import ExploreAt, Failure
    e = ExploreAt("39991b06fea", "900s", sequences=9, failures=[
        Failure("wrong-bytes", "explore seed 5 op 8 (pread ...)", after_s=300.0, ops_from=40,
                ops_to=9),
        Failure("error:EINVAL", "explore seed 7 op 15 (preadv libaio ...)", after_s=100.0,
                ops_from=40, ops_to=3)])
    spec = SymptomSpec(("EINVAL", "served-by-ARC"), rows="async=1")
    assert e.describe(spec).startswith("found: error:EINVAL after 100s (shrunk 40 -> 3 ops) "
                                       "(matches the bug's symptom): explore seed 7 op 15")
    assert e.describe(spec).endswith("; also wrong-bytes")
    assert e.describe().startswith("found: wrong-bytes after 5m00s")    # no spec: first found
    # both kinds named: the one the manifest names first leads
    eof = SymptomSpec(("EINVAL", "short", "wrong-bytes"), rows="async=1")
    assert e.describe(eof).startswith("found: error:EINVAL after 100s")
    later = SymptomSpec(("wrong-bytes", "EINVAL"), rows="")
    assert e.describe(later).startswith("found: wrong-bytes after 5m00s")


def test_a_summary_without_at_s_sums_the_sequence_times_and_says_so(tmp_path: Path):
    explore_session(tmp_path, "old", found=True, n=3, at_s=False)
    assert read_explore_at(BAD, [tmp_path]).describe().startswith(
        "found: wrong-bytes after ~2m00s (shrunk 40 -> 11 ops)")


def test_not_found_gives_the_budget_and_the_sequences(tmp_path: Path):
    explore_session(tmp_path, "clean", n=2)
    e = read_explore_at(BAD, [tmp_path])
    assert e.describe(bug().symptom) == "not found in 900s (2 sequences)"
    explore_session(tmp_path / "z", "clean-zvol", target="zvol", n=3)
    assert read_explore_at(BAD, [tmp_path / "z"], target="zvol").describe() == \
        "not found in 900s (3 sequences, target zvol)"
    explore_session(tmp_path / "k", "clean-known", n=6, known=4)
    assert read_explore_at(BAD, [tmp_path / "k"]).describe() == \
        "not found in 900s (6 sequences; 4 failed as known findings)"


@pytest.mark.parametrize("how, says", [
    ("no-result", "INCONCLUSIVE: failed: no-result: explore seed 1001: the engine never said"),
    ("guest-lost", "INCONCLUSIVE: error: guest-lost: ssh: no route"),
    ("no verdict", "INCONCLUSIVE: the explore case left no verdict.json (cut short, or still "
                   "running; see "),
    ("skipped", "INCONCLUSIVE: skipped: no pool"),
])
def test_what_proves_nothing_is_inconclusive(tmp_path: Path, how: str, says: str):
    v = {"guest-lost": CaseVerdict("n", "error", [Symptom("guest-lost", "ssh: no route")]),
         "skipped": CaseVerdict("n", "skipped", [], "no pool")}.get(how)
    explore_session(tmp_path, "s", no_result=how == "no-result", verdict=v,
                    write_verdict=how != "no verdict")
    got = read_explore_at(BAD, [tmp_path]).describe(bug().symptom)
    assert got.startswith(says), got


def test_a_session_that_never_reached_the_case_is_inconclusive(tmp_path: Path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "pytest.log").write_text("build failed\n")
    assert read_session(tmp_path / "s", BAD).describe().startswith(
        "INCONCLUSIVE: the explore case left no summary.json (see ")


def test_a_failure_outside_a_sequence_is_found_but_not_timed_or_shrunk(tmp_path: Path):
    v = CaseVerdict("n", "failed", [Symptom("kernel:warning", "WARNING at zio.c:123")])
    explore_session(tmp_path, "s", n=4, verdict=v)
    assert read_explore_at(BAD, [tmp_path]).describe() == (
        "found: kernel:warning outside a finished sequence (4 finished in 3m00s; nothing "
        "shrunk): WARNING at zio.c:123")


def test_a_missing_run_or_one_on_another_target_says_what_to_run(tmp_path: Path):
    explore_session(tmp_path, "elsewhere", commit=OTHER, found=True)
    md = explore_table([(bug(), read_explore_at(BAD, [tmp_path]))])
    assert (f"INCONCLUSIVE: no explore run at {BAD[:11]} under --explore-from (1 run(s) "
            f"there, at {OTHER[:11]}): run it with --explore BUDGET") in \
        row_of(md, "eof-tail-efault")
    explore_session(tmp_path, "zvol", target="zvol")
    got = read_explore_at(BAD, [tmp_path]).describe()
    assert got.startswith(f"INCONCLUSIVE: explore ran at {BAD[:11]} only on a zvol target")
    assert got.endswith("--explore-target zvol")
    assert explore_table([(bug(), None)]).endswith("| not run |\n")


def test_the_newest_finished_run_at_the_commit_wins_wherever_it_sits(tmp_path: Path):
    explore_session(tmp_path, "explore-a", stamp="20261201-100000", n=2)
    explore_session(tmp_path / "bugs-x" / "explore", BAD[:11], stamp="20261201-120000",
                    found=True)
    explore_session(tmp_path, "explore-c", stamp="20261201-130000", write_verdict=False)
    assert read_explore_at(BAD, [tmp_path]).describe().startswith("found: wrong-bytes")


def test_a_deferred_bug_says_so_from_the_manifest(tmp_path: Path):
    explore_session(tmp_path, "s", n=2)
    e = read_explore_at(BAD, [tmp_path])
    md = explore_table([(bug("uaf", deferred="kasan: bytes stay right"), e),
                            (bug("lone", bad=OTHER, deferred="kasan: x"), None)])
    assert ("deferred in the manifest (kasan: bytes stay right); explore at this commit: "
            "not found in 900s (2 sequences)") in row_of(md, "uaf")
    assert row_of(md, "lone").endswith("| deferred in the manifest (kasan: x) |")


# ---------------------------------------------------------------------------
# suite bugs --explore: one run per commit; running it; the command line
# ---------------------------------------------------------------------------

def manifest(*bugs: KnownBug) -> Manifest:
    return Manifest("async-dio", "", "u", "b", "h" * 40, "b" * 40, "u", bugs=bugs)


def test_a_commit_shared_by_several_bugs_runs_explore_once(tmp_path, monkeypatch, capsys):
    m = manifest(bug("a"), bug("b", kinds=("D-state",)), bug("c", bad=OTHER),
                 bug("d", bad="d" * 40, deferred="kasan: x"))
    monkeypatch.setattr(knownbugs.series, "available", lambda: {"async-dio": m})
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    monkeypatch.setattr(cases, "run_cases", lambda *a, **k: pytest.fail("ran suite cases"))
    calls: list[tuple[str, str]] = []

    def fake(name, commit, root, extra, plan, kernel=""):
        calls.append((name, commit))
        return ExploreAt(commit[:11], "900s", sequences=2)
    monkeypatch.setattr(explorebugs, "run_explore_at", fake)
    code = knownbugs.run_bugs("async-dio", [], "", [], lanes=[ExploreLane("15m", only=True)])
    assert sorted(calls) == sorted([("async-dio", BAD), ("async-dio", OTHER)])
    assert code == 0
    md = next(tmp_path.glob("bugs-*/explore-at-bad.md")).read_text()
    for b in "abc":
        assert row_of(md, b).endswith("| not found in 900s (2 sequences) |")
    assert row_of(md, "d").endswith("| deferred in the manifest (kasan: x) |")
    assert "not run here (explore only)" in capsys.readouterr().out


def _explore_runs(tmp_path, monkeypatch, m) -> list[tuple[str, str]]:
    """The (commit, kernel) of each explore run ``bugs --explore-only`` starts for ``m``
    (each run a stand-in: 9 sequences on a named kernel, 2 on the default one)."""
    monkeypatch.setattr(knownbugs.series, "available", lambda: {"async-dio": m})
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    calls: list[tuple[str, str]] = []

    def fake(name, commit, root, extra, plan, kernel=""):
        calls.append((commit, kernel))
        return ExploreAt(commit[:11], "900s", sequences=9 if kernel else 2)
    monkeypatch.setattr(explorebugs, "run_explore_at", fake)
    knownbugs.run_bugs("async-dio", [], "", [], lanes=[ExploreLane("15m", only=True)])
    return calls


def test_a_bug_that_names_a_kernel_is_explored_there_in_a_run_of_its_own(tmp_path, monkeypatch):
    """A use-after-free only KASAN reports: the bug names the debug kernel, so explore at
    its commit runs twice, on the default kernel (shared by the other bugs there) and on
    that one (its cell reads that run); --explore-from tells the two apart by the kernel
    profile in each run's build record."""
    import dataclasses
    uaf = dataclasses.replace(bug("uaf", bad=OTHER, kinds=("kernel:kasan",)),
                              kernel="debian-6.1-debug")
    calls = _explore_runs(tmp_path, monkeypatch, manifest(bug("a", bad=OTHER), uaf))
    assert sorted(calls) == [(OTHER, ""), (OTHER, "debian-6.1-debug")]
    md = next(tmp_path.glob("bugs-*/explore-at-bad.md")).read_text()
    assert "(9 sequences)" in row_of(md, "uaf") and "(2 sequences)" in row_of(md, "a")
    # read back: each run matched to its kernel by the build record
    for name, profile in (("plain", "debian-6.1"), ("debug", "debian-6.1-debug")):
        s = explore_session(tmp_path / "from", name, OTHER, n=2 if name == "plain" else 5)
        rec = next(s.glob("*/build/record-*.json"))
        rec.write_text(json.dumps({**json.loads(rec.read_text()),
                                   "kernel": {"profile": profile}}))
    assert read_explore_at(OTHER, [tmp_path / "from"], kernel="debian-6.1-debug").sequences == 5
    assert read_explore_at(OTHER, [tmp_path / "from"]).sequences == 2


def test_a_bug_seen_on_any_kernel_too_is_explored_on_the_default_one(tmp_path, monkeypatch):
    """A bug whose symptom also lists a report any kernel makes (write-iovec-use-after-
    free: KASAN's, or an oops once the submitter is gone) names the debug kernel for its
    cases, and is explored in the default kernel's run at its commit."""
    import dataclasses
    from suite.campaign.lanes.explore import explore_kernel
    both = dataclasses.replace(bug("uaf", bad=OTHER, kinds=("kernel:kasan", "kernel:oops")),
                               kernel="debian-6.1-debug")
    only = dataclasses.replace(both, symptom=dataclasses.replace(both.symptom,
                                                                 kinds=["kernel:kasan"]))
    assert (explore_kernel(both), explore_kernel(only)) == ("", "debian-6.1-debug")
    assert _explore_runs(tmp_path, monkeypatch, manifest(bug("a", bad=OTHER), both)) == \
        [(OTHER, "")]


def test_an_inconclusive_explore_alone_exits_non_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(knownbugs.series, "available", lambda: {"async-dio": manifest(bug())})
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    monkeypatch.setattr(explorebugs, "run_explore_at",
                        lambda *a, **k: ExploreAt(BAD[:11], problem="guest lost"))
    assert knownbugs.run_bugs("async-dio", [], "", [], lanes=[ExploreLane("15m", only=True)]) == 1


def test_running_explore_at_a_commit_reads_back_its_own_folder(tmp_path, monkeypatch):
    import suite.explore.lane as lane
    seen: dict = {}

    def fake_lane(build, seed, budget, pytest_args, results=None, target="file", findings=1,
                  known=None):
        seen.update(build=build, seed=seed, budget=budget, args=pytest_args, target=target,
                    findings=findings, known=known)
        explore_session(results.parent, results.name, found=True)
        return 1
    monkeypatch.setattr(lane, "run_lane", fake_lane)
    plan = ExploreLane("20x", seed=7, target="zvol", known=["/r/master"])
    e = plan.at("async-dio", BAD, tmp_path, ["-x"])
    assert seen == {"build": ["--series", f"async-dio@{BAD[:11]}"], "seed": 7,
                    "budget": "20x", "args": ["-x"], "target": "zvol", "findings": 3,
                    "known": ["/r/master"]}
    assert e.results == str(tmp_path / "explore" / BAD[:11])
    assert e.describe().startswith("found: wrong-bytes after 90s (shrunk 40 -> 11 ops)")


def test_the_command_line_passes_the_plan_and_refuses_only_without_a_budget(monkeypatch,
                                                                           capsys):
    from suite import cli
    got: dict = {}
    monkeypatch.setattr(knownbugs, "run_bugs",
                        lambda *a, **k: got.update(k, explore=next(
                            (lane for lane in k["lanes"] if lane.name == "explore"), None)) or 0)
    assert cli.main(["bugs", "async-dio", "--explore", "15m", "--explore-seed", "3",
                     "--explore-target", "zvol", "--explore-only"]) == 0
    assert got["explore"] == ExploreLane("15m", 3, "zvol", only=True)
    assert cli.main(["bugs", "async-dio", "--explore-from", "/r"]) == 0     # reads, alone
    assert got["explore"] == ExploreLane("", 1, "file", only=True, read_from=[Path("/r")])
    assert cli.main(["bugs", "async-dio"]) == 0 and got["explore"] is None
    assert cli.main(["bugs", "async-dio", "--explore-only"]) == 2
    assert "--explore-only runs nothing without a budget" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# the session records when each sequence ended: the time to the first failure
# ---------------------------------------------------------------------------

class FailsOneSeed:
    """Each run takes 10 s of the fake clock; every run of ``seed`` fails at its last op."""

    def __init__(self, now: list[float], seed: int) -> None:
        self.now, self.seed = now, seed

    def run_sequence(self, seq_file, target, timeout_s, extra=()) -> RunOutput:
        self.now[0] += 10.0
        seq = Sequence.from_json(Path(seq_file).read_text())
        n = len(seq.ops)
        ops = [{"event": "op", "i": i, "op": o.op, "outcome": "ok"}
               for i, o in enumerate(seq.ops)]
        done = {"event": "explore-done", "ok": True}
        if seq.seed == self.seed:
            done = {**done, "ok": False, "failed_at": n - 1, "kind": "wrong-bytes", "why": "x"}
        return RunOutput([*ops, done], 0)


def test_the_summary_records_when_each_sequence_ended(tmp_path: Path):
    now = [0.0]
    out = tmp_path / "run" / "cases" / "test_explore" / "explore"
    s = Settings(str(tmp_path), tmp_path / "engine", out, n_ops=6, shrink_tries=4)
    Explorer(FailsOneSeed(now, sequence_seed(5, 2)), s, Choices(), clock=lambda: now[0],
             log=lambda _: None).run(5, parse_budget("6x"))
    summary = json.loads((out / "summary.json").read_text())
    assert [r["at_s"] for r in summary["runs"]] == [10.0, 20.0, 30.0]
    assert summary["runs"][2]["state"] == "failed" and summary["elapsed_s"] > 30.0
    (out.parent / "verdict.json").write_text(CaseVerdict(
        "n", "failed", [Symptom("wrong-bytes", "x")]).to_json())
    assert read_session(tmp_path).describe().startswith(
        "found: wrong-bytes after 30s (shrunk 6 -> ")


def test_a_hang_with_tasks_in_d_state_meets_a_d_state_bug(tmp_path: Path):
    """async-dio 317cbaa578 on poisoned guests: explore's hang (mmap_write -> msync
    waits for good in zfs_fsync) left a task in D state; the case names it as its
    after-case judge would (``D-state`` with the stack's functions), and the lane credits
    the bug whose symptom is D-state, with the hang's time and shrink."""
    from suite.explore.crashes.trip import Trip
    from suite.explore.judge import Verdict
    from suite.explore.session import Finding
    lines = ("--- pid 313 (python) state=S (sleeping) wchan=pipe_read ---",
             "[<0>] pipe_read+0x3df/0x470",
             "--- pid 417 (python) state=D (disk sleep) wchan=cv_wait_common ---",
             "[<0>] cv_wait_common+0x16d/0x2e0 [spl]",
             "[<0>] zfs_fsync+0xc4/0x210 [zfs]",
             "[<0>] zpl_fsync+0xe2/0x190 [zfs]")
    v = Verdict(False, kind="hang", failed_at=1, why="no progress",
                trip=Trip("hang", "no progress for 90s in op 1 (mmap_write)", 1,
                          "mmap_write", lines, True))
    seq = Sequence(seed=SEED, ops=())
    f = Finding(0, seq, v, seq, v, True, 11, False, tmp_path / "m.json", tmp_path / "m.txt", "")
    names, funcs = f.stuck()
    assert names == "417 (python)" and "zfs_fsync" in funcs and "pipe_read" not in funcs
    s = explore_session(tmp_path, "s", OTHER, n=1, verdict=CaseVerdict(
        "n", "failed", [Symptom("hang", f"explore seed {SEED} op 1 (mmap_write): no progress"),
                        Symptom("D-state", f"explore seed {SEED}: {names}", stack=funcs)]))
    summary = next(s.glob("*/cases/test_explore/explore/summary.json"))
    d = json.loads(summary.read_text())
    d["runs"][0].update(seed=SEED, state="failed", kind="hang", at_s=283.0)
    d["findings"] = [{"seed": SEED, "kind": "hang", "confirmed": True, "ops": 2}]
    summary.write_text(json.dumps(d))
    uninit = bug("fsync-hang-uninit-counter", bad=OTHER, kinds=("D-state",))
    cell = read_explore_at(OTHER, [tmp_path]).describe(uninit.symptom)
    assert cell.startswith("found: D-state after 4m43s (shrunk 40 -> 2 ops) (matches the bug's "
                           "symptom)"), cell
    assert "zfs_fsync" in cell and "also hang" in cell


def test_a_report_a_run_named_a_known_finding_is_not_the_bugs_own(tmp_path: Path):
    """dc643dc204, 2026-12-07: a run explore named the known io_uring quota pin
    mismatch left its panic among the case's symptoms, and the cell read "found:
    kernel:spl_panic (matches the bug's symptom)". A symptom a known run's finding
    accounts for by its signature is counted with the known ones; one it does not
    account for (today's signature) is still a failure met at the commit."""
    stock = Symptom("kernel:spl_panic", "[ 516.4] VERIFY0(len) failed (-131072)",
                    stack=("zfs_uio_pin_user_pages", "zfs_uio_get_dio_pages_alloc"))
    series = Symptom("kernel:spl_panic", "[ 516.4] VERIFY0(len) failed (-524288)",
                     stack=("zfs_uio_get_dio_pages_alloc", "zfs_dio_pin_pages",
                            "zpl_async_dio_queue"))
    spec = SymptomSpec(kinds=["kernel:spl_panic"])
    for sym, credited in ((stock, False), (series, True)):
        root = tmp_path / sym.detail[-8:-1]
        s = explore_session(root, "s", n=3, known=1,
                            verdict=CaseVerdict("n", "failed", [sym]))
        summary = next(s.glob("*/cases/test_explore/explore/summary.json"))
        d = json.loads(summary.read_text())
        d["runs"][1].update(state="failed", kind="kernel:spl_panic",
                            known="io-uring-dio-write-past-quota-pin-mismatch")
        summary.write_text(json.dumps(d))
        cell = read_explore_at(BAD, [root]).describe(spec)
        assert cell.startswith("found: kernel:spl_panic") == credited, cell
        assert ("1 failed as known findings" in cell) or credited, cell


def test_a_finding_of_a_resumed_sequence_is_timed_at_the_run_that_failed_so(tmp_path: Path):
    """8e1187c520, 2026-12-07: sequence k2 failed first as a known finding (at 95 s),
    was run again past it and oopsed at 435 s; the cell said "after 95s"."""
    s = explore_session(tmp_path, "s", n=3, found=True)
    summary = next(s.glob("*/cases/test_explore/explore/summary.json"))
    d = json.loads(summary.read_text())
    first = dict(d["runs"][2], kind="short", known="sendfile-from-direct-always-moves-nothing",
                 at_s=95.0)
    d["runs"][2].update(resumed=1, at_s=435.0)
    d["runs"].insert(2, first)
    summary.write_text(json.dumps(d))
    assert "after 7m15s" in read_explore_at(BAD, [tmp_path]).describe()


def test_a_sequence_run_again_past_its_failures_counts_once(tmp_path: Path):
    s = explore_session(tmp_path, "s", n=3)
    summary = next(s.glob("*/cases/test_explore/explore/summary.json"))
    d = json.loads(summary.read_text())
    d["runs"] += [dict(d["runs"][2], resumed=1), dict(d["runs"][2], resumed=2)]
    d["sequences"] = len(d["runs"])
    summary.write_text(json.dumps(d))
    assert "(3 sequences" in read_explore_at(BAD, [tmp_path]).describe()


def test_a_symptom_met_while_shrinking_is_said_beside_the_cell(tmp_path: Path):
    s = explore_session(tmp_path, "s", n=3, found=True)
    summary = next(s.glob("*/cases/test_explore/explore/summary.json"))
    d = json.loads(summary.read_text())
    d["aside"] = [{"seed": 5, "kind": "crash-lost", "why": "block lost", "json": "a.json"}]
    summary.write_text(json.dumps(d))
    at = read_explore_at(BAD, [tmp_path])
    cell = at.describe(SymptomSpec(kinds=["early-barrier", "lost-after-barrier"]))
    assert cell.endswith("met while shrinking another finding: crash-lost (the bug's "
                         "symptom; kept aside, not replayed)"), cell
    assert cell.startswith("not by its symptom")
    assert at.describe(SymptomSpec(kinds=["EFAULT"])).endswith("another finding: crash-lost")


def test_a_bug_is_credited_only_with_its_own_stacks_and_op(tmp_path: Path):
    """The kind alone is not the bug: a D-state without both sides of the rollback
    deadlock on its stacks is not rollback-drain-deadlock, an early barrier of a syncfs
    is not fsync's (fsync-ignores-queued-writes) and the other way round, also when
    shrinking met it on the way."""
    from suite.source.series import available
    bugs = {b.id: b for b in available()["async-dio"].bugs}
    fsync, syncfs = (bugs[k].symptom for k in ("fsync-ignores-queued-writes",
                                                "syncfs-ignores-queued-writes"))
    later = bugs["barrier-satisfied-by-later-write"].symptom
    rollback = bugs["rollback-drain-deadlock"].symptom
    by_syncfs = (f"explore seed {SEED} op 37 (held_write iface=libaio off=0 len=32768 data=3 "
                 "then=syncfs slow_ms=1000): syncfs returned while ...")
    by_later = by_syncfs.replace("then=syncfs", "then=later_write")
    by_power = f"explore seed {SEED} op 9 (power_cut iface=libaio off=0 len=4096 segs=2 " \
               "data=4 barrier=fsync slow_ms=250): after the power cut and import: lost"
    c = explorebugs.credited
    assert c(syncfs, "early-barrier", by_syncfs) and not c(fsync, "early-barrier", by_syncfs)
    assert c(later, "early-barrier", by_later) and c(syncfs, "early-barrier", by_later)
    assert not c(later, "early-barrier", by_syncfs)
    assert c(fsync, "crash-lost", by_power) and not c(syncfs, "crash-lost", by_power)
    by_syncfs_cut = by_power.replace("barrier=fsync", "barrier=syncfs")
    assert c(syncfs, "crash-size", by_syncfs_cut) and not c(fsync, "crash-size", by_syncfs_cut)
    stuck = ("cv_wait_common", "zfsvfs_teardown", "zfs_rollback")
    assert not c(rollback, "D-state", "", stuck)
    assert c(rollback, "D-state", "", stuck + ("zpl_async_read_task",))
    s = explore_session(tmp_path, "s", OTHER, n=3, found=True)
    summary = next(s.glob("*/cases/test_explore/explore/summary.json"))
    d = json.loads(summary.read_text())
    d["aside"] = [{"seed": 5, "kind": "crash-lost", "why": "after the power cut: lost",
                   "op": by_power.split("(", 1)[1].split(")")[0], "json": "a.json"}]
    summary.write_text(json.dumps(d))
    at = read_explore_at(OTHER, [tmp_path])
    assert at.describe(fsync).endswith("(the bug's symptom; kept aside, not replayed)")
    assert at.describe(syncfs).endswith("another finding: crash-lost")
    assert "in an op matching /then=(syncfs|later_write)" in at.describe(syncfs)


def test_the_read_paths_oops_is_not_the_write_paths():
    """Two series bugs oops the same way in iov_iter_advance: the async read task's walk
    (async-read-iovec-after-submit) and the write task's (write-iovec-use-after-free,
    met so at 30582e2f4c with the submitter gone): the frames tell them apart, and an
    explore finding carries its report's frames as a case's kernel symptom does."""
    from suite.explore.crashes.trip import kernel_trip
    from suite.explore.finding import Finding as ExploreFinding
    from suite.explore.judge import Verdict
    from suite.source.series import available
    from suite.vm.console import Finding as Report
    bugs = {b.id: b for b in available()["async-dio"].bugs}
    read, write = (bugs[k].symptom for k in ("async-read-iovec-after-submit",
                                             "write-iovec-use-after-free"))
    report = Report("oops", "error", "[ 123.7] BUG: unable to handle page fault for address: "
                    "ff8157bf041d3a88", 1, ("RIP: 0010:iov_iter_advance+0x5b/0x220",
                                            "Call Trace:", " zfs_uioskip+0xfd/0x120 [zfs]",
                                            " dmu_write_uio_direct+0xad/0x110 [zfs]",
                                            " zfs_write_impl+0x6a0/0xf00 [zfs]",
                                            " zpl_async_dio_task+0x143/0x1c0 [zfs]"))
    trip = kernel_trip(report, (37, "held_write"))
    v = Verdict(False, kind="kernel:oops", failed_at=0, why=trip.headline, trip=trip)
    seq = Sequence(seed=5, ops=())
    f = ExploreFinding(0, seq, v, seq, v, True, 11, False, Path("m.json"), Path("m.txt"), "")
    stack = f.frames()
    assert "dmu_write_uio_direct" in stack
    c = explorebugs.credited
    assert c(write, "kernel:oops", "", stack) and not c(read, "kernel:oops", "", stack)
    assert c(read, "kernel:oops", "", ("zfs_uioskip", "dmu_read_uio_direct", "zfs_read_impl"))
