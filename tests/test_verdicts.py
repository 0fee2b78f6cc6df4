"""The judges: no vacuous pass, conditions proven as labelled, bugs caught only by
their own symptom, the guest judged after every case (no VM needed)."""
from __future__ import annotations

import pytest

from suite.casekit.dio import (ASYNC_PARAM, ASYNC_TASKS, STRICT_PARAM, Shape, cond, expect_arc,
                               expect_correct, expect_direct, expect_einval, judge, plan)
from suite.casekit.trials import classify, outcome
from suite.errors import GuestError
from suite.guest.aftercase import Observation, stuck_tasks
from suite.guest.evidence import DTask
from suite.ioengine.plan import FileSpec
from suite.report.outcomes import CaseResult, Outcome, judge_session
from suite.symptoms import CaseVerdict, Symptom, SymptomSpec, judge_case, stack_functions
from suite.vm.console import Finding, scan

HAVE = {ASYNC_PARAM, STRICT_PARAM}
A1 = cond("libaio async=1", "libaio", **{ASYNC_PARAM: 1, STRICT_PARAM: 1})
A0 = cond("libaio async=0", "libaio", **{ASYNC_PARAM: 0, STRICT_PARAM: 1})
SYNC = cond("sync preadv", "sync", control=True, **{STRICT_PARAM: 1})
CONDS = [A1, A0, SYNC]


def make_plan(conds=CONDS, trials=3):
    return plan(FileSpec("/t/f", 16384, "s"), Shape("p", nsegs=4), conds, trials, "tank", HAVE)


def good(req, **over):
    """A trial result as the engine reports a correct Direct I/O read."""
    r = {"event": "trial", "id": req.id, "condition": req.condition, "res": 16384,
         "expected_len": 16384, "errno": None, "errname": None, "stage": None,
         "correct": True, "wrong_bytes": 0, "overrun_bytes": 0,
         "counters": {"direct_read_count": 1, "arc_read_count": 0,
                      ASYNC_TASKS: 1 if req.condition == A1.label else 0},
         "params_applied": dict(req.params), "params_unavailable": [], "params_errors": {}}
    r.update(over)
    return r


def run_judge(results, p, expect=expect_direct, conds=CONDS):
    return judge("t", p, conds, results, {c.label: expect for c in conds})


# -- trials.classify ---------------------------------------------------------------

@pytest.mark.parametrize("over,col", [
    ({}, "correct"),
    ({"stage": "plan", "res": None, "correct": False}, "no result"),
    ({"stage": "timeout", "res": None, "correct": False}, "no result"),
    ({"stage": "open", "res": -22, "errno": 22, "errname": "EINVAL", "correct": False},
     "no result"),
    ({"overrun_bytes": 8, "correct": False}, "overrun"),
    ({"res": 100, "correct": False}, "short"),                # short, the bytes right
    ({"res": 100, "wrong_bytes": 2, "correct": False}, "wrong bytes"),
    ({"res": -14, "errno": 14, "errname": "EFAULT", "stage": "complete", "correct": False},
     "EFAULT"),
    ({"res": -5, "errno": 5, "errname": "EIO", "stage": "complete", "correct": False},
     "other error"),
])
def test_outcome_uses_the_engines_verdicts(over, col):
    req = make_plan().trials[0]
    assert outcome(good(req, **over)) == col


def test_engine_says_incorrect_even_when_res_looks_right():
    req = make_plan().trials[0]
    r = good(req, correct=False, wrong_bytes=0)        # e.g. overrun the engine saw
    assert "correct" not in classify(r)


# -- dio.judge ------------------------------------------------------------------------

def test_all_trials_right_passes():
    p = make_plan()
    v = run_judge([good(t) for t in p.trials], p)
    assert v.ok, v.failures
    assert v.table.rows[A1.label]["served by DIO"] == 3


def test_zero_results_is_a_failure_not_a_pass():
    p = make_plan()
    v = run_judge([], p)
    assert not v.ok and v.inconclusive
    assert {s.kind for s in v.symptoms} == {"no-result"}


