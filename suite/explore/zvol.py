"""Zvols for ``suite explore --target zvol``, in the case's guest: made under
the case's dataset with :func:`suite.casekit.zvol.create_zvol` (``zfs create
-V``, then the ``/dev/zdN`` that answers to its name: ``python -m
suite.ioengine zvol-dev``, :mod:`suite.ioengine.blockdev`), destroyed with
``zfs destroy``. Which properties a zvol of the build has is asked of a probe
zvol made first (``zfs get all`` of it: :func:`suite.explore.conditions.dataset_props`),
which also proves the build makes zvols at all.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from suite.casekit.zvol import Zvol, create_zvol, quiet_udev, settle
from suite.errors import GuestError, SuiteError
from suite.explore.conditions import dataset_props
from suite.explore.targets import NoZvols

if TYPE_CHECKING:
    from suite.casekit.engine import EngineRunner
    from suite.guest.zfs import Dataset

PROBE = "explore-probe"
PROBE_SIZE = 1 << 20
INHIBIT = "zvol_inhibit_dev"


class GuestZvols:
    """The :class:`~suite.explore.targets.ZvolMaker` of a guest: ``zfs_guest``
    (``suite.guest.zfs.Zfs``), the case's dataset, its ``EngineRunner``."""

    def __init__(self, zfs_guest: Any, dataset: Dataset, engine: EngineRunner) -> None:
        self.zfs, self.dataset, self.engine = zfs_guest, dataset, engine
        self._have: set[str] | None = None

    @property
    def parent(self) -> str:
        return self.dataset.name

    def properties(self) -> set[str]:
        """Make a probe zvol, read its property names, destroy it; NoZvols with
        the reason and what to do when the build makes no usable zvol. Asked once."""
        if self._have is None:
            self._have = self._probe()
        return set(self._have)

    def _probe(self) -> set[str]:
        if self.zfs.has_param(INHIBIT) and self.zfs.get_param(INHIBIT) != "0":
            raise NoZvols(f"{INHIBIT}={self.zfs.get_param(INHIBIT)}: this build makes no "
                          "/dev/zdN, so a zvol target cannot run",
                          fix=f"echo 0 > /sys/module/zfs/parameters/{INHIBIT} (or load zfs "
                              f"without it), or explore files: --target file")
        quiet_udev(self.zfs.guest)      # udev's re-probes would keep a zvol busy at destroy
        try:
            zv = create_zvol(self.dataset, self.engine, PROBE, PROBE_SIZE, 16384)
        except SuiteError as e:
            raise NoZvols(f"this build cannot make a zvol on {self.dataset.pool.name} "
                          f"(zfs create -V, then its /dev/zdN): {e.what}",
                          fix="see the case's commands.log and dmesg; explore files instead "
                              "with --target file", detail=e.detail) from e
        have = dataset_props(self.zfs, zv.name)
        self.destroy(zv.name)
        if "volblocksize" not in have:
            raise NoZvols(f"{zv.name} has no volblocksize: not a zvol ({sorted(have)[:8]} ...)",
                          fix="see zfs get all in the case's commands.log")
        return have

    def create(self, name: str, size: int, volblocksize: int, props: dict[str, str],
               queue: str = "bio") -> Zvol:
        """``zfs create -V`` under the dataset (casekit's defaults, primarycache=metadata
        and compression=off, where ``props`` does not say) and its ``/dev/zdN``, taking
        its I/O through ``queue`` ("bio" or "blk-mq")."""
        try:
            return create_zvol(self.dataset, self.engine, name, size, volblocksize, props,
                               queue=queue)
        except SuiteError as e:
            raise GuestError(f"explore: zvol {self.parent}/{name} could not be made: {e.what}",
                             fix="see zfs create -V in the case's commands.log (a pool full "
                                 "of zvols left by hung runs?)", detail=e.detail) from e

    def destroy(self, name: str) -> str | None:
        """``zfs destroy -f``, once more after a second if the zvol was busy."""
        why = ""
        for attempt in range(2):
            settle(self.zfs.guest)
            r = self.zfs.zfs("destroy", "-f", name, check=False, timeout=120)
            if r.rc == 0:
                return None
            why = (r.stderr or r.stdout or f"rc {r.rc}").strip()[-200:]
            if attempt == 0:
                time.sleep(1.0)
        return why
