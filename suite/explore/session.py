"""What the ``explore`` case runs: generate sequence k (its seed derived from
the master seed and k), write it to the case folder, run it in the guest,
judge it; on a failure shrink it by replaying candidates through the same
guest command (each on a fresh file, or a fresh zvol: :mod:`.targets`), save the smallest as
``explore/minimal-<seed>.json`` and ``.txt``, replay that once more to
confirm, and return the findings.

Every run goes through ``python -m suite.ioengine explore-run
/tmp/ozfs-engine/<name>.seq.json --file <dataset>/<name>.bin`` (a zvol: ``--file
/dev/zdN --blockdev --scratch <dataset>/<name> --zvol <its name>``), so the case's
``commands.log`` holds each of them and its reproducer (``repro/repro.sh``)
replays them; the sequences themselves are kept as ``engine/<name>.seq.json``
with the engine's output beside them (``<name>.results.jsonl``).

Under :class:`Conditions` the engine also gets the dataset and the build's
``zfs``/``zpool`` (:class:`GuestZfs`, ``--zfs-dataset ...``), and the generator
adds snapshots, rollbacks and ``zpool sync`` to what it picks.

Ops whose buffer races may leave ``dio_verify_wr``/``dio_verify_rd`` ereports
with nothing wrong (``Step.may_leave``): before a sequence with such ops runs,
they are declared for the case's after-case judges (``Conditions.declare``), so
those judges still call a checksum error, a data error or anything else a finding.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from suite.casekit.engine import parse_lines
from suite.errors import SuiteError
from suite.explore.crashes.avoid import (known_failure, known_hang, known_report, report_op,
                                         unclaimed)
from suite.explore.crashes.trip import Trip, signed_as
from suite.explore.gen import Choices, generate, sequence_seed
from suite.explore.judge import Verdict, judge, report_text, trip_verdict
from suite.explore.failure import cause, direct, named_as, same_failure, signature
from suite.explore.cover import Cover
from suite.explore.resume import (carried, kernel_limit_claims, original, past_known,
                                  past_known_hang, sequences_run)
from suite.explore.reach import MOVERS, run_reach
from suite.explore.timing import engine_timing
from suite.explore.ops import ZFS_OPS, Sequence
from suite.explore.shrink import DEFAULT_TRIES, shrink
from suite.explore.targets import ZvolMaker, make_targets
from suite.explore.budget import Budget
from suite.explore.finding import Aside, ExploreResult, Finding
from suite.explore.conditions import Conditions, GuestZfs


@dataclass
class RunOutput:
    lines: list[dict[str, Any]]
    rc: int | None = None
    stderr: str = ""
    trip: Trip | None = None        # the kernel, a hang or a lost guest cut the run short
    cut: dict[str, Any] | None = None   # the power_cut op's line: the power was cut there


class SequenceRunner(Protocol):
    def run_sequence(self, seq_file: Path, target: str, timeout_s: float,
                     extra: Iterable[str] = ()) -> RunOutput: ...


class LocalRunner:
    """``explore-run`` on this machine: the self-tests, a look without a guest."""

    def __init__(self, *extra: str) -> None:
        self.root = Path(__file__).resolve().parents[2]
        self.extra = list(extra)        # more explore-run arguments (a self-test hook)

    def run_sequence(self, seq_file: Path, target: str, timeout_s: float,
                     extra: Iterable[str] = ()) -> RunOutput:
        p = subprocess.run([sys.executable, "-m", "suite.ioengine", "explore-run", str(seq_file),
                            "--file", target, *self.extra, *extra], cwd=self.root,
                           capture_output=True, text=True, timeout=timeout_s)
        out = seq_file.with_name(seq_file.name.replace(".seq.json", ".results.jsonl"))
        out.write_text(p.stdout)
        return RunOutput(parse_lines(p.stdout), p.returncode, p.stderr)


@dataclass
class Settings:
    workdir: str                    # where the targets go: the dataset's mountpoint
    seq_dir: Path                   # every sequence run: <name>.seq.json, .results.jsonl
    out_dir: Path                   # minimal-<seed>.json/.txt, summary.json
    n_ops: int = 40
    file_size_max: int = 3 << 20
    target: str = "file"            # file | zvol: a fresh one per run (suite/explore/targets.py)
    seq_timeout_s: float = 180.0    # per run, before the runner's scale
    shrink_tries: int = DEFAULT_TRIES
    shrink_s: float = 1200.0        # wall clock for shrinking one finding
    # Distinct findings to collect before stopping. Past the first, exploring goes on
    # (as syzkaller does after a crash): a failure of a signature already found is
    # counted, not shrunk again, so a frequent finding (an upstream bug) does not hide
    # the next one behind it.
    max_findings: int = 1
    # Sequences to run in turn instead of generated ones (--explore-replay: a minimal
    # sequence found earlier, replayed as it is, power cuts included).
    sequences: tuple[Sequence, ...] = ()
    # Failures already found elsewhere (suite/explore/known.py: the base's or
    # master's runs), by signature: counted and named, never shrunk.
    known: dict[tuple[str, ...], Any] = field(default_factory=dict)
    # The guest's kernel release and the upstream findings (patches/upstream/
    # findings.toml): a hang that is a known finding on this kernel makes explore
    # avoid its op from then on (suite/explore/crashes/avoid.py).
    kernel_release: str = ""
    upstream: list[Any] = field(default_factory=list)
    # Run only sequences that reach a cell of the reach table no run has executed yet,
    # and stop once every cell was executed (:class:`Cover`).
    cover: bool = False


Declare = Callable[[str, set[str]], None]
@dataclass
class Fresh:
    """What a session runs on after a fresh guest replaced one that tripped: its
    runner, what puts a sequence's conditions in place, what makes its zvols."""
    runner: SequenceRunner
    configure: Callable[[Sequence], None]
    zvols: ZvolMaker | None = None


