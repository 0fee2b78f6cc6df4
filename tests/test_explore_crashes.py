"""Explore's crashes: a sequence that trips the kernel, a hang, a lost guest.

A fake executor stands in for the guest: its "kernel" dies on the first
``evict`` that follows a ``truncate`` (the shape of the dbuf_whichblock panic of
POSIX_FADV_DONTNEED on a grown one-block file), and a dead guest runs nothing
until the session asks for a fresh one. The shrinker must find those two ops on
fresh guests, exploring must go on after it, a repeat of the same panic must be
counted and not shrunk again, and a known hang must make its op avoided."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from suite.explore.crashes.avoid import known_hang, older
from suite.explore.crashes.pace import Pace, Progress
from suite.explore.crashes.trip import InFlight, Trip, frames, kernel_trip, normalize
from suite.explore.gen import Choices, generate, sequence_seed
from suite.explore.ops import Sequence
from suite.explore.budget import parse_budget
from suite.explore.session import Explorer, Fresh, RunOutput, Settings, signature
from suite.report.upstream import UpstreamFinding
from suite.vm.console import Finding

PANIC = "VERIFY3U(offset, <, dn->dn_datablksz) failed (12288 < 12288)"
STACK = ("Call Trace:", " <TASK>", " dump_stack_lvl+0x45/0x60",
         " spl_panic+0xfc/0x120 [spl]", " dbuf_whichblock+0x1a7/0x1b0 [zfs]",
         " dmu_evict_range+0x7d/0x1c0 [zfs]", " zpl_fadvise+0x1ef/0x280 [zfs]",
         " ksys_fadvise64_64+0x9b/0xc0")


def ok_line(i: int, op: str) -> dict[str, Any]:
    return {"event": "op", "i": i, "op": op, "ok": True, "outcome": "ok", "ms": 5.0}


@dataclass
class FakeKernel:
    """One guest: runs sequences by the rule above; dead after it tripped."""
    n: int
    log: list[str]
    dead: bool = False
    ran: list[int] = field(default_factory=list)     # sequence lengths run here

    def run_sequence(self, seq_file: Path, target: str, timeout_s: float,
                     extra=()) -> RunOutput:
        seq = json.loads(seq_file.read_text())
        if self.dead:
            self.log.append(f"guest {self.n} used after it died")
            return RunOutput([], None, "", Trip("guest-lost", "ssh: connection refused"))
        self.ran.append(len(seq["ops"]))
        lines: list[dict[str, Any]] = []
        truncated = False
        for i, op in enumerate(seq["ops"]):
            lines.append({"event": "begin", "i": i, "op": op["op"]})
            if op["op"] == "evict" and truncated:
                self.dead = True
                f = Finding("spl_panic", "error", f"[  123.456] {PANIC}", 7, self.trace())
                return RunOutput(lines, None, "", kernel_trip(f, InFlight.of(lines).op(), 8.0))
            truncated = truncated or op["op"] == "truncate"
            lines.append(ok_line(i, op["op"]))
        lines.append({"event": "explore-done", "ok": True, "failed_at": None})
        return RunOutput(lines, 0, "")

    def trace(self) -> tuple[str, ...]:
        return STACK


class CutKernel(FakeKernel):
    """A guest whose console is cut after the panic's title on every guest but the first."""

    def trace(self) -> tuple[str, ...]:
        return STACK if self.n == 0 else ("CPU: 0 PID: 412 Comm: python3 Tainted: P",)


class Fleet:
    """Fresh guests on demand (``renew``), each a FakeKernel (or ``kernel``)."""

    def __init__(self, kernel: type[FakeKernel] = FakeKernel) -> None:
        self.log: list[str] = []
        self.kernel = kernel
        self.guests = [kernel(0, self.log)]

    def renew(self, why: str) -> Fresh:
        self.log += [] if self.guests[-1].dead or why.startswith("to confirm") else \
            [f"a fresh guest asked for, the last still alive: {why}"]
        self.guests.append(self.kernel(len(self.guests), self.log))
        return Fresh(self.guests[-1], lambda seq: None)


def tripping_seed(n_ops: int = 40) -> int:
    """A master seed whose first sequence has an evict after a truncate."""
    for seed in range(1, 500):
        ops = [o.op for o in generate(sequence_seed(seed, 0), n_ops, "file", 3 << 20,
                                      Choices()).ops]
        if "truncate" in ops and "evict" in ops[ops.index("truncate"):]:
            return seed
    raise AssertionError("no seed draws an evict after a truncate")


def settings(tmp_path: Path, **kw) -> Settings:
    return Settings(str(tmp_path), tmp_path / "engine", tmp_path / "explore", **kw)


def test_the_shrinker_finds_the_op_that_kills_the_kernel_and_the_one_it_needs(tmp_path: Path):
    fleet = Fleet()
    seed = tripping_seed()
    ex = Explorer(fleet.guests[0], settings(tmp_path, max_findings=1), Choices(),
                  log=lambda _: None, renew=fleet.renew)
    res = ex.run(seed, parse_budget("1x"))
    assert len(res.findings) == 1 and not fleet.log, fleet.log
    f = res.findings[0]
    assert [o.op for o in f.minimal.ops] == ["truncate", "evict"], f.minimal.render()
    assert f.kind == "kernel:spl_panic" and f.confirmed
    assert f.minimal_verdict.failed_at == 1 and f.minimal_verdict.trip.op_kind == "evict"
    # every candidate that tripped took its guest with it: a fresh one each time, and
    # the confirming replay ran on a fresh guest
    assert res.boots == len(fleet.guests) - 1 >= 2
    assert fleet.guests[-1].ran == [2] or fleet.guests[-2].ran[-1:] == [2]
    assert "dbuf_whichblock" in f.text and "in flight: op 1 (evict)" in f.text
    assert "confirmed on a fresh guest" in f.text
    summary = json.loads((tmp_path / "explore" / "summary.json").read_text())
    assert summary["boots"] == res.boots and summary["trips"][0]["op_kind"] == "evict"
    assert summary["findings"][0]["ops"] == 2 and summary["findings"][0]["trip"]["kind"] == \
        "kernel:spl_panic"


def test_exploring_goes_on_after_a_trip_and_counts_the_same_panic_once(tmp_path: Path):
    fleet = Fleet()
    ex = Explorer(fleet.guests[0], settings(tmp_path, max_findings=3, shrink_s=0),
                  Choices(), log=lambda _: None, renew=fleet.renew)
    res = ex.run(tripping_seed(), parse_budget("12x"))
    assert len(res.runs) == 12, "a trip must not end the exploration"
    tripped = [r for r in res.runs if r["kind"] == "kernel:spl_panic"]
    assert len(tripped) >= 2 and len(res.findings) == 1
    assert all(r.get("repeat_of") == res.findings[0].original.seed for r in tripped[1:])
    assert not fleet.log, fleet.log


def test_a_panic_whose_console_was_cut_before_its_trace_is_the_same_panic(tmp_path: Path):
    """Signed by its title alone, a repeat is still a repeat and a replay still
    confirms the finding: neither is a new finding shrunk again."""
    fleet = Fleet(CutKernel)
    ex = Explorer(fleet.guests[0], settings(tmp_path, max_findings=3), Choices(),
                  log=lambda _: None, renew=fleet.renew)
    res = ex.run(tripping_seed(), parse_budget("12x"))
    tripped = [r for r in res.runs if r["kind"] == "kernel:spl_panic"]
    assert len(tripped) >= 2 and len(res.findings) == 1, [f.label() for f in res.findings]
    assert res.findings[0].confirmed
    assert all(r.get("repeat_of") == res.findings[0].original.seed for r in tripped[1:])


