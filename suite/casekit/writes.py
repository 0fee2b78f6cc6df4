"""Asynchronous O_DIRECT writes: what only writes need on top of ``dio``.

- **Independent read-back.** The engine reads every write back at once with
  O_DIRECT; a write that went through the ARC may still be read from the copy
  it just made, so :func:`reimport_check` exports and imports the pool and reads
  every trial's bytes again from disk.
- **Cut-short writes.** :func:`expect_short`: a write that hits a quota or
  RLIMIT_FSIZE after making progress returns the count written, never an error.
- **Writes in flight around a barrier.** :class:`Inflight` runs the engine's
  ``inflight`` command (writes held by a ``zinject -E -T write`` delay, then
  fsync/syncfs) and says whether the barrier returned before a write submitted
  before it had completed; :func:`power_cut_check` cuts the guest's power the
  moment the barrier returns and looks for the acknowledged bytes after import.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable

from suite.casekit.dio import DIO_PROPS, Condition, symptom_of
from suite.casekit.engine import EngineRunner, parse_lines
from suite.casekit.faults import NotArmed, skip_without_object_delay
from suite.errors import GuestError
from suite.ioengine.plan import FileSpec, Plan, Request, Segment
from suite.symptoms import Symptom

if TYPE_CHECKING:
    from suite.guest.zfs import Zfs

# 4 KiB records: every page-aligned 4 KiB piece is a whole block, so Direct I/O
# applies (a write smaller than a record is a read-modify-write through the ARC).
RECORD = 4096
WRITE_PROPS = {**DIO_PROPS, "recordsize": "4K"}
AFTER_ROW = "after export/import"
# Guest kernel command line that makes two classes of silent memory bugs loud:
# zfs_znode_cache objects come poisoned (0x6b), not zeroed, so a field the
# constructor forgets is never 0 by luck; kmalloc-2k (where the pinned-page array
# of a 1 MiB request lives) gets red zones, so an overflow is reported on free.
SLUB_DEBUG = ("init_on_alloc=0", "slub_debug=FZP,zfs_znode_cache,kmalloc-2k")


def landed(plan: Plan, results: list[dict]) -> list[tuple[int, int, str | None]]:
    """(offset, length, seed) of every trial's write as the engine saw it land:
    seed None where the outcome is unknown (error or no completion)."""
    reqs = {t.id: t for t in plan.trials}
    out = []
    for r in results:
        req = reqs.get(r.get("id"))
        if req is None or req.op != "write":
            continue
        seed = req.write_seed if req.write_seed is not None else f"{plan.files[0].seed}@{req.id}"
        res = r.get("res")
        refused = r.get("errname") in ("EINVAL", "EFAULT", "EFBIG")   # nothing written
        if isinstance(res, int) and res > 0 and not r.get("errno"):
            out.append((req.offset, res, seed))
        elif not refused:
            out.append((req.offset, req.total_len, None))
    return out


def verify_file(engine: EngineRunner, file: FileSpec, overlays: list, size: int,
                name: str) -> dict:
    """Read the whole file with one synchronous O_DIRECT read and compare it with
    the generator plus ``overlays``; the engine's result line."""
    spec = FileSpec(file.path, size, file.seed, create=False, overlays=overlays)
    req = Request(id="verify", file=file.path, segments=[Segment(max(size, 4096), 0)],
                  interface="sync", op="read", o_direct=True, condition=AFTER_ROW,
                  timeout_s=120)
    res = engine.run(Plan([spec], [req]), timeout=300, name=name)
    return res[0]


def reimport_check(zfs: "Zfs", engine: EngineRunner, pool: str, file: FileSpec,
                   relocate: Callable[[], str] | None = None
                   ) -> Callable[[Plan, list[dict]], Iterable[Symptom]]:
    """An ``after`` check for :meth:`DioBench.run`: export/import the pool, then
    every byte each trial wrote must be on disk (and nothing else changed).
    ``relocate()``: the file's path after the import (a zvol's /dev/zdN may change)."""
    def check(plan: Plan, results: list[dict]) -> list[Symptom]:
        overlays = landed(plan, results)
        size = max([file.size] + [o + n for o, n, s in overlays if s is not None])
        zfs.export_import(pool)
        target = replace(file, path=relocate()) if relocate else file
        r = verify_file(engine, target, overlays, size, "after-reimport")
        known = sum(n for _, n, s in overlays if s is not None)
        check.note = (f"{AFTER_ROW}: the whole file ({size} B, {known} B written by "
                      f"{sum(1 for o in overlays if o[2] is not None)} trials) re-read from "
                      f"disk with O_DIRECT: {'correct' if r.get('correct') else 'WRONG'}")
        if r.get("correct"):
            return []
        bad = symptom_of(Condition(AFTER_ROW, "sync"), r)
        detail = bad.detail if bad else json.dumps(r)[:300]
        kind = bad.kind if bad else "wrong-bytes"
        return [Symptom(kind, f"re-read from disk after export/import: {detail}", AFTER_ROW)]
    return check


