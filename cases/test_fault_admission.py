"""Admission limit: bytes held in flight stay bounded under a flood.

The review asked for admission before the pin: with the in-flight limit set
small, a flood of large async reads from several submitters must complete
correctly while the pages pinned for Direct I/O (nr_foll_pin_acquired -
nr_foll_pin_released, sampled in the guest during the flood) stay within the
limit plus one synchronous request per submitter (over-limit requests fall back
to the synchronous path, which pins its own buffer while it runs).
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import ASYNC_PARAM
from suite.casekit.faults import NotArmed

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.async_dio]

LIMIT_NAMES = ("zfs_async_dio_max_inflight", "zfs_async_read_max_inflight")
SUBMITTERS, DEPTH, REQ = 4, 8, 1 << 20
SIZE = 64 << 20


@pytest.mark.pool(props={"primarycache": "metadata", "recordsize": "1M"})
def test_admission_limit_under_flood(zfs_guest, pool, engine, accel, case_dir):
    name = zfs_guest.first_param(*LIMIT_NAMES)
    if name is None:
        pytest.skip(f"the build has none of {LIMIT_NAMES}")
    default = int(zfs_guest.get_param(name))
    # Bytes-based limit (later commits) vs request-count limit (the first ones).
    limit = 2 * REQ if default >= 1 << 20 else 2
    limit_bytes = limit if default >= 1 << 20 else limit * REQ
    path = pool.path("flood.bin")
    engine.oneshot("write-file", path, "--size", str(SIZE), "--seed", "flood")

    def flood(limit_value: int) -> dict:
        with zfs_guest.params(**{ASYNC_PARAM: 1, name: limit_value}):
            lines = engine.oneshot(
                "flood", "--file", path, "--seed", "flood", "--size", str(SIZE),
                "--interface", "libaio", "--len", str(REQ), "--submitters", str(SUBMITTERS),
                "--depth", str(DEPTH), "--requests", "24",
                "--sample", "pinned=/proc/vmstat#nr_foll_pin_acquired-nr_foll_pin_released",
                "--sample-ms", "20", timeout=600)
        (case_dir / f"flood-{limit_value}.json").write_text("\n".join(map(str, lines)))
        rep = next((ln for ln in lines if ln.get("event") == "flood"), None)
        assert rep is not None, f"no flood report: {lines}"
        assert not rep.get("hung"), f"submitters hung: {rep['hung']}"
        assert rep["all_correct"], rep["submitters"]
        assert rep["samples"]["pinned"]["count"] > 0, "no pinned-page samples during the flood"
        return rep

    bound_pages = (limit_bytes + SUBMITTERS * REQ) // 4096
    limited, control = flood(limit), flood(default)
    peak = limited["samples"]["pinned"]["max"] - limited["samples"]["pinned"]["first"]
    peak_control = control["samples"]["pinned"]["max"] - control["samples"]["pinned"]["first"]
    (case_dir / "admission.txt").write_text(
        f"{name}={limit}: peak pinned {peak * 4096} B (bound {bound_pages * 4096} B)\n"
        f"{name}={default} (control): peak pinned {peak_control * 4096} B\n")
    if peak_control <= bound_pages:
        raise NotArmed(f"could not arm: without the limit the flood peaked at "
                       f"{peak_control * 4096} B pinned, under the bound; the case cannot tell "
                       f"a working limit from a missing one",
                       fix="the guest was too slow to keep the flood in flight (TCG under load); "
                           "rerun, or raise DEPTH/SUBMITTERS in the case")
    assert peak <= bound_pages, (
        f"{peak * 4096} B pinned at peak > limit {limit_bytes} + {SUBMITTERS} x {REQ} sync "
        f"fallbacks ({name}={limit}); control without the limit: {peak_control * 4096} B")
