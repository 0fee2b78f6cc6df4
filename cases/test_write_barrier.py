"""Durability of async O_DIRECT writes: fsync/syncfs while they are in flight
(openzfs/zfs#18902).

A queued write has no ZIL record until its task runs, so a barrier has to wait
for the writes submitted before it. The series got this wrong three times:
fsync went straight to zil_commit (until 317cbaa57), syncfs did (until
dc643dc20), and then both counted *any* completion, so a later, faster write
let them return while an earlier one was still held (until 3d0b7bc20).

The writes are held by a ``zinject -E`` write delay on their file, or, where
one write of a file must be held while a later one goes through, by a delayed
O_DIRECT read of its range (the write waits for the read's range lock, as the
PR's aio_barrier_race does). The overlap is certain and proven: the engine
reports the writes outstanding when the barrier starts. Properties:

- a barrier returns only after every write submitted before it has completed;
- after the barrier returns, a crash loses nothing it acknowledged: the guest
  is killed the moment the barrier returns, a fresh guest boots on the same
  NVMe images and imports the pool (ZIL replay), and the bytes are there; and
  with the pool frozen (``zpool freeze``) before the write, export/import
  brings it back from the ZIL alone;
- two writes to the same range in flight together leave all of one or all of the
  other, and a barrier after both waits for both;
- fsync of a file with no async write returns at once (async on and off), on a
  guest whose znodes come poisoned, not zeroed, from the slab.
"""
from __future__ import annotations

import time

import pytest

from suite.casekit.dio import set_async
from suite.casekit.engine import EngineRunner, parse_lines
from suite.casekit.faults import RAISE_HOLD, NotArmed, hold
from suite.casekit.writes import SLUB_DEBUG, WRITE_PROPS, arm_write_delay, run_inflight, verify_file
from suite.errors import GuestError
from suite.ioengine.plan import FileSpec

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.zinject,
              pytest.mark.pool(props=WRITE_PROPS)]

SIZE = 64 * 1024
W = 4096


def _setup(z, pool, engine, accel, async_, names=("one.bin",)):
    set_async(z, async_)
    paths = [pool.path(n) for n in names]
    for p in paths:
        engine.oneshot("write-file", p, "--size", str(SIZE), "--seed", "base")
    z.guest.run("sync", timeout=accel.deadline(30))
    return paths


def _armed(run, async_, case_dir):
    (case_dir / "armed.txt").write_text(run.proof() + "\n")
    if run.first("probe") is None:
        raise NotArmed(f"the writer never reached its barrier: {run.events[-3:]}")
    if async_ and not run.first("probe").get("outstanding"):
        raise NotArmed("the held write had completed before the barrier started: "
                       "the delay did not hold it", fix=RAISE_HOLD)


HELD_PAST_LATE_S = 1.0      # W1 must stay held this long after W2 completed
HOLDS_S = (8, 16)           # the held read's delay (before the accelerator's factor), tried in turn


def _held_past_late(run) -> None:
    """The race the case is about ran: W1 was still held well after W2 completed,
    long enough for a barrier satisfied by W2 to return before W1. A hold that
    let both through together proves nothing either way (under a loaded TCG host
    the held read ended at 0.9 s and W1 completed 0.2 ms after W2: the case
    'passed' at the bad commit), so it is not armed, never a pass."""
    end = run.end or {}
    w1 = next((w for w in end.get("writes") or [] if w.get("seed") == "w1"), {})
    w2 = next((w for w in end.get("late") or [] if w.get("seed") == "w2"), {})
    if not (w1.get("t_done") and w2.get("t_done") and
            w1["t_done"] - w2["t_done"] >= HELD_PAST_LATE_S):
        raise NotArmed(f"W1 was not held past W2 (W1 done at t={w1.get('t_done')} s, W2 at "
                       f"t={w2.get('t_done')} s): the held read did not hold W1's range",
                       fix="the hold (a zinject-delayed read of W1's range) ended early: "
                           "see its proof; " + RAISE_HOLD)