def test_one_report_is_its_title_when_one_side_has_no_frames():
    from suite.explore.crashes.trip import one_report, signed_as
    framed = ("kernel:spl_panic", "VERIFYN(len) failed (-N)", "zfs_uio_get_dio_pages_alloc")
    cut = framed[:2]
    assert one_report(framed, cut) and one_report(cut, framed) and one_report(cut, cut)
    assert not one_report(framed, (*cut, "dmu_write_uio_direct"))   # both framed: frames count
    assert not one_report(cut, ("kernel:spl_panic", "VERIFYN(offset) failed"))
    assert not one_report(cut, ("kernel:oops", cut[1]))
    assert not one_report(("kernel:hung_task", "zfs_fsync"),
                          ("kernel:hung_task", "zfs_fsync", "zil_commit"))
    assert not one_report(("hang", "fsync"), ("hang", "fsync", "zfs_fsync"))
    assert signed_as(cut, [("hang", "fsync"), framed]) == framed
    assert signed_as(("kernel:oops", "x"), [framed]) is None


def test_a_kernel_that_dies_in_the_setup_is_shrunk_to_no_op_at_all(tmp_path: Path):
    class SetupPanics(FakeKernel):
        def run_sequence(self, seq_file, target, timeout_s, extra=()):
            if self.dead:
                self.log.append("used after it died")
            self.dead = True
            lines = [{"event": "setup", "what": "create x, write 12288 bytes, fsync, "
                      "POSIX_FADV_DONTNEED"}]
            f = Finding("spl_panic", "error", PANIC, 7, STACK)
            return RunOutput(lines, None, "", kernel_trip(f, InFlight.of(lines).op()))

    fleet = Fleet()
    fleet.guests = [SetupPanics(0, fleet.log)]
    fleet.renew = lambda why: (fleet.guests.append(SetupPanics(len(fleet.guests), fleet.log))
                               or Fresh(fleet.guests[-1], lambda seq: None))
    ex = Explorer(fleet.guests[0], settings(tmp_path), Choices(), log=lambda _: None,
                  renew=fleet.renew)
    f = ex.run(1, parse_budget("1x")).findings[0]
    assert f.minimal.ops == () and f.confirmed and not fleet.log
    assert "the setup alone fails: 40 -> 0 ops" in f.text
    assert "no op yet: the target's setup: create x" in f.text
    assert f.detail() == f"explore seed {f.original.seed}: kernel:spl_panic in the target's " \
        f"setup: create x, write 12288 bytes, fsync, POSIX_FADV_DONTNEED: {PANIC}"


def test_without_a_fresh_guest_the_session_stops_and_keeps_what_it_found(tmp_path: Path):
    """No fresh guest after a trip (none given, or every boot drowned in the debug
    kernel's early KASAN storm: 2026-12-07): the session runs nothing more, and the
    sequence that tripped is a finding, whole and not confirmed, saying why."""
    guest = FakeKernel(0, [])
    ex = Explorer(guest, settings(tmp_path), Choices(), log=lambda _: None)
    res = ex.run(tripping_seed(), parse_budget("5x"))
    assert len(res.runs) == 1 and ex.dead and len(guest.ran) == 1, "nothing ran after"
    f = res.findings[0]
    assert not f.confirmed and f.minimal.ops == f.original.ops
    assert f.minimal_verdict.kind == "kernel:spl_panic"
    assert "not confirmed, the session ended" in f.text and "no fresh guest" in f.text


def test_a_fresh_guest_that_never_comes_up_ends_the_session_with_its_finding(tmp_path):
    from suite.errors import BootStorm
    fleet = Fleet()

    def renew(why: str) -> Fresh:
        raise BootStorm("guest kernel reported 6557 KASAN errors while booting")
    ex = Explorer(fleet.guests[0], settings(tmp_path), Choices(), log=lambda _: None,
                  renew=renew)
    res = ex.run(tripping_seed(), parse_budget("5x"))
    assert len(res.findings) == 1 and not res.findings[0].confirmed
    assert "6557 KASAN errors" in ex.dead and len(res.runs) == 1
    assert (tmp_path / "explore" / "summary.json").exists()


def test_a_confirmation_that_ran_stands_when_no_guest_comes_up_after_it(tmp_path: Path):
    """The debug run of 2026-12-07: the confirmation tripped as the finding did, and the
    guest after it drowned in a boot storm. The finding is confirmed; the session ends."""
    from suite.errors import BootStorm
    fleet = Fleet()

    def renew(why: str) -> Fresh:
        if "-confirm:" in why:
            raise BootStorm("guest kernel reported 7692 KASAN errors while booting")
        return fleet.renew(why)
    ex = Explorer(fleet.guests[0], settings(tmp_path), Choices(), log=lambda _: None,
                  renew=renew)
    res = ex.run(tripping_seed(), parse_budget("5x"))
    f = res.findings[0]
    assert f.confirmed and "7692 KASAN" in ex.dead and "not confirmed" not in f.text
    assert len(f.minimal.ops) == 2


def test_trip_signatures_ignore_numbers_and_keep_the_functions():
    f1 = Finding("spl_panic", "error", f"[ 12.3] {PANIC}", 1, STACK)
    f2 = Finding("spl_panic", "error", "[ 99.1] VERIFY3U(offset, <, dn->dn_datablksz) failed "
                 "(131072 < 131072)", 1, STACK)
    a, b = kernel_trip(f1, (3, "evict")), kernel_trip(f2, (9, "evict"))
    assert a.signature() == b.signature()
    assert a.signature()[1] == normalize(PANIC) and "N < N" in a.signature()[1]
    assert frames(STACK, 2) == ("dbuf_whichblock", "dmu_evict_range")
    other = kernel_trip(Finding("oops", "error", "BUG: unable to handle page fault", 1, STACK),
                        (3, "evict"))
    assert other.signature() != a.signature()
    assert Trip("hang", "no progress", 4, "splice").signature() == ("hang", "splice")
    # an oops names the address it faulted on, bare hex that differs run to run: one
    # oops (8e1187c520's, 2026-12-07: its shrink kept no candidate, none "failed the
    # same way", and its confirmation failed, each at another address)
    oops = [kernel_trip(Finding("oops", "error", f"[ 451.0] BUG: unable to handle page "
                                f"fault for address: {addr}", 1, STACK), (31, "held_read"))
            for addr in ("ff5a7904076cbb48", "ff5a790407a3fb48")]
    assert oops[0].signature() == oops[1].signature()
    assert oops[0].signature()[1] == "BUG: unable to handle page fault for address: N"
    assert normalize("zfs_uioskip dbuf_whichblock") == "zfs_uioskip dbuf_whichblock"
    fsync = ("--- pid 7 (python) state=D (disk sleep) wchan=cv_wait_common ---",
             "[<0>] cv_wait_common+0x16d/0x2e0 [spl]", "[<0>] zfs_fsync+0xc4/0x210 [zfs]",
             "[<0>] zpl_fsync+0xe2/0x190 [zfs]")
    assert Trip("hang", "x", 1, "mmap_write", fsync).signature() == \
        Trip("hang", "x", 7, "fsync", fsync).signature(), "one wait, met by two ops"
    assert Trip.from_dict(a.to_dict()) == a


def test_a_frame_the_unwinder_guessed_signs_a_report_only_when_no_other_can():
    """``? f`` is a stale return address that differs boot to boot (one KASAN report of
    async-dio 30582e2f4c began ``? dbuf_rele`` in one boot and ``? spl_kmem_cache_free``
    in another): left out of a signature while a stack has sure frames."""
    stale = ("[ 566.8] Call Trace:", "[ 566.8]  iov_iter_advance+0x613/0x860",
             "[ 566.8]  ? dbuf_rele+0x13b/0x2b0 [zfs]", "[ 566.8]  zfs_uioskip+0x3e9/0x6c0 [zfs]",
             "[ 566.8]  dmu_write_uio_direct+0x188/0x250 [zfs]")
    other = (*stale[:2], "[ 524.8]  ? spl_kmem_cache_free+0x493/0x8e0 [spl]", *stale[3:])
    a = kernel_trip(Finding("kasan", "error", f"[ 566.8] {KASAN[0]}", 1, stale), (0, "held_write"))
    b = kernel_trip(Finding("kasan", "error", f"[ 524.8] {KASAN[0]}", 1, other), (0, "held_write"))
    assert a.signature() == b.signature()
    assert a.signature()[2:] == ("zfs_uioskip", "dmu_write_uio_direct")
    assert frames(("  ? zfs_read+0x1/0x2 [zfs]", "  ? zpl_iter_read+0x1/0x2 [zfs]"), 2) == \
        ("zfs_read", "zpl_iter_read"), "a stack of guesses alone still signs by them"


