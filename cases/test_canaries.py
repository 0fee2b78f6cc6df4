"""Canaries: each case damages what one after-case judge looks at, behind the
harness's back, and passes only when the judges report that symptom kind
(``canary(*kinds)``, suite/plugin/fixtures.py). A canary that passes shows its
judge fires on a real fault on this build and guest; one that fails names the
judge that stayed silent. Opt-in: ``pytest cases -m canary --thorough``.
"""
from __future__ import annotations

import shlex
from typing import Iterator

import pytest

pytestmark = [pytest.mark.vm, pytest.mark.nvme]

MARK = "OZFSCANARY"
RECORD = 128 * 1024


@pytest.fixture
def spoiled_pool(guests) -> Iterator[None]:
    """The canary leaves its pool damaged: the next case gets a fresh one. Requested
    before ``pool``, so this runs after the pool's own (thorough) teardown."""
    yield
    if guests.current is not None:
        guests.current.pool_spec = None


def _marked_file_script(path: str, records: int) -> str:
    """Bash: ``records`` 128 KiB records of random bytes, each starting with a marker
    that can be found on the raw disk, written with O_DIRECT (straight to disk)."""
    body = RECORD - len(MARK) - 2
    return (f"for i in $(seq 0 {records - 1}); do printf '{MARK}%02d' $i; "
            f"head -c {body} /dev/urandom; done > /tmp/canary.src && "
            f"dd if=/tmp/canary.src of={shlex.quote(path)} bs={RECORD} oflag=direct "
            f"status=none && rm /tmp/canary.src")


def _find_on_disks(zfs_guest, marker: str) -> tuple[str, int]:
    """The NVMe device and byte offset where ``marker`` is stored."""
    for dev in zfs_guest.nvme_devices():
        r = zfs_guest.guest.run(f"LC_ALL=C grep -obUa -m1 {marker} {dev} | head -1",
                                timeout=600, check=False)
        off, _, found = r.stdout.strip().partition(":")
        if found == marker:
            return dev, int(off)
    raise AssertionError(f"{marker} is on none of {zfs_guest.nvme_devices()}: "
                         "the file was not written where a raw read can find it")


def _damage_record(zfs_guest, record: int) -> None:
    """Overwrite the first 4 KiB of marked record ``record`` on the raw disk."""
    dev, off = _find_on_disks(zfs_guest, f"{MARK}{record:02d}")
    assert off % 4096 == 0, f"{MARK}{record:02d} at {off} on {dev}: not at a block's start"
    zfs_guest.guest.run(f"dd if=/dev/urandom of={dev} bs=4096 count=1 seek={off // 4096} "
                        "oflag=direct conv=notrunc status=none", timeout=120)


@pytest.mark.canary("ondisk:scrub", "ondisk:zdb")
def test_canary_block_damaged_on_disk(request, zfs_guest, spoiled_pool, pool):
    """4 KiB of one data block overwritten on the raw disk of a pool with no
    redundancy, in a file of the pool's root dataset (which outlives the case's
    dataset, so zdb walks it too): nothing reads it, so only the thorough scrub and
    ``zdb -bcc`` can tell."""
    if not request.config.getoption("thorough"):
        pytest.skip("the on-disk judges run with --thorough")
    root = f"{zfs_guest.mnt_root}/{pool.pool.name}"
    zfs_guest.guest.run(_marked_file_script(f"{root}/canary.bin", 8), timeout=300)
    zfs_guest.zpool("sync", pool.pool.name)
    _damage_record(zfs_guest, 3)


@pytest.mark.canary("taint:U")
def test_canary_kernel_tainted(zfs_guest):
    """The kernel's taint gains a bit during the case (U: asked for by user space,
    the one bit that can be set without breaking anything)."""
    zfs_guest.guest.run("echo 64 > /proc/sys/kernel/tainted")


@pytest.mark.canary("ereport:io", "ereport:data")
def test_canary_undeclared_read_error(zfs_guest, spoiled_pool, pool):
    """A read error the case did not declare: zinject armed behind the harness's
    back (so no ``leaves`` are recorded), one O_DIRECT read that gets EIO. A
    ``zinject -t data`` fault is raised above the leaf: the ereports tell (io on
    the leaf, data on the object), the leaf's READ counter does not move."""
    f = pool.path("canary.bin")
    zfs_guest.guest.run(_marked_file_script(f, 2), timeout=300)
    zinject = zfs_guest.cmd("zinject")
    zfs_guest.guest.run(f"{zinject} -t data -e io -T read {f}", timeout=60)
    r = zfs_guest.guest.run(f"dd if={f} of=/dev/null bs={RECORD} iflag=direct status=none",
                            timeout=120, check=False)
    zfs_guest.guest.run(f"{zinject} -c all", timeout=60, check=False)
    assert r.rc != 0 and "Input/output error" in r.stderr, \
        f"the armed read did not fail with EIO (rc={r.rc}): {r.stderr}"


@pytest.mark.canary("ondisk:scrub", "ondisk:zdb")
def test_canary_block_damaged_after_power_cut(request, zfs_guest, guests, accel, case_dir,
                                              spoiled_pool, pool, ondisk_check):
    """As ``test_canary_block_damaged_on_disk``, on the pool a power-cut case hands
    to ``ondisk_check``: the guest's power is cut, a fresh guest imports the pool
    from the same disks, one record is overwritten on the raw disk, and the
    fixture's scrub and ``zdb -bcc`` must report it before the case destroys it."""
    if not request.config.getoption("thorough"):
        pytest.skip("the on-disk judges run with --thorough")
    name = pool.pool.name
    zfs_guest.guest.run(_marked_file_script(f"{zfs_guest.mnt_root}/{name}/canary.bin", 8),
                        timeout=300)
    zfs_guest.zpool("sync", name)
    new = guests.power_cut(guests.current, case_dir / "commands.log")
    new.zfs.zpool("import", "-f", "-d", "/dev", name, timeout=accel.deadline(120))
    _damage_record(new.zfs, 3)
    ondisk_check(new, name)
    new.zfs.zpool("destroy", "-f", name, timeout=accel.deadline(60), check=False)
    new.pool_spec = None
