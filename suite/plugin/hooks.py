"""Options, markers, results folder and report hooks.

Besides the reports, the hooks keep every verdict honest:

- ``--trials`` below 1 is a usage error;
- every case's outcome and symptoms go to ``cases/<case>/verdict.json`` (for ``suite bugs``);
- a case that overruns its backstop deadline fails (``deadline`` marker, or
  ``OZFS_VMCI_CASE_DEADLINE`` seconds scaled by the accelerator);
- a session that collected VM cases but brought none of them to a verdict
  (all skipped or errored before their call) exits non-zero: a run that tested
  nothing is not green.
"""
from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from suite import paths
from suite.build.pipeline import add_build_options
from suite.casekit.xfstests import check_args
from suite.explore.options import add_explore_options
from suite.plugin.shards import hand_on_case_times, take_case_times
from suite.errors import GuestError, HarnessStepError, KernelTripped, SuiteError, VMError
import suite.plugin.expected as expected
from suite.report import upstream
from suite.report.repro import write_reproducer
from suite.symptoms import CaseVerdict, Symptom
from suite.vm import cpus

MARKERS = [
    "vm: needs a virtme-ng guest (boots or reuses one per xdist worker)",
    "nvme: needs emulated NVMe devices in the guest",
    "async_dio: needs the async O_DIRECT series (zfs_async_dio_enabled in the loaded build)",
    "zvol_dio: needs the zvol Direct I/O series (zvol_dio_enabled in the loaded build)",
    "zinject: needs zinject fault injection",
    "guest(nvme=2, lbs=4096, size_mib=1024, memory='4G', cpus=2): guest shape the case needs",
    "guest_unit(name): cases of one shape that must not share a worker's guest run apart "
    "(the parts of an --xfstests-split: one guest each, at once under -n)",
    "pool(layout='stripe', props=None, dataset=None, pool_props=None, log=0): pool layout "
    "(log: trailing NVMe devices as a separate log) and dataset properties",
    "zfs_params(**params): module parameters set for the case and restored after",
    "perf: a benchmark (fio matrices); deselected unless -m selects it",
    "zts: OpenZFS's own test suite (ZTS) run by tag; deselected unless -m selects it "
    "(-m zts also turns on --zts)",
    "xfstests: the kernel's file system suite (xfstests, the fork with ZFS support) on the "
    "build, by profile; deselected unless -m selects it",
    "explore: seeded op sequences checked against a byte model, a failure shrunk "
    "(suite/explore); deselected unless -m selects it",
    "poisoned: the guest boots with the kernel's memory poisoning unless --explore-poison off "
    "(explore: a field a constructor forgets reads poison, not a lucky zero)",
    "quick(*ids): the variants of this case function the quick tier runs (--tier quick)",
    "canary(*kinds): damages what a judge looks at; passes only when the after-case "
    "judges report each symptom kind (cases/test_canaries.py); deselected unless -m "
    "selects it",
    "bug(id): the known series bug (patches/*.toml [[bugs]]) this case targets",
    "leaves(ereports=[], errors=[], vdevs=[], data_errors=False): what the case may leave "
    "behind besides what its zinject faults declare (suite/judges/expect.py)",
    "deadline(seconds): backstop for the case's call, before accelerator scaling",
    "ozfs_case: set by the plugin on every case that uses the build under test",
]
CASE_MARK = "ozfs_case"          # set on items that use the build under test
DEFAULT_CASE_DEADLINE = float(os.environ.get("OZFS_VMCI_CASE_DEADLINE", "300"))
DEADLINE_SCALE = pytest.StashKey[float]()
GUEST_CPUS = pytest.StashKey["cpus.GuestCpus"]()
INNER_SESSION = "OZFS_VMCI_INNER_SESSION"   # set by suite/sessions.py run_cases