def test_a_missing_trial_fails():
    p = make_plan()
    v = run_judge([good(t) for t in p.trials[:-1]], p)
    assert not v.ok and "never returned a result" in v.failures[0]


def test_a_condition_the_case_claims_but_never_planned_fails():
    p = make_plan(conds=[A1, SYNC])
    v = run_judge([good(t) for t in p.trials], p, conds=CONDS)
    assert any("never planned" in f for f in v.failures)


@pytest.mark.parametrize("counters,why", [
    ({"direct_read_count": None, "arc_read_count": None, ASYNC_TASKS: 0}, "missing"),
    ({"direct_read_count": 0, "arc_read_count": 0, ASYNC_TASKS: 0}, "did not move"),
])
def test_attribution_counters_missing_or_frozen_are_inconclusive(counters, why):
    p = make_plan(conds=[A0])
    v = run_judge([good(t, counters=counters) for t in p.trials], p, conds=[A0])
    assert not v.ok and v.inconclusive and why in v.symptoms[0].detail


def test_arc_fallback_is_its_own_symptom_on_its_row():
    p = make_plan()
    res = [good(t, counters={"direct_read_count": 0, "arc_read_count": 1, ASYNC_TASKS: 1})
           if t.condition == A1.label else good(t) for t in p.trials]
    v = run_judge(res, p)
    assert [(s.kind, s.row) for s in v.symptoms] == [("served-by-ARC", A1.label)]
    assert not v.inconclusive


def test_param_that_does_not_read_back_fails_the_label():
    p = make_plan()
    res = [good(t, params_applied={**t.params, ASYNC_PARAM: 0})
           if t.condition == A1.label else good(t) for t in p.trials]
    v = run_judge(res, p)
    assert v.symptoms[0].kind == "unproven" and "reads back" in v.symptoms[0].detail


def test_param_unavailable_fails_the_label():
    p = make_plan()
    res = [good(t, params_applied={}, params_unavailable=[ASYNC_PARAM])
           if t.condition == A1.label else good(t) for t in p.trials]
    v = run_judge(res, p)
    assert v.symptoms[0].kind == "unproven" and "was not set" in v.symptoms[0].detail


def test_async_label_needs_a_dispatched_task_and_sync_needs_none():
    p = make_plan()
    res = [good(t, counters={**good(t)["counters"], ASYNC_TASKS: 0}) for t in p.trials]
    v = run_judge(res, p)
    assert ("unproven", A1.label) in {(s.kind, s.row) for s in v.symptoms}
    res = [good(t, counters={**good(t)["counters"], ASYNC_TASKS: 1}) for t in p.trials]
    v = run_judge(res, p)
    rows = {s.row for s in v.symptoms if s.kind == "unproven"}
    assert rows == {A0.label, SYNC.label}


def test_einval_on_the_async_row_names_the_row():
    p = make_plan()
    res = [good(t, res=-22, errno=22, errname="EINVAL", stage="complete", correct=False)
           if t.condition == A1.label else good(t) for t in p.trials]
    v = run_judge(res, p)
    assert [(s.kind, s.row) for s in v.symptoms] == [("EINVAL", A1.label)]
    assert "3/3 trials failed" in v.failures[0]


def test_expect_einval_and_arc():
    req = make_plan().trials[0]
    einval = good(req, res=-22, errno=22, errname="EINVAL", stage="syscall", correct=False)
    assert expect_einval(A1, einval) is None
    assert expect_einval(A1, good(req)).kind == "no-EINVAL"
    assert expect_einval(A1, dict(einval, stage="plan")).kind == "no-result"
    arc = good(req, counters={"direct_read_count": 0, "arc_read_count": 2})
    assert expect_arc(A1, arc) is None
    assert expect_arc(A1, good(req)).kind == "served-by-DIO"
    assert expect_correct(A1, good(req, res=100, correct=False)).kind == "short"


# -- known bugs ------------------------------------------------------------------------

SPEC = SymptomSpec(("EINVAL", "served-by-ARC"), rows="async=1")
DEADLOCK = SymptomSpec(("D-state",), stack=("zfsvfs_teardown", "zpl_async_read_task"),
                       also=("hang", "kernel:hung_task"))


