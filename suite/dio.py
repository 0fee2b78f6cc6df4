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

from dataclasses import dataclass, field
from typing import Callable, Iterable

from .guestbin.dioengine import FileSpec, Plan, Request, Segment
from .report import Table
from .trials import DEFAULT_TRIALS, alternate, classify, served, tally

PAGE = 4096
PARAMS = "/sys/module/zfs/parameters"
# Dataset properties for DIO cases: nothing cached, Direct I/O honoured.
DIO_PROPS = {"primarycache": "metadata", "direct": "standard", "compression": "off",
             "recordsize": "128K"}
PINNED_COUNTERS = ("zfs_async_read_pinned_copies",)
ASYNC_PARAM = "zfs_async_dio_enabled"
STRICT_PARAM = "zfs_dio_strict"


@dataclass(frozen=True)
class Condition:
    """One alternated condition: module params + the interface the read uses."""
    label: str
    interface: str = "libaio"            # libaio | io_uring | sync
    params: tuple[tuple[str, int], ...] = ()
    optional: tuple[str, ...] = ()       # params that may be absent (stock builds)

    @property
    def param_names(self) -> set[str]:
        return {k for k, _ in self.params}

    def missing(self, have: set[str]) -> set[str]:
        return self.param_names - have - set(self.optional)


def cond(label: str, interface: str = "libaio", optional: tuple[str, ...] = (),
         **params: int) -> Condition:
    """``optional`` params are set when the build has them (e.g. async=0 on a stock
    build means what it says: there is no async path to turn off)."""
    return Condition(label, interface, tuple(sorted(params.items())), optional)


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


def counters(pool: str, have_params: set[str]) -> dict[str, dict]:
    """Counter specs for the engine: pool iostats + the series' pinned-copy counter."""
    kstat = f"/proc/spl/kstat/zfs/{pool}/iostats"
    out: dict[str, dict] = {
        "direct_read_count": {"path": kstat, "field": "direct_read_count"},
        "arc_read_count": {"path": kstat, "field": "arc_read_count"},
    }
    for p in PINNED_COUNTERS:
        if p in have_params:
            out["pinned_copies"] = {"path": f"{PARAMS}/{p}"}
    return out


def plan(file: FileSpec, shape: Shape, conditions: Iterable[Condition], trials: int | None,
         pool: str, have_params: set[str], o_direct: bool = True,
         extra_params: dict[str, int] | None = None) -> Plan:
    """Alternate ``conditions`` trial by trial, ``trials`` rounds (default 14)."""
    conds = list(conditions)
    specs = counters(pool, have_params)
    reqs = []
    for i, c in enumerate(alternate(conds, trials or DEFAULT_TRIALS)):
        params = dict(extra_params or {})
        params.update({k: v for k, v in c.params if k in have_params or k not in c.optional})
        reqs.append(Request(id=f"{i:04d}", file=file.path, segments=shape.segments(),
                            interface=c.interface, op="read", vectored=shape.vectored,
                            offset=shape.offset, o_direct=o_direct, condition=c.label,
                            params=params, counters=specs))
    return Plan([file], reqs)


# -- verdicts -------------------------------------------------------------------

Expectation = Callable[[Condition, dict], "str | None"]


def expect_correct(c: Condition, r: dict) -> str | None:
    cols = classify(r)
    if "correct" not in cols:
        bad = next(iter(cols & {"EFAULT", "EINVAL", "other error", "wrong bytes"}), "?")
        where = f" first wrong byte at {r.get('first_wrong_byte')}" if bad == "wrong bytes" else ""
        return f"{bad}{where} (res={r.get('res')}, expected {r.get('expected_len')})"
    return None


def expect_direct(c: Condition, r: dict) -> str | None:
    """Correct AND served by Direct I/O alone (an ARC fallback is its own failure)."""
    why = expect_correct(c, r)
    if why:
        return why
    s = served(r.get("counters") or {})
    if s.known and s.label != "DIO":
        return f"served by {s.label}, not by Direct I/O (counters {r.get('counters')})"
    return None


def expect_einval(c: Condition, r: dict) -> str | None:
    return None if r.get("errname") == "EINVAL" else (
        f"expected EINVAL, got res={r.get('res')} {r.get('errname') or ''}".strip())


def expect_arc(c: Condition, r: dict) -> str | None:
    """Correct data, served through the ARC (a misaligned read under strict=0)."""
    why = expect_correct(c, r)
    if why:
        return why
    s = served(r.get("counters") or {})
    if s.known and not s.arc:
        return f"expected an ARC read, counters say {s.label}"
    return None


@dataclass
class Verdict:
    table: Table
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def judge(title: str, results: list[dict], expect: dict[str, Expectation],
          skipped: dict[str, str] | None = None, notes: Iterable[str] = ()) -> Verdict:
    """Tally results by condition and check each trial against its expectation."""
    rows = tally(results)
    per_cond: dict[str, list[str]] = {}
    for r in results:
        c = Condition(r["condition"])
        check = expect.get(r["condition"])
        why = check(c, r) if check else None
        if why:
            per_cond.setdefault(r["condition"], []).append(f"trial {r['id']}: {why}")
    failures = [f"{cond_}: {len(whys)}/{rows[cond_]['trials']} trials failed; first: {whys[0]}"
                for cond_, whys in per_cond.items()]
    table = Table(title, rows, notes=[*notes, *(f"{k}: skipped ({v})"
                                               for k, v in (skipped or {}).items())],
                  failures=failures)
    return Verdict(table, failures)


@dataclass
class DioBench:
    """What a Direct I/O case works with: dataset, engine, params the build has."""
    zfs: object                 # suite.zfs.Zfs
    dataset: object             # suite.zfs.Dataset
    engine: object              # suite.engine.EngineRunner
    have_params: set[str]
    trials: int | None
    write_table: Callable[[Table], None]

    @property
    def pool(self) -> str:
        return self.dataset.pool.name   # type: ignore[attr-defined]

    def path(self, name: str) -> str:
        return self.dataset.path(name)  # type: ignore[attr-defined]

    def split(self, conditions: Iterable[Condition]) -> tuple[list[Condition], dict[str, str]]:
        """Conditions this build can run, and the skipped ones with the reason."""
        run, skipped = [], {}
        for c in conditions:
            miss = c.missing(self.have_params)
            if miss:
                skipped[c.label] = f"build has no {', '.join(sorted(miss))}"
            else:
                run.append(c)
        return run, skipped

    def run(self, title: str, file: FileSpec, shape: Shape, conditions: Iterable[Condition],
            expect: dict[str, Expectation] | Expectation, notes: Iterable[str] = (),
            o_direct: bool = True, extra_params: dict[str, int] | None = None,
            name: str = "") -> Verdict:
        conds, skipped = self.split(conditions)
        if not conds:
            import pytest
            pytest.skip("; ".join(f"{k}: {v}" for k, v in skipped.items()))
        exp = expect if isinstance(expect, dict) else {c.label: expect for c in conds}
        p = plan(file, shape, conds, self.trials, self.pool, self.have_params, o_direct,
                 extra_params)
        timeout = 60 + 2 * len(p.trials)
        results = self.engine.run(p, timeout=timeout, name=name or shape.name)  # type: ignore
        v = judge(title, results, exp, skipped,
                  [f"shape {shape.name}: {len(shape.segments())} x {shape.seg_len if shape.vectored else shape.length} B"
                   f" at page offset {shape.page_offset}, file offset {shape.offset}, "
                   f"{'PREADV' if shape.vectored else 'PREAD'}", *notes])
        self.write_table(v.table)
        return v
