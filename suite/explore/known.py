"""Findings already known: what a failure looks like, read from earlier runs.

At a series' bad commit an exploration meets the upstream bugs of its base
first (they fail at the final verify, after a truncate or a clone), and
shrinking each costs minutes of a 15-minute budget. Like syzkaller's
suppressions, a failure whose signature an earlier run already found (the
base's or master's ``explore/summary.json``) is counted and named, not shrunk,
so the budget goes to what is new. The signature is the one that tells
findings apart within a run (:func:`suite.explore.session.signature`): the
symptom kind, the failing op's kind, interface and O_DIRECT-ness, and for wrong
bytes the op that laid them down (:mod:`suite.explore.failure`). A known
failure stops its own sequence (the engine stops at the first failed op), so
what it hides is only what that sequence would have met later.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.errors import SuiteError
from suite.explore.ops import Sequence
from suite.explore.failure import failure_signature

Signature = tuple[str, ...]


@dataclass(frozen=True)
class Known:
    """One known failure: its signature, and where it was found (a summary
    file and the seed of the finding's sequence)."""
    signature: Signature
    source: str
    seed: int

    def label(self) -> str:
        return f"{' '.join(self.signature)} (seed {self.seed}, {self.source})"


def summaries(path: Path) -> list[Path]:
    """The explore summaries a path names: a ``summary.json`` itself, or every
    ``explore/summary.json`` under a results folder."""
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(path.glob("**/explore/summary.json"))
    raise SuiteError(f"--known {path}: no such file or folder",
                     fix="give an explore summary.json, or a results folder of `suite "
                         "explore` / `-m explore` that holds one")


def _derived(summary: Path, finding: dict[str, Any], runs: list[dict[str, Any]]) -> Signature | None:
    """The signature of a finding recorded before summaries carried it: the
    original sequence's failing op (``original-<seed>.json`` beside the summary)."""
    run = next((r for r in runs if r.get("seed") == finding.get("seed") and r.get("kind")), None)
    original = summary.parent / f"original-{finding.get('seed')}.json"
    if run is None or not original.is_file():
        return None
    return failure_signature(str(run["kind"]), Sequence.from_json(original.read_text()),
                             run.get("failed_at"), run.get("first_wrong_byte"))


def read_known(paths: list[Path]) -> dict[Signature, Known]:
    """Every finding of the summaries ``paths`` name, by signature (the first
    one read wins). A summary that cannot be read says which and why."""
    out: dict[Signature, Known] = {}
    for p in paths:
        files = summaries(p)
        if not files:
            raise SuiteError(f"--known {p}: no explore/summary.json under it",
                             fix="point it at the results folder of an explore run")
        for f in files:
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError) as e:
                raise SuiteError(f"--known {f}: not an explore summary ({e})",
                                 fix="give the summary.json an explore run wrote") from e
            for finding in data.get("findings") or []:
                sig = finding.get("signature")
                sig = tuple(sig) if sig else _derived(f, finding, data.get("runs") or [])
                if sig and sig not in out:
                    out[sig] = Known(sig, str(f), int(finding.get("seed", 0)))
    return out