def verdict(outcome_, *symptoms):
    return CaseVerdict("cases/test_x.py::test_y", outcome_, list(symptoms))


@pytest.mark.parametrize("v,status", [
    (verdict("failed", Symptom("EINVAL", "res=-22", "libaio async=1 strict=1")), "caught"),
    (verdict("failed", Symptom("EINVAL", "", "sync preadv strict=1")), "inconclusive"),
    (verdict("failed", Symptom("guest-lost", "stopped answering")), "inconclusive"),
    (verdict("failed", Symptom("not-armed", "read completed early")), "inconclusive"),
    (verdict("failed", Symptom("EINVAL", "", "libaio async=1"),
             Symptom("EINVAL", "", "libaio async=0")), "inconclusive"),
    (verdict("error", Symptom("setup", "no build")), "inconclusive"),
    (verdict("failed"), "inconclusive"),
    (verdict("passed"), "passed"),
    (verdict("skipped"), "skipped"),
])
def test_judge_case_by_symptom(v, status):
    assert judge_case(SPEC, v)[0] == status


def test_deadlock_needs_both_functions_on_the_stacks():
    frames = ["[<0>] cv_wait_common+0x10/0x20 [spl]", "[<0>] zfsvfs_teardown+0x1a/0x2b0 [zfs]",
              "[<0>] zpl_async_read_task+0x5/0x90 [zfs]"]
    both = Symptom("D-state", "2 tasks", stack=stack_functions(frames))
    assert both.stack == ("cv_wait_common", "zfsvfs_teardown", "zpl_async_read_task")
    assert judge_case(DEADLOCK, verdict("failed", both, Symptom("hang", "rollback")))[0] == "caught"
    one = Symptom("D-state", "1 task", stack=("zfsvfs_teardown",))
    assert judge_case(DEADLOCK, verdict("failed", one))[0] == "inconclusive"
    assert judge_case(DEADLOCK, verdict("failed", Symptom("hang", "x")))[0] == "inconclusive"


def outcome_of(role, *statuses, problem=""):
    o = Outcome("b", "c", role, [CaseResult(f"t::{i}", s, "why") for i, s in
                                 enumerate(statuses)], problem)
    return o


@pytest.mark.parametrize("o,verdict_", [
    (outcome_of("bad", "caught", "passed"), "caught"),
    (outcome_of("bad", "caught", "inconclusive"), "INCONCLUSIVE"),
    (outcome_of("bad", "passed", "passed"), "MISSED"),
    (outcome_of("bad", "skipped"), "INCONCLUSIVE"),
    (outcome_of("bad", "caught", problem="killed"), "INCONCLUSIVE"),
    (outcome_of("fixed", "passed", "passed"), "clean"),
    (outcome_of("fixed", "passed", "caught"), "NOT FIXED"),
    (outcome_of("fixed", "passed", "inconclusive"), "INCONCLUSIVE"),
])
def test_bug_row_verdicts(o, verdict_):
    assert o.verdict.startswith(verdict_)
    assert o.ok == (verdict_ in ("caught", "clean"))


def test_judge_session_reads_verdicts_and_counts_missing_ones(tmp_path):
    d = tmp_path / "run" / "cases" / "a"
    d.mkdir(parents=True)
    (d / "verdict.json").write_text(verdict(
        "failed", Symptom("served-by-ARC", "", "io_uring async=1 strict=0")).to_json())
    cases, problem = judge_session(SPEC, tmp_path, junit_tests=1)
    assert [c.status for c in cases] == ["caught"] and not problem
    _, problem = judge_session(SPEC, tmp_path, junit_tests=3)
    assert "2 of 3 cases left no verdict" in problem


# -- after the case --------------------------------------------------------------------

def test_a_warning_after_a_passed_case_makes_the_guest_unfit():
    findings = scan("[  12.3] WARNING: CPU: 1 PID: 77 at module/zfs/dbuf.c:123 dbuf_x+0x1\n")
    reason, symptoms = Observation(True, [], findings).verdict()
    assert "WARNING: CPU: 1" in reason
    assert [s.kind for s in symptoms] == ["kernel:warning"]