def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("ozfs-vmci", "OpenZFS in virtme-ng guests")
    add_build_options(g.addoption)
    g.addoption("--accel", default="auto", choices=["auto", "kvm", "tcg"],
                help="guest accelerator; auto probes KVM and falls back to TCG")
    g.addoption("--results", default=None, help="results folder (default ./results)")
    g.addoption("--keep-vm", action="store_true",
                help="leave a guest that failed running for inspection (prints how to reach it)")
    g.addoption("--keep-images", action="store_true",
                help="keep the guests' NVMe images in the results folder after the session "
                     "(removed by default: 16 GiB a guest of the xfstests lane)")
    g.addoption("--perf-matrix", default="auto", choices=["auto", "small", "full"],
                help="benchmark matrix size (-m perf): auto = full on KVM, small under TCG")
    g.addoption("--zts-test", action="append", default=[], metavar="NAME",
                help="ZTS lane: run only this ZTS test (dio_loopback_dev or "
                     "functional/direct/dio_loopback_dev; repeatable), in its tag's case")
    g.addoption("--zts-lbs", type=int, default=None, choices=[512, 4096], metavar="BYTES",
                help="ZTS lane: the guest's NVMe sector size (default 4096, like real NVMe; "
                     "512 is what OpenZFS's CI gives ZTS with its loop-device files)")
    g.addoption("--xfstests", action="append", default=[], metavar="SEL",
                help="xfstests lane: what ./check runs: a group (-g aio, written 'g:aio'), a "
                     "test (generic/091), 'x:GROUP'/'e:TEST' to leave out, or 'dio' (the "
                     "Direct I/O selection: "
                     "suite/casekit/xfstests.py); repeatable or space-separated (default: dio)")
    g.addoption("--xfstests-profile", action="append", default=[], metavar="NAME",
                help="xfstests lane: plain, direct, async, zvol (repeatable; default: every "
                     "profile the build can run)")
    g.addoption("--xfstests-shard", default=None, metavar="i/N",
                help="xfstests lane: run the i-th of every N tests the selection names "
                     "(a runner's share of -g quick; the workflow's xfstests mode)")
    g.addoption("--xfstests-split", type=int, default=1, metavar="N",
                help="xfstests lane: run each profile's selection as N parts, a guest each "
                     "(at once with -n N), dealt longest first by each test's recorded time")
    g.addoption("--xfstests-budget", type=float, default=None, metavar="SECONDS",
                help="xfstests lane: stop ./check after this many seconds of wall clock "
                     "(default: 3600 scaled by the accelerator); what ran is reported, the "
                     "rest as not run")
    g.addoption("--tier", default="full", choices=["auto", "quick", "full"],
                help="quick: each case function once, with its bug-catching variant; full: "
                     "every variant; auto: full under KVM, quick under TCG (suite/plugin/tiers.py)")
    g.addoption("--shard", default=None, metavar="i/N",
                help="run shard i of N of the selection, balanced by the case times of "
                     "earlier runs (suite/plugin/shards.py); merge with `python -m suite merge`")
    g.addoption("--thorough", action="store_true",
                help="after each case: scrub the pool and check zdb block accounting of the "
                     "exported pool (minutes per case under TCG; the gate and nightly lane)")
    g.addoption("--poison", action="store_true",
                help="boot every guest with the kernel's own memory poisoning (init_on_free, "
                     "page_poison, slub_debug=FZP: suite/guest/lifecycle.py POISON), so a "
                     "use-after-free that leaves the bytes right reads poison; slower")
    g.addoption("--guest-cpus", default=None, metavar="N|auto",
                help="vCPUs of each guest (default auto, or OZFS_VMCI_GUEST_CPUS: 2, fewer when "
                     "the workers' guests would have more vCPUs than the host has cores; a "
                     "case's guest(cpus=N) marker wins: suite/vm/cpus.py)")
    g.addoption("--trials", type=int, default=None,
                help="trials per condition (default: enough to catch a 1-in-5 failure "
                     "with 95%% probability)")
    g.addoption("--zfs-param", action="append", default=[], metavar="NAME=VALUE",
                help="a zfs.ko parameter every guest loads the build with (repeatable; "
                     "checked to read back): a gate's head side with a tunable its pull "
                     "request adds")
    add_explore_options(g.addoption)
    expected.add_options(g.addoption)


def _run_label(config: pytest.Config) -> str:
    series = "+".join(config.getoption("series") or []) or (config.getoption("zfs_ref") or "stock")
    # Only characters qemu/vng take in paths (the VM workdirs live under it).
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", series.replace("@", "-at-"))[:60]


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"ozfs-vmci: {config.stash[GUEST_CPUS].line()}"]


