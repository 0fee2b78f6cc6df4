"""``explore-run`` in the guest, watched op by op.

The engine prints ``begin`` before each op and ``op`` after it, flushed; this
runner reads them as they come (the command runs in the background and is
polled), so when the run is cut short the op in flight is known. Three ways a
run is cut short become a :class:`~.trip.Trip` in the run's output, not an
exception:

- the kernel reports a dead thread (the guest's tripwire: a failed VERIFY, a
  PANIC, an Oops, a BUG): the report's lines from the case's console;
- the kernel reports anything else (a WARNING, KASAN, KFENCE, UBSAN, slab
  corruption, lockdep, a hung task: every kind of ``suite.vm.console``, less its
  allow-list): the command is stopped there, the op in flight (or the op that
  just ended) named: a Direct I/O page-reference bug shows first as one WARNING
  and then as corruption somewhere else;
- the guest goes away (qemu exits, SSH dies, no heartbeat);
- no progress (:mod:`.pace`): the stacks of the engine's tasks and of every
  task in D state are kept, the command is killed, and the guest is kept only
  if nothing is left in D state and it still answers.

A guest that tripped is not fit: the session asks for a fresh one
(:mod:`.fresh`) before it runs anything else.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

from suite.casekit.engine import REMOTE_DIR, parse_lines, upload
from suite.errors import GuestError, KernelTripped
from suite.explore.crashes.pace import Pace, Progress
from suite.explore.crashes.trip import DSTATE_MARK, InFlight, Trip, kernel_trip
from suite.explore.session import RunOutput
from suite.guest.evidence import DSTATE_SCRIPT
from suite.guest.lifecycle import TRIP_KINDS
from suite.signatures import frames, untimed
from suite.vm.console import CONTEXT

POLL_S = 1.0
# How long (x the accelerator's scale) a report's title waits for its call trace: under
# TCG the kernel prints a report line by line, and one poll of the console can carry the
# title alone. Signed without its frames, a repeat was taken for a new finding and
# shrunk again (2026-12-07).
TRACE_WAIT_S = 5.0
MAX_OTHERS = 4          # more reports of one stop a trip carries (each may wait for its trace)
# The engine's tasks (the resident server's forked children run its code): state,
# where each waits, its kernel stack.
ENGINE_STACKS = r"""
for p in $(pgrep -f 'suite[.]ioengine'); do
  for t in /proc/$p/task/*; do
    st=$(sed -n 's/^State:\s*//p' "$t/status" 2>/dev/null)
    echo "--- pid ${t##*/} ($(cat "$t/comm" 2>/dev/null)) state=$st wchan=$(cat "$t/wchan" 2>/dev/null) ---"
    cat "$t/stack" 2>/dev/null
  done