def _held_write_then(z, engine, accel, path, barrier, async_, case_dir):
    """W1 (4 KiB at 0) held by a write delay on its file, then ``barrier``; the
    overlap proven (the write outstanding when the barrier started)."""
    delay = accel.hold(4)
    arm_write_delay(z, path, delay)
    run = run_inflight(engine, ["--write", f"{path}:0:{W}:w1", "--barrier", barrier,
                                "--barrier-after-ms", "300", "--base-seed", "base"],
                       delay * 3 + accel.deadline(30))
    z.zinject("-c", "all", check=False)
    _armed(run, async_, case_dir)
    return run


def _judge(run, accel, symptom, expect_blocks):
    problems = []
    end = run.end
    if end is None or end.get("event") == "timeout":
        problems.append(f"the writes or the barrier did not finish: {run.events[-2:]}")
        symptom("hang", problems[-1])
        return problems
    if end.get("barrier_error"):
        problems.append(f"{end['barrier']} failed: {end['barrier_error']}")
        symptom(f"error:{end['barrier_error']}", problems[-1])
    for early in run.early(accel.deadline(0.5)):
        problems.append(f"{end['barrier']} returned before a write submitted before it "
                        f"completed: {early}")
        symptom("early-barrier", problems[-1])
    for w in run.writes() + list(end.get("late") or []):
        if w["res"] != w["len"]:
            problems.append(f"write {w['tag']}: res={w['res']} ({w['errname']})")
            symptom(f"error:{w['errname']}" if w["errname"] else "short", problems[-1])
    for (path, off), blocks in run.blocks().items():
        want = expect_blocks.get((path, off))
        if want is not None and blocks not in want:
            problems.append(f"{path} at {off}: blocks hold {blocks}, expected one of {want}")
            symptom("wrong-bytes", problems[-1])
    return problems


@pytest.mark.parametrize("async_", [1, 0], ids=["async1", "async0"])
@pytest.mark.parametrize("barrier", ["fsync", "fdatasync", "syncfs"])
def test_write_barrier_waits_for_held_write(zfs_guest, pool, engine, accel, barrier, async_,
                                            case_dir, symptom):
    z = zfs_guest
    (path,) = _setup(z, pool, engine, accel, async_)
    run = _held_write_then(z, engine, accel, path, barrier, async_, case_dir)
    problems = _judge(run, accel, symptom, {(path, 0): [["w1"]]})
    assert not problems, "\n".join(problems + [run.proof()])


@pytest.mark.parametrize("barrier", ["fsync", "syncfs"])
def test_write_barrier_not_satisfied_by_later_write(zfs_guest, pool, engine, accel, barrier,
                                                    case_dir, symptom):
    """W1 (4 KiB at 0) waits behind a held read of its range; the barrier
    starts; W2 (the next 4 KiB of the same file for fsync, another file for
    syncfs) is submitted after it and completes at once. The barrier must
    still wait for W1."""
    z = zfs_guest
    # long: the writer (a new process in the guest) must start while the read holds;
    # a host loaded past what the accelerator's factor foresees gets one try with
    # twice the hold before the case says it was never armed
    for n, seconds in enumerate(HOLDS_S):
        one, two = _setup(z, pool, engine, accel, 1, ("one.bin", "two.bin"))
        delay = accel.hold(seconds)
        held = hold(z, engine, one, "base", SIZE, delay, "async", accel.scale, length=W)
        late = f"{one}:{W}:{W}:w2" if barrier == "fsync" else f"{two}:0:{W}:w2"
        # Settled, the held read's handler would hold every read-back too (100 s here).
        run = run_inflight(engine, ["--write", f"{one}:0:{W}:w1", "--late", late,
                                    "--barrier", barrier, "--barrier-after-ms", "300",
                                    "--late-after-ms", "300", "--base-seed", "base"],
                           delay * 3 + accel.deadline(30),
                           on_settled=lambda: z.zinject("-c", "all", check=False))
        read = held.wait(accel.deadline(30))
        z.zinject("-c", "all", check=False)
        try:
            _armed(run, 1, case_dir)
            _held_past_late(run)
            break
        except NotArmed as e:
            if n == len(HOLDS_S) - 1:
                raise
            (case_dir / f"not-armed-{n}.txt").write_text(f"hold {delay:.0f} s: {e}\n")
    problems = _judge(run, accel, symptom, {(one, 0): [["w1"]]})
    if not read["finished"]:
        problems.append(f"the read holding W1's range did not finish: {read['detail'][:200]}")
        symptom("hang", problems[-1])
    assert not problems, "\n".join(problems + [run.proof(), *held.proof])


