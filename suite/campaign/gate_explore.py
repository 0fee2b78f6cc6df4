"""The gate's explore lane, sequence by sequence (``suite gate --explore BUDGET``).

One ``test_explore`` verdict per side says too little: the base stops at the bug a
pull request fixes and the head, getting past it, fails on something else; both
"fail", so the case is "still failing" and the fix (and any new failure) goes
unseen. So:

- the base explores for the budget and does not stop at its first finding
  (:data:`BASE_ARGS`: findings collected, each shrunk briefly);
- the head runs **the base's sequences**, each once, in the base's order
  (:func:`replay_args`: ``--explore-replay`` of every sequence the base generated),
  so each sequence has a result on both sides;
- each sequence becomes a verdict of its own (:func:`verdicts`, nodeid
  ``explore:<seed>``) whose symptoms are what it failed by, op by op (``kind [op N
  name]``), and the gate sorts it as it sorts a case: fixed (fails on base, passes on
  head), regression (passes on base, fails on head, or fails with another
  signature), still failing (the same signatures), unchanged pass.

A sequence one side never finished (its guest lost, the budget spent) is
``inconclusive`` for it, never a pass. A sequence whose first class claims a change
(fixed, regression, a new signature) is replayed again on both sides, alone, as its
own control (:func:`rerun_args`): a sequence that fails by timing decides nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import re
from dataclasses import replace

from suite.campaign.lanes.explore import _json
from suite.symptoms import CaseVerdict, Symptom

PREFIX = "explore:"
KNOWN_WHY = "known upstream finding "      # a symptom explore matched to one, by signature
NODE = "cases/test_explore.py::test_explore"
SUMMARIES = "*/cases/test_explore/explore/summary.json"
SEQUENCES = "*/cases/test_explore/engine/explore-*.seq.json"
# The base explores its whole budget: every distinct finding kept, each shrunk briefly.
BASE_ARGS = ["--explore-findings", "50", "--explore-shrink", "120"]
# A rerun judges a sequence again, it does not shrink it (already shrunk on the base).
RERUN_ARGS = ["--explore-findings", "50", "--explore-shrink", "1"]


def explore_selected(k: str) -> None:
    """``--explore`` runs inside the ``test_explore`` case: a ``-k`` that leaves it out
    would explore nothing on either side and say nothing of it (seen: a gate of
    #18795 with ``-k "zinject or smoke" --explore 10m`` ran 0 sequences)."""
    from suite.errors import SuiteError
    from suite.impact.cli import collect
    if NODE not in collect(k):
        raise SuiteError(f"--explore, but -k {k!r} leaves out {NODE}: nothing would be "
                         "explored on either side",
                         fix=f'add it: -k "{k} or (test_explore and not corpus)"')


def generated(session_dir: Path) -> dict[int, Path]:
    """Each sequence the session ran, by its seed: the first file the engine got for
    it (the generated sequence; later files of a seed are its runs past a known
    finding and its shrinking)."""
    out: dict[int, Path] = {}
    for f in sorted(session_dir.glob(SEQUENCES), key=lambda p: p.stat().st_mtime):
        seed = _json(f).get("seed")
        if isinstance(seed, int) and seed not in out:
            out[seed] = f
    return out


def replay_args(session_dir: Path) -> list[str]:
    """``--explore-replay FILE`` for each sequence the base ran, in its order (each
    failure met shrunk as briefly as the base's: :data:`BASE_ARGS`)."""
    args: list[str] = [*BASE_ARGS]
    for f in generated(session_dir).values():
        args += ["--explore-replay", str(f)]
    return args


def counted(extra: list[str], more: list[str]) -> list[str]:
    """``extra`` with its ``--explore-budget`` (a time: the base's) turned into the
    number of sequences ``more`` replays: a head that runs slower than the base must
    still replay every one of them (a gate of #18795, 10m: the head's budget ran out
    before its fifth sequence, inconclusive)."""
    n = more.count("--explore-replay")
    if "--explore-budget" not in extra or not n:
        return list(extra)
    out = list(extra)
    out[out.index("--explore-budget") + 1] = f"{n}x"
    return out


def rerun_args(session_dir: Path, nodeids: list[str]) -> list[str]:
    """A rerun's replay: the base's file of each suspect sequence (``explore:<seed>``),
    or every sequence of the base when ``test_explore`` alone is the suspect."""
    files = generated(session_dir)
    seeds = [int(n[len(PREFIX):]) for n in nodeids if n.startswith(PREFIX)]
    chosen = [files[s] for s in seeds if s in files] if seeds else list(files.values())
    return [*RERUN_ARGS, *(a for f in chosen for a in ("--explore-replay", str(f)))]


def _op_name(seq_file: Path | None, i: Any) -> str:
    ops = _json(seq_file).get("ops") if seq_file else None
    if isinstance(i, int) and isinstance(ops, list) and 0 <= i < len(ops):
        return str(ops[i].get("op", "?"))
    return "?"


def verdicts(session_dir: Path) -> dict[str, CaseVerdict]:
    """Each sequence of the session's exploration as a verdict of its own: passed, or
    failed by each failure its runs met (a known finding's too: the gate compares
    what each side failed by), a trip (a panic, a hang) by its kind and op."""
    files = generated(session_dir)
    found: dict[int, list[Symptom]] = {}
    ran: set[int] = set()
    for summary in sorted(session_dir.glob(SUMMARIES)):
        s = _json(summary)
        for r in s.get("runs") or []:
            seed = r.get("seed")
            if not isinstance(seed, int):
                continue
            ran.add(seed)
            if r.get("state") == "failed":
                i = r.get("at", r.get("failed_at"))     # as the generated sequence numbers it
                row = f"op {i} {_op_name(files.get(seed), i)}"
                why = f"{KNOWN_WHY}{r['known']}" if r.get("known") else ""
                found.setdefault(seed, []).append(Symptom(str(r.get("kind") or "?"), why, row))
        for t in s.get("trips") or []:
            seed = t.get("seed")
            if isinstance(seed, int):
                ran.add(seed)
                # a trip a run of its sequence counted as a known finding (by its
                # signature: a hang in a splice) carries that finding's name
                known = next((r["known"] for r in s.get("runs") or [] if r.get("seed") == seed
                              and r.get("failed_at") == t.get("op") and r.get("known")
                              and r.get("kind") == t.get("kind")), "")
                found.setdefault(seed, []).append(
                    Symptom(str(t.get("kind") or "trip"),
                            f"{KNOWN_WHY}{known}" if known else
                            str(t.get("headline") or "")[:300],
                            f"op {t.get('at', t.get('op'))} {t.get('op_kind') or '?'}"))
    out: dict[str, CaseVerdict] = {}
    for seed in sorted(ran | set(files), key=lambda x: list(files).index(x)
                       if x in files else len(files)):
        nodeid = f"{PREFIX}{seed}"
        if seed not in ran:
            out[nodeid] = CaseVerdict(nodeid, "error", [Symptom("no-result", "never finished")],
                                      "the sequence never finished on this side")
        elif seed in found:
            syms = list({x.signature(): x for x in found[seed]}.values())
            out[nodeid] = CaseVerdict(nodeid, "failed", syms, str(syms[0]))
        else:
            out[nodeid] = CaseVerdict(nodeid, "passed")
    return out


# ---------------------------------------------------------------------------
# A sequence the head gets further in: the base stopped at a bug the pull request
# fixes, and the head, past it, meets what the base never reached.

_OP = re.compile(r"^op (\d+)\b")


def failed_at(v: CaseVerdict | None) -> int | None:
    """The first op a sequence's verdict failed at (its symptoms' ``op N name`` rows)."""
    ops = [int(m.group(1)) for x in (v.symptoms if v else []) if (m := _OP.match(x.row))]
    return min(ops) if ops else None


def is_known(x: Symptom) -> bool:
    """Explore counted it as a known upstream finding (matched by its signature)."""
    return x.detail.startswith(KNOWN_WHY)


def past_the_base(base: CaseVerdict | None, head: CaseVerdict | None) -> tuple[int, int] | None:
    """(the base's op, the head's op) when the head ran past the op where the base
    failed, by none of the base's signatures there, and failed further on; else None."""
    b, h = failed_at(base), failed_at(head)
    if b is None or h is None or h <= b:
        return None
    mine = {x.signature() for x in base.symptoms}          # type: ignore[union-attr]
    if any(x.signature() in mine for x in head.symptoms):  # type: ignore[union-attr]
        return None
    return b, h


def after_case(v: CaseVerdict | None) -> CaseVerdict | None:
    """``test_explore``'s verdict without its sequences' failures (each sequence is a
    verdict of its own, sorted on its own): what the after-case judges found (a
    kernel report between sequences, a counter gone below zero). A verdict failed
    by its sequences alone is a pass here."""
    if v is None or v.outcome not in ("failed", "xfailed"):
        return v
    rest = [x for x in v.symptoms if not x.detail.startswith("explore seed ")]
    if rest == v.symptoms:
        return v
    if not rest:
        return replace(v, outcome="passed", symptoms=[], reason="")
    return replace(v, symptoms=rest, reason=v.reason if v.outcome == "xfailed" else str(rest[0]))
