"""What a build without a knob can run (issue #25): the 2.3 line has no
zfs_dio_strict and always refuses misaligned O_DIRECT with EINVAL, so an aligned
write or read runs whatever the knob, and a strict=1 row runs as it is."""
from __future__ import annotations

import pytest

from suite.casekit.dio import ASYNC_PARAM, STRICT_PARAM, DioBench, cond

LINE_2_3 = {"zfs_dio_enabled", "zfs_vdev_direct_write_verify"}   # no strict, no async
MASTER = LINE_2_3 | {STRICT_PARAM}


def bench(have: set[str]) -> DioBench:
    return DioBench(None, None, None, have, None, lambda t: None)   # type: ignore[arg-type]


def rows(strict: int):
    return [cond(f"libaio async=1 strict={strict}", "libaio", **{ASYNC_PARAM: 1, STRICT_PARAM: strict}),
            cond(f"libaio async=0 strict={strict}", "libaio", optional=(ASYNC_PARAM,),
                 **{ASYNC_PARAM: 0, STRICT_PARAM: strict}),
            cond(f"sync strict={strict}", "sync", control=True, **{STRICT_PARAM: strict})]


def test_aligned_rows_run_on_a_build_without_the_strict_knob():
    b = bench(LINE_2_3)
    run, skipped = b.split(rows(0), aligned=True)
    assert [c.label for c in run] == ["libaio async=0 strict=0", "sync strict=0"]
    assert skipped == {"libaio async=1 strict=0":
                       "build has no zfs_async_dio_enabled, zfs_dio_strict"}
    assert STRICT_PARAM in run[0].optional          # not written: the build has no such file
    assert any("page-aligned request does not depend" in n for n in b.capability_notes)


def test_misaligned_rows_follow_the_builds_fixed_behaviour():
    b = bench(LINE_2_3)
    run, skipped = b.split(rows(1), aligned=False)   # strict=1: what the 2.3 line always does
    assert [c.label for c in run] == ["libaio async=0 strict=1", "sync strict=1"]
    assert any("behaves as zfs_dio_strict=1" in n for n in b.capability_notes)
    run, skipped = b.split(rows(0), aligned=False)   # strict=0's ARC fallback: not this build
    assert [c.label for c in run] == []
    assert skipped["libaio async=0 strict=0"] == "build has no zfs_dio_strict"


def test_a_build_with_the_knob_sets_it_as_asked():
    b = bench(MASTER)
    run, _ = b.split(rows(0), aligned=False)
    assert [c.label for c in run] == ["libaio async=0 strict=0", "sync strict=0"]
    assert all(STRICT_PARAM not in c.optional for c in run) and b.capability_notes == []


# The capability record (suite/guest/capabilities.py): what the report says a build does.
from suite.guest import capabilities as caps  # noqa: E402

PARAMS_2_3 = {"zfs_dio_enabled": "1", "zfs_vdev_direct_write_verify": "1",
              "zfs_bclone_enabled": "1", "zvol_use_blk_mq": "0"}


def by_name(cs):
    return {c.name: c for c in cs}


def test_the_2_3_line_is_recorded_with_its_fixed_misaligned_behaviour():
    got = by_name(caps.capabilities(PARAMS_2_3, ["abdstats", "arcstats"]))
    assert got["Direct I/O"].have and got["Direct I/O"].value == "zfs_dio_enabled=1"
    strict = got["misaligned O_DIRECT"]
    assert not strict.have and "always refused with EINVAL" in strict.behaviour
    assert not got["async O_DIRECT (async-dio)"].have
    assert not got["zvol Direct I/O (zvol-dio)"].have
    assert got["kstats"].value == "2 files" and "abdstats" in got["kstats"].behaviour
    assert not got["optional tools"].have


