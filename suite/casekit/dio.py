"""Direct I/O plans: conditions x request shapes -> alternated engine trials.

A *condition* is what changes between trials of one case (async on/off, strict
0/1, the synchronous control); a *shape* is the exact request (segments, their
length and page offset, file offset). ``plan()`` interleaves conditions trial by
trial. Cases then ``judge()`` the results into a reviewer-style table with the
rows that fail marked.

Caching is controlled, not hoped for: DIO datasets use ``primarycache=metadata``
so no trial finds its data already in the ARC (a Direct I/O read of a cached
block is copied from the cache and moves neither counter), and the engine
writes its files with O_DIRECT so no page cache stays behind.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable

from suite.casekit.trials import (DEFAULT_TRIALS, NOT_ISSUED, Served, alternate, outcome, served,
                                  tally)
from suite.ioengine.plan import DEFAULT_PARAM_DIR as PARAMS, FileSpec, Plan, Request, Segment
from suite.casekit.tables import Table
from suite.guest.params import ASYNC_PARAM, STRICT_PARAM
from suite.symptoms import INFRASTRUCTURE, Symptom

if TYPE_CHECKING:
    from suite.casekit.engine import EngineRunner
    from suite.guest.zfs import Dataset, Zfs

PAGE = 4096
# Dataset properties for DIO cases: nothing cached, Direct I/O honoured.
DIO_PROPS = {"primarycache": "metadata", "direct": "standard", "compression": "off",
             "recordsize": "128K"}
PINNED_COUNTERS = {"read": "zfs_async_read_pinned_copies",
                   "write": "zfs_async_write_pinned_copies"}
TASKQ_KSTATS = "/proc/spl/kstat/taskq"
ASYNC_TASKS = "async_tasks"
# What a build does without a knob, where that behaviour is known: OpenZFS before
# zfs_dio_strict (the 2.3 line) always refuses misaligned O_DIRECT with EINVAL, as
# strict=1 does. A condition asking for that value runs there as it is.
FIXED_BEHAVIOUR = {STRICT_PARAM: 1}
# Knobs that change nothing for page-aligned requests: an aligned O_DIRECT request
# must be right whatever their value, so a build without them runs those rows too.
ALIGNMENT_ONLY = frozenset({STRICT_PARAM})


def set_async(zfs: "Zfs", on: bool | int, who: str = "async=1") -> None:
    """Turn the async Direct I/O path on or off for a case's rows. A build without
    the switch (stock OpenZFS) has only the synchronous path: the row that asks for
    the async one skips and says so (``who`` names it), the other runs as it is."""
    if zfs.has_param(ASYNC_PARAM):
        zfs.set_param(ASYNC_PARAM, int(on))
    elif on:
        import pytest
        pytest.skip(f"{who}: the build has no {ASYNC_PARAM}")


def capable(c: "Condition", have: set[str], aligned: bool) -> tuple["Condition | None", str]:
    """(the condition as this build can run it, or None; why, or a note of what
    stands in for a knob it lacks)."""
    miss = c.missing(have)
    wanted = dict(c.params)
    standin = {p for p in miss
               if FIXED_BEHAVIOUR.get(p) == wanted[p] or (aligned and p in ALIGNMENT_ONLY)}
    if miss - standin:
        return None, f"build has no {', '.join(sorted(miss))}"
    if not standin:
        return c, ""
    note = "; ".join(
        f"{p}={wanted[p]}: the build has no {p}; " +
        (f"it behaves as {p}={FIXED_BEHAVIOUR[p]}" if FIXED_BEHAVIOUR.get(p) == wanted[p]
         else "a page-aligned request does not depend on it") for p in sorted(standin))
    return replace(c, optional=c.optional + tuple(sorted(standin))), note


@dataclass(frozen=True)
class Condition:
    """One alternated condition: module params + the interface the read uses.

    ``via`` is the path the condition claims, proven per trial from the
    per-pool async taskq's dispatch counter: "async" (at least one task
    dispatched), "sync" (none), or "" (not asserted, e.g. a misaligned request
    the series may turn away at submission). ``control`` marks the synchronous
    control row: a case left with only controls (stock build) is skipped, not
    passed.
    """
    label: str
    interface: str = "libaio"            # libaio | io_uring | sync
    params: tuple[tuple[str, int], ...] = ()
    optional: tuple[str, ...] = ()       # params that may be absent (stock builds)
    via: str = ""
    control: bool = False
    buffered: bool = False               # page-cache I/O (no O_DIRECT), flushed in the trial

    @property
    def param_names(self) -> set[str]:
        return {k for k, _ in self.params}

    def missing(self, have: set[str]) -> set[str]:
        return self.param_names - have - set(self.optional)


def cond(label: str, interface: str = "libaio", optional: tuple[str, ...] = (),
         via: str | None = None, control: bool = False, buffered: bool = False,
         **params: int) -> Condition:
    """``optional`` params are set when the build has them (e.g. async=0 on a stock
    build means what it says: there is no async path to turn off). ``via``
    defaults to "async" for libaio/io_uring with the async parameter at 1 and to
    "sync" otherwise."""
    if via is None:
        via = "async" if interface != "sync" and params.get(ASYNC_PARAM) == 1 else "sync"
    return Condition(label, interface, tuple(sorted(params.items())), optional, via, control,
                     buffered)


@dataclass(frozen=True)
class Shape:
    """An exact request. ``nsegs == 0`` is the non-vectored shape (PREAD: one
    contiguous buffer, ITER_UBUF); ``nsegs >= 1`` is PREADV with that many segments
    (1: ITER_UBUF since 6.4; 2..8: the kernel's on-stack iovec array; 9+: kmalloc'd)."""
    name: str
    nsegs: int
    seg_len: int = PAGE
    page_offset: int = 0
    offset: int = 0
    total: int | None = None         # PREAD length when nsegs == 0

    @property
    def vectored(self) -> bool:
        return self.nsegs > 0

    @property
    def length(self) -> int:
        return self.total if self.nsegs == 0 and self.total else self.seg_len * max(self.nsegs, 1)

    def segments(self) -> list[Segment]:
        if not self.vectored:
            return [Segment(self.length, self.page_offset)]
        return [Segment(self.seg_len, self.page_offset) for _ in range(self.nsegs)]

    @property
    def aligned(self) -> bool:
        return (self.page_offset % PAGE == 0 and self.offset % PAGE == 0
                and self.length % PAGE == 0)


def counters(pool: str, have_params: set[str], op: str = "read") -> dict[str, dict]:
    """Counter specs for the engine: pool iostats (``direct_<op>_count``,
    ``arc_<op>_count``), the series' pinned-copy counter for ``op``, and the
    tasks dispatched to the pool's async taskqs (SPL taskq kstats; the taskqs
    are created on first use, so none yet counts as zero)."""
    kstat = f"/proc/spl/kstat/zfs/{pool}/iostats"
    out: dict[str, dict] = {
        f"direct_{op}_count": {"path": kstat, "field": f"direct_{op}_count"},
        f"arc_{op}_count": {"path": kstat, "field": f"arc_{op}_count"},
        ASYNC_TASKS: {"glob": f"{TASKQ_KSTATS}/zpl_async_*_{pool}.*",
                      "field": "tasks_dispatched"},
    }
    if PINNED_COUNTERS[op] in have_params:
        out["pinned_copies"] = {"path": f"{PARAMS}/{PINNED_COUNTERS[op]}"}
    return out


def plan(file: FileSpec, shape: Shape, conditions: Iterable[Condition], trials: int | None,
         pool: str, have_params: set[str], o_direct: bool = True,
         extra_params: dict[str, int] | None = None, op: str = "read",
         stride: int = 0, req_fields: dict | None = None,
         specs: dict[str, dict] | None = None) -> Plan:
    """Alternate ``conditions`` trial by trial, ``trials`` rounds (default 14).
    ``stride``: trial i goes to ``shape.offset + i * stride`` (writes: every
    trial leaves its own bytes, so the whole file can be checked afterwards).
    ``specs``: the attribution counters (default: the pool's, see ``counters``)."""
    conds = list(conditions)
    specs = specs if specs is not None else counters(pool, have_params, op)
    reqs = []
    for i, c in enumerate(alternate(conds, trials or DEFAULT_TRIALS)):
        params = dict(extra_params or {})
        params.update({k: v for k, v in c.params if k in have_params or k not in c.optional})
        reqs.append(Request(id=f"{i:04d}", file=file.path, segments=shape.segments(),
                            interface=c.interface, op=op, vectored=shape.vectored,
                            offset=shape.offset + i * stride,
                            o_direct=o_direct and not c.buffered, flush=c.buffered,
                            condition=c.label, params=params, counters=specs,
                            **(req_fields or {})))
    return Plan([file], reqs)


# -- verdicts -------------------------------------------------------------------

Expectation = Callable[[Condition, dict], "Symptom | None"]


def symptom_of(c: Condition, r: dict) -> Symptom | None:
    """What is wrong with a trial's I/O outcome (None: correct)."""
    col = outcome(r)
    row = c.label
    if col == "correct":
        return None
    if col == "no result":
        return Symptom("no-result", f"stage {r.get('stage')}: {r.get('error') or 'no completion'}",
                       row)
    if col in ("EFAULT", "EINVAL"):
        return Symptom(col, f"res={r.get('res')} at stage {r.get('stage')}", row)
    if col == "other error":
        return Symptom(f"error:{r.get('errname')}", f"res={r.get('res')} at stage "
                       f"{r.get('stage')}", row)
    if col == "overrun":
        return Symptom("overrun", f"{r.get('overrun_bytes')} bytes written past the buffers", row)
    if r.get("beyond_bytes"):
        return Symptom("past-end", f"res={r.get('res')} but the file grew "
                       f"{r.get('beyond_bytes')} bytes past what was reported written "
                       f"(size {r.get('size_before')} -> {r.get('size_after')})", row)
    if r.get("res") != r.get("expected_len"):
        return Symptom("short", f"res={r.get('res')}, expected {r.get('expected_len')}", row)
    return Symptom("wrong-bytes", f"{r.get('wrong_bytes')} wrong, first at "
                   f"{r.get('first_wrong_byte')} ({r.get('wrong_kind')})", row)


def _served(c: Condition, r: dict) -> tuple[Served | None, Symptom | None]:
    """(how a correct trial was served, None) or (None, what is wrong or unproven)."""
    bad = symptom_of(c, r)
    if bad:
        return None, bad
    s = served(r.get("counters") or {})
    if not s.known:
        return None, Symptom("unproven", "the attribution counters (pool iostats) are "
                             "missing on this build: cannot tell DIO from ARC", c.label)
    if s.label == "none":
        return None, Symptom("unproven", f"the attribution counters did not move "
                             f"({r.get('counters')}): the read was served from a cache "
                             f"or the counters are dead", c.label)
    return s, None


def expect_correct(c: Condition, r: dict) -> Symptom | None:
    """Full length, every byte right (how it was served is reported, not asserted)."""
    return symptom_of(c, r)


def expect_direct(c: Condition, r: dict) -> Symptom | None:
    """Correct AND served by Direct I/O alone (an ARC fallback is its own failure)."""
    s, bad = _served(c, r)
    if s is not None and s.label != "DIO":
        return Symptom("served-by-ARC", f"served by {s.label}, not by Direct I/O "
                       f"(counters {r.get('counters')})", c.label)
    return bad


def expect_einval(c: Condition, r: dict) -> Symptom | None:
    if r.get("errname") == "EINVAL" and r.get("stage") not in NOT_ISSUED:
        return None
    bad = symptom_of(c, r)
    if bad and bad.kind in ("no-result", "overrun"):
        return bad
    return Symptom("no-EINVAL", f"expected EINVAL, got res={r.get('res')} "
                   f"{r.get('errname') or ''}".strip(), c.label)


def expect_arc(c: Condition, r: dict) -> Symptom | None:
    """Correct data, served through the ARC (a misaligned read under strict=0)."""
    s, bad = _served(c, r)
    if s is not None and not s.arc:
        return Symptom("served-by-DIO", f"expected an ARC read, counters say {s.label}",
                       c.label)
    return bad


def proof_of_label(c: Condition, requested: dict[str, object], r: dict) -> Symptom | None:
    """Did the trial run as its condition says? Parameters read back, path shown."""
    applied = r.get("params_applied") or {}
    for name, want in requested.items():
        if name in (r.get("params_unavailable") or []) or name not in applied:
            why = (r.get("params_errors") or {}).get(name, "not available")
            return Symptom("unproven", f"parameter {name}={want} was not set ({why})", c.label)
        if str(applied[name]) != str(want):
            return Symptom("unproven", f"parameter {name} reads back {applied[name]!r} after "
                           f"writing {want!r}: the build ignores it", c.label)
    if c.via and outcome(r) != "no result":
        tasks = (r.get("counters") or {}).get(ASYNC_TASKS, "absent")
        if tasks is None or tasks == "absent":
            return Symptom("unproven", "the async taskq counter could not be read", c.label)
        if c.via == "async" and tasks < 1:
            return Symptom("unproven", "labelled async but no task was dispatched to the "
                           "pool's zpl_async taskq", c.label)
        if c.via == "sync" and tasks > 0:
            return Symptom("unproven", f"labelled synchronous but {tasks} task(s) went to the "
                           f"pool's zpl_async taskq", c.label)
    return None


@dataclass
class Verdict:
    table: Table
    failures: list[str] = field(default_factory=list)
    symptoms: list[Symptom] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)     # the engine's trial lines

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def inconclusive(self) -> bool:
        """Failed only for lack of proof: the case says nothing about the kernel."""
        return bool(self.symptoms) and all(s.kind in INFRASTRUCTURE for s in self.symptoms)