done
true
"""
Console = Callable[[], list[Any]]       # the case's console findings so far (CaseWatch.seen)


def first_report(said: list[Any]) -> Any:
    """The report that names a trip: a panic, else one of a dead thread (what ended
    the run: :data:`TRIP_KINDS`), else the first the kernel printed."""
    for pick in (lambda f: getattr(f, "severity", "") == "fatal",
                 lambda f: getattr(f, "kind", "") in TRIP_KINDS, lambda f: True):
        found = next((f for f in said if pick(f)), None)
        if found is not None:
            return found
    raise ValueError("no kernel report")


def traced(report: Any) -> bool:
    """The console carried ``report``'s call trace (a frame), or as many lines after it
    as a report keeps (``suite.vm.console.CONTEXT``)."""
    context = tuple(getattr(report, "context", ()))
    return len(context) >= CONTEXT or bool(frames(context))


def raised_in(lines: list[dict[str, Any]], report: Any) -> tuple[int | None, str]:
    """(index, kind) of the op that raised a kernel report: the op whose line carries
    it (the engine's own read of the kernel log, ``kmsg``); else the op in flight (the
    report stopped it), else the last op that ended."""
    said = untimed(str(getattr(report, "line", "")))
    for ln in lines:
        if ln.get("event") == "op" and isinstance(ln.get("i"), int) and \
                any(k and (k in said or said in k) for k in ln.get("kmsg") or ()):
            return ln["i"], str(ln.get("op", ""))
    flight = InFlight.of(lines)
    op = flight.op()
    if op[0] is None and flight.done:
        last = max(flight.done)
        op = (last, flight.begun.get(last, ""))
    return op


class StreamingRunner:
    """Runs sequences through ``engine`` (the case's ``EngineRunner``), on the
    session's :class:`Pace`; ``console`` gives the case's console findings (for a
    trip's report lines); ``evidence`` is where a hang's stacks go."""

    def __init__(self, engine: Any, pace: Pace | None = None, console: Console | None = None,
                 evidence: Path | None = None, clock: Callable[[], float] = time.monotonic,
                 on_cut: Callable[[], None] | None = None, engine_extra: Iterable[str] = (),
                 sleep: Callable[[float], None] = time.sleep):
        self.engine_extra = tuple(engine_extra)     # more explore-run arguments (a self-check)
        self.engine = engine
        self.on_cut = on_cut        # cuts the guest's power (suite/explore/crashes/power.py)
        self.pace = pace or Pace(scale=engine.scale)
        self.console, self.evidence, self.clock = console, evidence, clock
        self.sleep = sleep

    def run_sequence(self, seq_file: Path, target: str, timeout_s: float,
                     extra: Iterable[str] = ()) -> RunOutput:
        guest, scale = self.engine.guest, self.engine.scale
        out = seq_file.with_name(seq_file.name.replace(".seq.json", ".results.jsonl"))
        seen_before = len(self.console()) if self.console else 0
        t0 = self.clock()
        try:
            upload(guest, seq_file, f"{REMOTE_DIR}/{seq_file.name}", scale)
            # A guest of its own: eviction may drop its whole clean page cache.
            bg = guest.background(self.engine.command(
                "explore-run", f"{REMOTE_DIR}/{seq_file.name}", "--file", target,
                "--drop-caches", *self.engine_extra, *extra),
                timeout=30 * scale, waited=True)
        except GuestError as e:
            return self._tripped(e, [], out, seen_before, t0)
        progress = Progress(self.pace, t0)
        deadline = t0 + timeout_s * scale
        lines: list[dict[str, Any]] = []
        try:
            while not bg.poll(POLL_S):
                lines = parse_lines(bg.result().stdout)
                said = self._reported(seen_before)
                if said:
                    return self._reported_trip(bg, said, out, t0, seen_before)
                cut = next((ln for ln in lines if ln.get("event") == "power-cut"), None)
                if cut is not None and self.on_cut is not None:
                    out.write_text(bg.result().stdout)
                    self.on_cut()           # at once: its writes are still in flight
                    return RunOutput(lines, None, "", cut=cut)
                now = self.clock()
                progress.see(lines, now)
                quiet, stacks = progress.stalled(now), ""
                if quiet is None and progress.peek_due(now):
                    stacks = self._stacks()
                    probe = Trip("hang", "", None, None, tuple(stacks.splitlines()))
                    if probe.signature() in self.pace.found_hangs:    # that hang again
                        quiet = now - progress.last_line_at
                if quiet is not None or now > deadline:
                    trip = self._hang(bg, lines, quiet if quiet is not None else now - t0,
                                      seq_file.name, t0, stacks)
                    r = bg.result()             # what it printed before it was killed
                    out.write_text(r.stdout)
                    return RunOutput(parse_lines(r.stdout), None, r.stderr, trip)
        except GuestError as e:
            r = bg.result()
            return self._tripped(e, parse_lines(r.stdout), out, seen_before, t0, r.stdout)
        r = bg.result()
        out.write_text(r.stdout)
        lines = parse_lines(r.stdout)
        progress.see(lines, self.clock())
        said = self._reported(seen_before)
        if said:                # raised by the last op, seen once the command ended
            return self._reported_trip(bg, said, out, t0, seen_before)
        if bg.lost:             # the channel closed with no status: a guest gone, or a kill
            if not guest.answers():
                return self._tripped(GuestError("the guest went away while the sequence "
                                                "ran"), lines, out, seen_before, t0, r.stdout)
        return RunOutput(lines, r.rc, r.stderr)

    def _reported(self, seen_before: int) -> list[Any]:
        """The kernel reports the console showed since the run began."""
        return list((self.console() if self.console else [])[seen_before:])

    def _reported_trip(self, bg: Any, said: list[Any], out: Path, t0: float,
                       seen_before: int) -> RunOutput:
        """The kernel reported something while the sequence ran: stop it there (a
        kernel that warned is no longer the one the model describes) and name the
        op in flight, else the last op that ended; the guest is replaced (a
        lockdep report turns lockdep off for the rest of its boot, a WARNING taints)."""
        report = first_report(said)
        # A hung-task report names one blocked task, whichever the kernel saw first:
        # the stacks of every task in D state, read before the command is stopped, are
        # the deadlock's (async-dio 8e1187c520: the rollback in zfsvfs_teardown and the
        # read's completion in zpl_async_read_task, reported after a kworker).
        stacks = self._stacks() if report.kind == "hung_task" else ""
        if DSTATE_MARK not in stacks:
            report = self._traced(report, seen_before)
        self._stop(bg)
        r = bg.result()
        out.write_text(r.stdout)
        lines = parse_lines(r.stdout)
        secs = self.clock() - t0
        trip = kernel_trip(report, raised_in(lines, report), secs, stacks)
        return RunOutput(lines, None, r.stderr, self._with_others(trip, report, lines,
                                                                  seen_before, secs))

    def _with_others(self, trip: Trip, report: Any, lines: list[dict[str, Any]],
                     seen_before: int, secs: float) -> Trip:
        """``trip`` carrying the kernel's other reports of the stop (read after the
        command stopped: one printed just after the first is among them), each traced
        and named by the op that raised it: the session names a finding by the first
        no known finding claims."""
        others = [f for f in self._reported(seen_before) if f.line != report.line]
        also = tuple(kernel_trip(f, raised_in(lines, f), secs)
                     for f in (self._traced(f, seen_before) for f in others[:MAX_OTHERS]))
        return replace(trip, also=also) if also else trip

    def _traced(self, report: Any, seen_before: int) -> Any:
        """``report`` once the console carries its call trace (:func:`traced`), or as it
        is after :data:`TRACE_WAIT_S` (scaled): a report with no trace at all."""
        deadline = self.clock() + TRACE_WAIT_S * self.engine.scale
        while not traced(report) and self.clock() < deadline:
            self.sleep(POLL_S)
            report = next((f for f in self._reported(seen_before) if f.line == report.line),
                          report)
        return report

    def _stop(self, bg: Any) -> None:
        """End the command: TERM, then KILL; a guest that no longer answers is left."""
        scale = self.engine.scale
        for sig in ("TERM", "KILL"):
            if self._ended(bg):
                return
            try:
                bg.signal(sig)
                bg.poll(5 * scale)
            except GuestError:
                return

    def _tripped(self, e: GuestError, lines: list[dict[str, Any]], out: Path, seen_before: int,
                 t0: float, stdout: str = "") -> RunOutput:
        """The run's output when the kernel or the guest cut it short."""
        out.write_text(stdout)
        op = InFlight.of(lines).op()
        secs = self.clock() - t0
        report = self._reported(seen_before)
        if report:
            first = first_report(report)
            trip = self._with_others(kernel_trip(first, op, secs), first, lines,
                                     seen_before, secs)
        elif isinstance(e, KernelTripped):
            trip = Trip("kernel:trip", e.what.split(" while running:")[0][:300], op[0], op[1],
                        (e.what,), False, secs)
        else:
            trip = Trip("guest-lost", e.what[:300], op[0], op[1], (e.what,), False, secs)
        return RunOutput(lines, None, str(e), trip)

    def _stacks(self) -> str:
        """The engine's tasks' stacks and those of every task in D state."""
        try:
            return self.engine.guest.run(ENGINE_STACKS + DSTATE_SCRIPT,
                                         timeout=30 * self.engine.scale, check=False,
                                         log=False).stdout
        except GuestError:
            return ""

    def _hang(self, bg: Any, lines: list[dict[str, Any]], quiet: float, name: str,
              t0: float, stacks: str = "") -> Trip:
        """No progress: keep the stacks (``stacks``: read already), kill the command,
        see what is left."""
        guest, scale = self.engine.guest, self.engine.scale
        op, kind = InFlight.of(lines).op()
        stacks = stacks or self._stacks()
        self._stop(bg)
        fit = False
        try:
            left = guest.run(DSTATE_SCRIPT, timeout=30 * scale, check=False, log=False).stdout
            fit = self._ended(bg) and "state=D" not in left
        except GuestError:
            pass
        where = ""
        if self.evidence is not None:
            d = self.evidence / name.replace(".seq.json", "")
            d.mkdir(parents=True, exist_ok=True)
            (d / "stacks.txt").write_text(stacks)
            where = str(d)
        what = f"{kind or 'setup'}" if op is not None else "the setup"
        head = (f"no progress for {quiet:.0f}s in op {op} ({what}); allowance "
                f"{self.pace.allowance_s(op is not None):.0f}s (x{self.pace.factor:g} the "
                f"slowest op, {self.pace.slowest_s:.1f}s)")
        return Trip("hang", head, op, kind, tuple(stacks.splitlines()), fit,
                    self.clock() - t0, where)

    @staticmethod
    def _ended(bg: Any) -> bool:
        """The command is gone: it exited, or its channel closed with it."""
        return bg.result().rc is not None or bg.lost