def test_a_series_build_records_its_knobs_and_values():
    params = {**PARAMS_2_3, STRICT_PARAM: "0", ASYNC_PARAM: "1",
              "zfs_async_dio_task_depth": "32", "zfs_async_write_pinned_copies": "7"}
    got = by_name(caps.capabilities(params, [], tools=["zfs", "zpool", "zinject", "zdb"],
                                    features=["async_dio"]))
    assert got["misaligned O_DIRECT"].value == f"{STRICT_PARAM}=0"
    assert "ARC" in got["misaligned O_DIRECT"].behaviour
    assert got["async O_DIRECT (async-dio)"].behaviour.startswith(f"{ASYNC_PARAM}=1")
    assert got["pinned-page counters (async-dio)"].value == "zfs_async_write_pinned_copies=7"
    assert not got["kstats"].have
    assert got["optional tools"].behaviour == "built: zdb"
    assert got["series features"].value == "async_dio"
    assert by_name(caps.capabilities({}, [], zts=True))["optional tools"].value == "ZTS"


def test_the_record_round_trips_through_the_run_folder(tmp_path):
    cs = caps.capabilities(PARAMS_2_3, ["zil"])
    path = caps.write(tmp_path, cs)
    assert path == tmp_path / "build" / caps.FILE
    assert caps.load(path) == cs
    assert not list((tmp_path / "build").glob(".*"))      # no temporary left behind



class _RefusingZinject:
    """A guest whose zinject refuses with ``stderr``."""
    def __init__(self, stderr: str) -> None:
        self.stderr = stderr

    def zinject(self, *a, **kw):
        from types import SimpleNamespace
        return SimpleNamespace(rc=2, stdout="", stderr=self.stderr)


def test_a_held_read_on_a_zinject_without_object_delay_is_skipped_with_the_reason():
    """zfs-2.3.9's zinject has no -E: the teardown-with-held-read cases cannot run
    there; that is a skip that says why, not a NotArmed error (first 2.3.9 run)."""
    from suite.casekit.faults import NotArmed, arm_delay
    with pytest.raises(pytest.skip.Exception, match="no -E"):
        arm_delay(_RefusingZinject("zinject: invalid option 'E'\nusage: ..."), "/tank/f", 5.0)
    with pytest.raises(NotArmed, match="no such file"):
        arm_delay(_RefusingZinject("cannot open /tank/f: no such file"), "/tank/f", 5.0)


def test_a_held_write_on_a_zinject_without_object_delay_is_skipped_too():
    """zfs-2.3.9: test_teardown_with_held_write, test_write_append_respects_rlimit_fsize
    and test_write_barrier_waits_for_held_write errored not-armed the same way."""
    from suite.casekit.faults import NotArmed
    from suite.casekit.writes import arm_write_delay
    with pytest.raises(pytest.skip.Exception, match="no write can be held"):
        arm_write_delay(_RefusingZinject("zinject: invalid option 'E'"), "/tank/f", 5.0)
    with pytest.raises(NotArmed):
        arm_write_delay(_RefusingZinject("cannot open /tank/f"), "/tank/f", 5.0)


class _Switch:
    """What set_async uses of suite.guest.zfs.Zfs."""

    def __init__(self, has: bool) -> None:
        self.has, self.set = has, []

    def has_param(self, name: str) -> bool:
        return self.has

    def set_param(self, name: str, value: object) -> None:
        self.set.append((name, value))


def test_set_async_sets_the_switch_or_skips_only_the_row_that_needs_it():
    from suite.casekit.dio import ASYNC_PARAM, set_async
    z = _Switch(True)
    set_async(z, True)
    set_async(z, 0)
    assert z.set == [(ASYNC_PARAM, 1), (ASYNC_PARAM, 0)]
    stock = _Switch(False)
    set_async(stock, 0)                  # the sync row runs on a stock build as it is
    assert stock.set == []
    with pytest.raises(pytest.skip.Exception, match=f"writer=async: the build has no {ASYNC_PARAM}"):
        set_async(stock, 1, "writer=async")
