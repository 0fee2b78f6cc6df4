"""A guest boot that only ran out of time is tried once more; a crash is not."""
from __future__ import annotations

import pytest

from suite.errors import BootTimeout, VMError
from suite.guest.lifecycle import Guests, GuestShape


def _guests(outcomes: list) -> tuple[Guests, list]:
    g = object.__new__(Guests)             # no run folder, no build: only _boot is tested
    calls: list = []

    def once(shape, spec=None):
        calls.append(spec)
        r = outcomes.pop(0)
        if isinstance(r, BaseException):
            raise r
        return r
    g._boot_once = once
    return g, calls


def test_a_boot_that_ran_out_of_time_is_tried_once_more():
    g, calls = _guests([BootTimeout("guest not ready within 360s (tcg)"), "guest"])
    with pytest.warns(UserWarning, match="booting another guest"):
        assert g._boot(GuestShape()) == "guest"
    assert len(calls) == 2


def test_twice_out_of_time_or_a_crash_is_raised():
    g, _ = _guests([BootTimeout("late"), BootTimeout("late again")])
    with pytest.warns(UserWarning), pytest.raises(BootTimeout, match="late again"):
        g._boot(GuestShape())
    g, calls = _guests([VMError("guest kernel crashed while booting: BUG"), "guest"])
    with pytest.raises(VMError, match="crashed"):
        g._boot(GuestShape())
    assert len(calls) == 1
