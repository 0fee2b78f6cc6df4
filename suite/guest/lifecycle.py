"""The guest lifecycle: get a guest of a shape with the build loaded, judge it
after each case, recycle it when it is not fit.

One guest per worker (xdist) is reused across cases while it stays fit and the
case asks for the same shape; a guest that splatted, hung or lost SSH is killed
after its evidence is collected, and the next case boots a fresh one. The
pytest fixtures (``suite/plugin/fixtures.py``) only ask for a guest, yield it
and give it back.
"""
from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator

from suite.build.kernel import boot_append
from suite.build.recipe import BuildRecord
from suite.guest.params import COUNTER_PARAMS
from suite.guest.resident import start_resident
from suite.guest import gcov as coverage_collect
from suite.build import gcov as coverage_flags
from suite.errors import BootStorm, BootTimeout, GuestError, HarnessStepError, SuiteError
from suite.guest.aftercase import Observation, judgeable, stuck_tasks
from suite.guest.capabilities import capabilities, kstat_command
from suite.guest.capabilities import write as write_capabilities
from suite.guest.evidence import Evidence, collect_evidence
from suite.guest.probes import Kprobes
from suite.vm.ssh import virtme_key
from suite.guest.zfs import PARAMS_SCRIPT, PoolSpec, Zfs, parse_params
from suite.judges.expect import Leaves
from suite.judges.judge import Finding as Leftover, Judgement, judge
from suite.judges.kstats import Rules, load_rules
from suite.judges.snapshot import (SECTION, Snapshot, after_script, before_script,
                                   kstat_script, sections)
from suite.symptoms import Symptom
from suite.vm.accel import Accel
from suite.vm.console import ConsoleWatcher, Finding

# Console findings after which a waiting command will not finish (a thread died
# holding its I/O): the wait ends at once (KernelTripped), not at its deadline.
# A user process killed by a trap mid-I/O counts: what it left in flight (a
# `zpool` in D state at 39991b06f) only ends at the deadline. So does a suspended
# pool: none of its I/O will come back (a full run once waited 17 min on one).
TRIP_KINDS = frozenset({"spl_panic", "oops", "bug", "panic", "user_trap", "pool_suspended"})
from suite.vm.cpus import WANT
from suite.vm.machine import VM, NvmeSpec, VMSpec
from suite.vm.vng import BASE_APPEND


# The kernel's own poisoning, for cases whose error paths free memory (a write cut
# short, a teardown with I/O in flight): freed slab objects are poisoned and red-zoned
# (slub_debug=FZP, checked on every free), freed pages filled (page_poison) and
# zeroed memory handed out again only after (init_on_free). A use-after-free that
# would leave the bytes right reads poison instead, and SLUB reports the overwrite.
POISON = ("init_on_free=1", "page_poison=1", "slub_debug=FZP")
BOOT_TRIES = 2          # a boot that ran out of time is tried once more
# A debug-kernel boot drowned in its early KASAN storm: 2 boots in 6 in a row met it on
# 2026-12-07 (TCG), and two in a row ended an explore session that had a finding.
STORM_TRIES = 4


@dataclass(frozen=True)
class GuestShape:
    """What a case asks of its guest (``@pytest.mark.guest(...)``)."""
    nvme: int = 2
    lbs: int | tuple[int, ...] = 4096
    size_mib: int = 1024
    memory: str = "4G"
    cpus: int | None = None             # None: the run's choice (suite/vm/cpus.py)
    append: tuple[str, ...] = ()        # extra kernel command line (e.g. slub_debug=...)


@dataclass
class ZfsGuest:
    """A booted guest running the build under test, and its ZFS state."""
    vm: VM
    zfs: Zfs
    shape: GuestShape
    params: set[str]                    # module parameters the loaded build has
    loaded: dict[str, str]              # srcversions, verified against the build record
    pool_spec: PoolSpec | None = None   # the pool that exists in it now
    fit: bool = True
    replaced_by: "ZfsGuest | None" = None   # the guest booted on its disks after a power cut
    probes: Kprobes | None = None       # armed once, for the guest's life (suite/guest/probes.py)
    ondisk: list[Leftover] = field(default_factory=list)   # --thorough findings of this case
    baseline: dict | None = None        # [[returns]] gauges right after load, no pool yet
    watch: "CaseWatch | None" = None    # the case running in it now
    # The case failed on its data alone and its dataset was released cleanly:
    # the guest is judged and kept like a pass (suite/plugin/fixtures.py ``pool``).
    released_after_failure: bool = False

    def kprobes(self) -> Kprobes:
        """The guest's kprobes (armed by ``install``, never disarmed)."""
        if self.probes is None:
            self.probes = Kprobes(self.zfs.guest)
        return self.probes

    @property
    def traced(self) -> bool:
        """Kprobes are armed: every hit on their functions takes a trap."""
        return bool(self.probes and self.probes.symbols)

    def booted_shape(self) -> GuestShape:
        """The shape with what its guest was booted with filled in (the vCPUs)."""
        return replace(self.shape, cpus=self.vm.spec.cpus)

    def latest(self) -> "ZfsGuest":
        """This guest, or the one that took over its disks after a power cut."""
        g = self
        while g.replaced_by is not None:
            g = g.replaced_by
        return g