def test_the_op_in_flight_is_the_last_begun_and_not_finished():
    lines = [{"event": "begin", "i": 0, "op": "truncate"}, ok_line(0, "truncate"),
             {"event": "begin", "i": 1, "op": "evict"}]
    assert InFlight.of(lines).op() == (1, "evict")
    assert InFlight.of(lines[:2]).op() == (None, "")
    setup = [{"event": "setup", "what": "create /p/x.bin, write 12288 bytes, fsync, "
              "POSIX_FADV_DONTNEED"}]
    assert InFlight.of(setup).op() == (None, "setup: create /p/x.bin, write 12288 bytes, "
                                             "fsync, POSIX_FADV_DONTNEED")
    assert InFlight.of(setup + lines[:2]).op() == (None, ""), "past the setup, between ops"
    trip = Trip("kernel:spl_panic", PANIC, *InFlight.of(setup).op())
    assert "in the target's setup: create /p/x.bin" in trip.label()


def test_a_hang_is_several_times_the_slowest_op_scaled_and_setup_has_its_own():
    pace = Pace(scale=6.0, factor=8.0, floor_s=15.0, setup_s=120.0)
    p = Progress(pace, last_line_at=0.0)
    assert p.stalled(600.0) is None and p.stalled(721.0) == 721.0     # before any op
    p.see([{"event": "begin", "i": 0, "op": "pwrite"}], 10.0)
    assert pace.allowance_s(True) == 90.0          # the floor, scaled for TCG
    assert p.stalled(99.0) is None and p.stalled(101.0) == pytest.approx(91.0)
    p.see([{"event": "begin", "i": 0, "op": "pwrite"},
           {"event": "op", "i": 0, "op": "pwrite", "ms": 20000.0}], 30.0)
    assert pace.slowest_s == 20.0 and pace.allowance_s(True) == 160.0
    assert p.stalled(180.0) is None and p.stalled(191.0) is not None


PIPE_WAIT = ("--- pid 5 (python3) state=S wchan=pipe_read ---", "[<0>] pipe_read+0x2a/0x400")


class HangsIn:
    """A guest whose ``op`` never returns, its tasks waiting in ``stack`` (killable: the
    guest stays fit); ``hung`` counts the times."""
    def __init__(self, op: str, stack: tuple[str, ...]) -> None:
        self.op, self.stack, self.hung = op, stack, 0

    def run_sequence(self, seq_file, target, timeout_s, extra=()):
        ops = json.loads(seq_file.read_text())["ops"]
        lines = []
        for i, op in enumerate(ops):
            lines.append({"event": "begin", "i": i, "op": op["op"]})
            if op["op"] == self.op:
                self.hung += 1
                return RunOutput(lines, None, "", Trip("hang", "no progress", i, self.op,
                                                       self.stack, True))
            lines.append(ok_line(i, op["op"]))
        lines.append({"event": "explore-done", "ok": True, "failed_at": None})
        return RunOutput(lines, 0, "")


def test_a_known_hang_is_avoided_from_then_on_on_the_kernels_it_names(tmp_path: Path):
    splice = UpstreamFinding("sendfile-from-direct-always-moves-nothing", "t", (), ("hang",),
                             explore_hangs=("splice", "sendfile"), linux_before="6.5",
                             explore_hang_stack="pipe_read", explore_direct=True)
    hang = Trip("hang", "no progress for 95s in op 12 (splice)", 12, "splice", PIPE_WAIT, True)
    assert known_hang(hang, "6.1.0-57-amd64", [splice]) is splice
    assert known_hang(hang, "6.12.95+deb12-amd64", [splice]) is None
    assert known_hang(hang, "6.1.0-57-amd64", [splice], direct=False) is None, \
        "a buffered splice that hangs is not the Direct I/O finding"
    elsewhere = Trip("hang", "no progress", 12, "splice", ("--- pid 5 (python3) state=D ---",
                                                           "[<0>] zfs_rangelock_enter+0x3/0x9 [zfs]"))
    assert known_hang(elsewhere, "6.1.0-57-amd64", [splice]) is None, "another stack: new"
    assert known_hang(Trip("hang", "x", 1, "pwrite"), "6.1.0", [splice]) is None
    assert older("6.1.0-57-amd64", "6.5") and not older("weird", "6.5")

    guest = HangsIn("splice", PIPE_WAIT)
    ex = Explorer(guest, settings(tmp_path, kernel_release="6.1.0-57-amd64",
                                  upstream=[splice]), Choices(), log=lambda _: None)
    res = ex.run(1, parse_budget("30x"))
    assert guest.hung == 1, "splice drawn again after its known hang"
    assert res.avoided and res.avoided[0]["op"] == "splice" and not res.findings
    assert res.known == 1 and "splice" not in ex.choices.ops
    # the sequence that hung ran again past it, without splice, and got to its end
    again = [r for r in res.runs if r["resumed"]]
    hung = next(r for r in res.runs if r.get("known"))
    assert len(again) == 1 and again[0]["k"] == hung["k"] and again[0]["state"] == "ok"
    assert again[0]["ops"] < hung["ops"] and len(res.runs) == 31
    assert signature(Sequence.from_json(json.dumps({"seed": 1, "ops": []})),
                     ex.last[next(iter(ex.last))]) is not None


LOCKDEP = ("WARNING: possible recursive locking detected",
           "python3/412 is trying to acquire lock:",
           "ffff8880 (&sb->s_type->i_mutex_key#16){++++}-{3:3}, at: zpl_clone_file_range_impl+0x1b4/0x3a0 [zfs]",
           "Call Trace:", " zpl_clone_file_range_impl+0x1b4/0x3a0 [zfs]",
           " zpl_remap_file_range+0x5c/0x90 [zfs]", " do_clone_file_range+0x1f1/0x5e0")


class ReportsIn(FakeKernel):
    """A kernel whose every fresh boot stops at the first ``op`` with ``stop(lines)``."""
    op = ""

    def stop(self, lines: list[dict[str, Any]]) -> Trip:
        raise NotImplementedError

    def run_sequence(self, seq_file, target, timeout_s, extra=()):
        ops = json.loads(seq_file.read_text())["ops"]
        lines: list[dict[str, Any]] = []
        for i, op in enumerate(ops):
            lines.append({"event": "begin", "i": i, "op": op["op"]})
            if op["op"] == self.op:
                self.dead = True
                return RunOutput(lines, None, "", self.stop(lines))
            lines.append(ok_line(i, op["op"]))
        lines.append({"event": "explore-done", "ok": True, "failed_at": None})
        return RunOutput(lines, 0, "")


class LockdepIn(ReportsIn):
    """A lockdep kernel whose every fresh boot reports at its first copy_range."""
    op = "copy_range"

    def stop(self, lines: list[dict[str, Any]]) -> Trip:
        f = Finding("lockdep", "error", f"[  88.1] {LOCKDEP[0]}", 7, LOCKDEP[1:])
        return kernel_trip(f, InFlight.of(lines).op(), 3.0)


def test_a_known_report_that_every_fresh_guest_raises_in_an_op_avoids_that_op(tmp_path: Path):
    """A lockdep kernel reports a known finding at the first clone between two files of
    every boot (async-dio 30582e2f4c on debian-6.1-debug: zpl_clone_file_range_impl):
    counted as known once, the guest replaced, copy_range generated no more, and the
    sequence run again past it; a report in another op is not avoided."""
    from suite.explore.crashes.avoid import known_report, report_op
    from suite.report.upstream import load
    nesting = next(f for f in load() if f.id == "remap-lock-two-no-lockdep-nesting")
    fleet = Fleet(LockdepIn)
    ex = Explorer(fleet.guests[0], settings(tmp_path, kernel_release="6.1.0-57-amd64",
                                            upstream=[nesting], max_findings=3),
                  Choices(), log=lambda _: None, renew=fleet.renew)
    res = ex.run(1, parse_budget("12x"))
    assert res.known == 1 and not res.findings
    assert res.avoided[0]["op"] == "copy_range" and "raises its report" in res.avoided[0]["why"]
    assert "copy_range" not in ex.choices.ops and res.boots == 1
    again = [r for r in res.runs if r["resumed"]]
    assert again and again[0]["state"] == "ok"
    f = Finding("lockdep", "error", f"[  88.1] {LOCKDEP[0]}", 7, LOCKDEP[1:])
    trip = kernel_trip(f, (3, "copy_range"))
    assert report_op(trip, known_report(trip, "6.1.0", [nesting])) == "copy_range"
    other = kernel_trip(f, (3, "pwrite"))
    assert report_op(other, known_report(other, "6.1.0", [nesting])) == ""
    assert report_op(trip, None) == "" and report_op(None, nesting) == ""