def test_allow_listed_lines_are_not_findings():
    assert scan("Kernel command line: panic_on_warn=0 lockdep\n") == []
    # a crypto self-test that timed out at boot on a starved TCG guest
    assert scan("[  293.653883] WARNING: CPU: 1 PID: 131 at crypto/api.c:174 "
                "crypto_wait_for_test+0x96/0xa0\n") == []
    # but a warning from elsewhere in crypto still is one
    assert scan("[  12.3] WARNING: CPU: 1 PID: 9 at crypto/testmgr.c:5 alg_test+0x1\n") != []


def test_a_stuck_task_after_a_passed_case_makes_the_guest_unfit():
    t = DTask(476, "zfs", "D", "cv_wait", ("[<0>] zfsvfs_teardown+0x1/0x2 [zfs]",))
    reason, symptoms = Observation(True, [t]).verdict()
    assert "476 (zfs)" in reason and symptoms[0].stack == ("zfsvfs_teardown",)


def test_a_fit_guest_has_no_reason():
    assert Observation(True, [], []).verdict() == ("", [])
    assert Observation(True, teardown_problem="the dataset teardown hung").verdict()[1][0].kind == "hang"
    # A teardown step that returned an error did not hang (zpool export: "pool is busy").
    failed = Observation(True, teardown_problem="the dataset teardown failed: zpool export: busy")
    assert failed.verdict()[1][0].kind == "teardown"
    # One the kernel's report cut short proves no more than the report (a consequence).
    cut = Observation(True, teardown_problem="the dataset teardown was cut short: the kernel "
                                             "reported spl_panic: VERIFY0(len) failed")
    assert cut.verdict()[1][0].kind == "no-result"
    assert Observation(False).verdict()[1][0].kind == "guest-lost"


class FakeGuest:
    def __init__(self, samples):
        self.samples = list(samples)

    def run(self, cmd, timeout, check=True, log=True):
        class R:
            stdout = self.samples.pop(0)
        return R()


def _dstate(*pids):
    return "".join(f"--- pid {p} (t{p}) state=D wchan=x ---\n[<0>] f{p}+0x1/0x2\n" for p in pids)


def test_stuck_tasks_are_the_ones_in_every_sample(monkeypatch):
    monkeypatch.setattr("suite.guest.aftercase.time.sleep", lambda s: None)
    assert [t.pid for t in stuck_tasks(FakeGuest([_dstate(1, 2), _dstate(2, 3), _dstate(2)]),
                                       1.0)] == [2]
    assert stuck_tasks(FakeGuest([_dstate(1), _dstate()]), 1.0) == []
    assert stuck_tasks(FakeGuest([""]), 1.0) == []


def test_findings_carry_their_kind():
    f = Finding("hung_task", "error", "INFO: task zfs:476 blocked for more than 120 seconds.", 1)
    assert Observation(True, [], [f]).verdict()[1][0].kind == "kernel:hung_task"


def test_guest_error_from_a_dead_guest_is_raised_before_any_connection():
    from suite.vm.ssh import Guest
    g = Guest(1, name="t")
    g.watch(lambda: "qemu is stopped (process state T): the guest is frozen", 60)
    with pytest.raises(GuestError, match="stopped answering: qemu is stopped"):
        g.run("true", timeout=5)
    assert not g.alive(timeout=1)


# -- the loaded module is the build under test ------------------------------------------

def test_verify_refuses_a_module_that_is_not_the_build():
    from types import SimpleNamespace

    from suite.guest.zfs import ModuleMismatch, Zfs
    rec = SimpleNamespace(modules={"spl": SimpleNamespace(srcversion="SPL1", path="/b/spl.ko"),
                                   "zfs": SimpleNamespace(srcversion="ZFS1", path="/b/zfs.ko")})
    z = Zfs(None, rec)        # type: ignore[arg-type]
    assert z.verify({"spl": "SPL1", "zfs": "ZFS1"}) == {"spl": "SPL1", "zfs": "ZFS1"}
    with pytest.raises(ModuleMismatch, match="loaded zfs srcversion DISTRO.*ZFS1"):
        z.verify({"spl": "SPL1", "zfs": "DISTRO"})
    with pytest.raises(ModuleMismatch, match=r"\(not loaded\)"):
        z.verify({"spl": None, "zfs": "ZFS1"})


