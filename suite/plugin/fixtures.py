"""Fixtures: ask for X, yield it, give it back.

A build and an accelerator per session (xdist: per worker; the build lock makes
the second worker reuse the first one's build), the worker's guests
(``suite/guest/lifecycle.py``: reused while fit, judged after every case, recycled), a
verified ZFS in a guest, a dataset on a pool, the I/O engine, a Direct I/O bench.
"""
from __future__ import annotations

import json
import shlex
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from suite.build.pipeline import BuildOptions, build, options_from
from suite.build.recipe import BuildRecord
from suite.casekit.dio import DIO_PROPS, DioBench
from suite.casekit.engine import EngineRunner
from suite.casekit.zvol import PROBES, quiet_udev, zvol_counters
from suite.errors import GuestError, KernelTripped, SourceUnreachable, SuiteError
from suite.guest.lifecycle import CaseEnd, Guests, GuestShape
from suite.guest.params import load_params
import suite.plugin.expected as expected
from suite.plugin.grouping import run_shape
from suite.guest.zfs import Dataset, Pool, PoolSpec, Zfs
from suite.plugin.hooks import DEADLINE_SCALE, GUEST_CPUS, RUN_DIR, add_section, add_symptoms, case_dir_of, slug
from suite.symptoms import Symptom, settled
from suite.vm.accel import Accel, for_build

FEATURE_PARAMS = {"async_dio": "zfs_async_dio_enabled", "zvol_dio": "zvol_dio_enabled"}


@dataclass
class RunCtx:
    config: pytest.Config
    run_dir: Path
    worker: str
    opts: BuildOptions
    trials: int | None
    keep_vm: bool

    def case_dir(self, nodeid: str) -> Path:
        return case_dir_of(self.config, nodeid)

    def tables_dir(self) -> Path:
        d = self.run_dir / "tables"
        d.mkdir(parents=True, exist_ok=True)
        return d


@pytest.fixture(scope="session")
def run_ctx(request: pytest.FixtureRequest) -> RunCtx:
    c = request.config
    run_dir = c.stash[RUN_DIR]
    run_dir.mkdir(parents=True, exist_ok=True)
    worker = getattr(c, "workerinput", {}).get("workerid", "main")
    opts = options_from(c.getoption)
    return RunCtx(c, run_dir, worker, opts, c.getoption("trials"), c.getoption("keep_vm"))


@contextmanager
def live(config: pytest.Config) -> Iterator[None]:
    """Let a long step's progress reach the terminal as it happens: pytest captures a
    fixture's output until the case ends, and an xdist worker's reaches the controller
    only when uncaptured. Without this, the first run sits silent through the build."""
    capman = config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else nullcontext():
        yield


# What a session says when its build's source did not answer (a self-test skips on it).
UNREACHABLE = "no OpenZFS build under test: source unreachable:"


@pytest.fixture(scope="session")
def zfs_build(run_ctx: RunCtx) -> BuildRecord:
    """The build under test: made, or taken from the cache, for the session's options.

    When it cannot be made (source unreachable, ref or kernel missing, build
    failure) every case errors with the reason: nothing tested is never green.
    """
    try:
        with live(run_ctx.config):
            record, built = build(run_ctx.opts)
    except SourceUnreachable as e:      # the one reason that says nothing about the build
        pytest.fail(f"{UNREACHABLE} {e.url}: nothing can be tested:\n{e}", pytrace=False)
    except SuiteError as e:
        pytest.fail(f"no OpenZFS build under test, so nothing can be tested:\n{e}",
                    pytrace=False)
    run_ctx.config.stash[expected.BUILD_COMMIT] = str(record.source.get("commit") or "")
    run_ctx.config.stash[expected.BUILD_SERIES] = bool(record.source.get("series"))
    out = run_ctx.run_dir / "build"
    out.mkdir(exist_ok=True)
    (out / f"record-{record.key}.json").write_text(record.to_json())
    (out / "build.log.path").write_text(record.log + "\n")
    return record


@pytest.fixture(scope="session")
def accel(run_ctx: RunCtx, zfs_build: BuildRecord) -> Accel:
    # for_build() (choose()) warns once when KVM is unusable; pytest lists it in the summary.
    a = for_build(run_ctx.config.getoption("accel"), zfs_build.kernel)
    run_ctx.config.stash[DEADLINE_SCALE] = a.scale      # the per-case backstop scales too
    (run_ctx.run_dir / "accel.json").write_text(json.dumps(
        {"name": a.name, "scale": a.scale, "hold_scale": a.hold_scale, "reason": a.reason}) + "\n")
    return a


