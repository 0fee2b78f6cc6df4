"""Held I/O: the proof that a teardown raced a held I/O, and the hold factor's reach.

A hold is now stretched x2 under TCG, not x6 like a deadline, so a case must show
the race ran inside the hold, never assume it. ``while_held`` prefixes the racer
with a guest-side look at the held I/O's submitter; these tests run that prefix in
a real shell against a live and a dead process.
"""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from suite.casekit.faults import (HELD_AT_START, RAISE_HOLD, NotArmed, raced_while_held,
                                  require_raced_while_held, while_held)
from suite.vm.channel import CmdResult

ROOT = Path(__file__).resolve().parents[1]


def _sh(cmd: str) -> str:
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=20).stdout


def test_the_prefix_sees_a_running_submitter_and_runs_the_teardown() -> None:
    held = subprocess.Popen(["sleep", "30"])
    try:
        out = _sh(while_held(held.pid, "echo teardown-ran"))
    finally:
        held.kill()
        held.wait()
    assert out.splitlines() == [HELD_AT_START, "teardown-ran"]
    assert raced_while_held(out)


def test_the_prefix_says_nothing_once_the_submitter_is_gone() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    out = _sh(while_held(gone.pid, "echo teardown-ran"))
    assert out.splitlines() == ["teardown-ran"] and not raced_while_held(out)


def test_no_pid_means_no_proof() -> None:
    assert while_held(None, "zfs rollback p/ds@before") == "zfs rollback p/ds@before"
    assert not raced_while_held(None) and not raced_while_held("")
    # the marker must stand on its own line, not inside some other output
    assert not raced_while_held(f"cannot unmount: {HELD_AT_START}?")


def test_a_teardown_that_raced_nothing_is_not_armed_and_says_how_to_fix_it() -> None:
    late = CmdResult(cmd="x", rc=0, stdout="", stderr="", duration=0.1)
    with pytest.raises(NotArmed) as e:
        require_raced_while_held(True, raced_while_held(late.stdout), "async read")
    assert "not seen in flight when the teardown began" in str(e.value)
    assert "OZFS_VMCI_HOLD_SCALE" in RAISE_HOLD and e.value.fix == RAISE_HOLD
    raced = CmdResult(cmd="x", rc=0, stdout=f"{HELD_AT_START}\n", stderr="", duration=0.1)
    require_raced_while_held(True, raced_while_held(raced.stdout), "async read")  # proven
    require_raced_while_held(False, False, "async read")   # a hung teardown: its own symptom


def _hold_calls(tree: ast.AST) -> list[str]:
    """``delay = accel.X(...)`` assignments: which scaling each hold uses."""
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "delay"
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and isinstance(node.value.func.value, ast.Name)
                and node.value.func.value.id == "accel"):
            out.append(node.value.func.attr)
    return out


def test_every_case_hold_is_scaled_as_a_hold_not_a_deadline() -> None:
    """A ``delay`` in a case is how long zinject keeps I/O in flight: scaled by
    ``accel.hold``. One scaled as a deadline would be waited out x6 under TCG."""
    seen: dict[str, list[str]] = {}
    for f in sorted((ROOT / "cases").glob("test_*.py")):
        calls = _hold_calls(ast.parse(f.read_text()))
        if calls:
            seen[f.name] = calls
    assert seen, "no case arms a hold: the scan found nothing to check"
    wrong = {f: c for f, c in seen.items() if set(c) != {"hold"}}
    assert not wrong, f"holds scaled as deadlines: {wrong}"
    for f in ("test_fault_teardown.py", "test_write_teardown.py", "test_write_barrier.py"):
        assert f in seen


def test_the_look_at_a_held_io_lands_inside_its_hold() -> None:
    from suite.casekit.faults import held_deadline_s, probe_ms
    for delay, scale in ((5.0, 1.0), (10.0, 6.0), (60.0, 6.0), (2.0, 1.0)):
        look = probe_ms(delay, scale) / 1000
        assert 0 < look <= delay / 4 and look <= 2.0 * scale
        assert held_deadline_s(delay, scale) > delay + look   # the holder outlives its hold
    assert probe_ms(60.0, 6.0) == 12000 and probe_ms(4.0, 6.0) == 1000