def pytest_configure(config: pytest.Config) -> None:
    # vCPUs per guest, decided once per process: by -n (a worker: by its env)
    n = getattr(config.option, "numprocesses", None)
    try:
        config.stash[GUEST_CPUS] = cpus.choose(config.getoption("guest_cpus", None), cpus.xdist_workers()
                                               if hasattr(config, "workerinput") else int(n or 1))
    except SuiteError as e:
        raise pytest.UsageError(str(e)) from e
    trials = config.getoption("trials", None)
    if trials is not None and trials < 1:
        raise pytest.UsageError(f"--trials {trials}: a case needs at least 1 trial per "
                                f"condition (default {_default_trials()})")
    try:                    # a misspelt --xfstests stops here, not in a booted guest
        check_args(config.getoption("xfstests", None) or [])
    except ValueError as e:
        raise pytest.UsageError(str(e)) from e
    try:                    # a finding that would match by kind alone, likewise
        config.stash[expected.LOADED] = upstream.load()
    except SuiteError as e:
        raise pytest.UsageError(str(e)) from e
    for m in MARKERS:
        config.addinivalue_line("markers", m)
    # paramiko logs every refused connection while a guest boots: noise, not news.
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_dir = Path(workerinput["ozfs_run_dir"])
    else:
        root = Path(config.getoption("results") or paths.results_root())
        run_dir = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{_run_label(config)}"
    config.stash[RUN_DIR] = run_dir
    take_case_times(config)
    if asks_for(config, "zts"):
        config.option.zts = True            # the ZTS lane needs a build with the ZTS
    if config.getoption("thorough", False):
        config.option.with_zdb = True       # its block accounting is zdb's
    from suite.plugin.tiers import TierPlugin
    config.pluginmanager.register(TierPlugin(), "ozfs-vmci-tier")
    from suite.plugin.grouping import GroupingPlugin
    config.pluginmanager.register(GroupingPlugin(run_dir), "ozfs-vmci-grouping")
    if config.getoption("shard", None):
        from suite.plugin.shards import ShardPlugin, parse_shard
        config.pluginmanager.register(ShardPlugin(*parse_shard(config.getoption("shard"))),
                                      "ozfs-vmci-shard")
    if workerinput is None:
        config.pluginmanager.register(_VerdictCount(), "ozfs-vmci-verdict-count")
        config.pluginmanager.register(_ZtsJunit(), "ozfs-vmci-zts-junit")
        from suite.plugin.images import ImagesPlugin
        config.pluginmanager.register(ImagesPlugin(run_dir), "ozfs-vmci-images")


# Markers whose cases run only when -m names them: benchmarks, OpenZFS's own tests,
# exploration, the judges' canaries.
OPT_IN = ("perf", "zts", "explore", "canary", "xfstests")


def asks_for(config: pytest.Config, marker: str) -> bool:
    """``-m`` selects ``marker`` (and does not exclude it)."""
    expr = config.getoption("markexpr", "") or ""
    return re.search(rf"(?<!not )\b{marker}\b", expr) is not None


RUN_DIR = pytest.StashKey[Path]()


def _default_trials() -> int:
    from suite.casekit.trials import DEFAULT_TRIALS
    return DEFAULT_TRIALS


slug = paths.case_slug


def case_dir_of(config: pytest.Config, nodeid: str) -> Path:
    d = config.stash[RUN_DIR] / "cases" / slug(nodeid)
    d.mkdir(parents=True, exist_ok=True)
    return d


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lbs = config.getoption("zts_lbs")
    for item in items:
        if "zfs_build" in getattr(item, "fixturenames", ()):
            item.add_marker(CASE_MARK)
        shape = item.get_closest_marker("guest") if lbs else None
        if shape and item.get_closest_marker("zts"):   # in front: the closest mark wins
            item.add_marker(pytest.mark.guest(**{**shape.kwargs, "lbs": lbs}), append=False)
    # Benchmarks and ZTS run only when asked for by marker (-m perf, -m zts).
    for marker in OPT_IN:
        if not asks_for(config, marker):
            drop = [i for i in items if i.get_closest_marker(marker)]
            if drop:
                config.hook.pytest_deselected(items=drop)
                items[:] = [i for i in items if not i.get_closest_marker(marker)]


def has_cases(items: list[pytest.Item]) -> bool:
    """The session runs cases of the build under test: only such a session makes a
    results folder (the harness's own self-tests leave none)."""
    return any(i.get_closest_marker(m) is not None for i in items
               for m in (CASE_MARK, "guest"))


