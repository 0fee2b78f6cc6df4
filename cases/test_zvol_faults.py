"""zvol Direct I/O under faults (openzfs/zfs#18661).

- **EIO on reads**: a read the disk fails must return the error to the caller,
  by either path (Direct I/O retries a failed chunk through the ARC first).
  Writes are not judged here: an ARC write fails at txg sync, long after the
  call returned, and suspends a non-redundant pool.
- **Mirror self-heal**: checksum errors injected on one side of a mirror: every
  read still returns the right bytes, and the pool counts the errors it repaired.
- **Pages changed in flight**: a Direct I/O write whose buffer another thread
  keeps changing. The checksum computed before the write no longer matches what
  the device got (``zfs_vdev_direct_write_verify`` catches it). The write must
  not fail for it (the chunk is retried through the ARC) and what is on disk
  must be a consistent block, readable without checksum errors.
"""
from __future__ import annotations

import json
import re

import pytest

from suite.casekit.dio import Shape, expect_correct, symptom_of
from suite.casekit.trials import trials_needed
from suite.casekit.zvol import SIZES, ZVOL_PARAM, create_zvol, zconditions
from suite.ioengine.plan import FileSpec, Plan
from suite.symptoms import Symptom

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.zinject]

VBS = SIZES["128K"]
ROUNDS = trials_needed(rate=0.4)


def expect_eio(c, r):
    if r.get("errname") == "EIO":
        return None
    bad = symptom_of(c, r)
    return Symptom("no-EIO", f"expected EIO from a failing disk, got res={r.get('res')} "
                   f"{r.get('errname') or ''}".strip() + (f" ({bad.kind})" if bad else ""),
                   c.label)


def read_with_fault(zdio, seed: str, devs: list[str], fault: str, expect, title: str):
    """Lay a zvol down, sync it, inject ``fault`` on reads from ``devs``, then
    run every condition's reads of it, alternated; the fault is cleared after."""
    rounds = zdio.trials or ROUNDS
    conds = zconditions(buffered=False)
    zv = create_zvol(zdio.dataset, zdio.engine, "flt", VBS * rounds * len(conds), VBS)
    zdio.engine.run(Plan([FileSpec(zv.dev, zv.size, seed)], []), name="lay-down")
    zdio.zfs.zpool("sync", zdio.pool)
    zdio.zfs.zpool("clear", zdio.pool)
    for dev in devs:
        zdio.zfs.zinject("-d", dev, "-e", fault, "-T", "read", "-f", "100", zdio.pool)
    try:
        return zdio.run(f"{title} ({fault} injected on {', '.join(devs)})",
                        FileSpec(zv.dev, zv.size, seed, create=False),
                        Shape("block", nsegs=0, total=VBS), conds, expect, stride=VBS,
                        name=f"{fault}-read", rounds=rounds)
    finally:
        zdio.zfs.zinject("-c", "all", check=False)


def test_zvol_read_eio_reaches_caller(zdio):
    # a stripe: every device, or the blocks on the other one escape
    v = read_with_fault(zdio, "eio", zdio.zfs.nvme_devices(), "io", expect_eio,
                        "zvol read from a failing disk")
    assert v.ok, "\n" + v.table.text()


@pytest.mark.pool(layout="mirror")
def test_zvol_mirror_self_heals(zdio):
    # "corrupt" flips bits in what the device returns: the checksum catches it
    # and the other side serves (and repairs) the block.
    bad = zdio.zfs.nvme_devices()[:1]
    v = read_with_fault(zdio, "heal", bad, "corrupt", expect_correct,
                        "zvol read from a mirror with one bad side")
    status = zdio.zfs.zpool("status", "-p", zdio.pool, check=False).stdout
    v.table.notes.append("zpool status after the reads:\n" + status)
    assert v.ok, "\n" + v.table.text()
    name = bad[0].rsplit("/", 1)[-1]
    row = next((ln.split() for ln in status.splitlines() if ln.strip().startswith(name)), None)
    assert row and int(re.sub(r"\D", "", row[4]) or 0) > 0, (
        f"zpool status counted no checksum errors on {name}: the fault did not fire\n{status}")


@pytest.mark.zvol_dio
@pytest.mark.bug("dio-write-error-not-retried")
# Pages changed under a Direct I/O write fail its checksum verification: that is
# what the case provokes, and the series reports it (zfs_vdev_direct_write_verify).
@pytest.mark.leaves(ereports=["dio_verify_wr"])
def test_zvol_dio_write_pages_changed_in_flight(zdio, symptom, case_dir):
    z = zdio.zfs
    z.set_param(ZVOL_PARAM, 1)
    zv = create_zvol(zdio.dataset, zdio.engine, "flip", 4 * VBS, VBS)
    z.zpool("events", "-c", check=False)
    found = zdio.engine.oneshot("flip-write", zv.dev, "--len", str(VBS), "--writes", "30",
                                timeout=600)
    out = next((e for e in found if e.get("event") == "flip-write"), None)
    assert out is not None, f"flip-write returned nothing: {found}"
    (case_dir / "flip-write.json").write_text(json.dumps(out, indent=1))
    events = z.zpool("events", check=False).stdout
    verify_events = sum(1 for ln in events.splitlines() if "dio_verify" in ln)
    z.zpool("scrub", "-w", zdio.pool, timeout=600, check=False)
    status = z.zpool("status", "-p", zdio.pool, check=False).stdout
    (case_dir / "pool-after.txt").write_text(events + "\n" + status)
    problems = []
    if out["errors"]:
        symptom(f"error:{out['first_error']}", f"{out['errors']} of {out['writes']} O_DIRECT "
                f"writes failed while their pages changed ({out['flips']} flips, "
                f"{verify_events} dio_verify events)")
        problems.append(f"{out['errors']} writes failed with {out['first_error']}")
    if out["short"]:
        symptom("short", f"{out['short']} writes returned less than {VBS}")
        problems.append(f"{out['short']} short writes")
    if not out["readback_matches"]:
        symptom("wrong-bytes", "the last, stable write of the buffer does not read back")
        problems.append("the final stable write does not read back")
    if "errors: No known data errors" not in status:
        symptom("wrong-bytes", "the scrub found errors after the flipped writes")
        problems.append("scrub found errors:\n" + status)
    assert not problems, (f"{out['writes']} writes, {out['flips']} flips, {verify_events} "
                          f"dio_verify events: " + "; ".join(problems))
