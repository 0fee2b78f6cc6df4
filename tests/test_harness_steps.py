"""A step of the harness's own that fails or hangs the guest is named as the
harness's (infrastructure), never folded into the case (issue #27): the kernel
lines it provokes are its evidence, not a ``kernel:*`` finding about the build."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.errors import GuestError, HarnessStepError
from suite.guest.aftercase import Observation
from suite.guest.lifecycle import CaseWatch, Guests
from suite.symptoms import CaseVerdict, SymptomSpec, judge_case
from suite.vm.accel import Accel
from suite.vm.console import ConsoleWatcher

CASE_LINE = "[  10.0] WARNING: CPU: 0 PID: 9 at fs/zfs/zio.c:1 zio_done+0x1/0x2 [zfs]\n"
HARNESS_LINES = ("[ 200.0] watchdog: BUG: soft lockup - CPU#1 stuck for 164s! [bash:546]\n"
                 "[ 201.0] rcu: INFO: rcu_preempt self-detected stall on CPU\n")


def _guest(tmp_path: Path):
    console = tmp_path / "console.log"
    console.write_text("boot\n")
    g = SimpleNamespace(fit=True, watch=CaseWatch(ConsoleWatcher(console), {}))
    guests = Guests(tmp_path, "gw0", Accel("tcg", 6.0, "test"), record=None)  # type: ignore[arg-type]
    return console, g, guests


def test_a_harness_step_that_hangs_is_named_and_keeps_its_kernel_lines(tmp_path: Path):
    console, g, guests = _guest(tmp_path)
    with console.open("a") as f:
        f.write(CASE_LINE)                       # printed while the case ran
    with pytest.raises(HarnessStepError, match="'disarm probes' did not finish"):
        with guests.harness_step(g, "disarm probes"):
            with console.open("a") as f:
                f.write(HARNESS_LINES)           # provoked by the harness's own step
            raise GuestError("SSH connection lost while running echo 0 > enable")
    assert g.fit is False
    case, harness = g.watch.findings()
    assert [f.kind for f in case] == ["warning"]
    assert [f.kind for f in harness] == ["lockup", "rcu_stall"]
    reason, symptoms = Observation(False, [], case, "", g.watch.harness, harness).verdict()
    kinds = [s.kind for s in symptoms]
    assert kinds[0] == "harness" and "disarm probes" in symptoms[0].detail
    assert "soft lockup" in symptoms[0].detail            # its evidence, named
    assert "kernel:lockup" not in kinds and "kernel:rcu_stall" not in kinds
    assert "kernel:warning" in kinds                      # the case's own line stays its
    assert "disarm probes" in reason
    # `suite bugs` cannot call such a case caught, whatever its own symptom.
    v = CaseVerdict("cases/t.py::t", "failed", symptoms)
    assert judge_case(SymptomSpec(("kernel:warning",)), v)[0] == "inconclusive"


def test_a_step_that_finishes_leaves_every_line_to_the_case(tmp_path: Path):
    console, g, guests = _guest(tmp_path)
    with guests.harness_step(g, "read kstats"):
        with console.open("a") as f:
            f.write(CASE_LINE)
    case, harness = g.watch.findings()
    assert [f.kind for f in case] == ["warning"] and harness == []
    assert g.fit is True and g.watch.harness == ""


def test_a_power_cut_case_is_judged_on_both_consoles_and_restores_the_new_guests_params(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """After a power cut the case goes on in a guest booted on the same disks: what
    the old console showed stays the case's, the new console is watched (a warning
    during the ZIL-replay import is found), and parameters go back to the new
    guest's own values, never the old guest's load-time ones."""
    from dataclasses import dataclass

    from suite.guest import lifecycle

    console, g, guests = _guest(tmp_path)
    g.watch.params = {"zfs_dedup_log_mem_max": "41034956", "zfs_dio_strict": "0"}
    with console.open("a") as f:
        f.write(CASE_LINE)                       # before the cut, on the old guest
    new_console = tmp_path / "console-2.log"
    new_console.write_text("[   1.0] boot of the new guest\n")

    @dataclass
    class _Guest:                                # the new guest's SSH side
        tripwire: object = None

        def set_log(self, log): pass

        def set_tripwire(self, fn): self.tripwire = fn

        def run(self, script, **kw):             # no pool imported yet, the gauges
            return SimpleNamespace(stdout="=== pools\n=== kstat abdstats\n"
                                   "13 1 0x01 21 5712 1 2\nname type data\n"
                                   "scatter_cnt 4 7\n")

    class _Zfs:
        guest = _Guest()

        def cmd(self, name): return name

        def load(self): return {"zfs": "NEW"}

        def param_values(self): return {"zfs_dedup_log_mem_max": "41034874",
                                        "zfs_dio_strict": "0"}

    new = SimpleNamespace(zfs=_Zfs(), vm=SimpleNamespace(console_path=new_console), watch=None,
                          loaded={}, params=set(), baseline=None)
    old_vm = SimpleNamespace(power_cut=lambda: None, spec=SimpleNamespace(), console_path=console)
    g.vm, g.shape, g.replaced_by = old_vm, "default", None
    monkeypatch.setattr(lifecycle, "replace", lambda spec, **kw: spec)
    monkeypatch.setattr(lifecycle, "start_resident", lambda guest: None)
    monkeypatch.setattr(guests, "_boot", lambda shape, spec: new)
    assert guests.power_cut(g, tmp_path / "commands.log") is new
    assert g.fit is False and new.watch is g.watch and guests.current is new
    assert g.watch.params["zfs_dedup_log_mem_max"] == "41034874"      # the new guest's own
    # Its gauges before the pool is imported: the later cases' leak check has a baseline.
    assert new.baseline["abdstats"]["scatter_cnt"] == (4, 7)
    with new_console.open("a") as f:
        f.write("[  30.0] WARNING: CPU: 0 PID: 77 at fs/zfs/zil.c:9 zil_replay+0x1/0x2 [zfs]\n")
    case, harness = g.watch.findings()
    assert [f.line.split(" at ")[1][:15] for f in case] == ["fs/zfs/zio.c:1 ", "fs/zfs/zil.c:9 "]
    assert harness == []
    with new_console.open("a") as f:
        f.write("[  40.0] Kernel panic - not syncing: zfs: adding existent segment\n")
    fired = new.zfs.guest.tripwire()         # commands on the new guest stop at a panic
    assert fired is not None and fired.startswith("panic:"), fired


def test_a_harness_step_after_a_power_cut_keeps_the_cases_lines(tmp_path: Path):
    console, g, guests = _guest(tmp_path)
    with console.open("a") as f:
        f.write(CASE_LINE)
    new_console = tmp_path / "console-2.log"
    new_console.write_text("")
    g.watch.follow(ConsoleWatcher(new_console), {})
    with pytest.raises(HarnessStepError):
        with guests.harness_step(g, "read kstats"):
            with new_console.open("a") as f:
                f.write(HARNESS_LINES)
            raise GuestError("SSH connection lost")
    case, harness = g.watch.findings()
    assert [f.kind for f in case] == ["warning"]
    assert [f.kind for f in harness] == ["lockup", "rcu_stall"]