def judge(title: str, plan_: Plan, conditions: Iterable[Condition], results: list[dict],
          expect: dict[str, Expectation], skipped: dict[str, str] | None = None,
          notes: Iterable[str] = ()) -> Verdict:
    """Check every planned trial: it returned a result, ran as labelled, and met
    its condition's expectation. Conditions with no result fail the case."""
    conds = {c.label: c for c in conditions}
    planned = {t.id: t for t in plan_.trials}
    by_id = {r.get("id"): r for r in results}
    per_cond: dict[str, list[Symptom]] = {}

    def add(label: str, s: Symptom) -> None:
        per_cond.setdefault(label, []).append(s)

    for tid, req in planned.items():
        c = conds.get(req.condition) or Condition(req.condition)
        r = by_id.get(tid)
        if r is None:
            add(c.label, Symptom("no-result", f"trial {tid} never returned a result", c.label))
            continue
        check = expect.get(c.label)
        if check is None:
            add(c.label, Symptom("unproven", f"no expectation for condition {c.label!r}",
                                 c.label))
            continue
        why = proof_of_label(c, req.params, r) or check(c, r)
        if why:
            add(c.label, Symptom(why.kind, f"trial {tid}: {why.detail}", why.row, why.stack))
    for label in conds:
        if not any(t.condition == label for t in planned.values()):
            add(label, Symptom("no-result", "the condition was never planned", label))
    rows = tally(r for r in results if r.get("id") in planned)
    failures, symptoms = [], []
    for label, syms in per_cond.items():
        n = rows.get(label, {}).get("trials", 0)
        failures.append(f"{label}: {len(syms)}/{max(n, len(syms))} trials failed; "
                        f"first: {syms[0].kind}: {syms[0].detail}")
        kinds_seen = set()
        for sym in syms:
            if sym.kind not in kinds_seen:
                kinds_seen.add(sym.kind)
                symptoms.append(sym)
    extra = [f"{len(planned)} trials planned, {sum(1 for t in planned if t in by_id)} returned"]
    table = Table(title, rows, notes=[*notes, *extra, *(f"{k}: skipped ({v})"
                                                        for k, v in (skipped or {}).items())],
                  failures=failures)
    return Verdict(table, failures, symptoms)