def baseline_of(g: ZfsGuest, out: dict[str, str], raw: str) -> None:
    """The [[returns]] gauges of a guest with no pool imported yet: what they must
    come back to once every pool is exported again (``suite/judges/ondisk.py``)."""
    if not out.get("pools", "").split():
        g.baseline = Snapshot.parse(raw).kstats


def tripwire(console_path: Path) -> Callable[[], str | None]:
    """A guest's tripwire (``Guest.set_tripwire``): the first console line from
    now on that says a kernel thread died, else None."""
    trip = ConsoleWatcher(console_path)

    def fired() -> str | None:
        dead = [f for f in trip.poll() if f.kind in TRIP_KINDS]
        return f"{dead[0].kind}: {dead[0].line.strip()[:200]}" if dead else None
    return fired


@dataclass
class CaseWatch:
    """What is noted when a case begins, to judge the guest when it ends."""
    console: ConsoleWatcher
    params: dict[str, str]
    harness: str = ""                   # a harness step that failed or hung: why
    harness_from: int = 0               # console findings from this index on are its
    before: Snapshot = field(default_factory=Snapshot)   # what the judges saw at the start
    carried: list[Finding] = field(default_factory=list)  # the console of a guest it power-cut
    label: str = ""                     # the case's slug

    def seen(self) -> list[Finding]:
        """Every console finding of the case so far, across a power cut."""
        self.console.poll()
        return self.carried + self.console.findings

    def findings(self) -> tuple[list[Finding], list[Finding]]:
        """(the case's console findings, those of a failed harness step)."""
        found = self.seen()
        if not self.harness:
            return found, []
        return found[:self.harness_from], found[self.harness_from:]

    def follow(self, console: ConsoleWatcher, params: dict[str, str]) -> None:
        """The case goes on in a guest booted on the same disks after a power cut:
        what the old console showed stays the case's, the new console is watched
        from here on, and parameters are put back to the new guest's own values
        (the old guest's load-time ones, sized from its memory, are not all
        writable: restoring them made every power-cut case's new guest unfit)."""
        self.carried = self.seen()
        self.console = console
        self.params = dict(params)


@dataclass
class CaseEnd:
    reason: str = ""                    # why the guest is not fit ('' if it is)
    symptoms: list[Symptom] = field(default_factory=list)
    evidence: Evidence | None = None
    restored: list[str] = field(default_factory=list)
    restore_error: str = ""