Renew = Callable[[str], Fresh]      # renew(why): boot a fresh guest, pool and dataset
MAX_NO_RESULTS = 3                  # runs in a row that proved nothing, each on a fresh guest
POWER_WAIT_S = 900.0                # how long a power_cut op waits for the cut (the boot is after)


class Power(Protocol):
    """Recovery after a power cut (``suite/explore/crashes/power.py``)."""
    def recover(self, line: dict[str, Any], n_ops: int, name: str,
                seq_dir: Path) -> tuple[Fresh, list[dict[str, Any]]]: ...


class Explorer:
    """One exploration: its runner, where its files go, what it may pick, how a
    sequence's conditions are put in place, where what its ops may leave is
    declared (``declare(why, ereports)``), the guest's ZFS commands for the ZFS
    ops (``zfs``; both default to what :class:`Conditions` knows), what makes
    the zvols of a ``zvol`` target (``zvols``: it is asked first which properties
    a zvol of the build has, and refuses a build that makes none), and every
    run it made."""

    def __init__(self, runner: SequenceRunner, settings: Settings, choices: Choices,
                 configure: Callable[[Sequence], None] = lambda seq: None,
                 clock: Callable[[], float] = time.monotonic, log: Callable[[str], None] = print,
                 declare: Declare | None = None, zfs: GuestZfs | None = None,
                 zvols: ZvolMaker | None = None, renew: Renew | None = None,
                 power: Power | None = None):
        self.runner, self.s = runner, settings
        self.power = power          # None: no power cut is drawn
        self.configure, self.clock, self.log = configure, clock, log
        self.renew = renew
        self.dead = ""              # why the guest is gone, when nothing can renew it
        self.fresh = True           # nothing ran on this guest since it booted
        self.boots = 0
        if isinstance(configure, Conditions):
            declare = declare or configure.declare
            zfs = zfs or configure.guest_zfs()
        self.declare, self.zfs = declare, zfs
        if choices.zfs_ops and zfs is None:
            raise ValueError("choices.zfs_ops asks for snapshots and rollbacks, but the "
                             "session has no ZFS commands for the guest (give zfs=GuestZfs)")
        wanted = choices.zfs_ops            # None: as the session can
        self.choices = replace(choices, zfs_ops=(zfs is not None) if wanted is None else wanted)
        if power is None:
            self.choices = replace(self.choices,
                                   ops=tuple(o for o in self.choices.ops if o != "power_cut"))
        self.engine_args = zfs.engine_args() if zfs is not None else []
        self.declared: set[str] = set()
        self.targets = make_targets(settings.target, settings.workdir, zvols, log)
        self.choices = self.targets.choices(self.choices)
        self.replays = 0
        self.aside = Aside(settings.out_dir)    # other failures its shrinking met
        self.last_lines: list[dict[str, Any]] = []
        self.last: dict[str, Verdict] = {}          # sequence key -> its latest verdict
        self.last_timing: dict[str, float] = {}
        self.shrinking_s = 0.0      # spent shrinking and confirming: not the budget's
        for d in (settings.seq_dir, settings.out_dir):
            d.mkdir(parents=True, exist_ok=True)

    def replay(self, seq: Sequence, label: str) -> Verdict:
        """Run ``seq`` once, on a file (or zvol) of its own, under its conditions."""
        if seq.target != self.s.target:
            raise ValueError(f"sequence {seq.seed} is for a {seq.target} target and this "
                             f"session explores a {self.s.target}: give Settings(target="
                             f"{seq.target!r})")
        if self.dead:
            return Verdict("no-result", None, "no-result", f"no guest to run it: {self.dead}")
        self.replays += 1
        name = f"explore-{seq.seed}-{self.replays:04d}-{label}"
        seq_file = self.s.seq_dir / f"{name}.seq.json"
        seq_file.write_text(seq.to_json())
        self.configure(self.targets.conditions(seq))
        self.declare_leaves(seq)
        run = self.targets.prepare(seq, name)
        # A zvol's run gets the ZFS commands only for its txg_syncs: the sequences
        # without one run as they always did.
        zfs_ops = any(o.op in ZFS_OPS for o in seq.ops)
        extra = [*run.args, *(self.engine_args if run.zvol is None or zfs_ops else [])]
        if self.power is not None and any(o.op == "power_cut" for o in seq.ops):
            extra += ["--power-cut-wait", str(POWER_WAIT_S)]
        t = self.clock()
        self.fresh = False
        out = self.runner.run_sequence(seq_file, run.path, self.s.seq_timeout_s, extra)
        if out.cut is not None and self.power is not None:
            out = self.after_power_cut(out, len(seq.ops), name)
        self.last_timing = engine_timing(out.lines, self.clock() - t)
        self.last_lines = out.lines
        v = judge(out.lines, len(seq.ops), out.rc, out.stderr) if out.trip is None \
            else trip_verdict(unclaimed(out.trip, self.s.kernel_release, self.s.upstream,
                                        self.s.known), out.lines)
        if out.trip is not None:
            self.log(f"explore: {name}: {out.trip.label()}")
        if out.trip is None or out.trip.guest_fit:      # the guest still holds its target
            self.targets.release(run, v)
        else:
            self.replace_guest(f"{name}: {out.trip.label()}")
        self.last[seq.key()] = v
        return v

    def after_power_cut(self, out: RunOutput, n_ops: int, name: str) -> RunOutput:
        """The power was cut in the run: recover on the guest booted after, go on there."""
        assert out.cut is not None and self.power is not None
        fresh, lines = self.power.recover(out.cut, n_ops, name, self.s.seq_dir)
        self.adopt(fresh)
        done = next((ln for ln in lines if ln.get("event") == "explore-done"), {})
        return RunOutput(out.lines + lines, 0 if done.get("ok") else 1, out.stderr)

    def adopt(self, fresh: Fresh) -> None:
        """Run from now on in the guest ``fresh`` is bound to."""
        self.runner, self.configure = fresh.runner, fresh.configure
        if isinstance(fresh.configure, Conditions):
            self.declare = fresh.configure.declare
            self.zfs = fresh.configure.guest_zfs()
            self.engine_args = self.zfs.engine_args() if self.zfs is not None else []
        self.declared = set()           # the new guest's judges know of nothing yet
        self.targets = make_targets(self.s.target, self.s.workdir, fresh.zvols, self.log)
        self.fresh, self.dead = True, ""

    def replace_guest(self, why: str) -> None:
        """A fresh guest, pool and dataset for the next run (``renew``); without one
        (none given, or none came up) the session ends, what it found kept (``dead``)."""
        if self.dead:
            return
        try:
            if self.renew is None:
                raise SuiteError("none can be booted here")
            self.adopt(self.renew(why))
            self.boots += 1
        except SuiteError as e:
            self.dead = f"{why}; no fresh guest: {e.what}"

    def declare_leaves(self, seq: Sequence) -> None:
        """Declare, before it runs, the ereports ``seq``'s ops may leave with
        nothing wrong (each once): a run that dies mid-op is covered too."""
        where: dict[str, int] = {}          # each ereport: the first op that may leave it
        for i, o in enumerate(seq.ops):
            for e in o.may_leave():
                where.setdefault(e, i)
        new = sorted(set(where) - self.declared)
        if not new or self.declare is None:
            return
        first = min(where[e] for e in new)
        self.declare(f"explore: a buffer changed in flight may fail Direct I/O checksum "
                     f"verification (seed {seq.seed} op {first}: {seq.ops[first].render()})",
                     set(new))
        self.declared.update(new)

    def investigate(self, k: int, seq: Sequence, v: Verdict) -> Finding:
        """Shrink a failing sequence (same kind of failure only), save and confirm it."""
        self.log(f"explore: sequence {k} (seed {seq.seed}) {v.line()}; shrinking")
        (self.s.out_dir / f"original-{seq.seed}.json").write_text(seq.to_json())
        began = self.clock()
        try:
            return self._investigate(k, seq, v, stop_at=began + self.s.shrink_s)
        finally:                # shrinking comes on top of the budget: its time is set apart
            self.shrinking_s += self.clock() - began

    def _investigate(self, k: int, seq: Sequence, v: Verdict, stop_at: float) -> Finding:

        def still_fails(c: Sequence) -> bool:
            r = self.replay(c, "shrink")
            same = same_failure(v, r)
            if r.failed and not same:       # another failure met on the way: kept aside
                self.aside.keep(c, r, signature(c, r))
            return same

        # A run the kernel cut short before its first op: no op may be needed at all.
        at = -1 if v.trip is not None and v.failed_at is None else v.failed_at
        res = shrink(seq, still_fails, self.s.shrink_tries, failed_at=at,
                     should_stop=lambda: self.clock() > stop_at or bool(self.dead))
        before = named_as(v, self.last.get(res.sequence.key(), v)) or v  # its last failing run
        if v.trip is not None and not self.fresh:
            self.replace_guest(f"to confirm seed {seq.seed}'s minimal sequence on a fresh guest")
        confirm = self.replay(res.sequence, "confirm")
        shown, unrun = named_as(v, confirm), confirm.state == "no-result" and bool(self.dead)
        confirmed, shown = shown is not None, shown or before
        stem = self.s.out_dir / f"minimal-{seq.seed}"
        json_path, txt_path = stem.with_suffix(".json"), stem.with_suffix(".txt")
        json_path.write_text(res.sequence.to_json())
        text = report_text(res.sequence, shown, original=seq, original_verdict=v,
                           confirmed=None if unrun else confirmed, tries=res.tries,
                           label=f"#{k}", dead=self.dead if unrun else "",
                           replay_file=json_path.name)
        if res.exhausted:
            text += f"(shrinking stopped at its limit: {self.s.shrink_tries} replays or " \
                    f"{self.s.shrink_s:.0f}s; smaller may exist)\n"
        text += "steps: " + ("; ".join(res.steps) or "none") + "\n"
        if v.trip is not None:
            text += (f"confirmed on a fresh guest ({self.boots} fresh guests so far)\n"
                     if confirmed else "")
        txt_path.write_text(text)
        return Finding(k, seq, v, res.sequence, shown, confirmed, res.tries, res.exhausted,
                       json_path, txt_path, text)

    def run(self, master_seed: int, budget: Budget) -> ExploreResult:
        result = ExploreResult(master_seed, str(budget), self.s.target)
        t0, k = self.clock(), 0
        found: dict[tuple[str, ...], int] = {}     # signature -> seed that first showed it
        cover = Cover.of(self.choices, self.s.target) if self.s.cover else None
        resume, resumes = None, 0       # the sequence again past a known finding's op
        last, origin = None, ()         # its ops' places in the generated sequence
        no_results = 0                  # in a row: a harness that proves nothing stops it
        while resume or budget.allows(sequences_run(result.runs), self.explored(t0)):
            if (self.s.sequences and k >= len(self.s.sequences)) or self.dead:
                break
            seq = resume or self.sequence(master_seed, k)
            origin = carried(last, seq, origin) if resume and last else tuple(range(len(seq.ops)))
            last = seq
            resumes, resume = (resumes + 1 if resume else 0), None
            if cover is not None and not resumes and not cover.admits(seq, result.runs):
                result.cover = cover.state(result.runs)
                if cover.done(result.runs):
                    break
                k += 1
                continue
            t = self.clock()
            v = self.replay(seq, f"s{k}")
            result.runs.append({"k": k, "seed": seq.seed, "resumed": resumes,
                                "state": v.state, "kind": v.kind,
                                "failed_at": v.failed_at, "ops": len(seq.ops),
                                "at": original(origin, v.failed_at),
                                "first_wrong_byte": v.first_wrong_byte,
                                "einval": len(v.einval), "unsupported": len(v.unsupported),
                                "refused": len(v.refused), "leaves": v.leaves,
                                "seconds": round(self.clock() - t, 2),
                                "engine": self.last_timing,
                                **run_reach(seq, self.last_lines),
                                "at_s": round(self.explored(t0), 2)})   # exploring time so far
            if v.state == "no-result":
                result.no_result.append((seq.seed, v))
                if self.renew is None or no_results >= MAX_NO_RESULTS:
                    break
                no_results += 1         # the harness proved nothing: a fresh guest, go on
                self.log(f"explore: sequence {k} (seed {seq.seed}) proved nothing "
                         f"({v.why[:160]}); a fresh guest, and on")
                self.replace_guest(f"seed {seq.seed} proved nothing: {v.why[:160]}")
                k += 1
                continue
            no_results = 0
            if v.trip is not None:
                result.trips.append({"k": k, "seed": seq.seed, **v.trip.to_dict(),
                                     "at": original(origin, v.trip.op)})
            failing_op = seq.ops[v.failed_at] if v.failed and v.failed_at is not None and \
                0 <= v.failed_at < len(seq.ops) else None
            failing = failing_op.op if failing_op is not None else None
            asked_direct = failing_op is None or direct(seq, failing_op)
            hang = known_hang(v.trip, self.s.kernel_release, self.s.upstream, asked_direct) \
                if v.trip is not None else None
            report = known_report(v.trip, self.s.kernel_release, self.s.upstream) \
                if v.trip is not None else None
            laid = cause(seq, v.failed_at, v.first_wrong_byte)
            upstream = known_failure(v.kind, failing, self.s.kernel_release, self.s.upstream,
                                     laid.op if laid is not None else None, asked_direct,
                                     v.why, seq.caller.get("kind", "")) \
                if v.trip is None else report
            if v.failed:        # a report cut before its trace is the one with its title
                sig = signature(seq, v)
                sig = signed_as(sig, [*found, *self.s.known]) or sig
                if hang is not None or report_op(v.trip, report):
                    known = hang or report
                    result.known += 1
                    result.runs[-1]["known"] = known.id
                    self.avoid(v.trip.op_kind, known, seq.seed, result,
                               does="hangs" if hang is not None else "raises its report")
                    if cover is not None:       # never drawn again: nothing will run it
                        cover.give_up(f"moved:{v.trip.op_kind}")
                    resume = past_known_hang(seq, v, v.trip.op_kind, resumes)
                    if resume:
                        self.log(f"explore: sequence {k} (seed {seq.seed}) run again without "
                                 f"{v.trip.op_kind} from op {v.failed_at} on")
                        continue
                elif upstream is not None or sig in self.s.known:
                    result.known += 1
                    name = upstream.id if upstream else self.s.known[sig].label()
                    result.runs[-1]["known"] = name
                    resume = past_known(seq, v, resumes, kernel_limit_claims(seq, upstream)) \
                        if upstream and v.trip is None else None
                    self.log(f"explore: sequence {k} (seed {seq.seed}) fails as a known "
                             f"finding: {name} ({v.kind} in {failing}); not shrunk" +
                             ("; run again without that op" if resume else ""))
                    if resume:
                        continue
                elif sig in found:
                    result.runs[-1]["repeat_of"] = found[sig]
                    self.log(f"explore: sequence {k} (seed {seq.seed}) fails as seed "
                             f"{found[sig]} did ({' '.join(sig)}): not shrunk again")
                    if self.avoid_found_hang(v, seq.seed, found[sig], result, cover):
                        resume = past_known_hang(seq, v, v.trip.op_kind, resumes)
                        if resume:
                            continue
                else:
                    found[sig] = seq.seed
                    self.note_hang(v, sig)
                    result.findings.append(self.investigate(k, seq, v))
                    if len(result.findings) >= self.s.max_findings:
                        break
                    self.avoid_found_hang(v, seq.seed, seq.seed, result, cover)
            k += 1
            self._save(result, t0)
        result.boots = self.boots
        if cover is not None:
            result.cover = cover.state(result.runs)
        self._save(result, t0)
        return result

    def explored(self, t0: float) -> float:
        """Seconds spent exploring since ``t0``: shrinking and confirming findings is not
        the budget's (a hang met early, shrunk for 20 minutes, must not end the run)."""
        return self.clock() - t0 - self.shrinking_s

    def sequence(self, master_seed: int, k: int) -> Sequence:
        """Sequence ``k``: the ``k``-th one given (``--explore-replay``), else generated."""
        if self.s.sequences:
            return self.s.sequences[k]
        return generate(sequence_seed(master_seed, k), self.s.n_ops, self.s.target,
                        self.s.file_size_max, self.choices)

    def note_hang(self, v: Verdict, sig: tuple[str, ...]) -> None:
        """A hang found: the runner's pace (shared by its fresh guests) recognises it
        again early, from its stacks (:mod:`.crashes.pace`); a runner without one
        (the self-tests' local runner) waits it out."""
        pace = getattr(self.runner, "pace", None)
        if v.trip is not None and v.trip.kind == "hang" and pace is not None:
            pace.found_hangs.add(sig)

    def avoid_found_hang(self, v: Verdict, seed: int, first: int, result: ExploreResult,
                         cover: Any) -> bool:
        """A hang in an op this run has found already (shrunk at seed ``first``): another
        costs a boot and says nothing new, so the op is generated no more, as for a
        known hang (syzkaller's disabled call). True when the op is avoided."""
        op = v.trip.op_kind if v.trip is not None and v.trip.kind == "hang" else None
        if not op or op not in self.choices.ops:
            return False
        self.avoid(op, None, seed, result, label=f"this run's finding (seed {first})")
        if cover is not None and op in MOVERS:      # never drawn again: nothing will run it
            cover.give_up(f"moved:{op}")
        return True

    def avoid(self, op: str, finding: Any, seed: int, result: ExploreResult,
              label: str = "", does: str = "hangs") -> None:
        """Generate no more ``op``: its hang (or, ``does``, its kernel report) is
        ``finding`` on this kernel (or, with ``label``, a finding of this run)."""
        if op not in self.choices.ops:
            return
        self.choices = replace(self.choices, ops=tuple(o for o in self.choices.ops if o != op))
        name = label or f"known upstream finding {finding.id}"
        why = f"{op} {does} on this kernel ({self.s.kernel_release or '?'}): {name}"
        result.avoided.append({"op": op, "seed": seed,
                               "finding": finding.id if finding is not None else label,
                               "why": why})
        self.log(f"explore: sequence seed {seed}: {why}; {op} avoided from now on "
                 f"(as --explore-avoid {op})")

    def _save(self, result: ExploreResult, t0: float) -> None:
        result.replays, result.elapsed_s = self.replays, self.clock() - t0
        result.shrinking_s = self.shrinking_s
        result.aside = self.aside.seen
        result.boots = self.boots
        (self.s.out_dir / "summary.json").write_text(json.dumps(result.summary(), indent=1,
                                                                default=str) + "\n")


def explore(runner: SequenceRunner, settings: Settings, master_seed: int, budget: Budget,
            choices: Choices | None = None,
            configure: Callable[[Sequence], None] = lambda seq: None,
            clock: Callable[[], float] = time.monotonic,
            log: Callable[[str], None] = print, declare: Declare | None = None,
            zfs: GuestZfs | None = None, zvols: ZvolMaker | None = None,
            renew: Renew | None = None, power: Power | None = None) -> ExploreResult:
    """Explore until the budget is spent or the findings asked for are made (and
    shrunk); ``renew`` boots a fresh guest after one the kernel took down."""
    return Explorer(runner, settings, choices or Choices(), configure, clock, log,
                    declare, zfs, zvols, renew, power).run(master_seed, budget)
