"""zvol coherency between the Direct I/O and ARC paths (openzfs/zfs#18661).

With Direct I/O a zvol block can be written around the ARC while an ARC copy
(dirty or cached) of it exists, and read around the ARC while the newest bytes
are only in memory. Property: whatever path wrote a block last, every reader,
by either path, sees exactly those bytes: at once, after an overwrite, after a
partial ARC write over a block just written by Direct I/O, and from disk after
export/import. Each round issues, on one range of two blocks:

  1. O_DIRECT write, Direct I/O on            (path: DIO)
  2. O_DIRECT read, Direct I/O off            (ARC) sees 1
  3. O_DIRECT write of half a block into the middle, Direct I/O on (ARC: not
     whole blocks), over blocks 1 just wrote around the ARC
  4. O_DIRECT read, Direct I/O on             (DIO) sees 1 + 3
  5. page-cache write, Direct I/O on, fdatasync
  6. O_DIRECT read, Direct I/O on             (DIO) sees 5
  7. page-cache read, Direct I/O off (cache dropped first) sees 5
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import PAGE, Condition, cond, symptom_of
from suite.casekit.trials import served
from suite.casekit.writes import reimport_check
from suite.casekit.zvol import SIZES, ZVOL_PARAM, create_zvol, relocator
from suite.ioengine.plan import FileSpec, Plan, Request, Segment
from suite.symptoms import Symptom

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.zvol_dio]

ROUNDS = 4


def steps(vbs: int) -> list[tuple[Condition, str, int, int, str]]:
    """(condition, op, offset, length, path the rule gives or "" for bytes only)."""
    on, off = {ZVOL_PARAM: 1}, {ZVOL_PARAM: 0}
    return [
        (cond("1 write O_DIRECT dio=1", "libaio", via="", **on), "write", 0, 2 * vbs, "DIO"),
        (cond("2 read O_DIRECT dio=0", "libaio", via="", **off), "read", 0, 2 * vbs, "ARC"),
        (cond("3 write half-block O_DIRECT dio=1", "sync", via="", **on), "write",
         vbs - vbs // 4 if vbs > PAGE else 0, max(vbs // 2, PAGE),
         "ARC" if vbs > PAGE else "DIO"),
        (cond("4 read O_DIRECT dio=1", "io_uring", via="", **on), "read", 0, 2 * vbs, "DIO"),
        (cond("5 write page-cache dio=1", "sync", via="", buffered=True, **on), "write", 0,
         2 * vbs, ""),
        (cond("6 read O_DIRECT dio=1", "sync", via="", **on), "read", 0, 2 * vbs, "DIO"),
        (cond("7 read page-cache dio=0", "sync", via="", buffered=True, **off), "read", 0,
         2 * vbs, ""),
    ]


def expect(path: str):
    def check(c: Condition, r: dict) -> Symptom | None:
        bad = symptom_of(c, r)
        if bad or not path:
            return bad
        s = served(r.get("counters") or {})
        if s.label != path:
            return Symptom("served-by-ARC" if path == "DIO" else "served-by-DIO",
                           f"expected {path}, probes say {s.label} ({r.get('counters')})",
                           c.label)
        return None
    return check


@pytest.mark.parametrize("vbs", ["4K", "128K"])
def test_zvol_paths_see_each_others_writes(zdio, vbs):
    size = SIZES[vbs]
    zv = create_zvol(zdio.dataset, zdio.engine, "coh", 4 * size, size)
    file = FileSpec(zv.dev, zv.size, seed=f"coh-{vbs}")
    plan_steps = steps(size)
    reqs = []
    for rnd in range(ROUNDS):
        for i, (c, op, off, n, _) in enumerate(plan_steps):
            reqs.append(Request(id=f"{rnd:02d}-{i}", file=zv.dev, segments=[Segment(n, 0)],
                                interface=c.interface, op=op, offset=off,
                                o_direct=not c.buffered, flush=c.buffered,
                                condition=c.label, params=dict(c.params),
                                counters=zdio.counter_specs(op)))
    conds = [c for c, *_ in plan_steps]
    exp = {c.label: expect(path) for c, _, _, _, path in plan_steps}
    after = reimport_check(zdio.zfs, zdio.engine, zdio.pool, file,
                           relocate=relocator(zdio.engine, zv.name))
    v = zdio.run_plan(f"zvol coherency, volblocksize {vbs}: {ROUNDS} rounds of 7 steps on "
                      f"one range", Plan([file], reqs), conds, exp,
                      [f"{zv.name} ({zv.dev}); each round's steps in order, on [0, {2 * size})"
                       f" except step 3"], name="coherency", after=after)
    assert v.ok, "\n" + v.table.text()