def test_an_idle_guest_is_not_a_silent_one():
    """Silence is counted from the start of the running command, not from the last one."""
    import time as _time

    from suite.vm.ssh import Guest
    g = Guest(1, name="t")
    g.watch(lambda: None, 1.0)
    g._last_ok = _time.monotonic() - 3600          # idle for an hour
    g.check_alive()                                 # no command running: not silent

    class Ex:
        started = _time.monotonic()
        last_output = started
        cmd = "x"
    g.check_alive(Ex())                             # a command that just started: not silent
    Ex.started = _time.monotonic() - 5
    Ex.last_output = _time.monotonic()              # ... that keeps printing: alive
    g._beat = lambda: None                          # no heartbeat gets through
    g.check_alive(Ex())
    Ex.last_output = Ex.started                     # silent command, no heartbeat: gone
    with pytest.raises(GuestError, match="no answer to a heartbeat"):
        g.check_alive(Ex())


def test_deferred_bugs_are_listed_not_run(monkeypatch, capsys):
    from suite.campaign import bugs as knownbugs
    from suite.campaign.lanes import cases
    from suite.source.series import KnownBug, Manifest
    m = Manifest("s", "", "u", "b", "h" * 40, "b" * 40, "u", bugs=(
        KnownBug("uaf", "t", "a" * 40, "b" * 40, deferred="kasan: bytes stay right"),))
    monkeypatch.setattr(knownbugs.series, "available", lambda: {"s": m})
    ran = []
    monkeypatch.setattr(cases, "run_cases", lambda *a, **k: ran.append(a))
    assert knownbugs.run_bugs("s", [], "", []) == 0
    out = capsys.readouterr().out
    assert not ran and "uaf" in out and "deferred: kasan" in out


def test_a_bug_that_needs_its_own_kernel_runs_its_cases_there(monkeypatch, tmp_path):
    """A KASAN-only bug runs on its profile even when the caller chose another
    (its --kernel comes last: pytest's option takes the last one given)."""
    from suite.campaign import bugs as knownbugs
    from suite.campaign.lanes import cases
    from suite.source.series import KnownBug, Manifest
    spec = SymptomSpec(("kernel:kasan",))
    m = Manifest("s", "", "u", "b", "h" * 40, "b" * 40, "u", bugs=(
        KnownBug("uaf", "t", "a" * 40, "c" * 40, ("t_uaf",), spec, kernel="debian-6.1-debug"),
        KnownBug("eof", "t", "a" * 40, "c" * 40, ("t_eof",), spec)))
    monkeypatch.setattr(knownbugs.series, "available", lambda: {"s": m})
    monkeypatch.setattr(knownbugs.paths, "results_root", lambda: tmp_path)
    ran = []
    monkeypatch.setattr(cases, "run_cases",
                        lambda args, results, extra: ran.append((args[1], extra)) or (0, "", 1.0))
    knownbugs.run_bugs("s", [], "", ["--kernel", "debian-6.12"])
    assert ran == [("(t_uaf)", ["--kernel", "debian-6.12", "--kernel", "debian-6.1-debug"])] * 2 + \
        [("(t_eof)", ["--kernel", "debian-6.12"])] * 2


