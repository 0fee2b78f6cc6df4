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
from suite.report.symptoms import CaseVerdict, SymptomSpec, judge_case
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
