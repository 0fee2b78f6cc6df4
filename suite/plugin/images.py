"""The guests' NVMe images go when the session ends.

Each guest boots on sparse NVMe image files in its run's ``vms/<guest>/`` folder (a
power-cut reboot boots a fresh guest on the same images, so they live as long as the
session). Afterwards they only fill the disk: a day of runs here left 51 GB of them and
the next lanes could not start a guest. The controller removes them when the session
ends, after every guest is down; ``--keep-images`` (or ``--keep-vm``) keeps them for a
look at the pool (``zdb -e``, ``zpool import -d``). What a failure needs to be read (the
console, dmesg, the pool's status and events) is collected while the guest runs.
"""
from __future__ import annotations

from pathlib import Path

import pytest

PATTERN = "vms/*/nvme*.img"
NOTE = "images-removed.txt"


def drop_images(run_dir: Path) -> tuple[int, int]:
    """Remove the run's NVMe images; (files, MiB they held on disk)."""
    files = mib = 0
    for img in sorted(run_dir.glob(PATTERN)):
        try:
            held = img.stat().st_blocks * 512 >> 20
            img.unlink()
        except OSError:
            continue
        files, mib = files + 1, mib + held
    if files:
        (run_dir / "vms" / NOTE).write_text(
            f"{files} NVMe image(s) removed at the end of the session ({mib} MiB on disk); "
            f"run with --keep-images to keep them\n")
    return files, mib


class ImagesPlugin:
    """Registered on the controller (not on xdist workers: their guests may still run)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        c = session.config
        if c.getoption("keep_images", False) or c.getoption("keep_vm", False):
            return
        drop_images(self.run_dir)