@pytest.fixture(scope="session")
def guests(run_ctx: RunCtx, accel: Accel, zfs_build: BuildRecord) -> Iterator[Guests]:
    """The worker's guests (one at a time, reused while fit)."""
    g = Guests(run_ctx.run_dir, run_ctx.worker, accel, zfs_build, keep_failed=run_ctx.keep_vm,
               cpus=run_ctx.config.stash[GUEST_CPUS].count,
               load_params=load_params(run_ctx.config.getoption("zfs_param")))
    yield g
    for line in g.close():
        print("\n" + line)
    if g.kept:                  # --keep-vm: stay up until the guests die or Ctrl-C
        try:
            while any(vm.alive for vm in g.kept):
                time.sleep(5)
        except KeyboardInterrupt:
            pass
        for vm in g.kept:
            vm.kill()


@pytest.fixture
def case_dir(request: pytest.FixtureRequest, run_ctx: RunCtx) -> Path:
    return run_ctx.case_dir(request.node.nodeid)


@pytest.fixture
def zfs_guest(request: pytest.FixtureRequest, zfs_build: BuildRecord, guests: Guests,
              case_dir: Path) -> Iterator[Zfs]:
    """A guest running the build under test, loaded and verified (srcversion);
    judged after the case, pass or fail."""
    item = request.node
    # A benchmark times its I/O on a guest with no kprobe traps in the path.
    untraced = bool(item.get_closest_marker("perf")) and "zdio" not in item.fixturenames
    clock = PhaseClock(case_dir / "phases.json", item.nodeid)
    boots = guests.boots
    try:
        g = guests.acquire(run_shape(item), case_dir / "commands.log", untraced=untraced)
    except SuiteError as e:
        pytest.fail(f"no guest with the build under test:\n{e}", pytrace=False)
    # The shape as booted (its vCPUs resolved): what `suite repro` boots again.
    (case_dir / "guest-shape.json").write_text(json.dumps(asdict(g.booted_shape())) + "\n")
    (case_dir / "srcversion.txt").write_text(
        "".join(f"{m} {v}\n" for m, v in g.loaded.items()) +
        f"build {zfs_build.key} {zfs_build.source['describe']}\n")
    for feature, param in FEATURE_PARAMS.items():
        if item.get_closest_marker(feature) and param not in g.params:
            pytest.skip(f"{feature}: the loaded build has no {param} "
                        f"(build {zfs_build.source['describe']}); use --series")
    if item.get_closest_marker("zinject") and "zinject" not in zfs_build.commands:
        pytest.skip("zinject: the build has no zinject command")
    clock.lap("boot" if guests.boots > boots else "acquire")
    watch = guests.begin_case(g, slug(item.nodeid))
    clock.lap("begin")
    for m in item.iter_markers("leaves"):
        g.zfs.leaves.from_marker(m.kwargs)
    pm = item.get_closest_marker("zfs_params")
    try:
        for name, value in (pm.kwargs if pm else {}).items():
            g.zfs.set_param(name, value)
        yield g.zfs
    finally:
        rep = getattr(item, "rep_call", None)
        call = rep.duration if rep is not None else 0.0
        clock.lap("case", call=call)
        g = g.latest()                  # a power-cut case ends on the guest it rebooted into
        end = guests.end_case(g, watch, case_dir / "evidence",
                              getattr(item, "ozfs_teardown_problem", ""),
                              failed=bool(rep and rep.failed))
        clock.lap("end")
        clock.write()
        _report_case_end(item, end, case_dir)


class PhaseClock:
    """Where a case's time goes (``phases.json``): boot or acquire (a reused guest:
    load check), begin (the kmsg mark and the judges' first snapshot), case (the
    call, and the case's own fixtures: pool, dataset, their teardown), end (D-state
    samples, the after-case judges, parameter restore)."""

    def __init__(self, path: Path, nodeid: str) -> None:
        self.path = path
        self.nodeid = nodeid
        self.t = time.monotonic()
        self.phases: dict[str, float] = {}

    def lap(self, name: str, call: float | None = None) -> None:
        now = time.monotonic()
        self.phases[name] = round(now - self.t, 2)
        if call is not None:                # split: the call, and the case's fixtures
            self.phases["call"] = round(call, 2)
            self.phases["fixtures"] = round(self.phases[name] - call, 2)
        self.t = now

    def write(self) -> None:
        self.path.write_text(json.dumps({"nodeid": self.nodeid, **self.phases}) + "\n")


