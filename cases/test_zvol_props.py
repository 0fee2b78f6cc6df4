"""zvol properties that change the Direct I/O write path (openzfs/zfs#18661).

A Direct I/O write carries its own block pointer to the sync thread instead of
ARC data. Properties that make the sync thread decide something about the block
are where that can go wrong:

- **nopwrite** (compression on + a nopwrite-capable checksum): identical data
  rewritten after its txg synced is not written again. The series' own history
  has a checksum assertion on that path (``dio-nopwrite-checksum-assert``).
  Rewritten in place, and on a clone of a snapshot (the clone shares the blocks).
- **dedup**, **encryption**: the write policy differs again.

Property: the guest survives (no assertion, no hung sync), ``zpool sync``
returns, and every block reads back right by both paths.

Each property also runs as a ``-dio0`` control: the same writes with
``zvol_dio_enabled=0``, through the ARC. Stock OpenZFS, which has no Direct I/O
for zvols, runs only those: that is its control run of this file.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import cond, expect_correct
from suite.casekit.zvol import (SIZES, ZVOL_PARAM, Zvol, block_requests, create_zvol, dio_on,
                                relocator)
from suite.errors import GuestError
from suite.ioengine.plan import FileSpec, Plan

pytestmark = [pytest.mark.vm, pytest.mark.nvme]

VBS = SIZES["128K"]
BLOCKS = 8
DIO_WRITE = cond("rewrite O_DIRECT dio=1", "libaio", via="", **{ZVOL_PARAM: 1})
DIO_READ = cond("read O_DIRECT dio=1", "io_uring", via="", **{ZVOL_PARAM: 1})
# dio=0: stock OpenZFS has no zvol_dio_enabled, and these rows mean the same there.
ARC_WRITE = cond("rewrite O_DIRECT dio=0", "libaio", via="", optional=(ZVOL_PARAM,),
                 **{ZVOL_PARAM: 0})
ARC_READ = cond("read O_DIRECT dio=0", "sync", via="", optional=(ZVOL_PARAM,),
                **{ZVOL_PARAM: 0})


def need_param(zdio, dio: bool) -> None:
    if dio and ZVOL_PARAM not in zdio.have_params:
        pytest.skip(f"zvol_dio: the build has no {ZVOL_PARAM}; its run of this property "
                    f"is the -dio0 variant")


def sync_pool(zdio, accel, symptom, when: str) -> None:
    try:
        zdio.zfs.zpool("sync", zdio.pool, timeout=accel.deadline(120))
    except GuestError as e:
        symptom("hang", f"zpool sync {when} did not return: {e.what}")
        pytest.fail(f"zpool sync {when} did not return within its deadline: the sync "
                    f"thread is stuck or dead (see the console and the D-state stacks)")


def rewrite_and_check(zdio, accel, symptom, props: dict[str, str], clone: bool, title: str,
                      dio: bool = True):
    need_param(zdio, dio)
    z = zdio.zfs
    path = {ZVOL_PARAM: int(dio)} if ZVOL_PARAM in zdio.have_params else {}
    with z.params(**path):                      # the first write takes the same path
        zv = create_zvol(zdio.dataset, zdio.engine, "prop", VBS * BLOCKS, VBS, props)
        seed = f"props-{zv.name}"
        file = FileSpec(zv.dev, zv.size, seed)
        zdio.engine.run(Plan([file], []), name="lay-down")
    sync_pool(zdio, accel, symptom, "after the first write")
    if clone:
        z.zfs("snapshot", f"{zv.name}@s")
        z.zfs("clone", *sum((["-o", f"{k}={v}"] for k, v in props.items()
                             if k not in ("encryption", "keyformat", "keylocation")), []),
              f"{zv.name}@s", f"{zv.name}-clone")
        zv = Zvol(f"{zv.name}-clone", relocator(zdio.engine, f"{zv.name}-clone")(),
                      zv.volblocksize, zv.size)
    existing = FileSpec(zv.dev, zv.size, seed, create=False)
    write = DIO_WRITE if dio else ARC_WRITE
    reqs = block_requests(zv, "write", write, zdio.counter_specs("write"), "w",
                          write_seed=seed, have=zdio.have_params)
    conds = [write, *([DIO_READ] if dio else []), ARC_READ]
    first = zdio.run_plan(title, Plan([existing], reqs), conds[:1], {write.label:
                          expect_correct}, [f"{zv.name} ({zv.dev}) {props}: every block "
                          f"rewritten with the bytes it holds"], name="rewrite")
    sync_pool(zdio, accel, symptom, "after the identical rewrite")
    written = z.zfs("get", "-Hp", "-o", "value", "written", zv.name, check=False).stdout.strip()
    reads = [r for c in conds[1:] for r in block_requests(
        zv, "read", c, zdio.counter_specs("read"), "rd" if dio_on(c) else "ra",
        have=zdio.have_params)]
    second = zdio.run_plan(f"{title}: read back after sync", Plan([existing], reads),
                           conds[1:], {c.label: expect_correct for c in conds[1:]},
                           [f"'written' of {zv.name} after the rewrite synced: {written} B "
                            f"(nopwrite leaves it near 0 on a clone)"], name="readback")
    return first, second


NOPWRITE_SUMS = ["sha256", "sha512", "skein", "edonr", "blake3"]


# The controls: every checksum with Direct I/O; sha256 (both shapes) through the ARC.
NOPWRITE = ([pytest.param(c, k, True, id=f"{c}-{k}") for c in NOPWRITE_SUMS
             for k in ("inplace", "clone")]
            + [pytest.param("sha256", k, False, id=f"sha256-{k}-dio0") for k in ("inplace", "clone")])
# (not "dio": that name is the fixture zdio is built on)


@pytest.mark.parametrize("checksum,shape,direct", NOPWRITE)
def test_zvol_nopwrite_rewrite(zdio, accel, symptom, checksum, shape, direct):
    """Identical data rewritten where nopwrite applies (by Direct I/O, or the ARC)."""
    clone = shape == "clone"
    a, b = rewrite_and_check(zdio, accel, symptom, {"compression": "lz4", "checksum": checksum},
                             clone, f"zvol nopwrite rewrite, checksum={checksum}"
                             f"{' on a clone' if clone else ''}, dio={int(direct)}", direct)
    assert a.ok and b.ok, "\n" + a.table.text() + "\n" + b.table.text()


@pytest.mark.parametrize("direct", [True, False], ids=["dio1", "dio0"])
def test_zvol_dedup_rewrite(zdio, accel, symptom, direct):
    a, b = rewrite_and_check(zdio, accel, symptom, {"dedup": "on", "checksum": "sha256"},
                             False, f"zvol dedup=on rewrite, dio={int(direct)}", direct)
    assert a.ok and b.ok, "\n" + a.table.text() + "\n" + b.table.text()


@pytest.mark.parametrize("direct", [True, False], ids=["dio1", "dio0"])
def test_zvol_encrypted_rewrite(zdio, accel, symptom, direct):
    need_param(zdio, direct)
    zdio.zfs.guest.run("printf 'ozfs-vmci-passphrase' > /tmp/ozfs-zvol.key", timeout=20)
    a, b = rewrite_and_check(zdio, accel, symptom, {
        "encryption": "aes-256-gcm", "keyformat": "passphrase",
        "keylocation": "file:///tmp/ozfs-zvol.key"}, False,
        f"zvol encrypted rewrite, dio={int(direct)}", direct)
    assert a.ok and b.ok, "\n" + a.table.text() + "\n" + b.table.text()
