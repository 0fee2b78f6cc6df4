"""The findings of ``suite explore``, kept (``cases/explore_corpus/*.json``):
each minimal sequence replayed three times on a fresh file (a ``"target":
"zvol"`` one: a fresh zvol made with its properties) under its own properties
and module parameters (those the build has), every read checked against the
model. In the default selection: a fixed finding must stay fixed."""
from __future__ import annotations

from pathlib import Path

import pytest

from suite.explore.gen import Choices
from suite.explore.ops import Sequence
from suite.explore.crashes.stream import StreamingRunner
from suite.explore.conditions import Conditions, dataset_props, prepare_guest
from suite.explore.session import Explorer, Settings
from suite.explore.targets import NoZvols, settable
from suite.explore.zvol import GuestZvols

pytestmark = [pytest.mark.vm]

CORPUS = sorted((Path(__file__).parent / "explore_corpus").glob("*.json"))
RUNS = 3
# A kept sequence is short (a few ops): a run still going after this (scaled by the
# accelerator) hangs, and the case says so without waiting explore's 180 s.
SEQ_TIMEOUT_S = 60.0


# Every kept sequence is its own finding: the quick tier keeps them all.
@pytest.mark.quick(*[p.stem for p in CORPUS])
@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_explore_corpus(path, zfs_guest, pool, engine, case_dir, symptom, guests):
    seq = Sequence.from_json(path.read_text())
    zvols = GuestZvols(zfs_guest, pool, engine) if seq.target == "zvol" else None
    try:
        have = zvols.properties() if zvols else dataset_props(zfs_guest, pool.name)
    except NoZvols as e:
        pytest.fail(f"{path.name} runs on a zvol, and this build makes none:\n{e}",
                    pytrace=False)
    lacking = sorted([k for k in seq.props if k not in have] +
                     [k for k in seq.params if not zfs_guest.has_param(k)])
    if any(k in lacking for k in seq.props):
        kind = "zvols" if seq.target == "zvol" else "datasets"
        pytest.skip(f"the build's {kind} have no {', '.join(lacking)}: the sequence "
                    f"cannot run as found")
    seq = settable(seq, zfs_guest.has_param)
    g = guests.current
    prepare_guest(g)
    stream = StreamingRunner(engine, console=g.watch.seen if g and g.watch else None,
                             evidence=case_dir / "explore" / "trips")
    runner = Explorer(stream, Settings(workdir=pool.mountpoint,
                                                    seq_dir=engine.outdir,
                                                    out_dir=case_dir / "explore",
                                                    target=seq.target,
                                                    seq_timeout_s=SEQ_TIMEOUT_S),
                      Choices(), Conditions(zfs_guest, pool), zvols=zvols)
    verdicts = []
    for i in range(RUNS):       # a run that took the guest down ends the replays
        verdicts.append(runner.replay(seq, f"corpus{i}"))
        if runner.dead:
            break
    bad = [v for v in verdicts if v.state != "ok"]
    note = f" (params the build lacks, not set: {', '.join(lacking)})" if lacking else ""
    for i, v in enumerate(verdicts):        # every replay's own symptom, with its frames
        if v.state != "ok":
            stack = (v.trip.waits() if v.trip.kind == "hang" else v.trip.frames()) \
                if v.trip is not None else ()
            symptom(v.kind or "no-result", f"{path.name}: replay {i + 1}: {v.line()}"[:300],
                    stack=stack)
    assert not bad, (f"{path.name}: {len(bad)} of {RUNS} runs failed{note}: {bad[0].line()}\n"
                     f"{seq.render(bad[0].failed_at)}")
