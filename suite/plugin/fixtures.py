"""Fixtures: a build, an accelerator, one guest per worker, a verified ZFS, a pool.

Lifetime: the build and accelerator are per session (xdist: per worker, the
build lock makes the second worker reuse the first one's build). One guest
per worker is reused across cases while it stays healthy and the case asks for
the same guest shape; a guest that splatted, hung or lost SSH is killed
(after evidence is collected) and the next case boots a fresh one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ..console import ConsoleWatcher
from ..evidence import collect_evidence
from ..accel import Accel, choose
from ..aftercase import Observation, stuck_tasks
from ..build import BuildRecord
from ..dio import COUNTER_PARAMS, DIO_PROPS, DioBench
from ..engine import EngineRunner
from ..errors import GuestError, SuiteError, VMError
from ..guest import virtme_key
from ..pipeline import BuildOptions, build, options_from
from ..symptoms import Symptom
from ..vm import VM, NvmeSpec, VMSpec
from ..zfs import Dataset, Pool, PoolSpec, Zfs
from .hooks import DEADLINE_SCALE, RUN_DIR, add_section, add_symptoms, case_dir_of, slug

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


@pytest.fixture(scope="session")
def zfs_build(run_ctx: RunCtx) -> BuildRecord:
    """The build under test: made, or taken from the cache, for the session's options.

    When it cannot be made (source unreachable, ref or kernel missing, build
    failure) every case errors with the reason: nothing tested is never green.
    """
    try:
        record, built = build(run_ctx.opts)
    except SuiteError as e:
        pytest.fail(f"no OpenZFS build under test, so nothing can be tested:\n{e}",
                    pytrace=False)
    out = run_ctx.run_dir / "build"
    out.mkdir(exist_ok=True)
    (out / f"record-{record.key}.json").write_text(record.to_json())
    (out / "build.log.path").write_text(record.log + "\n")
    return record


@pytest.fixture(scope="session")
def accel(run_ctx: RunCtx, zfs_build: BuildRecord) -> Accel:
    # choose() warns once when KVM is unusable; pytest lists it in the summary.
    a = choose(run_ctx.config.getoption("accel"), Path(zfs_build.kernel["vmlinuz"]))
    run_ctx.config.stash[DEADLINE_SCALE] = a.scale      # the per-case backstop scales too
    return a


@dataclass(frozen=True)
class GuestShape:
    nvme: int = 2
    lbs: int | tuple[int, ...] = 4096
    size_mib: int = 1024
    memory: str = "4G"
    cpus: int = 2


def shape_of(item: pytest.Item) -> GuestShape:
    m = item.get_closest_marker("guest")
    return GuestShape(**m.kwargs) if m else GuestShape()


@dataclass
class VMManager:
    """One guest per worker, reused while healthy and of the right shape."""
    ctx: RunCtx
    accel: Accel
    vm: VM | None = None
    shape: GuestShape | None = None
    healthy: bool = True
    boots: int = 0
    pool_spec: PoolSpec | None = None
    params: set[str] | None = None          # module parameters the loaded build has
    kept: list[VM] = field(default_factory=list)

    def get(self, kernel_image: Path, shape: GuestShape) -> VM:
        if self.vm is not None and (not self.healthy or shape != self.shape or not self.vm.alive):
            self.discard()
        if self.vm is None:
            self.boots += 1
            workdir = self.ctx.run_dir / "vms" / f"{self.ctx.worker}-{self.boots}"
            spec = VMSpec(kernel_image=kernel_image, accel=self.accel, workdir=workdir,
                          memory=shape.memory, cpus=shape.cpus,
                          nvme=NvmeSpec(count=shape.nvme, size_mib=shape.size_mib,
                                        lbs=shape.lbs),
                          name=f"ozfs-{self.ctx.worker}-{self.boots}")
            vm = VM(spec)
            try:
                vm.start()
                vm.wait_ready()
            except BaseException:
                vm.kill()
                raise
            self.vm, self.shape, self.healthy, self.pool_spec = vm, shape, True, None
            self.params = None
        return self.vm

    def discard(self, keep: bool = False) -> None:
        if self.vm is not None:
            if keep:
                self.kept.append(self.vm)
            else:
                self.vm.kill()
        self.vm, self.pool_spec = None, None

    def close(self) -> None:
        self.discard()
        for vm in self.kept:
            print(f"\nkept guest {vm.spec.name}: ssh -p {vm.port} -i "
                  f"{virtme_key()} root@127.0.0.1 (console {vm.console_path}); "
                  f"it stays up until this pytest exits, kill with Ctrl-C")


@pytest.fixture(scope="session")
def vm_manager(run_ctx: RunCtx, accel: Accel) -> Iterator[VMManager]:
    mgr = VMManager(run_ctx, accel)
    yield mgr
    mgr.close()
    if mgr.kept:                  # --keep-vm: stay up until the guests die or Ctrl-C
        try:
            while any(vm.alive for vm in mgr.kept):
                time.sleep(5)
        except KeyboardInterrupt:
            pass
        for vm in mgr.kept:
            vm.kill()


@pytest.fixture
def case_dir(request: pytest.FixtureRequest, run_ctx: RunCtx) -> Path:
    return run_ctx.case_dir(request.node.nodeid)


@pytest.fixture
def zfs_guest(request: pytest.FixtureRequest, run_ctx: RunCtx, zfs_build: BuildRecord,
              accel: Accel, vm_manager: VMManager, case_dir: Path) -> Iterator[Zfs]:
    """A guest running the build under test, loaded and verified (srcversion)."""
    item = request.node
    try:
        vm = vm_manager.get(Path(zfs_build.kernel["vmlinuz"]), shape_of(item))
    except VMError as e:
        pytest.fail(f"guest did not boot:\n{e}", pytrace=False)
    guest = vm.guest()
    guest.set_log(case_dir / "commands.log")
    z = Zfs(guest, zfs_build, devices=vm.nvme_devices)
    try:
        loaded = z.load()
    except SuiteError as e:
        vm_manager.healthy = False
        pytest.fail(f"loading the build failed:\n{e}", pytrace=False)
    (case_dir / "srcversion.txt").write_text(
        "".join(f"{m} {v}\n" for m, v in loaded.items()) +
        f"build {zfs_build.key} {zfs_build.source['describe']}\n")
    if vm_manager.params is None:
        vm_manager.params = set(z.param_values())
    for feature, param in FEATURE_PARAMS.items():
        if item.get_closest_marker(feature) and param not in vm_manager.params:
            pytest.skip(f"{feature}: the loaded build has no {param} "
                        f"(build {zfs_build.source['describe']}); use --series")
    if item.get_closest_marker("zinject") and "zinject" not in zfs_build.commands:
        pytest.skip("zinject: the build has no zinject command")
    guest.run(f"echo 'ozfs-vmci: begin {slug(item.nodeid)}' > /dev/kmsg", timeout=20, check=False)
    watcher = ConsoleWatcher(vm.console_path)
    before = z.param_values()
    pm = item.get_closest_marker("zfs_params")
    try:
        for name, value in (pm.kwargs if pm else {}).items():
            z.set_param(name, value)
        yield z
    finally:
        _after_case(item, z, vm, vm_manager, watcher, case_dir, accel, before)


def _after_case(item: pytest.Item, z: Zfs, vm: VM, mgr: VMManager,
                watcher: ConsoleWatcher, case_dir: Path, accel: Accel,
                params_before: dict[str, str]) -> None:
    """Judge the guest after the case, pass or fail: alive, no task stuck in D
    state, no kernel trouble since the case began, its dataset teardown done.
    An unfit guest fails the case (even a passed one), leaves its evidence and
    is recycled; otherwise every module parameter the case changed is restored."""
    rep = getattr(item, "rep_call", None)
    failed = bool(rep and rep.failed)
    alive = vm.alive and z.guest.alive(timeout=accel.deadline(5))
    stuck = []
    if alive:
        try:
            stuck = stuck_tasks(z.guest, accel.scale)
        except GuestError:
            alive = False
    obs = Observation(alive, stuck, watcher.poll(),
                      getattr(item, "ozfs_teardown_problem", ""))
    reason, symptoms = obs.verdict()
    if reason:
        add_symptoms(item, symptoms)
        ev = collect_evidence(z.guest if alive else None, vm, case_dir / "evidence",
                                    reason, watcher=watcher)
        add_section(item, "guest evidence", ev.summary())
        mgr.healthy = False
        mgr.discard(keep=mgr.ctx.keep_vm)
        if not failed:
            pytest.fail(f"the case passed but the guest did not survive it: {reason}\n"
                        f"{ev.summary()}", pytrace=False)
        return
    try:
        restored = z.restore_params(params_before, ignore=COUNTER_PARAMS)
        if restored:
            (case_dir / "params-restored.txt").write_text(
                "".join(f"{k}={params_before[k]}\n" for k in restored))
    except SuiteError as e:
        add_section(item, "parameter restore failed (guest recycled)", str(e))
        mgr.healthy = False


@pytest.fixture
def pool(request: pytest.FixtureRequest, zfs_guest: Zfs, vm_manager: VMManager,
         case_dir: Path) -> Iterator[Dataset]:
    """A fresh dataset for this case on a pool of the asked layout.

    The pool is created when the guest has none of that layout and reused after;
    a case that exports or destroys it sets ``vm_manager.pool_spec = None``.
    Cases that use ``dio`` get the Direct I/O dataset properties (nothing cached)
    unless their ``pool`` marker says otherwise.
    """
    m = request.node.get_closest_marker("pool")
    kw = dict(m.kwargs) if m else {}
    spec = PoolSpec(layout=kw.get("layout", "stripe"), props=kw.get("pool_props", {}))
    props = dict(DIO_PROPS) if "dio" in request.fixturenames else {}
    props.update(kw.get("props") or {})
    if vm_manager.pool_spec != spec:
        pool_obj = zfs_guest.create_pool(spec)
        vm_manager.pool_spec = spec
        (case_dir / "pool.txt").write_text(pool_obj.status())
    else:
        pool_obj = Pool(zfs_guest, spec.name, spec)
    try:
        ds = pool_obj.dataset(kw.get("dataset") or "case", props)
    except GuestError:              # the pool went away (exported, destroyed): recreate
        pool_obj = zfs_guest.create_pool(spec)
        ds = pool_obj.dataset(kw.get("dataset") or "case", props)
    yield ds
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        # The dataset may be wedged (that may be the bug): touching it could hang.
        # zfs_guest's teardown judges the guest; a survivor gets a fresh pool.
        vm_manager.pool_spec = None
        return
    if vm_manager.healthy and vm_manager.vm is not None:
        try:
            if request.node.get_closest_marker("zinject"):
                zfs_guest.zinject("-c", "all", check=False, timeout=60)
            r = zfs_guest.zfs("destroy", "-R", "-f", ds.name, check=False, timeout=120)
            if r.rc != 0:
                vm_manager.pool_spec = None     # unknown state: recreate next time
        except GuestError as e:
            # A hang here is a finding like any other: zfs_guest's teardown fails
            # the case with the evidence and recycles the guest.
            request.node.ozfs_teardown_problem = f"the dataset teardown hung: {e.what}"


@pytest.fixture
def symptom(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``symptom(kind, detail, row="")``: say how the case is failing (see
    suite/symptoms.py), before the assert that fails it."""
    def record(kind: str, detail: str = "", row: str = "") -> None:
        add_symptoms(request.node, [Symptom(kind, detail, row)])
    return record


@pytest.fixture
def engine(zfs_guest: Zfs, case_dir: Path, accel: Accel) -> EngineRunner:
    """The guest I/O engine, its plans and raw results kept in the case folder."""
    return EngineRunner(zfs_guest.guest, case_dir / "engine", scale=accel.scale)


@pytest.fixture
def dio(request: pytest.FixtureRequest, zfs_guest: Zfs, pool: Dataset, engine: EngineRunner,
        run_ctx: RunCtx, case_dir: Path, vm_manager: VMManager) -> DioBench:
    """A Direct I/O bench: nothing cached (primarycache=metadata), tables recorded."""
    have = vm_manager.params or set()
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
