"""Where an exploration's time went: one run's parts from the engine's own line, and
the sequences' time summed by part (the explore command prints it at its end)."""
from __future__ import annotations

from typing import Any

TIMING_PARTS = ("startup_s", "setup_s", "ops_s", "cleanup_s")


def engine_timing(lines: list[dict[str, Any]], command_s: float) -> dict[str, float]:
    """Where one run's time went: the engine's own parts (its ``explore-done``
    line: interpreter start-up, target setup, the ops) and the command's wall time
    as the host saw it (``command_s``: also the snapshots' cleanup, the SSH round
    trip and the guest's shell). The engine's ``cleanup`` line, after its done line,
    says how long the snapshots' and files' removal took. An engine that died early
    gives the command alone."""
    line = next((ln for ln in reversed(lines) if ln.get("event") == "explore-done"), {})
    named = {"startup_s": "startup_s", "setup_s": "setup_s", "ops_s": "elapsed_s"}
    out = {k: float(line[src]) for k, src in named.items()
           if isinstance(line.get(src), (int, float))}
    clean = next((ln for ln in reversed(lines) if ln.get("event") == "cleanup"), {})
    if isinstance(clean.get("seconds"), (int, float)):   # the snapshots' and files' removal
        out["cleanup_s"] = float(clean["seconds"])
    out["command_s"] = round(command_s, 3)
    return out


def time_split(runs: list[dict[str, Any]]) -> str:
    """One line: the generated sequences' time summed by part (the rest of a
    sequence's seconds is the host's: properties, parameters, target setup)."""
    total = sum(float(r.get("seconds") or 0.0) for r in runs)
    if not total:
        return "no sequence ran"
    parts = {k: sum(float((r.get("engine") or {}).get(k) or 0.0) for r in runs)
             for k in (*TIMING_PARTS, "command_s")}
    host = total - parts["command_s"]
    outside = parts["command_s"] - sum(parts[k] for k in TIMING_PARTS)
    shown = [(k.removesuffix("_s"), parts[k]) for k in TIMING_PARTS] + \
        [("ssh and exit", outside), ("host steps", host)]
    return f"{len(runs)} sequences, {total:.0f}s: " + ", ".join(
        f"{name} {v:.0f}s ({100 * v / total:.0f}%)" for name, v in shown)