def expect_direct_write(c: Condition, r: dict) -> Symptom | None:
    """Correct, and every 4 KiB record of it written by Direct I/O: the pool's
    ``direct_write_count`` moved by the number of records. ``arc_write_count``
    cannot decide it: it is pool-wide and also counts the sync thread's own
    dmu_write calls (bpobj, history), which land in a trial's window now and then."""
    bad = symptom_of(c, r)
    if bad:
        return bad
    counters = r.get("counters") or {}
    d = counters.get("direct_write_count")
    if d is None:
        return Symptom("unproven", "the pool has no direct_write_count: cannot tell DIO from "
                       "ARC", c.label)
    want = -(-(r.get("total_len") or 0) // RECORD)
    if d < want:
        return Symptom("served-by-ARC", f"{d} of {want} records written by Direct I/O "
                       f"(counters {counters})", c.label)
    return None


def expect_short_or_whole(c: Condition, r: dict) -> Symptom | None:
    """For a quota: ZFS enforces it per transaction, against space already
    accounted, so a write may run past it whole (seen with 4 KiB records). What
    must never happen is an error after progress; a cut write must be exact."""
    if r.get("res") == r.get("total_len") and not r.get("errno"):
        return symptom_of(c, r)
    return expect_short(c, r)


def expect_short(c: Condition, r: dict) -> Symptom | None:
    """A write cut short after progress: 0 < res < requested, the file ends at
    ``offset + res``, the prefix is the written bytes, nothing lies past it."""
    total = r.get("total_len") or 0
    res = r.get("res")
    row = c.label
    if r.get("stage") in ("plan", "setup", "open", "timeout") or res is None:
        return Symptom("no-result", f"stage {r.get('stage')}: {r.get('error')}", row)
    if r.get("errno"):
        return Symptom(f"error:{r.get('errname')}", f"res={res} ({r.get('errname')}) where a "
                       f"short count was due; the file is now {r.get('size_after')} bytes", row)
    if not 0 < res < total:
        return Symptom("no-short", f"res={res} of {total}: the limit did not cut the write",
                       row)
    if r.get("beyond_bytes"):
        return Symptom("past-end", f"res={res} but the file grew {r.get('beyond_bytes')} "
                       f"bytes past it (size {r.get('size_after')})", row)
    end = (r.get("offset") or 0) + res
    if r.get("size_after") is not None and r.get("size_after") != max(end, r.get("size_before") or 0):
        return Symptom("past-end", f"res={res} but st_size={r.get('size_after')} "
                       f"(expected {end})", row)
    if r.get("wrong_bytes"):
        return Symptom("wrong-bytes", f"{r.get('wrong_bytes')} wrong in the written prefix, "
                       f"first at {r.get('first_wrong_byte')}", row)
    return None


# -- writes in flight ----------------------------------------------------------

def arm_write_delay(zfs: "Zfs", path: str, delay_s: float) -> str:
    """``zinject -E`` ready-stage delay on every data write of ``path``.

    A delay cannot be aimed at one block: ``-b`` refuses ``-E``, and on debug
    builds ``zinject -r`` panics the kernel (zio_calculate_range drops the pool
    config lock before dmu_objset_from_ds; upstream too, see
    patches/notes/async-dio-write-path.md). To hold one write of a file while
    another of the same file goes through, hold a read of its range instead
    (``faults.hold``): the write waits for the read's range lock."""
    ms = str(int(delay_s * 1000))
    r = zfs.zinject("-E", ms, "-T", "write", "-t", "data", path, check=False, timeout=60)
    skip_without_object_delay(r, "write")
    if r.rc != 0:
        raise NotArmed(f"zinject -E -T write refused: {r.stderr.strip() or r.stdout.strip()}",
                       fix="is the file on the pool and zinject from the same build?")
    return f"{ms} ms write delay on {path}"


@dataclass
class Inflight:
    """What one ``inflight`` run reported."""
    events: list[dict] = field(default_factory=list)

    def first(self, name: str) -> dict | None:
        return next((e for e in self.events if e.get("event") == name), None)

    @property
    def end(self) -> dict | None:
        return self.first("done") or self.first("timeout")

    def writes(self) -> list[dict]:
        end = self.end or {}
        return list(end.get("writes") or [])

    def proof(self) -> str:
        """The writes the barrier was issued over (the overlap the case is about)."""
        probe = self.first("probe") or {}
        return (f"{len(probe.get('outstanding') or [])} write(s) still in flight when the "
                f"barrier started at t={probe.get('t')} s")

    def early(self, grace_s: float) -> list[str]:
        """Writes submitted before the barrier that completed more than ``grace_s``
        after it returned (or never): the barrier did not wait for them."""
        end = self.end or {}
        b_end = end.get("barrier_end")
        if b_end is None:
            return []
        out = []
        for w in self.writes():
            done = w.get("t_done")
            if done is None or done > b_end + grace_s:
                out.append(f"write {w['tag']} ({w['len']} B at {w['offset']}) completed "
                           f"{'never' if done is None else f'at t={done} s'}, the barrier "
                           f"returned at t={b_end} s")
        return out

    def waited_past(self, grace_s: float) -> str:
        """How long the barrier kept waiting after the last write submitted before
        it had completed, when that is more than ``grace_s`` ('' otherwise)."""
        end = self.end or {}
        b_end = end.get("barrier_end")
        done = [w.get("t_done") for w in self.writes()]
        if b_end is None or not done or None in done:
            return ""
        extra = b_end - max(done)
        if extra <= grace_s:
            return ""
        return (f"the barrier returned at t={b_end} s, {extra:.1f} s after the last write "
                f"submitted before it completed (t={max(done)} s)")

    def blocks(self) -> dict[tuple[str, int], list[str]]:
        end = self.end or {}
        return {(c["file"], c["offset"]): c["blocks"] for c in end.get("contents") or []}


def run_inflight(engine: EngineRunner, args: list[str], deadline_s: float,
                 on_barrier_end: Callable[[dict], None] | None = None,
                 name: str = "inflight",
                 on_settled: Callable[[], None] | None = None) -> Inflight:
    """Run ``inflight`` in the background; call ``on_barrier_end`` the moment the
    barrier returns (e.g. to cut the power), ``on_settled`` once every write and
    the barrier are done and before the engine reads the ranges back (e.g. to
    clear the zinject delay that held them); return the events seen."""
    go = f"/tmp/ozfs-engine/{name}-read-back"     # the engine reads back once it exists
    if on_settled is not None:
        engine.guest.run(f"mkdir -p /tmp/ozfs-engine; rm -f {go}", timeout=30 * engine.scale)
        args = [*args, "--read-back-after", go,
                "--read-back-wait-s", str(int(60 * engine.scale))]
    h = engine.background("inflight", *args, "--deadline-s", str(int(deadline_s)))
    run = Inflight()
    fired = False
    stop = time.monotonic() + deadline_s + 30 * engine.scale
    while time.monotonic() < stop:
        out, _ = h.output_so_far()
        run.events = parse_lines(out)
        if on_settled is not None and run.first("settled") is not None:
            try:
                on_settled()
            finally:
                engine.guest.run(f"touch {go}", timeout=30 * engine.scale)
            on_settled = None
        end = run.first("barrier-end")
        if end is not None and not fired and on_barrier_end is not None:
            fired = True
            on_barrier_end(end)
            break
        if run.end is not None or h.done:
            break
        time.sleep(0.05)
    (engine.outdir).mkdir(parents=True, exist_ok=True)
    if not fired:
        try:
            h.wait(10 * engine.scale)
        except GuestError:
            pass
        out, _ = h.output_so_far()
        run.events = parse_lines(out)
    (engine.outdir / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n"
                                                         for e in run.events))
    return run
