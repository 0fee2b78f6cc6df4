"""Real power cuts in explore: the moment a sequence's ``power_cut`` op says what must
survive (its ``power-cut`` line, :mod:`suite.ioengine.explore.powercut`), the
streaming runner calls :meth:`PowerCuts.cut`: the guest's power goes (its async writes
still in flight) and a fresh guest boots on the same NVMe images, the build loaded and
verified. :meth:`PowerCuts.recover` then imports the pool there (the ZIL replayed),
judges the file (or the zvol's window, found again by its name) in that guest
(``explore-recover``), scrubs the pool, and hands the session a runner, conditions and
(for a zvol target) a zvol maker bound to the new guest; exploring goes on there.

The case's console watch follows the new console (``Guests.power_cut``), so a kernel
report of the recovery is the case's; its after-case judges run on the last guest.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from suite.casekit.engine import REMOTE_DIR, EngineRunner, upload
from suite.errors import GuestError
from suite.explore.conditions import Conditions, prepare_guest
from suite.explore.session import Fresh, SequenceRunner
from suite.explore.zvol import GuestZvols
from suite.guest.lifecycle import Guests, ZfsGuest
from suite.guest.zfs import Dataset, Pool

MakeRunner = Callable[[EngineRunner], SequenceRunner]
CLEAN = "No known data errors"


def failed_lines(i: int, n_ops: int, kind: str, why: str) -> list[dict[str, Any]]:
    """The op line and the end line of a recovery that could not judge the file."""
    return [{"event": "op", "i": i, "op": "power_cut", "ok": False, "outcome": "failed",
             "kind": kind, "why": why},
            {"event": "explore-done", "ok": False, "failed_at": i, "kind": kind, "why": why,
             "ops": n_ops}]


class PowerCuts:
    """``cut()`` for the streaming runner, ``recover(...)`` for the session."""

    def __init__(self, guests: Guests, dataset: Any, case_dir: Path, make_runner: MakeRunner,
                 target: str = "file", log: Callable[[str], None] = print) -> None:
        g = guests.current
        assert g is not None and g.pool_spec is not None, "a session's guest has its pool"
        self.guests, self.dataset, self.case_dir = guests, dataset, case_dir
        self.spec, self.make_runner, self.log = g.pool_spec, make_runner, log
        self.target = target
        self.new: ZfsGuest | None = None
        self.cuts = 0
        self.boot_s: list[float] = []

    def cut(self) -> None:
        """Cut the current guest's power now; boot the next on its disks."""
        old = self.guests.current
        assert old is not None
        old.zfs.guest.set_tripwire(None)
        t0 = time.monotonic()
        self.new = self.guests.power_cut(old, self.case_dir / "commands.log")
        self.cuts += 1
        self.boot_s.append(time.monotonic() - t0)
        self.log(f"explore: power cut {self.cuts}: a fresh guest on the same disks in "
                 f"{self.boot_s[-1]:.0f}s")

    def recover(self, line: dict[str, Any], n_ops: int, name: str,
                seq_dir: Path) -> tuple[Fresh, list[dict[str, Any]]]:
        """Import, judge the file, scrub; the session's next runner and the lines."""
        new = self.new
        assert new is not None, "recover() follows cut()"
        self.new = None
        z, i, pool = new.zfs, int(line["i"]), self.spec.name
        scale = self.guests.accel.scale
        prepare_guest(new)
        engine = EngineRunner(z.guest, self.case_dir / "engine", scale=scale)
        ds = Dataset(Pool(z, pool, self.spec), self.dataset.name, self.dataset.mountpoint)
        zvols = GuestZvols(z, ds, engine) if self.target == "zvol" else None
        fresh = Fresh(self.make_runner(engine), Conditions(z, ds), zvols)
        try:
            z.zpool("import", "-f", "-d", "/dev", pool, timeout=self.guests.accel.deadline(120))
        except GuestError as e:
            return fresh, failed_lines(i, n_ops, "crash-import", f"zpool import after the "
                                       f"power cut: {e.what}")
        new.pool_spec = self.spec
        local = seq_dir / f"{name}.cut.json"
        local.write_text(json.dumps(line) + "\n")
        upload(z.guest, local, f"{REMOTE_DIR}/{local.name}", scale)
        lines = engine.oneshot("explore-recover", f"{REMOTE_DIR}/{local.name}", "--file",
                               str(line["path"]), "--ops", str(n_ops), timeout=120)
        (seq_dir / f"{name}.recover.jsonl").write_text(
            "".join(json.dumps(ln) + "\n" for ln in lines))
        z.zpool("scrub", "-w", pool, check=False,
                timeout=self.guests.accel.deadline(300))
        status = z.zpool("status", "-v", pool, check=False, timeout=self.guests.accel.deadline(60))
        if CLEAN not in status.stdout and all(ln.get("ok") for ln in lines
                                              if ln.get("event") == "explore-done"):
            lines = failed_lines(i, n_ops, "crash-pool-errors", "after the power cut, import "
                                 "and a scrub: " + " ".join(status.stdout.split())[-300:])
        return fresh, lines