CIRCULAR = ("WARNING: possible circular locking dependency detected",
            "the existing dependency chain (in reverse order) is:", "-> #1 (&ms->ms_lock){+.+.}-{3:3}:",
            "-> #0 (&dn->dn_dbufs_mtx){+.+.}-{3:3}:", "Call Trace:",
            " dbuf_free_range+0x1b4/0x3a0 [zfs]", " dnode_free_range+0x5c/0x90 [zfs]")
KASAN = ("BUG: KASAN: use-after-free in iov_iter_advance+0x613/0x860",
         "Read of size 8 at addr ff11000114417890 by task zpl_async_dio_t/587", "Call Trace:",
         " iov_iter_advance+0x613/0x860", " zfs_uioskip+0x3e9/0x6c0 [zfs]",
         " dmu_write_uio_direct+0x188/0x250 [zfs]")


def _stop_of_two(lines: list[dict[str, Any]]) -> Trip:
    """The stop of async-dio 30582e2f4c on debian-6.1-debug: the known false-positive
    lockdep report, then 0.23 s later a KASAN use-after-free."""
    lock = Finding("lockdep", "error", f"[ 647.36] {CIRCULAR[0]}", 7, CIRCULAR[1:])
    kasan = Finding("kasan", "error", f"[ 647.59] {KASAN[0]}", 9, KASAN[1:])
    at = InFlight.of(lines).op()
    return replace(kernel_trip(lock, at, 3.0), also=(kernel_trip(kasan, at, 3.0),))


class LockdepThenKasan(ReportsIn):
    """A debug kernel whose every truncate raises a known lockdep report and then a
    KASAN use-after-free, in one stop."""
    op = "truncate"

    def stop(self, lines: list[dict[str, Any]]) -> Trip:
        return _stop_of_two(lines)


def test_a_known_report_does_not_hide_a_new_one_of_the_same_stop(tmp_path: Path):
    """A known lockdep report (dbufs-mtx-ms-lock-lockdep-class) printed first and a
    KASAN use-after-free after it: the finding is the KASAN report, shrunk by it, the
    lockdep report carried along; a stop of known reports alone stays known."""
    from suite.explore.crashes.avoid import unclaimed
    from suite.report.upstream import load
    known = [f for f in load() if f.id == "dbufs-mtx-ms-lock-lockdep-class"]
    stop = _stop_of_two([{"event": "begin", "i": 2, "op": "truncate"}])
    named = unclaimed(stop, "6.1.0", known)
    assert named.kind == "kernel:kasan" and [t.kind for t in named.also] == ["kernel:lockdep"]
    assert unclaimed(stop, "6.1.0", []) is stop, "the first report names a stop none claims"
    assert unclaimed(stop, "6.1.0", known, {named.signature()}) is stop, "all known"
    assert Trip.from_dict(json.loads(json.dumps(stop.to_dict()))) == stop

    fleet = Fleet(LockdepThenKasan)
    ex = Explorer(fleet.guests[0], settings(tmp_path, kernel_release="6.1.0-57-amd64",
                                            upstream=known, max_findings=1),
                  Choices(), log=lambda _: None, renew=fleet.renew)
    res = ex.run(1, parse_budget("12x"))
    assert len(res.findings) == 1 and res.known == 0
    f = res.findings[0]
    assert f.minimal_verdict.kind == "kernel:kasan"
    assert [o.op for o in f.minimal.ops] == ["truncate"]
    assert "the kernel's other reports of that stop" in f.text


def test_a_replay_fails_the_same_way_when_any_report_of_its_stop_is_the_findings():
    """The 1-op replay of a held libaio write (async-dio 30582e2f4c, debian-6.1-debug)
    printed a KASAN use-after-free in zfs_uioskip < zfs_write_impl first and the one it
    was shrunk for (< dmu_write_uio_direct) 1 s later: the same failure, named by the
    second report; a stop without that report is not."""
    from suite.explore.failure import named_as, same_failure
    from suite.explore.judge import trip_verdict
    at = [{"event": "begin", "i": 0, "op": "held_write"}]
    kasan = Finding("kasan", "error", f"[ 566.88] {KASAN[0]}", 9, KASAN[1:])
    early = Finding("kasan", "error", f"[ 566.88] {KASAN[0]}", 9,
                    (*KASAN[1:4], " zfs_uioskip+0x3e9/0x6c0 [zfs]", " zfs_write_impl+0x18db/0x27c0 [zfs]"))
    v = trip_verdict(kernel_trip(kasan, (1, "held_write")), at)
    stop = replace(kernel_trip(early, (0, "held_write")), also=(kernel_trip(kasan, (0, "held_write")),))
    r = trip_verdict(stop, at)
    assert r.trip.signature() != v.trip.signature() and same_failure(v, r)
    named = named_as(v, r)
    assert named.trip.frames() == ("zfs_uioskip", "dmu_write_uio_direct")
    assert [t.frames() for t in named.trip.also] == [("zfs_uioskip", "zfs_write_impl")]
    alone = trip_verdict(kernel_trip(early, (0, "held_write")), at)
    assert not same_failure(v, alone) and named_as(v, v) is v


def test_a_stop_carries_every_report_the_console_showed(tmp_path: Path):
    """The console shows a second report after the first: the trip is named by the
    first and carries the second, traced, with the op that raised it."""
    from suite.explore.crashes.stream import StreamingRunner
    lock = Finding("lockdep", "error", f"[ 647.36] {CIRCULAR[0]}", 7, CIRCULAR[1:])
    kasan = Finding("kasan", "error", f"[ 647.59] {KASAN[0]}", 9, KASAN[1:])
    polls = iter([[], [lock]])
    guest = _Guest([{"event": "begin", "i": 0, "op": "held_write"}], False)
    seq = tmp_path / "s.seq.json"
    seq.write_text("{}")
    out = StreamingRunner(_Engine(guest), console=lambda: next(polls, [lock, kasan]),
                          sleep=lambda s: None).run_sequence(seq, "/p/f.bin", 60)
    assert out.trip is not None and out.trip.kind == "kernel:lockdep"
    assert [(t.kind, t.op, t.op_kind) for t in out.trip.also] == [("kernel:kasan", 0,
                                                                    "held_write")]
    assert out.trip.also[0].frames() == ("zfs_uioskip", "dmu_write_uio_direct")


def test_a_hang_this_run_found_is_avoided_once_shrunk(tmp_path: Path):
    """A hang no table knows (async-dio 317cbaa578: every fsync of a poisoned znode
    waits for good) is shrunk once; from then on its op is generated no more, so the
    run goes on to other ops instead of paying a boot for it in every sequence."""
    guest = HangsIn("fsync", ("--- pid 7 (python3) state=D ---",
                              "[<0>] zfs_fsync+0x9/0x90 [zfs]"))
    ex = Explorer(guest, settings(tmp_path, kernel_release="6.1.0-57-amd64", max_findings=3),
                  Choices(), log=lambda _: None)
    res = ex.run(1, parse_budget("30x"))
    assert len(res.findings) == 1 and res.findings[0].verdict.kind == "hang"
    assert "fsync" not in ex.choices.ops
    assert res.avoided and res.avoided[0]["op"] == "fsync"
    assert "this run's finding" in res.avoided[0]["why"]
    shrink_and_confirm = guest.hung - 1
    assert shrink_and_confirm >= 1, "the first one was shrunk and confirmed"
    after = [r for r in res.runs if r.get("repeat_of")]
    assert not after, "no later sequence paid for the same hang again"