@dataclass
class Guests:
    """The worker's guests."""
    run_dir: Path
    worker: str
    accel: Accel
    record: BuildRecord
    keep_failed: bool = False
    current: ZfsGuest | None = None
    boots: int = 0
    kept: list[VM] = field(default_factory=list)
    rules: Rules = field(default_factory=load_rules)   # vmimages/kstat-rules.toml
    capabilities_recorded: bool = False
    cpus: int = WANT                    # vCPUs of a guest whose shape does not say
    load_params: dict[str, str] = field(default_factory=dict)   # --zfs-param, every load
    case_copies: dict[str, int] = field(default_factory=dict)   # per guest: counter copies

    @cached_property
    def profile_append(self) -> tuple[str, ...]:
        """The kernel profile's ``[vm] append``: read once, used at every boot."""
        return boot_append(self.record.kernel.get("profile", ""))

    def acquire(self, shape: GuestShape, log: Path, untraced: bool = False) -> ZfsGuest:
        """A fit guest of ``shape`` with the build loaded and verified (srcversion);
        ``untraced``: one with no kprobes armed (a benchmark's timings)."""
        g = self.current
        if g is not None and (not g.fit or g.shape != shape or not g.vm.alive
                              or (untraced and g.traced)):
            self.recycle()
        if self.current is None:
            self.current = self._boot(shape)
        g = self.current
        g.zfs.guest.set_log(log)
        start_resident(g.zfs.guest)         # imports while the build loads (once a guest)
        try:
            g.loaded = g.zfs.load()         # one command when it is loaded already
            g.params = g.params or self._learn(g)
        except SuiteError:
            g.fit = False
            raise
        return g

    def _learn(self, g: ZfsGuest) -> set[str]:
        """The loaded build's module parameters and, with no pool imported yet, the
        load-time baseline of the [[returns]] gauges, in one guest command; the first
        time in this worker also what the build can do (``build/capabilities.json``)."""
        script = "\n".join([f"echo '{SECTION}params'; {PARAMS_SCRIPT}",
                             self._baseline_script(g),
                             f"echo '{SECTION}kstat-files'; {kstat_command()}"])
        raw = g.zfs.guest.run(script, timeout=self.accel.deadline(30), log=False,
                              check=False).stdout
        out = sections(raw)
        values = parse_params(out.get("params", ""))
        baseline_of(g, out, raw)
        if not self.capabilities_recorded:
            write_capabilities(self.run_dir, capabilities(
                values, out.get("kstat-files", "").split(), list(self.record.commands),
                self.record.features,
                zts="all" in self.record.inputs.get("targets", [])))   # ZTS builds all
            self.capabilities_recorded = True
        return set(values)

    def _baseline_script(self, g: ZfsGuest) -> str:
        """The guest's imported pools and its [[returns]] gauges (``baseline_of``)."""
        return "\n".join([f"echo '{SECTION}pools'; {g.zfs.cmd('zpool')} list -H -o name "
                          "2>/dev/null; true", kstat_script(self.rules.return_files())])

    def _take_baseline(self, g: ZfsGuest) -> None:
        raw = g.zfs.guest.run(self._baseline_script(g), timeout=30, log=False,
                              check=False).stdout
        baseline_of(g, sections(raw), raw)

    def _boot(self, shape: GuestShape, spec: VMSpec | None = None) -> ZfsGuest:
        """A booted guest; a boot that only ran out of time (no crash on the console:
        a host busy with other guests and builds), or whose kernel drowned in its own
        reports before any module was loaded, is tried once more, with a warning."""
        attempt = 0
        while True:
            try:
                return self._boot_once(shape, spec)
            except BootTimeout as e:
                attempt += 1
                tries = STORM_TRIES if isinstance(e, BootStorm) else BOOT_TRIES
                if attempt >= tries or (spec is not None and spec.reuse_images):
                    raise
                warnings.warn(f"{e.what}: booting another guest ({e.fix})")

    def _boot_once(self, shape: GuestShape, spec: VMSpec | None = None) -> ZfsGuest:
        self.boots += 1
        spec = spec or VMSpec(
            kernel_image=Path(self.record.kernel["vmlinuz"]), accel=self.accel,
            workdir=self.run_dir / "vms" / f"{self.worker}-{self.boots}",
            memory=shape.memory, cpus=shape.cpus or self.cpus,
            nvme=NvmeSpec(count=shape.nvme, size_mib=shape.size_mib, lbs=shape.lbs),
            append=[*BASE_APPEND, *self.profile_append, *shape.append],
            name=f"ozfs-{self.worker}-{self.boots}")
        vm = VM(spec)
        try:
            vm.start()
            vm.wait_ready()
        except BaseException:
            vm.kill()
            raise
        return ZfsGuest(vm, Zfs(vm.guest(), self.record, devices=vm.nvme_devices,
                                load_params=self.load_params), shape, set(), {})

    def power_cut(self, g: ZfsGuest, log: Path) -> ZfsGuest:
        """Cut ``g``'s power and boot a fresh guest on the same NVMe images, the
        build loaded and verified; its pools are not imported yet. Returns the
        new guest (also ``self.current``)."""
        g.vm.power_cut()
        g.fit = False
        self.current = None
        new = self._boot(g.shape, replace(g.vm.spec, reuse_images=True))
        self.current = g.replaced_by = new
        new.zfs.guest.set_log(log)
        start_resident(new.zfs.guest)
        new.loaded = new.zfs.load()
        values = new.zfs.param_values()
        new.params = set(values)
        self._take_baseline(new)    # its pools are not imported yet: later cases' leak check
        if g.watch is not None:             # the case is judged on the new guest from here
            g.watch.follow(ConsoleWatcher(new.vm.console_path), values)
            new.watch = g.watch
            new.zfs.guest.set_tripwire(tripwire(new.vm.console_path))
        return new

    def begin_case(self, g: ZfsGuest, label: str) -> CaseWatch:
        """Mark the case's start on the console and take the judges' first
        snapshot (taint, kstats; the event log cleared), in one guest command."""
        g.zfs.leaves = Leaves()
        g.ondisk = []
        r = g.zfs.guest.run(f"echo 'ozfs-vmci: begin {label}' > /dev/kmsg\n" +
                            before_script(g.zfs.cmd("zpool"), self.rules.collect),
                            timeout=self.accel.deadline(30), check=False)
        g.zfs.guest.set_tripwire(tripwire(g.vm.console_path))
        g.watch = CaseWatch(ConsoleWatcher(g.vm.console_path), g.zfs.param_values(),
                            before=Snapshot.parse(r.stdout), label=label)
        return g.watch

    def judge_leftovers(self, g: ZfsGuest, watch: CaseWatch, case_dir: Path) -> Judgement:
        """What the case left behind (``suite/judges``): one guest command, as a
        harness step; the snapshots and the judgement are kept in the case folder."""
        leaves = g.zfs.leaves
        zpool = g.zfs.cmd("zpool")
        # Errors it declared are cleared, so the next case on this pool starts at zero.
        clear = (f"\nfor p in $({zpool} list -H -o name); do {zpool} clear \"$p\"; done"
                 if leaves.errors else "")
        with self.harness_step(g, "after-case judges"):
            r = g.zfs.guest.run(after_script(zpool, self.rules.collect) + clear,
                                timeout=self.accel.deadline(60), check=False)
        after = Snapshot.parse(r.stdout)
        def reread(files: tuple[str, ...]) -> dict:
            """Those kstat files again, a second on (none read: the wrap stands)."""
            time.sleep(1)
            try:
                r2 = g.zfs.guest.run(kstat_script(files), timeout=self.accel.deadline(30),
                                     check=False)
            except SuiteError:
                return {}
            return Snapshot.parse(r2.stdout).kstats

        j = judge(watch.before, after, leaves, self.rules, reread)
        j.findings += g.ondisk
        case_dir.mkdir(parents=True, exist_ok=True)
        (case_dir / "after-case.txt").write_text(
            j.text() + "\n\ndeclared: " + ("; ".join(leaves.why) or "nothing") +
            "\n\n--- before the case\n" + watch.before.raw + "\n--- after the case\n" +
            after.raw + "\n")
        if leaves.data_errors:
            g.pool_spec = None          # permanent errors stay listed: a fresh pool next
        return j

    @contextmanager
    def harness_step(self, g: ZfsGuest, name: str) -> Iterator[None]:
        """A step of the harness's own in the guest (arming probes, reading
        kstats, a judge). If it fails or hangs, that is the harness's, named as
        such: HarnessStepError (infrastructure), the guest is unfit, and the
        kernel lines printed from the step's start on are its evidence, not the
        case's (``CaseWatch.harness``)."""
        w = g.watch
        start = len(w.seen()) if w is not None else 0    # what came before is the case's
        try:
            yield
        except SuiteError as e:
            g.fit = False
            problem = f"the harness step '{name}' did not finish: {e.what}"
            if w is not None and not w.harness:
                w.harness, w.harness_from = problem, start
            raise HarnessStepError(problem, fix="a harness bug, or a guest too slow for "
                                   "it: the case proved nothing; see the evidence",
                                   detail=e.detail) from e

    def end_case(self, g: ZfsGuest, watch: CaseWatch, evidence_dir: Path,
                 teardown_problem: str = "", failed: bool = False) -> CaseEnd:
        """Judge the guest after a case, pass or fail: alive, no task stuck in D
        state, no kernel trouble since the case began, its teardown done. An unfit
        guest leaves its evidence and is recycled; otherwise every module
        parameter the case changed is put back. The guest of a failed case is
        recycled too: its dataset was left alone (it may be wedged), and with it
        faults still injected and I/O in flight that must not reach the next case,
        unless it failed on its data alone and its dataset was released cleanly."""
        g.zfs.guest.set_tripwire(None)         # the evidence commands must run to the end
        g.zfs.guest.mark("ozfs-vmci: end of the case; the harness's checks follow")
        alive = g.vm.alive and g.zfs.guest.alive(timeout=self.accel.deadline(5))
        stuck = []
        if alive:
            try:
                stuck = stuck_tasks(g.zfs.guest, self.accel.scale)
            except GuestError:
                alive = False
        if alive:
            self.copy_case_coverage(g, watch.label)
        found, harness_found = watch.findings()
        left = Judgement()
        # A guest already condemned (stuck tasks, kernel trouble past a lockdep-like
        # report) is not asked for more: its ZFS may not answer, and the case has its symptom.
        if judgeable(alive, stuck, found, watch.harness):
            try:
                left = self.judge_leftovers(g, watch, evidence_dir.parent)
            except HarnessStepError:
                alive = g.zfs.guest.alive(timeout=self.accel.deadline(5))
                found, harness_found = watch.findings()
        reason, symptoms = Observation(alive, stuck, found, teardown_problem,
                                       watch.harness, harness_found, left.findings).verdict()
        if reason:
            ev = collect_evidence(g.zfs.guest if alive else None, g.vm, evidence_dir, reason,
                                  watcher=watch.console)
            g.fit = False
            self.recycle(keep=self.keep_failed)
            return CaseEnd(reason, symptoms, ev)
        kept, g.released_after_failure = g.released_after_failure, False
        if (failed and not kept) or not g.fit:   # a case may leave it unfit (load-time params)
            g.fit = False
            self.recycle(keep=self.keep_failed and failed)
            return CaseEnd()
        try:
            return CaseEnd(restored=g.zfs.restore_params(watch.params, ignore=COUNTER_PARAMS))
        except SuiteError as e:
            g.fit = False
            return CaseEnd(restore_error=str(e))

    def recycle(self, keep: bool = False) -> None:
        """Let the current guest go (killed, or kept running for --keep-vm), its
        gcov counters copied out first on an instrumented build."""
        if self.current is not None:
            self.collect_coverage(self.current)
            if keep:
                self.kept.append(self.current.vm)
            else:
                self.current.vm.kill()
        self.current = None

    def collect_coverage(self, g: ZfsGuest) -> None:
        """An instrumented build (``[zfs] gcov``): the guest's OpenZFS counters into
        ``<run>/coverage/gcda/<key>/<guest>/`` (suite/guest/gcov.py), while it
        still answers. A guest that died or lost its power takes them with it; a
        failed copy is noted there, never a case's failure."""
        if not coverage_flags.instrumented(self.record.inputs) or not g.vm.alive:
            return
        name = g.vm.spec.name
        dest = coverage_collect.gcda_dir(self.run_dir, self.record.key) / name
        try:
            got = coverage_collect.from_guest(g.zfs.guest, dest, name,
                                              timeout=self.accel.deadline(120))
            g.zfs.guest.mark(f"ozfs-vmci: gcov counters: {got.files} files to {dest}"
                             + (f" ({got.skipped})" if got.skipped else ""))
        except (SuiteError, ValueError, OSError) as e:
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "collect-failed.txt").write_text(f"{e}\n")

    def copy_case_coverage(self, g: ZfsGuest, label: str) -> None:
        """An instrumented build: the guest's counters as the case leaves them, into
        ``coverage/cases/<key>/<guest>/<NNN>-<case>/``; what grew since the guest's
        previous copy is what the case reached (the per-case map of test impact
        selection: ``suite/impact/casemap.py``). A failed copy is noted there."""
        if not coverage_flags.instrumented(self.record.inputs) or not label:
            return
        name = g.vm.spec.name
        n = self.case_copies[name] = self.case_copies.get(name, 0) + 1
        dest = coverage_collect.cases_dir(self.run_dir, self.record.key) / name / \
            f"{n:03d}-{label}"
        try:
            coverage_collect.from_guest(g.zfs.guest, dest, name,
                                        timeout=self.accel.deadline(120))
        except (SuiteError, ValueError, OSError) as e:
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "collect-failed.txt").write_text(f"{e}\n")

    def close(self) -> list[str]:
        """Stop the current guest; returns how to reach the kept ones."""
        self.recycle()
        return [f"kept guest {vm.spec.name}: ssh -p {vm.port} -i {virtme_key()} "
                f"root@127.0.0.1 (console {vm.console_path}); it stays up until this "
                f"pytest exits, kill with Ctrl-C" for vm in self.kept]