@dataclass
class DioBench:
    """What a Direct I/O case works with: dataset, engine, params the build has."""
    zfs: Zfs
    dataset: Dataset
    engine: EngineRunner
    have_params: set[str]
    trials: int | None
    write_table: Callable[[Table], None]
    record: Callable[[list[Symptom]], None] = lambda symptoms: None
    # op -> attribution counter specs (default: the pool's iostats and async taskqs)
    counter_specs: Callable[[str], dict[str, dict]] | None = None
    capability_notes: list[str] = field(default_factory=list)   # set by split()

    @property
    def pool(self) -> str:
        return self.dataset.pool.name

    def path(self, name: str) -> str:
        return self.dataset.path(name)

    def split(self, conditions: Iterable[Condition], aligned: bool = True
              ) -> tuple[list[Condition], dict[str, str]]:
        """Conditions this build can run (a knob it lacks stands in by the build's
        known behaviour: ``capable``), and the skipped ones with the reason. What
        stood in for a missing knob is kept in ``capability_notes``."""
        run, skipped = [], {}
        self.capability_notes = []
        for c in conditions:
            ok, why = capable(c, self.have_params, aligned)
            if ok is None:
                skipped[c.label] = why
                continue
            run.append(ok)
            if why and why not in self.capability_notes:
                self.capability_notes.append(why)
        return run, skipped

    def run(self, title: str, file: FileSpec, shape: Shape, conditions: Iterable[Condition],
            expect: dict[str, Expectation] | Expectation, notes: Iterable[str] = (),
            o_direct: bool = True, extra_params: dict[str, int] | None = None,
            name: str = "", op: str = "read", stride: int = 0, req_fields: dict | None = None,
            after: Callable[[Plan, list[dict]], Iterable[Symptom]] | None = None,
            rounds: int | None = None) -> Verdict:
        """Plan, run and judge one table (``rounds``: trials per condition when the
        run did not ask for a number, default 14). ``after(plan, results)``: checks once all
        trials ran (e.g. every write's bytes after an export/import); its symptoms
        fail the case as a row of their own."""
        conds, skipped = self.split(conditions, shape.aligned)
        notes = [*notes, *self.capability_notes]
        if not any(not c.control for c in conds):
            import pytest
            pytest.skip("nothing but the control left to run: " +
                        "; ".join(f"{k}: {v}" for k, v in skipped.items()))
        if not shape.aligned:       # the series may turn it away at submission: no path claim
            conds = [replace(c, via="") for c in conds]
        exp = expect if isinstance(expect, dict) else {c.label: expect for c in conds}
        p = plan(file, shape, conds, self.trials or rounds, self.pool, self.have_params, o_direct,
                 extra_params, op, stride, req_fields,
                 self.counter_specs(op) if self.counter_specs else None)
        verb = f"P{op.upper()}{'V' if shape.vectored else ''}"
        each = shape.seg_len if shape.vectored else shape.length
        return self.run_plan(title, p, conds, exp, [
            f"shape {shape.name}: {len(shape.segments())} x {each} B at page offset "
            f"{shape.page_offset}, file offset {shape.offset}"
            f"{f' + trial x {stride}' if stride else ''}, {verb}", *notes],
            name or shape.name, skipped, after)

    def run_plan(self, title: str, p: Plan, conds: list[Condition],
                 exp: dict[str, Expectation], notes: Iterable[str] = (), name: str = "",
                 skipped: dict[str, str] | None = None,
                 after: Callable[[Plan, list[dict]], Iterable[Symptom]] | None = None
                 ) -> Verdict:
        """Run a plan built by the case (any mix of ops and conditions) and judge it."""
        timeout = 60 + 2 * len(p.trials)
        results = self.engine.run(p, timeout=timeout, name=name)
        v = judge(title, p, conds, results, exp, skipped, notes)
        v.results = results
        if after is not None:
            late = list(after(p, results))
            if getattr(after, "note", ""):
                v.table.notes.append(after.note)
            for sym in late:
                v.failures.append(f"{sym.row}: {sym.kind}: {sym.detail}")  # = table.failures
            v.symptoms.extend(late)
        self.finish(v)
        return v

    def finish(self, v: Verdict) -> None:
        """Record a verdict's table and symptoms with the case."""
        self.write_table(v.table)
        self.record(v.symptoms)