def test_a_known_upstream_failure_in_a_new_shape_is_named_not_shrunk_on_old_kernels():
    from suite.explore.crashes.avoid import known_failure
    from suite.report.upstream import load
    findings = load()
    f = known_failure("short", "sendfile_out", "6.1.0-57-amd64", findings)
    assert f is not None and f.id == "sendfile-from-direct-always-moves-nothing"
    assert known_failure("short", "sendfile_out", "6.12.95+deb12-amd64", findings) is None
    assert known_failure("short", "pwrite", "6.1.0-57-amd64", findings) is None
    assert known_failure("crash-lost", "sendfile", "6.1.0-57-amd64", findings) is None
    assert known_failure(None, "sendfile", "6.1.0", findings) is None
    assert known_failure("short", "sendfile_out", "6.1.0-57-amd64", findings, direct=False) \
        is None, "buffered, on a dataset of direct=standard: not the Direct I/O finding"
    rb = known_failure("wrong-bytes", "verify", "6.12.0", findings, "rollback")
    assert rb is not None and rb.id == "rollback-keeps-cached-pages"
    assert known_failure("wrong-bytes", "verify", "6.12.0", findings, "pwrite") is None, \
        "a write after the rollback laid the wrong byte down: not the rollback's"


def test_the_session_counts_an_upstream_failure_as_known(tmp_path: Path, monkeypatch):
    import suite.explore.session as session
    from suite.explore.ops import Op, Sequence
    from suite.explore.session import RunOutput, Settings, explore
    from suite.report.upstream import load
    monkeypatch.setattr(session, "generate", lambda seed, *a, **k: Sequence(
        seed=seed, ops=(Op("sendfile_out", direct=True, off=0, len=4096),)))

    class Short:
        def run_sequence(self, seq_file, target, timeout_s, extra=()):
            return RunOutput([{"event": "op", "i": 0, "op": "sendfile_out", "ok": False,
                               "outcome": "failed", "kind": "short"},
                              {"event": "explore-done", "ok": False, "failed_at": 0,
                               "kind": "short", "why": "moved 0 of 4096", "ops": 1}], 1)
    s = Settings(workdir="/x", seq_dir=tmp_path / "e", out_dir=tmp_path / "o",
                 kernel_release="6.1.0-57-amd64", upstream=load())
    r = explore(Short(), s, 1, parse_budget("3x"), Choices(), log=lambda m: None)
    assert r.known == 3 and not r.findings
    assert r.runs[0]["known"] == "sendfile-from-direct-always-moves-nothing"
    s.kernel_release = "6.12.0"
    r = explore(Short(), s, 1, parse_budget("3x"), Choices(), log=lambda m: None)
    assert r.findings and r.known == 0


class _Guest:
    """A guest whose engine command prints ``lines`` and then runs until killed."""
    engine_dir_made = True

    def __init__(self, lines: list[dict[str, Any]], ends: bool) -> None:
        self.bg = _Bg("\n".join(json.dumps(ln) for ln in lines) + "\n", ends)

    def put(self, local, remote) -> None:
        pass

    def background(self, cmd, timeout=30.0, waited=False) -> "_Bg":
        return self.bg


@dataclass
class _Result:
    stdout: str
    rc: int | None
    stderr: str = ""


class _Bg:
    def __init__(self, out: str, ends: bool) -> None:
        self.out, self.ends, self.signals, self.lost = out, ends, [], False

    def poll(self, seconds: float) -> bool:
        return self.ends or bool(self.signals)

    def result(self) -> _Result:
        return _Result(self.out, 0 if self.ends else (None if not self.signals else -15))

    def signal(self, sig: str) -> None:
        self.signals.append(sig)


@dataclass
class _Engine:
    guest: _Guest
    scale: float = 1.0

    def command(self, *args: str) -> str:
        return "python3 -m suite.ioengine " + " ".join(args)


WARN = Finding("warning", "warning", "[  77.1] WARNING: CPU: 0 PID: 412 at mm/gup.c:2105 "
               "try_grab_folio+0x1f/0x2a0", 3,
               ("Call Trace:", " zfs_uio_get_dio_pages_alloc+0x12/0x90 [zfs]",
                " zfs_write+0x55/0x400 [zfs]"))


def _run_reported(tmp_path: Path, guest: "_Guest", report: Finding) -> RunOutput:
    """One sequence on ``guest`` whose console is quiet when the run begins and then
    shows ``report``."""
    from suite.explore.crashes.stream import StreamingRunner
    asked: list[int] = []

    def console() -> list[Finding]:
        asked.append(1)
        return [] if len(asked) == 1 else [report]
    seq = tmp_path / "s.seq.json"
    seq.write_text("{}")
    return StreamingRunner(_Engine(guest), console=console).run_sequence(seq, "/p/f.bin", 60)


@pytest.mark.parametrize("ends", [False, True], ids=["in-flight", "just-ended"])
def test_a_kernel_warning_during_a_sequence_is_a_trip_naming_the_op(tmp_path: Path, ends):
    lines = [{"event": "begin", "i": 0, "op": "pwrite"}, ok_line(0, "pwrite"),
             {"event": "begin", "i": 1, "op": "pwritev"}]
    if ends:
        lines += [ok_line(1, "pwritev"), {"event": "explore-done", "ok": True}]
    guest = _Guest(lines, ends)
    out = _run_reported(tmp_path, guest, WARN)
    assert out.trip is not None and out.trip.kind == "kernel:warning"
    assert (out.trip.op, out.trip.op_kind) == (1, "pwritev")
    assert not out.trip.guest_fit, "a kernel that warned is replaced"
    assert out.trip.signature()[2:] == ("zfs_uio_get_dio_pages_alloc", "zfs_write")
    assert guest.bg.signals[:1] == ([] if ends else ["TERM"])


CUT = Finding("spl_panic", "error", "[  41.0] VERIFY0(len) failed (-4096)", 3,
              ("CPU: 1 PID: 88 Comm: python3 Tainted: P",))
TRACED = Finding(CUT.kind, CUT.severity, CUT.line, CUT.lineno,
                 (*CUT.context, "Call Trace:", " spl_panic+0xfc/0x120 [spl]",
                  " zfs_uio_get_dio_pages_alloc+0x12/0x90 [zfs]"))


def test_a_report_seen_before_its_trace_waits_for_the_trace(tmp_path: Path):
    """The console's first poll carries the title alone: the trip is signed once the
    trace came, by its frames."""
    from suite.explore.crashes.stream import StreamingRunner
    polls = iter([[], [CUT], [CUT], [TRACED]])
    guest = _Guest([{"event": "begin", "i": 0, "op": "pwrite"}], False)
    seq = tmp_path / "s.seq.json"
    seq.write_text("{}")
    out = StreamingRunner(_Engine(guest), console=lambda: next(polls, [TRACED]),
                          sleep=lambda s: None).run_sequence(seq, "/p/f.bin", 60)
    assert out.trip is not None
    assert out.trip.signature()[2:] == ("zfs_uio_get_dio_pages_alloc",)


def test_a_report_with_no_trace_at_all_is_taken_after_a_bounded_wait(tmp_path: Path):
    from suite.explore.crashes.stream import TRACE_WAIT_S, StreamingRunner
    now, slept = [0.0], []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s
    guest = _Guest([{"event": "begin", "i": 0, "op": "pwrite"}], False)
    seq = tmp_path / "s.seq.json"
    seq.write_text("{}")
    polls = iter([[]])
    out = StreamingRunner(_Engine(guest, scale=2.0), console=lambda: next(polls, [CUT]),
                          clock=lambda: now[0], sleep=sleep).run_sequence(seq, "/p/f.bin", 60)
    assert out.trip is not None and out.trip.signature() == ("kernel:spl_panic",
                                                             "VERIFY0(len) failed (-N)")
    assert TRACE_WAIT_S * 2.0 <= sum(slept) <= TRACE_WAIT_S * 2.0 + 1