def test_write_barrier_not_starved_by_later_writes(zfs_guest, pool, engine, accel, case_dir,
                                                   symptom):
    """W1 held, fsync, then four more writes to the file, spaced half a delay
    apart, each held as long: fsync must return once W1 is done, not when the
    file has no write in flight any more."""
    z = zfs_guest
    (path,) = _setup(z, pool, engine, accel, 1)
    delay = accel.hold(4)
    arm_write_delay(z, path, delay)
    late = []
    for i in range(1, 5):
        late += ["--late", f"{path}:{i * W}:{W}:l{i}"]
    run = run_inflight(engine, ["--write", f"{path}:0:{W}:w1", *late, "--barrier", "fsync",
                                "--barrier-after-ms", "300", "--late-after-ms", "300",
                                "--late-every-ms", str(int(delay * 500)), "--base-seed", "base"],
                       delay * 8 + accel.deadline(30))
    z.zinject("-c", "all", check=False)
    _armed(run, 1, case_dir)
    problems = _judge(run, accel, symptom, {(path, 0): [["w1"]]})
    # A starved fsync waits for l4 (submitted 1.5 delays in, held one more): 1.5
    # delays past W1 at the least; a correct one returns well inside half a delay.
    starved = run.waited_past(delay / 2)
    if starved:
        problems.append(f"fsync waited for writes submitted after it: {starved}")
        symptom("late-barrier", problems[-1])
    assert not problems, "\n".join(problems + [run.proof()])


def test_write_overlap_all_or_nothing(zfs_guest, pool, engine, accel, case_dir, symptom):
    """W1 and W2, the same 16 KiB, in flight together (their file's writes
    delayed), then fsync: the range is all W1 or all W2; fsync waits for both."""
    z = zfs_guest
    (path,) = _setup(z, pool, engine, accel, 1)
    delay = accel.hold(4)
    arm_write_delay(z, path, delay)
    n = 4 * W
    run = run_inflight(engine, ["--write", f"{path}:0:{n}:w1", "--write", f"{path}:0:{n}:w2",
                                "--barrier", "fsync", "--barrier-after-ms", "300",
                                "--base-seed", "base"], delay * 4 + accel.deadline(30))
    z.zinject("-c", "all", check=False)
    _armed(run, 1, case_dir)
    problems = _judge(run, accel, symptom, {(path, 0): [["w1"] * 4, ["w2"] * 4]})
    assert not problems, "\n".join(problems + [run.proof()])


@pytest.mark.parametrize("barrier", ["fsync", "syncfs"])
def test_write_acknowledged_survives_power_cut(zfs_guest, pool, engine, accel, guests, barrier,
                                               case_dir, symptom, ondisk_check):
    """The guest's power is cut the moment the barrier returns; a fresh guest
    imports the pool from the same NVMe images: the write the barrier
    acknowledged must be there."""
    z = zfs_guest
    (path,) = _setup(z, pool, engine, accel, 1)
    delay = accel.hold(4)
    arm_write_delay(z, path, delay)
    old = guests.current
    state: dict = {}

    def cut(end: dict) -> None:
        state["barrier_end"] = end
        state["guest"] = guests.power_cut(old, case_dir / "commands.log")

    run = run_inflight(engine, ["--write", f"{path}:0:{W}:w1", "--barrier", barrier,
                                "--barrier-after-ms", "300", "--base-seed", "base"],
                       delay * 3 + accel.deadline(30), on_barrier_end=cut)
    _armed(run, 1, case_dir)
    if "guest" not in state:
        problems = _judge(run, accel, symptom, {})
        assert problems, "the barrier never returned, yet no problem was found"
        pytest.fail("\n".join(problems))
    new = state["guest"]
    end = state["barrier_end"]
    new.zfs.zpool("import", "-f", "-d", "/dev", pool.pool.name, timeout=accel.deadline(120))
    fresh = EngineRunner(new.zfs.guest, case_dir / "engine-after-power-cut", scale=accel.scale)
    r = verify_file(fresh, FileSpec(path, SIZE, "base"), [(0, W, "w1")], SIZE, "after-power-cut")
    (case_dir / "power-cut.txt").write_text(
        f"barrier returned at t={end['t']} s with {end.get('pending')} still pending; "
        f"power cut at once; after import: {r.get('correct')} "
        f"(wrong bytes {r.get('wrong_bytes')}, first at {r.get('first_wrong_byte')})\n")
    ondisk_check(new, pool.pool.name)       # --thorough: the pool as the ZIL replay left it
    try:
        new.zfs.zpool("destroy", "-f", pool.pool.name, timeout=accel.deadline(60), check=False)
    except GuestError:
        new.fit = False
    new.pool_spec = None
    if not r.get("correct"):
        pending = end.get("pending")
        symptom("lost-after-barrier",
                f"{barrier} returned (with write(s) {pending} not yet complete), the power was "
                f"cut, and after import the acknowledged 4 KiB at 0 is not the write's bytes "
                f"({r.get('wrong_bytes')} wrong, first at {r.get('first_wrong_byte')})")
        pytest.fail(f"{barrier}-acknowledged write lost across a power cut: {r}")


