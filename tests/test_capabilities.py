"""What a build without a knob can run (issue #25): the 2.3 line has no
zfs_dio_strict and always refuses misaligned O_DIRECT with EINVAL, so an aligned
write or read runs whatever the knob, and a strict=1 row runs as it is."""
from __future__ import annotations

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