WORKER_COLLECTION = "collection.json"      # what an xdist worker selected
_DESELECTED = pytest.StashKey[int]()


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        cfg = items[0].config
        cfg.stash[_DESELECTED] = cfg.stash.get(_DESELECTED, 0) + len(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """An xdist worker writes what it selected: the controller collects nothing, and
    the report's "what ran" needs the counts (every worker writes the same)."""
    if getattr(session.config, "workerinput", None) is None or not has_cases(session.items):
        return
    deselected = session.config.stash.get(_DESELECTED, 0)
    paths.write_json(session.config.stash[RUN_DIR] / WORKER_COLLECTION,
                     {"collected": len(session.items) + deselected, "deselected": deselected})


def pytest_configure_node(node) -> None:  # xdist: the controller hands on its run dir, times
    node.workerinput["ozfs_run_dir"] = str(node.config.stash[RUN_DIR])
    hand_on_case_times(node)


class CaseBackstop(SuiteError):
    """The case ran past its backstop deadline."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Arm the backstop: SIGALRM raises CaseBackstop in the case's (main) thread."""
    seconds = _backstop(item)
    armed = seconds and threading.current_thread() is threading.main_thread()
    if armed:
        def expire(signum, frame):
            raise CaseBackstop(f"the case ran past its {seconds:.0f}s backstop deadline",
                               fix="a wait in the case has no end, or the guest is wedged: "
                                   "see the evidence; raise it with @pytest.mark.deadline(s)")
        old = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _backstop(item: pytest.Item) -> float:
    if item.get_closest_marker(CASE_MARK) is None:
        return 0.0
    m = item.get_closest_marker("deadline")
    base = float(m.args[0]) if m and m.args else DEFAULT_CASE_DEADLINE
    return base * item.config.stash.get(DEADLINE_SCALE, 1.0)


def add_symptoms(item: pytest.Item, symptoms: list[Symptom]) -> None:
    """Record why a case failed (kept in its verdict.json)."""
    if not hasattr(item, "ozfs_symptoms"):
        item.ozfs_symptoms = []  # type: ignore[attr-defined]
    item.ozfs_symptoms.extend(symptoms)  # type: ignore[attr-defined]


def symptom_of_exception(excinfo: pytest.ExceptionInfo) -> Symptom:
    from suite.casekit.faults import NotArmed
    e = excinfo.value
    first = (str(e).splitlines() or [""])[0][:300]
    if isinstance(e, CaseBackstop):
        return Symptom("backstop", first)
    if isinstance(e, NotArmed):
        return Symptom("not-armed", first)
    if isinstance(e, HarnessStepError):
        return Symptom("harness", first)
    if isinstance(e, VMError):
        return Symptom("guest-lost", first)
    if isinstance(e, KernelTripped):        # the console finding is the symptom
        return Symptom("no-result", first, e.row)
    if isinstance(e, GuestError):
        if first.startswith("killed by a signal"):
            return Symptom("killed", first)     # the guest answers: not infrastructure
        lost = "stopped answering" in first or "connection lost" in first.lower()
        return Symptom("guest-lost" if lost else "guest-error", first)
    if isinstance(e, (AssertionError, pytest.fail.Exception)):
        return Symptom("assertion", first)     # a case's own verdict, with no symptom named
    return Symptom("setup" if isinstance(e, SuiteError) else "harness-error",
                   f"{type(e).__name__}: {first}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
    if rep.failed and call.excinfo is not None:
        recorded = getattr(item, "ozfs_symptoms", [])
        if rep.when == "setup":
            add_symptoms(item, [Symptom("setup", symptom_of_exception(call.excinfo).detail)])
        elif rep.when == "call" and not (recorded and call.excinfo.errisinstance(
                (AssertionError, pytest.fail.Exception))):
            add_symptoms(item, [symptom_of_exception(call.excinfo)])
    for title, text in getattr(item, "ozfs_sections", []):
        if rep.when == "teardown" or (rep.when == "call" and rep.failed):
            rep.sections.append((title, text))
    if rep.when == "teardown" and getattr(item, "ozfs_sections", None):
        # JUnit (junit_logging = system-out) keeps "Captured stdout" sections only:
        # the tables and evidence go into each testcase's output that way.
        rep.sections.append(("Captured stdout teardown", "\n\n".join(
            f"== {title}\n{text}" for title, text in item.ozfs_sections)))
    if rep.when == "teardown":
        # Evidence is gathered in teardown, after the call report was made: give it
        # to the failed call's report too, so the failure shows it.
        call_rep = getattr(item, "rep_call", None)
        if call_rep is not None and call_rep.failed:
            for title, text in getattr(item, "ozfs_sections", []):
                if (title, text) not in call_rep.sections:
                    call_rep.sections.append((title, text))
        if item.get_closest_marker(CASE_MARK) is not None:
            _write_verdict(item, rep)


def _write_verdict(item: pytest.Item, teardown: pytest.TestReport) -> None:
    setup, call = getattr(item, "rep_setup", None), getattr(item, "rep_call", None)
    reason = ""
    if setup is not None and setup.skipped:
        outcome = "skipped"
        reason = str(setup.longrepr[-1]) if isinstance(setup.longrepr, tuple) else ""
    elif setup is not None and setup.failed:
        outcome, reason = "error", _first_line(setup)
    elif call is not None and call.skipped:
        outcome = "skipped"
        reason = str(call.longrepr[-1]) if isinstance(call.longrepr, tuple) else ""
    elif (call is not None and call.failed) or teardown.failed:
        outcome, reason = "failed", _first_line(call if call is not None and call.failed
                                                else teardown)
    else:
        outcome = "passed"
    symptoms = list(getattr(item, "ozfs_symptoms", []))
    if outcome in ("passed", "failed"):
        e = expected.judge(item, outcome == "failed", [s.signed() for s in symptoms],
                           call_failed=call is not None and call.failed)
        if e is not None:
            outcome, reason = e.outcome, e.reason[:300]
    v = CaseVerdict(item.nodeid, outcome, symptoms, reason)
    d = case_dir_of(item.config, item.nodeid)
    (d / "verdict.json").write_text(v.to_json() + "\n")
    if outcome in ("failed", "xfailed"):
        try:
            sh = write_reproducer(d, item.nodeid, v)
        except (OSError, ValueError) as e:
            add_section(item, "reproducer", f"could not be written: {e}")
        else:
            if sh is not None:
                add_section(item, "reproducer", f"bash {sh} <devices>   (or: python -m suite "
                            f"repro {d} [--series ...|--zfs-ref ...])")


def _first_line(rep: pytest.TestReport) -> str:
    """The failure's message: pytest's first ``E`` line; for ``pytest.fail(...,
    pytrace=False)`` (no ``E`` lines: the message is the text) its first line."""
    lines = (getattr(rep, "longreprtext", "") or "").splitlines()
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ") and ln[1:].strip()]
    rest = [ln.strip() for ln in lines if ln.strip()]
    return (errors[0] if errors else rest[0] if rest else "")[:300]


class _VerdictCount:
    """Counted on the controller (xdist or not) from the reports of VM cases."""

    def __init__(self) -> None:
        self.cases = 0
        self.verdicts = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if CASE_MARK not in report.keywords:
            return
        if report.when == "setup":
            self.cases += 1
        if report.when == "call" and (report.passed or report.failed
                                      or hasattr(report, "wasxfail")):
            self.verdicts += 1

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.cases and not self.verdicts and exitstatus in (0, 5):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            msg = (f"ozfs-vmci: {self.cases} VM case(s) selected, none ran to a verdict "
                   f"(all skipped or errored): nothing was tested, so this run is not green")
            if tr is not None:
                tr.write_line(msg, red=True)


class _ZtsJunit:
    """After pytest wrote its JUnit XML (``--junitxml``), add each ZTS and xfstests
    test of the run under its own id (``suite/report/zts.py``, ``xfstests.py``)."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        xml = getattr(session.config.option, "xmlpath", None)
        run_dir = session.config.stash.get(RUN_DIR, None)
        if not xml or run_dir is None:
            return
        from suite.report import xfstests, zts
        files = sorted(run_dir.glob(f"cases/*/{zts.RESULTS_FILE}"))
        zts.fold_into_junit(Path(xml), files)
        xfstests.fold_into_junit(Path(xml), sorted(run_dir.glob(
            f"cases/*/{xfstests.RESULTS_FILE}")))


def add_section(item: pytest.Item, title: str, text: str) -> None:
    """Attach text to a case's report (shown for failures, kept in JUnit)."""
    if not hasattr(item, "ozfs_sections"):
        item.ozfs_sections = []  # type: ignore[attr-defined]
    item.ozfs_sections.append((title, text))  # type: ignore[attr-defined]