def test_another_bug_of_the_same_commit_showing_first_is_named(tmp_path):
    """317cbaa578 has both the iovec use-after-free (KASAN) and the uninitialised
    fsync counter: a guest whose slab left garbage in the counter hangs in fsync
    before any async write, and the row says whose symptom that was."""
    import json as _json

    from suite.report.outcomes import judge_session
    from suite.source.series import KnownBug
    case = tmp_path / "run" / "cases" / "c"
    case.mkdir(parents=True)
    case.joinpath("verdict.json").write_text(_json.dumps({
        "nodeid": "cases/t.py::test_pwritev_aligned[libaio-segs9-strict0]", "outcome": "failed",
        "reason": "stuck", "symptoms": [
            {"kind": "D-state", "detail": "python3 in zfs_fsync", "row": "",
             "stack": ["cv_wait_common", "zfs_fsync", "zpl_fsync"]},
            {"kind": "kernel:hung_task", "detail": "blocked for more than 122 seconds",
             "row": "", "stack": []}]}))
    fsync = KnownBug("fsync-hang-uninit-counter", "t", "a" * 40, "b" * 40, ("x",),
                     SymptomSpec(("D-state",), stack=("zfs_fsync",),
                                 also=("hang", "kernel:hung_task")))
    other = KnownBug("eof", "t", "a" * 40, "b" * 40, ("y",), SymptomSpec(("error:EFAULT",)))
    kasan = SymptomSpec(("kernel:kasan",), also=("taint:B",))
    cases, problem = judge_session(kasan, tmp_path, 1, (other, fsync))
    assert problem == "" and cases[0].status == "inconclusive"
    assert "fsync-hang-uninit-counter's symptom, a bug of the same commit" in cases[0].why
    alone, _ = judge_session(kasan, tmp_path, 1, (other,))
    assert "same commit" not in alone[0].why


def test_a_case_that_fails_itself_after_naming_its_symptom_adds_nothing_else():
    from suite.plugin.hooks import symptom_of_exception
    try:
        pytest.fail("acknowledged write lost")
    except pytest.fail.Exception:
        import sys
        info = pytest.ExceptionInfo.from_exc_info(sys.exc_info())
    s = symptom_of_exception(info)
    assert s.kind == "assertion"        # not a harness error: a verdict the case reached
    spec = SymptomSpec(("lost-after-barrier",))
    v = verdict("failed", Symptom("lost-after-barrier", "4078 wrong"))
    assert judge_case(spec, v)[0] == "caught"


def test_a_dead_kernel_thread_ends_the_wait_at_once(tmp_path):
    """The tripwire: a failed VERIFY on the console while a command waits ends
    the wait (KernelTripped, counted as no result: the console finding is the
    symptom); a warning does not; with no command running nothing is asked."""
    import time as _time

    from suite.errors import KernelTripped
    from suite.guest.lifecycle import TRIP_KINDS
    from suite.vm.ssh import Guest
    from suite.plugin.hooks import symptom_of_exception
    from suite.vm.console import ConsoleWatcher
    console = tmp_path / "console.log"
    console.write_text("boot\n")
    w = ConsoleWatcher(console)

    def tripwire():
        dead = [f for f in w.poll() if f.kind in TRIP_KINDS]
        return f"{dead[0].kind}: {dead[0].line}" if dead else None

    g = Guest(1, name="t")
    g.watch(lambda: None, None)
    g.set_tripwire(tripwire)

    class Ex:
        started = last_output = _time.monotonic()
        cmd = "python3 -m suite.ioengine run quota.plan.json"

        class chan:
            @staticmethod
            def close():
                pass
    with open(console, "a") as f:
        f.write("[ 1.0] WARNING: CPU: 1 PID: 7 at fs/x.c:1 y+0x1/0x2\n")
    g.check_alive(Ex())                                          # a warning: keep waiting
    with open(console, "a") as f:
        f.write("[ 2.0] VERIFY3S(uio->uio_dio.npages, ==, npages) failed (192 == 224)\n")
    g.check_alive()                                              # no command: not asked
    with pytest.raises(KernelTripped, match="spl_panic: .*VERIFY3S") as e:
        g.check_alive(Ex())
    assert symptom_of_exception(e).kind == "no-result"