@pytest.mark.parametrize("barrier", ["fsync", "syncfs"])
def test_write_acknowledged_survives_freeze_and_import(zfs_guest, pool, engine, accel, barrier,
                                                       case_dir, symptom):
    """``zpool freeze`` first: no txg after it reaches the main pool. A held
    async write, the barrier, then export/import: what the barrier acknowledged
    can only come back from the ZIL, and must."""
    z = zfs_guest
    (path,) = _setup(z, pool, engine, accel, 1)
    z.zpool("freeze", pool.pool.name)
    run = _held_write_then(z, engine, accel, path, barrier, 1, case_dir)
    problems = _judge(run, accel, symptom, {})
    assert not problems, "\n".join(problems + [run.proof()])
    z.export_import(pool.pool.name, timeout=accel.deadline(300))
    r = verify_file(engine, FileSpec(path, SIZE, "base"), [(0, W, "w1")], SIZE, "after-freeze")
    returned = (run.first("barrier-end") or {}).get("t")
    (case_dir / "freeze.txt").write_text(
        f"barrier returned at t={returned} s; after export/import of the frozen pool: "
        f"correct={r.get('correct')} (wrong {r.get('wrong_bytes')}, first at "
        f"{r.get('first_wrong_byte')})\n")
    if not r.get("correct"):
        symptom("lost-after-barrier",
                f"{barrier} acknowledged the 4 KiB at 0 on a frozen pool; after export/import "
                f"(ZIL replay) {r.get('wrong_bytes')} bytes are wrong, first at "
                f"{r.get('first_wrong_byte')}")
        pytest.fail(f"{barrier}-acknowledged write lost across freeze + import: {r}")


@pytest.mark.guest(append=SLUB_DEBUG)
@pytest.mark.parametrize("async_", [1, 0], ids=["async1", "async0"])
def test_write_fsync_without_async_writes_returns(zfs_guest, pool, engine, accel, async_,
                                                  symptom):
    """Twenty new files, one buffered page each, fsync'd one by one: none may
    wait for async writes that were never issued."""
    z = zfs_guest
    set_async(z, async_)
    limit = accel.deadline(5)
    h = engine.background("fsync-files", "--dir", pool.mountpoint, "-n", "20")
    done, seen, last = None, 0, time.monotonic()
    while done is None and time.monotonic() - last < limit + accel.deadline(10):
        events = parse_lines(h.output_so_far()[0])
        done = next((e for e in events if e.get("event") == "done"), None)
        if len(events) > seen:
            seen, last = len(events), time.monotonic()
        if h.done and done is None:
            break
        time.sleep(0.5)
    if done is None:
        started = [e for e in parse_lines(h.output_so_far()[0]) if e.get("event") == "fsync-start"]
        stuck = started[-1] if started else "before the first fsync"
        symptom("hang", f"fsync did not return within {limit:.0f} s: {stuck}")
        pytest.fail(f"fsync of a file with no async write hung: {stuck}")
    slow = [(i, t) for i, t in enumerate(done["latency_s"]) if t > limit]
    if slow:
        symptom("slow-fsync", f"fsync took {slow} s (limit {limit:.0f} s)")
    assert not slow, f"fsync of files with no async write took {slow} s"