def canary_missing(want: tuple[str, ...], end: CaseEnd) -> list[str]:
    """The symptom kinds a canary case must leave that the judges did not report."""
    got = {sym.kind for sym in end.symptoms}
    return [k for k in want if k not in got]


def _canary(item: pytest.Item, end: CaseEnd, case_dir: Path) -> bool:
    """A ``canary(*kinds)`` case damages what a judge looks at: it passes when the
    judges report each of those symptom kinds, and fails when one stays silent."""
    m = item.get_closest_marker("canary")
    rep = getattr(item, "rep_call", None)
    if m is None or (rep is not None and rep.failed):
        return False            # the case's own failure says what went wrong
    missing = canary_missing(tuple(m.args), end)
    fired = "".join(f"{sym.kind}: {sym.detail}\n" for sym in end.symptoms)
    (case_dir / "canary.txt").write_text(f"expected: {' '.join(m.args)}\n"
                                         f"missing: {' '.join(missing) or '-'}\n{fired}")
    add_section(item, "canary", fired or "no judge reported anything")
    if missing:
        add_symptoms(item, [Symptom("canary", f"judge silent: {', '.join(missing)}")])
        pytest.fail(f"canary: the judges did not report {', '.join(missing)} "
                    f"(they reported: {fired.strip() or 'nothing'})", pytrace=False)
    return True


def _report_case_end(item: pytest.Item, end: CaseEnd, case_dir: Path) -> None:
    if end.restored:
        (case_dir / "params-restored.txt").write_text("".join(f"{k}\n" for k in end.restored))
    if end.restore_error:
        add_section(item, "parameter restore failed (guest recycled)", end.restore_error)
    if _canary(item, end, case_dir):
        return
    if not end.reason:
        return
    add_symptoms(item, end.symptoms)
    summary = end.evidence.summary() if end.evidence else end.reason
    add_section(item, "guest evidence", summary)
    rep = getattr(item, "rep_call", None)
    if not (rep and rep.failed):
        pytest.fail(f"the case passed, but the guest after it did not: {end.reason}\n"
                    f"{summary}", pytrace=False)


@pytest.fixture
def pool(request: pytest.FixtureRequest, zfs_guest: Zfs, guests: Guests,
         case_dir: Path) -> Iterator[Dataset]:
    """A fresh dataset for this case on a pool of the asked layout.

    The pool is created when the guest has none of that layout and reused after;
    a case that exports or destroys it sets ``guests.current.pool_spec = None``.
    Cases that use ``dio`` get the Direct I/O dataset properties (nothing cached)
    unless their ``pool`` marker says otherwise.
    """
    m = request.node.get_closest_marker("pool")
    kw = dict(m.kwargs) if m else {}
    spec = PoolSpec(layout=kw.get("layout", "stripe"), props=kw.get("pool_props", {}),
                    log=kw.get("log", 0))
    props = dict(DIO_PROPS) if "dio" in request.fixturenames else {}
    props.update(kw.get("props") or {})
    g = guests.current
    assert g is not None
    if g.pool_spec != spec:
        pool_obj = zfs_guest.create_pool(spec)
        g.pool_spec = spec
        (case_dir / "pool.txt").write_text(pool_obj.status())
    else:
        pool_obj = Pool(zfs_guest, spec.name, spec)
        # Made by an earlier case: say how, for this case's reproducer.
        zfs_guest.guest.mark("ozfs-vmci: setup: " + " ".join(
            ["zpool destroy -f", spec.name, ";", "zpool",
             *map(shlex.quote, zfs_guest.pool_create_args(spec))]))
    try:
        ds = pool_obj.dataset(kw.get("dataset") or "case", props)
    except GuestError:              # the pool went away (exported, destroyed): recreate
        pool_obj = zfs_guest.create_pool(spec)
        ds = pool_obj.dataset(kw.get("dataset") or "case", props)
    yield ds
    rep = getattr(request.node, "rep_call", None)
    failed = rep is not None and rep.failed
    thorough = request.config.getoption("thorough")
    in_doubt = failed and not settled_failure(request.node)
    skipped = thorough_skipped(g, in_doubt)
    if thorough and skipped and not getattr(request.node, "ozfs_ondisk_done", False):
        (case_dir / "ondisk.txt").write_text(f"on-disk checks not run: {skipped}, not checked\n")
        ondisk_record(case_dir, not_run=skipped)
    if in_doubt:
        # The dataset may be wedged (that may be the bug): touching it could hang.
        # zfs_guest's teardown judges the guest and then lets it go.
        g.pool_spec = None
        return
    if failed:
        zfs_guest.guest.mark("ozfs-vmci: the case failed on its data alone (every request "
                             "completed): its dataset is released and the guest kept")
    # A guest let go after the case only for a load-time parameter it set still
    # holds the case's data: --thorough judges it before it goes.
    if g.fit or (thorough and not skipped):
        try:
            if request.node.get_closest_marker("zinject") or thorough:
                # --thorough scrubs and exports the pool: a handler the case left
                # armed (even behind the harness's back) would fault the scrub's reads
                # and hold the pool busy.
                zfs_guest.zinject("-c", "all", check=False, timeout=60)
            ondisk = (_Thorough(request.node, zfs_guest, g, case_dir, g.pool_spec.name)
                      if thorough and g.pool_spec is not None else None)
            if not release_dataset(zfs_guest, ds.name, ondisk):
                g.pool_spec = None      # unknown state: recreate next time
            elif failed:
                g.released_after_failure = True
        except GuestError as e:
            # A hang here is a finding like any other: zfs_guest's teardown fails
            # the case with the evidence and recycles the guest.
            how = ("was cut short" if isinstance(e, KernelTripped) else    # the report's
                   "hung" if "deadline" in e.what else "failed")   # ssh.py: "overran its Ns deadline"
            request.node.ozfs_teardown_problem = f"the dataset teardown {how}: {e.what}"