def test_a_quiet_console_is_no_trip(tmp_path: Path):
    from suite.explore.crashes.stream import StreamingRunner
    lines = [{"event": "begin", "i": 0, "op": "pwrite"}, ok_line(0, "pwrite"),
             {"event": "explore-done", "ok": True}]
    runner = StreamingRunner(_Engine(_Guest(lines, True)), console=lambda: [])
    seq = tmp_path / "s.seq.json"
    seq.write_text("{}")
    assert runner.run_sequence(seq, "/p/f.bin", 60).trip is None


def test_two_corruptions_seen_at_verify_are_told_apart_by_the_op_that_laid_them_down():
    from suite.explore.failure import cause, label
    from suite.explore.judge import Verdict
    from suite.explore.ops import Op
    ops = (Op("pwrite", direct=True, off=0, len=8192, data=1), Op("snapshot", data=1),
           Op("pwrite", off=8192, len=4096, data=2), Op("rollback", data=1),
           Op("pwrite", direct=True, off=16384, len=4096, data=3), Op("verify"))
    seq = Sequence(1, ops=ops)
    assert label(cause(seq, 5, 100)) == "after rollback"
    assert label(cause(seq, 5, 17000)) == "after pwrite O_DIRECT"
    assert label(cause(Sequence(1, ops=(Op("verify"),)), 0, 5)) == "after the initial content"
    a = signature(seq, Verdict("failed", 5, "wrong-bytes", "", 100))
    b = signature(seq, Verdict("failed", 5, "wrong-bytes", "", 17000))
    assert a != b and a[:4] == b[:4] == ("wrong-bytes", "verify", "sync", "buffered")


def test_a_kernel_report_is_known_by_its_signature_never_by_its_kind():
    from suite.explore.crashes.avoid import known_report
    from suite.report.upstream import load
    findings = load()
    lock = Finding("lockdep", "error", "[ 9.1] WARNING: possible circular locking dependency "
                   "detected", 3, ("python3/912 is trying to acquire lock:",
                                   "(&dn->dn_dbufs_mtx){+.+.}, at: dbuf_free_range+0x9a/0x5f0 [zfs]",
                                   "but task is already holding lock:",
                                   "(&ms->ms_lock){+.+.}, at: metaslab_check_free+0x2/0x9 [zfs]"))
    trip = kernel_trip(lock, (3, "truncate"))
    assert known_report(trip, "6.1.0", findings).id == "dbufs-mtx-ms-lock-lockdep-class"
    other = Finding("lockdep", "error", "[ 9.1] WARNING: possible circular locking dependency "
                    "detected", 3, ("(&zp->z_rangelock){+.+.}, at: zfs_rangelock_enter",
                                    "(&zfsvfs->z_hold_mtx){+.+.}, at: zfs_zget"))
    assert known_report(kernel_trip(other, (3, "truncate")), "6.1.0", findings) is None
    warn = Finding("warning", "warning", "[ 9.1] WARNING: CPU: 0 PID: 4 at mm/gup.c:1 x", 3, ())
    assert known_report(kernel_trip(warn, (1, "pwrite")), "6.1.0", findings) is None


def test_a_run_that_proved_nothing_gets_a_fresh_guest_and_exploring_goes_on(tmp_path: Path):
    class Mute:
        """Guest 0 never says it is done; the guests after it run everything."""
        def __init__(self, n: int) -> None:
            self.n = n

        def run_sequence(self, seq_file, target, timeout_s, extra=()):
            ops = json.loads(seq_file.read_text())["ops"]
            if self.n == 0:
                return RunOutput([{"event": "begin", "i": 0, "op": ops[0]["op"]}], 1, "KeyError")
            lines = []
            for i, op in enumerate(ops):
                lines += [{"event": "begin", "i": i, "op": op["op"]}, ok_line(i, op["op"])]
            lines.append({"event": "explore-done", "ok": True, "failed_at": None})
            return RunOutput(lines, 0, "")

    boots: list[str] = []

    def renew(why: str) -> Fresh:
        boots.append(why)
        return Fresh(Mute(len(boots)), lambda seq: None)

    ex = Explorer(Mute(0), settings(tmp_path), Choices(), log=lambda _: None, renew=renew)
    res = ex.run(1, parse_budget("5x"))
    assert len(res.no_result) == 1 and len(boots) == 1 and "proved nothing" in boots[0]
    assert len(res.runs) == 5 and all(r["state"] == "ok" for r in res.runs[1:])
    assert res.summary()["boots"] == 1


def test_the_injected_warning_is_printed_after_its_write_only(tmp_path: Path):
    from suite.ioengine.explore.model import Outcome
    from suite.ioengine.explore.run import warn_hook
    from suite.ioengine.explore.step import Step
    kmsg = tmp_path / "kmsg"
    warn_hook(Step("pwrite", data=2), Outcome(), 3, str(kmsg))
    warn_hook(Step("pread", data=3), Outcome(), 3, str(kmsg))
    assert not kmsg.exists()
    warn_hook(Step("pwrite", data=3), Outcome(), 3, str(kmsg))
    from suite.vm.console import scan
    found = scan(kmsg.read_text())
    assert [f.kind for f in found] == ["warning"], "the console reads it as a kernel WARNING"


def test_the_op_whose_line_carries_the_report_is_the_one_named():
    from suite.explore.crashes.stream import raised_in
    lines = [{"event": "begin", "i": 0, "op": "pwrite"}, ok_line(0, "pwrite"),
             {"event": "begin", "i": 1, "op": "pwritev"},
             {**ok_line(1, "pwritev"), "kmsg": [WARN.line.split("] ", 1)[1]]},
             {"event": "begin", "i": 2, "op": "pread"}, ok_line(2, "pread"),
             {"event": "begin", "i": 3, "op": "snapshot"}]
    assert raised_in(lines, WARN) == (1, "pwritev"), "not the op in flight when it was seen"
    assert raised_in(lines[:2] + lines[4:], WARN) == (3, "snapshot"), "no kmsg: in flight"


def test_the_engine_reads_what_the_kernel_logged_during_an_op():
    import os
    from suite.ioengine.explore.kmsg import KernelLog
    if not os.access("/dev/kmsg", os.R_OK | os.W_OK):
        pytest.skip("/dev/kmsg cannot be read and written here (not root, or no such device)")
    log = KernelLog()
    fd = os.open("/dev/kmsg", os.O_WRONLY)        # one write, one record
    os.write(fd, b"<6>ozfs-vmci self-test: an info line, not kept\n")
    os.write(fd, b"<4>ozfs-vmci self-test: WARNING: a warning line, kept\n")
    os.close(fd)
    assert log.new() == ["ozfs-vmci self-test: WARNING: a warning line, kept"]
    assert log.new() == []
    log.close()


def test_a_racing_write_that_leaves_zeros_is_the_verify_finding_and_no_other_failure_is():
    from suite.explore.crashes.avoid import known_failure
    from suite.report.upstream import load
    findings = load()
    zeros = ("racing write: the byte at 12288 is 0x00, none of the contents it may hold "
             "(first 0xed, second 0x09, old 0xb1)")
    f = known_failure("wrong-bytes", "pwritev", "6.1.0", findings, None, True, zeros)
    assert f is not None and f.id == "dio-write-refused-by-verify-zeroes-dirty-block"
    other = "racing write: the byte at 12288 is 0x41, none of the contents it may hold"
    assert known_failure("wrong-bytes", "pwritev", "6.1.0", findings, None, True, other) is None