def test_a_tripped_engine_names_the_trial_in_flight_as_the_row(tmp_path):
    """When the kernel dies under an engine plan, what the engine printed before
    (its begin lines) names the trial in flight: in the error and as the row."""
    import json as _json

    from suite.casekit.engine import EngineRunner
    from suite.errors import KernelTripped
    from suite.ioengine.plan import Plan
    from suite.plugin.hooks import symptom_of_exception
    printed = "\n".join(_json.dumps(x) for x in [
        {"event": "begin", "trial": "0000", "condition": "sync"},
        {"event": "trial", "id": "0000", "condition": "sync"},
        {"event": "begin", "trial": "0001", "condition": "io_uring async=1"}]) + "\n"

    class FakeGuest:
        started: list[str] = []

        def background(self, cmd):
            self.started.append(cmd)       # the resident engine
            return object()

        def run(self, cmd, timeout=60, check=True):
            if "client.sh" not in cmd:
                return None
            e = KernelTripped("the kernel reported spl_panic: VERIFY3S(...) failed")
            e.partial_stdout = printed
            raise e

        def put(self, local, remote):
            pass

    guest = FakeGuest()
    runner = EngineRunner(guest, tmp_path / "engine")
    assert [c.split()[-4:] for c in guest.started] == [["serve", "--dir", "/tmp/ozfs-engine/srv", "</dev/null"]]
    with pytest.raises(KernelTripped, match=r"in flight: trial 0001, io_uring async=1") as e:
        runner.run(Plan([], []), name="quota")
    s = symptom_of_exception(e)
    assert (s.kind, s.row) == ("no-result", "io_uring async=1")
    assert "0001" in (tmp_path / "engine" / "quota.results.jsonl").read_text()


@pytest.mark.parametrize("what, kind", [
    ("killed by a signal while running: python3 -m suite.ioengine run p.json", "killed"),
    ("SSH connection lost while running: python3 -m suite.ioengine run p.json", "guest-lost"),
])
def test_a_command_killed_by_a_signal_is_a_finding_not_infrastructure(what, kind):
    """A gate must not call a series that makes the I/O engine die of a GPF
    'inconclusive': only a guest that went away is infrastructure."""
    import sys

    from suite.errors import GuestError
    from suite.plugin.hooks import symptom_of_exception
    from suite.symptoms import INFRASTRUCTURE
    try:
        raise GuestError(what)
    except GuestError:
        info = pytest.ExceptionInfo.from_exc_info(sys.exc_info())
    s = symptom_of_exception(info)
    assert s.kind == kind and (kind in INFRASTRUCTURE) == (kind == "guest-lost")


def test_only_a_failure_on_data_alone_keeps_its_guest():
    """A failed case's guest is kept only when every symptom is a data outcome the
    engine judged after its requests completed (and no fault was injected)."""
    from suite.plugin.fixtures import settled_failure
    from suite.symptoms import settled
    assert settled(["wrong-bytes"]) and settled(["short", "error:EFAULT", "paths-disagree"])
    assert not settled([])                                   # failed, and said nothing
    for other in ("hang", "D-state", "kernel:spl_panic", "no-result", "assertion",
                  "guest-error", "early-barrier", "teardown", "taint:W", "kstat:wrap",
                  "pool:cksum", "killed"):
        assert not settled(["wrong-bytes", other]), other

    class Item:
        def __init__(self, kinds, markers=()):
            self.ozfs_symptoms = [Symptom(k) for k in kinds]
            self.markers = set(markers)

        def get_closest_marker(self, name):
            return object() if name in self.markers else None

    assert settled_failure(Item(["wrong-bytes"]))
    assert not settled_failure(Item(["wrong-bytes"], ["zinject"]))
    assert not settled_failure(Item(["hang"]))


def test_the_judges_still_ask_a_guest_whose_kernel_only_reported_a_lockdep_like_rule():
    from suite.guest.aftercase import judgeable
    from suite.vm.console import scan
    lockdep = scan("[  162.9] WARNING: bad unlock balance detected!\n")
    oops = scan("[  170.1] BUG: kernel NULL pointer dereference, address: 0000000000000088\n")
    assert lockdep and lockdep[0].kind == "lockdep"
    assert judgeable(True, [], [], "")
    assert judgeable(True, [], lockdep, "")
    assert not judgeable(True, [], lockdep + oops, "")
    assert not judgeable(True, ["a stuck task"], lockdep, "")
    assert not judgeable(False, [], [], "")
    assert not judgeable(True, [], [], "the harness step 'x' did not finish")
