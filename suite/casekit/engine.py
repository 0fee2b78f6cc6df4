"""Host side of the guest I/O engine: send a plan, get the trial results.

The engine itself (``suite/ioengine``, ``python -m suite.ioengine``) runs in the guest with the
host's interpreter (the guest shares the host root), so a trial costs
milliseconds. Plans and raw results are kept in the case's results folder.

Foreground commands go through ``suite/ioengine/client.sh``: the engine kept
resident in the guest (``resident.py``, started once per guest by the first
runner) forks a child per command instead of importing the engine again over
9p (6-20 s under TCG); until it is ready, and for background commands (whose
process the case signals and inspects), the engine runs directly.
"""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.errors import GuestError, KernelTripped
from suite.vm.ssh import Background, Guest
from suite.ioengine.plan import Plan
from suite.guest.resident import RESIDENT_DIR, _pythonpath, start_resident
from suite.paths import PROJECT_ROOT

CLIENT = PROJECT_ROOT / "suite" / "ioengine" / "client.sh"
REMOTE_DIR = "/tmp/ozfs-engine"


def parse_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for ln in text.splitlines():
        ln = ln.strip()
        if ln.startswith("{"):
            try:
                out.append(json.loads(ln))
            except json.JSONDecodeError:
                continue
    return out


def problem_kind(problem: str, by_text: tuple[tuple[str, str], ...]) -> str:
    """The symptom kind of one problem an engine trial reported
    (suite/symptoms.py): "failed EXXX, ..." is ``error:EXXX``; else the kind of
    the first (text, kind) of ``by_text`` whose text the problem holds; else ``harness``."""
    if problem.startswith("failed "):
        return "error:" + problem.split()[1].rstrip(",")
    return next((kind for text, kind in by_text if text in problem), "harness")


def report_trials(lines: list[dict[str, Any]], event: str, want: int, symptom: Any,
                  row: Any, kind: Any) -> list[dict[str, Any]]:
    """The trials of an engine command that prints one ``event`` line a trial with its
    ``problems``: all ``want`` of them, or ``no-result`` and the case fails; each problem
    of a trial recorded as ``symptom(kind(problem), problem, row(trial))``. Returns the
    trials."""
    import pytest
    trials = [ln for ln in lines if ln.get("event") == event]
    if len(trials) != want:
        symptom("no-result", f"{len(trials)} of {want} trials reported: {lines[-2:]}")
        pytest.fail(f"the engine reported {len(trials)} of {want} trials: {lines[-3:]}")
    for t in trials:
        for problem in t.get("problems") or ():
            symptom(kind(problem), problem, row(t))
    return trials


def in_flight(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The trial the engine began and never reported (its ``begin`` line without
    a result line), or None."""
    done = {ln.get("id") for ln in lines if ln.get("event") == "trial"}
    begun = [ln for ln in lines if ln.get("event") == "begin" and ln.get("trial") not in done]
    return begun[-1] if begun else None


@dataclass
class EngineRunner:
    guest: Guest
    outdir: Path
    scale: float = 1.0         # deadline multiplier from the accelerator
    python: str = sys.executable
    resident: bool = True      # foreground commands through the resident engine
    _n: int = 0

    def __post_init__(self) -> None:
        if self.resident:
            start_resident(self.guest, self.python)

    def direct_command(self, *args: str) -> str:
        """The guest command line: the host's interpreter (the guest shares the
        host root) running the engine package from this checkout."""
        return _pythonpath() + " ".join(
            shlex.quote(a) for a in (self.python, "-m", "suite.ioengine", *args))

    def command(self, *args: str) -> str:
        """A foreground command: through the resident engine when it serves,
        else exactly :meth:`direct_command` (``client.sh`` decides in the guest)."""
        if not self.resident:
            return self.direct_command(*args)
        return _pythonpath() + " ".join(
            shlex.quote(a) for a in ("bash", str(CLIENT), RESIDENT_DIR, self.python, *args))

    def _remote(self, name: str) -> str:
        return f"{REMOTE_DIR}/{name}"

    def run(self, plan: Plan | dict, timeout: float = 120, name: str = "") -> list[dict]:
        """Run a plan; return the trial result lines (file/summary lines dropped).

        The plan and every output line are written to ``outdir/<name>.plan.json``
        and ``outdir/<name>.results.jsonl``.
        """
        self._n += 1
        name = name or f"plan{self._n}"
        data = plan.to_dict() if hasattr(plan, "to_dict") else plan
        self.outdir.mkdir(parents=True, exist_ok=True)
        local = self.outdir / f"{name}.plan.json"
        local.write_text(json.dumps(data, indent=1))
        remote = self._remote(f"{name}.plan.json")
        upload(self.guest, local, remote, self.scale)
        try:
            r = self.guest.run(self.command("run", remote), timeout=timeout * self.scale,
                               check=False)
        except KernelTripped as e:
            partial = getattr(e, "partial_stdout", "")
            (self.outdir / f"{name}.results.jsonl").write_text(partial)
            t = in_flight(parse_lines(partial))
            if t is not None:
                e.what += f" (in flight: trial {t.get('trial')}, {t.get('condition')})"
                e.row = str(t.get("condition") or "")
            raise
        (self.outdir / f"{name}.results.jsonl").write_text(r.stdout)
        lines = parse_lines(r.stdout)
        if r.rc != 0 or not any(ln.get("event") == "summary" for ln in lines):
            raise GuestError(f"the I/O engine failed on plan {name} (rc={r.rc})",
                             fix=f"see {local} and the case's commands.log",
                             detail=r.stderr[-3000:])
        return [ln for ln in lines if ln.get("event") == "trial"]

    def background(self, *args: str) -> Background:
        """Start ``python -m suite.ioengine <args>`` in the guest, directly: the
        case signals and inspects this very process (its pid, its state)."""
        return self.guest.background(self.direct_command(*args))

    def oneshot(self, *args: str, timeout: float = 120) -> list[dict]:
        r = self.guest.run(self.command(*args), timeout=timeout * self.scale, check=False)
        return parse_lines(r.stdout)


def upload(guest: Guest, local: Path, remote: str, scale: float = 1.0) -> None:
    """Put ``local`` at ``remote`` in the guest, making :data:`REMOTE_DIR` the
    first time for that guest (plans, explore sequences)."""
    if not getattr(guest, "engine_dir_made", False):
        guest.run(f"mkdir -p {REMOTE_DIR}", timeout=30 * scale)
        guest.engine_dir_made = True  # type: ignore[attr-defined]
    guest.put(local, remote)