def thorough_skipped(g, in_doubt: bool) -> str:
    """Why --thorough cannot judge this case's pool on disk ('' when it can)."""
    if in_doubt:
        return "the case failed with its dataset in doubt (touching it could hang)"
    if g.replaced_by is not None:
        return "the case cut the guest's power (its pool is on the guest booted after)"
    if g.pool_spec is None:
        return "the case exported or destroyed its pool"
    return ""


def settled_failure(item: pytest.Item) -> bool:
    """A failed case whose guest may be kept: it recorded only data outcomes
    (suite/symptoms.py ``SETTLED``) and injected no fault."""
    return (item.get_closest_marker("zinject") is None
            and settled(s.kind for s in getattr(item, "ozfs_symptoms", [])))


def release_dataset(zfs: Zfs, name: str, ondisk: "_Thorough | None") -> bool:
    """Destroy the case's dataset; with ``--thorough`` scrub before (the case's files
    are still there to be read) and export + ``zdb -bcc`` after (the destroy's frees
    are in the accounting). False: the destroy failed, the pool's state is unknown."""
    if ondisk:
        ondisk.scrub()
    if zfs.zfs("destroy", "-R", "-f", name, check=False, timeout=120).rc != 0:
        return False
    if ondisk:
        ondisk.exported()
    return True


def ondisk_record(case_dir: Path, not_run: str = "", seconds: dict | None = None,
                  **counts: int) -> None:
    """Add one step to the case's ``ondisk.json`` (``suite.judges.ondisk.Done``)."""
    from suite.judges.ondisk import Done
    done = Done.read(case_dir) or Done()
    for name, n in counts.items():
        setattr(done, name, getattr(done, name) + n)
    done.not_run = not_run or done.not_run
    for name, secs in (seconds or {}).items():
        done.seconds[name] = round(done.seconds.get(name, 0.0) + secs, 1)
    done.write(case_dir)


