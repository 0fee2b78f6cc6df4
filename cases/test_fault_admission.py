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

from suite.dio import ASYNC_PARAM
from suite.engine import parse_lines

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
    with zfs_guest.params(**{ASYNC_PARAM: 1, name: limit}):
        lines = engine.oneshot(
            "flood", "--file", path, "--seed", "flood", "--size", str(SIZE),
            "--interface", "libaio", "--len", str(REQ), "--submitters", str(SUBMITTERS),
            "--depth", str(DEPTH), "--requests", "24",
            "--sample", "pinned=/proc/vmstat#nr_foll_pin_acquired-nr_foll_pin_released",
            "--sample-ms", "20", timeout=600)
    (case_dir / "flood.json").write_text("\n".join(map(str, lines)))
    flood = next((ln for ln in lines if ln.get("event") == "flood"), None)
    assert flood is not None, f"no flood report: {lines}"
    assert not flood.get("hung"), f"submitters hung: {flood['hung']}"
    assert flood["all_correct"], flood["submitters"]
    pinned = flood["samples"]["pinned"]
    bound_pages = (limit_bytes + SUBMITTERS * REQ) // 4096
    assert pinned["count"] > 0, "no pinned-page samples were taken during the flood"
    assert pinned["max"] - pinned["first"] <= bound_pages, (
        f"{(pinned['max'] - pinned['first']) * 4096} bytes pinned at peak > limit {limit_bytes} "
        f"+ {SUBMITTERS} x {REQ} sync fallbacks ({name}={limit})")