def test_past_a_kernels_limit_the_resumed_sequence_leaves_out_every_op_it_claims():
    """A finding that is a kernel's limit on Direct I/O (``linux_before``,
    ``explore_direct``) fails every O_DIRECT op it claims on that kernel: they all go at
    the first resume, not one rerun each; any other finding loses only the op that
    failed (what fails next depends on what came before)."""
    from suite.explore.judge import Verdict
    from suite.explore.ops import Op
    from suite.explore.resume import kernel_limit_claims, past_known
    limit = UpstreamFinding("sendfile-from-direct-always-moves-nothing", "t", (), ("short",),
                            linux_before="6.5", explore_ops=("sendfile", "sendfile_out"),
                            explore_direct=True)
    other = UpstreamFinding("dio-read-of-range-freed-in-open-txg", "t", (), ("wrong-bytes",),
                            explore_ops=("pread",))
    seq = Sequence(1, ops=(Op("pwrite", off=0, len=4096),
                           Op("sendfile_out", direct=True, off=0, len=4096),
                           Op("pread", direct=True, off=0, len=4096),
                           Op("sendfile_out", direct=True, off=0, len=4096),
                           Op("sendfile_out", direct=False, off=0, len=4096),
                           Op("fsync")))
    v = Verdict("failed", failed_at=1, kind="short")
    again = past_known(seq, v, 0, kernel_limit_claims(seq, limit))
    assert again is not None and [(o.op, o.direct) for o in again.ops] == [
        ("pwrite", False), ("pread", True), ("sendfile_out", False), ("fsync", False)]
    assert kernel_limit_claims(seq, other) is None
    assert kernel_limit_claims(seq, UpstreamFinding("k", "t", (), ("short",), linux_before="6.5",
                                                    explore_ops=("sendfile_out",))) is None
    once = past_known(seq, Verdict("failed", failed_at=2, kind="wrong-bytes"), 0,
                      kernel_limit_claims(seq, other))
    assert once is not None and len(once.ops) == len(seq.ops) - 1


def test_shrinking_a_finding_does_not_spend_the_exploring_budget(tmp_path: Path):
    """A finding met early and shrunk for long (a hang: every candidate waits out its
    bound and boots a guest) must not end the run: the budget is exploring time, and
    shrinking comes on top (317cbaa578's fsync hang, shrunk for 20 minutes, left a
    15-minute run with one sequence)."""
    fleet = Fleet()
    now = [0.0]

    class Timed:           # every run takes 10 s of the host's clock, whatever its kind
        def __init__(self, guest: FakeKernel) -> None:
            self.guest = guest

        def run_sequence(self, seq_file, target, timeout_s, extra=()):
            now[0] += 10.0
            return self.guest.run_sequence(seq_file, target, timeout_s, extra)

    def renew(why: str) -> Fresh:
        return Fresh(Timed(fleet.renew(why).runner), lambda seq: None)

    ex = Explorer(Timed(fleet.guests[0]), settings(tmp_path, max_findings=3), Choices(),
                  log=lambda _: None, renew=renew, clock=lambda: now[0])
    res = ex.run(tripping_seed(), parse_budget("60s"))
    assert len(res.findings) == 1 and res.findings[0].tries >= 3
    assert res.shrinking_s >= 10.0 * res.findings[0].tries      # each replay: 10 s
    assert res.elapsed_s > 60.0 + 10.0                           # ran past 60 s of wall
    assert len(res.runs) == 6, [r["at_s"] for r in res.runs]   # 6 sequences of 10 s each
    assert [r["at_s"] for r in res.runs] == [10.0 * (i + 1) for i in range(6)]
    summary = json.loads((tmp_path / "explore" / "summary.json").read_text())
    assert summary["shrinking_s"] == round(res.shrinking_s, 1) > 0


def test_a_hang_found_already_is_known_again_by_its_stacks_before_its_allowance(tmp_path):
    """317cbaa578: its fsync hang came back through every op that fsyncs, each waited out
    for the whole allowance (90 s under TCG) and a boot. With the hang's signature found,
    an op quiet for half the floor has its stacks read: that signature is the hang now;
    another waits out its allowance (the stacks read once early, not at every poll)."""
    from types import SimpleNamespace
    from suite.explore.crashes.stream import StreamingRunner
    stuck = ("--- pid 500 (python) state=D (disk sleep) wchan=cv_wait_common ---\n"
             "[<0>] cv_wait_common+0x16d/0x2e0 [spl]\n[<0>] zfs_fsync+0xc4/0x210 [zfs]\n"
             "[<0>] zpl_fsync+0xe2/0x190 [zfs]\n[<0>] __do_sys_msync+0x1c6/0x2c0\n")
    other = stuck.replace("zfs_fsync", "zfs_rezget").replace("zpl_fsync", "zfs_resume_fs")
    head = '{"event": "begin", "i": 0, "op": "pwrite"}\n{"event": "op", "i": 0, "ms": 10}\n' \
        '{"event": "begin", "i": 1, "op": "fdatasync"}\n'

    class Bg:
        lost = False

        def __init__(self):
            self.signals: list = []

        def poll(self, seconds):
            return False

        def result(self):
            return SimpleNamespace(rc=-9 if self.signals else None, stdout=head, stderr="")

        def signal(self, sig):
            self.signals.append(sig)

    class Guest:
        def __init__(self, stacks: str):
            self.stacks, self.reads = stacks, 0

        def run(self, cmd, timeout, check=True, log=True):
            self.reads += "D" in cmd or "stack" in cmd
            return SimpleNamespace(rc=0, stdout=self.stacks if self.reads < 3 else "",
                                   stderr="")

        def put(self, local, remote):
            pass

        def background(self, cmd, timeout, waited=False):
            return Bg()

        def answers(self):
            return True

    def run(stacks: str, found: bool):
        guest = Guest(stacks)
        engine = SimpleNamespace(guest=guest, scale=2.0, command=lambda *a: "ENGINE")
        pace = Pace(scale=2.0)
        if found:
            pace.found_hangs.add(Trip("hang", "", None, None,
                                      tuple(stuck.splitlines())).signature())
        ticks = iter(range(0, 10000, 7))
        f = tmp_path / "explore-1-0001-s0.seq.json"
        f.write_text("{}")
        r = StreamingRunner(engine, pace, clock=lambda: float(next(ticks))).run_sequence(
            f, "/x", 1000)
        return r.trip, guest.reads
    trip, reads = run(stuck, found=True)
    assert trip.kind == "hang" and trip.op_kind == "fdatasync"
    assert trip.signature() == ("hang", "zfs_fsync", "zpl_fsync")
    quiet = int(trip.headline.split("no progress for ")[1].split("s")[0])
    assert 15 < quiet < 30, trip.headline            # half the floor (15 s x 2), not 30
    trip, reads = run(other, found=True)             # another hang: its whole allowance
    assert int(trip.headline.split("no progress for ")[1].split("s")[0]) > 30
    assert reads == 3                      # once early, once at the hang, once after the kill
    trip, reads = run(stuck, found=False)            # nothing found yet: no early read
    assert int(trip.headline.split("no progress for ")[1].split("s")[0]) > 30 and reads == 2


def test_the_explorer_tells_its_runners_pace_of_each_hang_it_finds(tmp_path: Path):
    from types import SimpleNamespace
    from suite.explore.judge import Verdict
    pace = Pace()
    runner = SimpleNamespace(pace=pace, run_sequence=None)
    ex = Explorer(runner, settings(tmp_path), Choices(), log=lambda _: None)
    hang = Trip("hang", "no progress", 1, "fsync", ("[<0>] zfs_fsync+0x1/0x2 [zfs]",))
    v = Verdict("failed", 1, "hang", "no progress", None, trip=hang)
    ex.note_hang(v, hang.signature())
    panic = Trip("kernel:spl_panic", "VERIFY", 1, "fsync", ())
    ex.note_hang(Verdict("failed", 1, "kernel:spl_panic", "x", None, trip=panic),
                 panic.signature())
    assert pace.found_hangs == {hang.signature()}


