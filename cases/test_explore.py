"""Exploration (``-m explore`` only; the project's issue #22).

Seeded sequences of ops on one file of the case's dataset, after xfstests' fsx:
pread/pwrite and preadv/pwritev (sync, libaio, io_uring; O_DIRECT or buffered,
aligned or misaligned on purpose; buffers from the heap, fresh anonymous memory,
an offset inside a page, a shared file mapping, a huge page), mmap reads and
writes, truncate up and down, punch-hole and zero-range, copy_file_range,
fsync/fdatasync/syncfs, and a verify that reads the whole file through
O_DIRECT, buffered and mmap. Every read is checked against a byte model of the
file (``suite/ioengine/explore/``). Each sequence runs under its own dataset
properties (recordsize, compression, checksum, direct, sync, primarycache) and
module parameters (``zfs_dio_strict``, ``zfs_async_dio_enabled``, where the
build has them).

Property: every op of every sequence is right (a misaligned O_DIRECT request
may be refused with EINVAL; an op the filesystem lacks is recorded as
unsupported). A failing sequence is shrunk by replaying candidates in the guest
(``suite/explore/shrink.py``) and the case fails with the minimal sequence, one
op a line (``explore/minimal-<seed>.txt`` in the case folder). Options:
``--explore-seed N`` (the master seed), ``--explore-budget 15m|90s|20x`` and
``--explore-target file|zvol``: with ``zvol`` each sequence runs on a fresh
zvol under the case's dataset, made with its volblocksize, compression,
checksum, sync and primarycache (those a zvol of the build has), as a block
device, with ``zvol_dio_enabled`` varied where the build has it; only the ops
a block device can do (``suite/explore/gen.py`` ``BLOCK_OPS``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from suite.errors import SuiteError
from suite.explore.crashes.fresh import FreshGuests
from suite.explore.crashes.pace import Pace
from suite.explore.crashes.power import PowerCuts
from suite.explore.crashes.stream import StreamingRunner
from suite.explore import reach
from suite.explore.known import read_known
from suite.explore.ops import OP_KINDS, Sequence
from suite.explore.budget import Budget, parse_budget
from suite.explore.conditions import Conditions, dataset_props, prepare_guest
from suite.explore.session import Settings, explore
from suite.explore.targets import NoZvols, choices_for, settable
from suite.explore.zvol import GuestZvols
from suite.report import upstream

pytestmark = [pytest.mark.vm, pytest.mark.explore]

PER_SEQUENCE_S = 60.0           # a guess at one run under KVM, for an "Nx" budget's backstop
SHRINK_S = 1200.0               # default wall clock for shrinking a finding (--explore-shrink)
SETUP_S = 600.0                 # guest, pool and the first commands, before scaling


def conditions_row(seq: Sequence) -> str:
    """The finding's row: what it ran under (a manifest's ``rows`` regex matches it)."""
    return " ".join(f"{k}={v}" for k, v in sorted({**seq.params, **seq.props}.items()))


def shrink_s(config: pytest.Config) -> float:
    """Wall clock for shrinking one finding: --explore-shrink, else SHRINK_S."""
    return float(config.getoption("explore_shrink") or SHRINK_S)


def replayed(paths: list[str], target: str, has_param) -> tuple[Sequence, ...]:
    """The --explore-replay sequences, each with the module parameters the build has
    (as the corpus replays them); one for another target is refused."""
    seqs = []
    for p in paths:
        seq = Sequence.from_json(Path(p).read_text())
        if seq.target != target:
            pytest.fail(f"--explore-replay {p} runs on a {seq.target}: give --explore-target "
                        f"{seq.target}", pytrace=False)
        seqs.append(settable(seq, has_param))
    return tuple(seqs)


@pytest.fixture
def explore_budget(request: pytest.FixtureRequest, accel) -> Budget:
    """The --explore-budget, and a backstop that fits it (exploring and shrinking
    are wall clock; the backstop is scaled by the accelerator on top of this)."""
    budget = parse_budget(request.config.getoption("explore_budget"))
    wall = budget.explore_s(PER_SEQUENCE_S * accel.scale) + \
        shrink_s(request.config) * request.config.getoption("explore_findings")
    request.node.add_marker(pytest.mark.deadline(wall / accel.scale + SETUP_S), append=False)
    return budget


@pytest.mark.poisoned
def test_explore(request, zfs_guest, pool, engine, case_dir, symptom, explore_budget, guests,
                 zfs_build):
    """Generated sequences, each op checked; a failure shrunk and shown. A sequence
    that trips the kernel (a panic, a failed VERIFY, a hang, a lost guest) is a
    finding too: named by its kernel lines and the op in flight, shrunk on fresh
    guests, and exploring goes on on another."""
    seed = request.config.getoption("explore_seed")
    target = request.config.getoption("explore_target")
    zvols = GuestZvols(zfs_guest, pool, engine) if target == "zvol" else None
    try:
        have = zvols.properties() if zvols else dataset_props(zfs_guest, pool.name)
    except NoZvols as e:
        pytest.fail(f"--explore-target zvol on a build that makes no zvol:\n{e}", pytrace=False)
    avoid = request.config.getoption("explore_avoid")
    try:
        choices = choices_for(target, have, zfs_guest.has_param, avoid)
        share = request.config.getoption("explore_power_share")
        if share is not None:
            choices = replace(choices, power_share=share)
    except SuiteError as e:
        pytest.fail(f"{e.what}: {e.fix}", pytrace=False)
    findings = request.config.getoption("explore_findings")
    given = replayed(request.config.getoption("explore_replay"), target, zfs_guest.has_param)
    settings = Settings(workdir=pool.mountpoint, seq_dir=engine.outdir,
                        out_dir=case_dir / "explore", shrink_s=shrink_s(request.config),
                        target=target,
                        max_findings=findings,
                        known=read_known([Path(p) for p in
                                          request.config.getoption("explore_known")]),
                        kernel_release=str(zfs_build.kernel.get("release", "")),
                        upstream=upstream.load(),
                        cover=request.config.getoption("explore_cover"),
                        sequences=given)
    varied = choices.vol_have if target == "zvol" else tuple(sorted(choices.props))
    print(f"explore: master seed {seed}, budget {explore_budget}, target {target}; props "
          f"varied: {', '.join(varied or ()) or 'none'}; params varied: "
          f"{', '.join(choices.params) or 'none (the build has none of them)'}"
          + (f"; ops avoided: {', '.join(k for k in OP_KINDS if k not in choices.ops)}"
             if avoid else ""))
    unarmed = prepare_guest(guests.current)
    if unarmed:
        print(f"explore: the Direct I/O path is told by the pool's iostats alone ({unarmed})")
    pace = Pace(scale=engine.scale)     # the slowest op so far, across fresh guests

    power: PowerCuts | None = None
    warn = request.config.getoption("explore_inject_warning")     # a self-check of trips
    inject = ("--warn-after-data", str(warn)) if warn is not None else ()

    def runner(eng) -> StreamingRunner:
        g = guests.current
        return StreamingRunner(eng, pace, console=g.watch.seen if g and g.watch else None,
                               evidence=case_dir / "explore" / "trips",
                               on_cut=power.cut if power is not None else None,
                               engine_extra=inject)

    fresh = FreshGuests(guests, pool, case_dir, target, runner)
    power = PowerCuts(guests, pool, case_dir, runner, target)
    result = explore(runner(engine), settings, seed, explore_budget, choices,
                     Conditions(zfs_guest, pool), zvols=zvols, renew=fresh, power=power)
    print(f"explore: {len(result.runs)} sequences, {result.replays} runs in "
          f"{result.elapsed_s:.0f}s, {result.boots} fresh guests after a trip; summary "
          f"{settings.out_dir / 'summary.json'}")
    for t in result.trips:
        print(f"explore: seed {t['seed']}: {t['kind']} in op {t['op']} ({t['op_kind']}): "
              f"{t['headline'][:160]}")
    if settings.cover:
        c = result.cover
        print(f"explore: --explore-cover: {len(result.runs)} sequences run; cells left "
              f"{', '.join(c.get('missing') or []) or 'none'}; given up (drawn, never "
              f"executed here): {', '.join(c.get('given_up') or []) or 'none'}")
    for a in result.avoided:
        print(f"explore: avoided from seed {a['seed']} on: {a['why']}")
    table = reach.table(reach.from_runs(result.runs), reach.from_runs(result.runs, "executed"))
    table += "\n" + reach.served_share(result.runs)
    (settings.out_dir / "reach.txt").write_text(table + "\n")
    print(table)
    print(f"explore: where the time went: {result.summary()['time_split']}")
    print(f"explore: {reach.crash_rate(result.runs)} under {guests.accel.name}")
    if settings.known:
        print(f"explore: {result.known} sequences failed as a known finding did (of "
              f"{len(settings.known)} known: " +
              "; ".join(k.label() for k in settings.known.values()) + ")")
    for f in result.findings:
        symptom(f.kind, f.detail(), row=conditions_row(f.minimal), stack=f.frames())
        if (stuck := f.stuck()) is not None:      # what a case's after-case judge names
            symptom("D-state", f"explore seed {f.original.seed}: {stuck[0]}",
                    row=conditions_row(f.minimal), stack=stuck[1])
    for s, v in result.no_result:
        symptom("no-result", f"explore seed {s}: {v.why}"[:300])
    if result.findings:
        pytest.fail("\n".join(f"{f.text}\nfiles: {f.json_path} {f.txt_path}"
                              for f in result.findings), pytrace=False)
    if result.no_result:
        pytest.fail("a sequence brought no result (the engine died or stopped early):\n" +
                    "\n".join(f"seed {s}: {v.why}" for s, v in result.no_result), pytrace=False)
    assert result.runs, f"the budget {explore_budget} allowed no sequence"
