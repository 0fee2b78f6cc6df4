"""A fresh guest for a session whose guest tripped: the same shape, the build
loaded and verified, a pool of the same layout and the case's dataset made again,
the case's console watch following the new console (what the old one showed
stays the case's, as across a power cut), and a runner and conditions bound to
it. The case's teardown judges the last guest (``ZfsGuest.latest``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from suite.casekit.engine import EngineRunner
from suite.explore.conditions import Conditions, prepare_guest
from suite.explore.session import Fresh, SequenceRunner
from suite.explore.zvol import GuestZvols
from suite.guest.lifecycle import Guests, tripwire
from suite.vm.console import ConsoleWatcher

MakeRunner = Callable[[EngineRunner], SequenceRunner]


class FreshGuests:
    """``renew(why)`` for :class:`~suite.explore.session.Explorer`: boots the next
    guest of the worker's ``guests`` in place of the current one."""

    def __init__(self, guests: Guests, dataset: Any, case_dir: Path, target: str,
                 make_runner: MakeRunner, props: dict[str, str] | None = None,
                 log: Callable[[str], None] = print) -> None:
        g = guests.current
        assert g is not None and g.pool_spec is not None, "a session's guest has its pool"
        self.guests, self.case_dir, self.target = guests, case_dir, target
        self.spec, self.short = g.pool_spec, dataset.name.split("/", 1)[1]
        self.props, self.make_runner, self.log = dict(props or {}), make_runner, log
        self.boots = 0

    def __call__(self, why: str) -> Fresh:
        old = self.guests.current
        assert old is not None
        watch = old.watch
        old.zfs.guest.set_tripwire(None)
        old.fit = False             # the case's teardown must not ask it for its dataset
        self.guests.recycle()
        self.log(f"explore: booting a fresh guest ({why[:160]})")
        new = self.guests.acquire(old.shape, self.case_dir / "commands.log")
        self.boots += 1
        old.replaced_by = new
        if watch is not None:
            watch.follow(ConsoleWatcher(new.vm.console_path), new.zfs.param_values())
            new.watch = watch
        new.zfs.guest.mark(f"ozfs-vmci: explore: fresh guest {self.boots} after: {why[:200]}")
        new.zfs.guest.set_tripwire(tripwire(new.vm.console_path))
        prepare_guest(new)
        pool = new.zfs.create_pool(self.spec)
        new.pool_spec = self.spec
        ds = pool.dataset(self.short, self.props)
        engine = EngineRunner(new.zfs.guest, self.case_dir / "engine",
                              scale=self.guests.accel.scale)
        zvols = GuestZvols(new.zfs, ds, engine) if self.target == "zvol" else None
        return Fresh(self.make_runner(engine), Conditions(new.zfs, ds), zvols)