def test_another_failure_met_while_shrinking_is_kept_aside(tmp_path: Path):
    """Shrinking keeps a candidate only if it fails the same way; one that fails
    otherwise (30582e2f4c: crash-lost after a power cut, while an oops was shrunk) is
    kept aside, each signature once, its candidate saved to replay."""
    class Other(FakeKernel):
        def run_sequence(self, seq_file, target, timeout_s, extra=()):
            seq = json.loads(seq_file.read_text())
            kinds = [o["op"] for o in seq["ops"]]
            if "evict" in kinds and "truncate" not in kinds and not self.dead:
                i = kinds.index("evict")
                lines = [ok_line(j, kinds[j]) for j in range(i)]
                bad = {"event": "op", "i": i, "op": "evict", "ok": False, "outcome": "failed",
                       "kind": "wrong-bytes", "why": "evict: 1 wrong byte", "ms": 1.0}
                done = {"event": "explore-done", "ok": False, "failed_at": i,
                        "kind": "wrong-bytes", "why": "evict: 1 wrong byte"}
                return RunOutput([*lines, bad, done], 1, "")
            return super().run_sequence(seq_file, target, timeout_s, extra)

    fleet = Fleet()
    fleet.guests = [Other(0, fleet.log)]

    def renew(why: str) -> Fresh:
        fleet.renew(why)
        fleet.guests[-1] = Other(len(fleet.guests) - 1, fleet.log)
        return Fresh(fleet.guests[-1], lambda seq: None)

    ex = Explorer(fleet.guests[0], settings(tmp_path, max_findings=1), Choices(),
                  log=lambda _: None, renew=renew)
    res = ex.run(tripping_seed(), parse_budget("1x"))
    assert res.findings and res.findings[0].kind == "kernel:spl_panic"
    assert [a["kind"] for a in res.aside] == ["wrong-bytes"], res.aside
    saved = Path(res.aside[0]["json"])
    assert saved.exists() and "evict" in saved.read_text()
    summary = json.loads((tmp_path / "explore" / "summary.json").read_text())
    assert summary["aside"][0]["signature"] == res.aside[0]["signature"]


def test_a_pin_panic_through_the_series_async_path_is_not_the_upstream_finding():
    """dc643dc204 and 30582e2f4c, 2026-12-07: a libaio O_DIRECT write cut by
    RLIMIT_FSIZE on the series' async path printed the very PANIC line of the upstream
    pin-count findings (zfs_uio_pin_user_pages, inlined) and was named the io_uring
    quota finding; it is the series' own pin-overflow-rlimit. Stock's panic (through
    zfs_write) and the series head's npages check stay the upstream findings'."""
    from suite.explore.crashes.avoid import known_report
    from suite.report import upstream
    found = upstream.load()
    series = Trip("kernel:spl_panic", "VERIFY0(len) failed (-524288)", 36, "pwrite", (
        "VERIFY0(len) failed (-524288)",
        "[  411.317732] PANIC at zfs_uio.c:664:zfs_uio_pin_user_pages()", "Call Trace:",
        "[  411.319326]  spl_panic+0xf0/0x108 [spl]",
        "[  411.319530]  zfs_uio_get_dio_pages_alloc+0x648/0x8a0 [zfs]",
        "[  411.320427]  zfs_dio_pin_pages+0xe/0x20 [zfs]",
        "[  411.320957]  zpl_async_dio_queue+0x4bd/0x850 [zfs]"))
    assert known_report(series, "6.1.0-57-amd64", found) is None
    stock = Trip("kernel:spl_panic", "VERIFY0(len) failed (-1048576)", 1, "pwrite", (
        "VERIFY0(len) failed (-1048576)",
        "[   47.2] PANIC at zfs_uio.c:200:zfs_uio_pin_user_pages()", "Call Trace:",
        "[   47.3]  spl_panic+0xf0/0x108 [spl]",
        "[   47.3]  zfs_uio_pin_user_pages+0x1/0x2 [zfs]",
        "[   47.3]  zfs_uio_get_dio_pages_alloc+0x1/0x2 [zfs]",
        "[   47.3]  zfs_write+0x1/0x2 [zfs]"))
    assert known_report(stock, "6.1.0-57-amd64", found).id.endswith("pin-mismatch")
    head = Trip("kernel:spl_panic", "VERIFY3S(uio->uio_dio.npages, ==, npages) failed "
                "(192 == 224)", 1, "pwrite", ("VERIFY3S(uio->uio_dio.npages, ==, npages) "
                                              "failed (192 == 224)",
                                              "[ 9.1]  zpl_async_dio_queue+0x1/0x2 [zfs]"))
    assert known_report(head, "6.1.0-57-amd64", found).id == \
        "io-uring-dio-write-past-quota-pin-mismatch"


def test_a_hung_task_report_is_signed_and_judged_by_every_blocked_task():
    """The kernel names one blocked task per report, whichever it saw first (async-dio
    8e1187c520, 2026-12-07: a kworker in zpl_writepages, then the read's completion and
    the rollback): the trip keeps the stacks of every task in D state, its signature is
    theirs whatever the order, and the finding names the deadlock's two sides as a
    case's after-case judge would (``D-state``)."""
    from suite.explore.finding import Finding as ExploreFinding
    from suite.explore.judge import Verdict
    from suite.explore.ops import Sequence
    tasks = {
        "kworker": ("--- pid 26 (kworker/u4:2) state=D wchan=rrw_enter_read_impl ---",
                    "[<0>] rrw_enter_read_impl+0x4c/0x160 [zfs]",
                    "[<0>] zpl_writepages+0x6e/0x190 [zfs]"),
        "read": ("--- pid 1924 (zpl_async_read_) state=D wchan=rrw_enter_read_impl ---",
                 "[<0>] rrw_enter_read_impl+0x4c/0x160 [zfs]",
                 "[<0>] zpl_async_read_task+0x108/0x160 [zfs]"),
        "rollback": ("--- pid 1934 (zfs) state=D wchan=cv_wait_common ---",
                     "[<0>] cv_wait_common+0x16d/0x2e0 [spl]",
                     "[<0>] zfsvfs_teardown+0xd6/0x530 [zfs]")}
    def trip(first: str, order: tuple[str, ...]) -> Trip:
        head = Finding("hung_task", "error", f"[ 494.4] INFO: task {first} blocked for more "
                       "than 120 seconds.", 1, ("Not tainted",))
        return kernel_trip(head, (11, "held_read"), 130.0,
                           "\n".join(ln for k in order for ln in tasks[k]))
    a = trip("kworker/u4:2:26", ("kworker", "read", "rollback"))
    b = trip("zpl_async_read_:1924", ("rollback", "read", "kworker"))
    assert a.blocked() and a.signature() == b.signature()
    assert {"zfsvfs_teardown", "zpl_async_read_task"} <= set(a.signature())
    no_stacks = kernel_trip(Finding("hung_task", "error", "INFO: task x:1 blocked for more "
                                    "than 120 seconds.", 1, STACK), (1, "pwrite"))
    assert not no_stacks.blocked() and no_stacks.signature()[1].startswith("INFO: task")
    v = Verdict(False, kind="kernel:hung_task", failed_at=11, why=a.headline, trip=a)
    seq = Sequence(seed=5, ops=())
    f = ExploreFinding(0, seq, v, seq, v, True, 11, False, Path("m.json"), Path("m.txt"), "")
    names, funcs = f.stuck()
    assert "1934 (zfs)" in names and {"zfsvfs_teardown", "zpl_async_read_task"} <= set(funcs)


def test_a_hung_task_report_during_a_sequence_keeps_the_blocked_tasks_stacks(tmp_path: Path):
    """The stacks are read while the tasks are still blocked, before the command is
    stopped; any other report keeps its own lines."""
    lines = [{"event": "begin", "i": 0, "op": "held_read"}]
    stacks = ("--- pid 1934 (zfs) state=D wchan=cv_wait_common ---\n"
              "[<0>] zfsvfs_teardown+0xd6/0x530 [zfs]\n")

    class Reads(_Guest):
        ran: list[str] = []

        def run(self, cmd, timeout=30.0, check=True, log=True):
            self.ran.append(cmd)
            return _Result(stacks, 0)
    hung = Finding("hung_task", "error", "[ 494.4] INFO: task kworker/u4:2:26 blocked for "
                   "more than 120 seconds.", 3, ("Not tainted",))
    for report, keeps in ((hung, True), (WARN, False)):
        guest = Reads(lines, False)
        guest.ran = []
        out = _run_reported(tmp_path, guest, report)
        assert out.trip is not None and out.trip.blocked() == keeps
        assert bool(guest.ran) == keeps and guest.bg.signals[:1] == ["TERM"]
        if keeps:
            assert out.trip.signature() == ("kernel:hung_task", "zfsvfs_teardown")
