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


def test_a_boot_drowning_in_kasan_reports_is_given_up_and_retried_a_panic_is_not():
    from suite.vm import console
    line = "[    2.968395] BUG: KASAN: wild-memory-access in do_raw_spin_lock+0x11f/0x270\n"
    few = console.scan(line * 3)
    assert console.boot_trouble(few, few) is None
    many = console.scan(line * console.BOOT_STORM_REPORTS)
    t = console.boot_trouble(many[-1:], many)
    assert t is not None and t.retry and "20 KASAN errors while booting" in t.what
    assert "do_raw_spin_lock" in t.what
    panic = console.scan("[    3.1] Kernel panic - not syncing: Fatal exception\n")
    t = console.boot_trouble(panic, few + panic)
    assert t is not None and not t.retry and "crashed while booting" in t.what


def test_a_kasan_storm_is_tried_more_often_than_a_late_boot():
    """Two debug boots in a row drowned in the early KASAN storm (2026-12-07): a storm
    gets STORM_TRIES boots, a boot that ran out of time still BOOT_TRIES."""
    from suite.errors import BootStorm
    from suite.guest.lifecycle import BOOT_TRIES, STORM_TRIES
    assert STORM_TRIES > BOOT_TRIES
    storms = [BootStorm(f"storm {i}") for i in range(STORM_TRIES - 1)]
    g, calls = _guests([*storms, "guest"])
    with pytest.warns(UserWarning, match="booting another guest"):
        assert g._boot(GuestShape()) == "guest"
    assert len(calls) == STORM_TRIES
    g, calls = _guests([BootStorm(f"storm {i}") for i in range(STORM_TRIES)])
    with pytest.warns(UserWarning), pytest.raises(BootStorm):
        g._boot(GuestShape())
    assert len(calls) == STORM_TRIES