class _Thorough:
    """--thorough: a scrub while the case's dataset still holds what it wrote, then,
    with the dataset destroyed, ``zdb -bcc`` of the exported pool; findings join the
    after-case judges' (``suite/judges/ondisk.py``) and ``ondisk.txt``."""

    def __init__(self, item: pytest.Item, zfs_guest: Zfs, g, case_dir: Path,
                 pool: str) -> None:
        self.zfs, self.g, self.out, self.pool = zfs_guest, g, case_dir / "ondisk.txt", pool
        self.case_dir = case_dir
        self.timeout = 300 * item.config.stash.get(DEADLINE_SCALE, 1.0)
        item.ozfs_ondisk_done = True

    def scrub(self) -> None:
        from suite.judges import ondisk
        t = time.monotonic()
        found = ondisk.scrub(self.zfs, self.pool, self.timeout)
        self._record(f"scrub (the case's dataset included) in {time.monotonic() - t:.1f}s",
                     [], found)
        ondisk_record(self.case_dir, scrubbed=1, seconds={"scrub": time.monotonic() - t})

    def exported(self) -> None:
        from suite.judges import ondisk
        from suite.judges.kstats import load_rules
        res = ondisk.exported(self.zfs, self.pool, self.timeout,
                              rules=load_rules(), baseline=self.g.baseline)
        self._record(f"export + gauges + zdb -bcc in {res.seconds:.1f}s", res.notes,
                     res.findings)
        ondisk_record(self.case_dir, exported=1, zdb=int(res.zdb),
                      seconds={"export+zdb": res.seconds})

    def _record(self, head: str, notes: list[str], found: list) -> None:
        self.g.ondisk += found
        with self.out.open("a") as f:
            f.write(head + "\n" + "".join(f"{n}\n" for n in notes) +
                    "".join(f"FINDING {x.kind}: {x.detail}\n" for x in found))


@pytest.fixture
def ondisk_check(request: pytest.FixtureRequest, case_dir: Path) -> Callable[..., None]:
    """``ondisk_check(guest, pool)``: with ``--thorough``, judge a pool the ``pool``
    fixture cannot reach (the one a power-cut case imported on the guest booted
    after the cut) before the case destroys it: scrub, export, gauges, ``zdb -bcc``,
    import; findings join the after-case judges'. Without ``--thorough``: nothing."""
    def check(g, pool: str) -> None:
        if not request.config.getoption("thorough"):
            return
        t = _Thorough(request.node, g.zfs, g, case_dir, pool)
        try:
            t.scrub()
            t.exported()
        except GuestError as e:         # as the pool fixture's teardown: the case fails
            how = "hung" if "deadline" in e.what else "failed"
            request.node.ozfs_teardown_problem = f"the on-disk checks {how}: {e.what}"
    return check


@pytest.fixture
def symptom(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``symptom(kind, detail, row="", stack=())``: say how the case is failing (see
    suite/symptoms.py), before the assert that fails it; ``stack``: the frames it
    stopped in (a kernel report's, a hang's), part of its signature."""
    def record(kind: str, detail: str = "", row: str = "", stack: tuple[str, ...] = ()) -> None:
        add_symptoms(request.node, [Symptom(kind, detail, row, tuple(stack))])
    return record


@pytest.fixture
def engine(zfs_guest: Zfs, case_dir: Path, accel: Accel) -> EngineRunner:
    """The guest I/O engine, its plans and raw results kept in the case folder."""
    return EngineRunner(zfs_guest.guest, case_dir / "engine", scale=accel.scale)


@pytest.fixture
def dio(request: pytest.FixtureRequest, zfs_guest: Zfs, pool: Dataset, engine: EngineRunner,
        run_ctx: RunCtx, case_dir: Path, guests: Guests) -> DioBench:
    """A Direct I/O bench: nothing cached (primarycache=metadata), tables recorded."""
    have = guests.current.params if guests.current else set()
    item = request.node
    n = {"count": 0}

    def write_table(table) -> None:
        n["count"] += 1
        stem = slug(item.nodeid) + (f"-{n['count']}" if n["count"] > 1 else "")
        table.write(run_ctx.tables_dir(), stem)
        table.write(case_dir, f"table-{n['count']}")
        add_section(item, f"table {n['count']}", table.text())

    return DioBench(zfs_guest, pool, engine, have, run_ctx.trials, write_table,
                    lambda symptoms: add_symptoms(item, symptoms))


@pytest.fixture
def zdio(dio: DioBench, zfs_guest: Zfs, guests: Guests) -> DioBench:
    """A Direct I/O bench for zvols: each trial attributed by kprobe hit counts on
    the Direct I/O and ARC entry points (``suite/casekit/zvol.py``); make the
    zvols with ``create_zvol(zdio.dataset, zdio.engine, ...)``."""
    g = guests.current
    assert g is not None
    probes = g.kprobes()            # armed once for the guest's life, never disarmed
    try:
        with guests.harness_step(g, "arm the zvol path kprobes"):
            quiet_udev(zfs_guest.guest)
            probes.install(*(sym for pair in PROBES.values() for sym in pair))
    except SuiteError as e:
        pytest.fail(f"cannot tell the zvol paths apart in this guest:\n{e}", pytrace=False)
    dio.counter_specs = lambda op: zvol_counters(probes, op)
    return dio
