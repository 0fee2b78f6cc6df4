"""Smoke: the build under test is loaded (srcversion verified by the fixture), a
pool stands on the emulated NVMe devices, and O_DIRECT I/O round-trips."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vm, pytest.mark.nvme]


def test_smoke_odirect_roundtrip(zfs_guest, pool, engine):
    devices = zfs_guest.nvme_devices()
    assert len(devices) >= 2, f"expected 2 NVMe namespaces, guest has {devices}"
    status = pool.pool.status()
    assert all(d.rsplit("/", 1)[-1] in status for d in devices[:2]), status
    f = pool.path("smoke.bin")
    kstat = f"/proc/spl/kstat/zfs/{pool.pool.name}/iostats"
    counters = {"direct_read_count": {"path": kstat, "field": "direct_read_count"},
                "direct_write_count": {"path": kstat, "field": "direct_write_count"}}
    results = engine.run({
        "files": [{"path": f, "size": 1 << 20, "seed": "smoke", "create": True}],
        "trials": [
            {"id": "w", "file": f, "op": "write", "segments": [{"len": 131072}],
             "offset": 131072, "o_direct": True, "counters": counters},
            {"id": "r", "file": f, "op": "read", "segments": [{"len": 262144}],
             "offset": 0, "o_direct": True, "counters": counters},
        ]}, name="smoke")
    w, r = results
    assert w["correct"] and w["res"] == 131072, w
    assert r["correct"] and r["res"] == 262144, r
    assert w["counters"]["direct_write_count"], f"write did not go through Direct I/O: {w}"
