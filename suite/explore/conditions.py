"""What a sequence runs under in the guest: its dataset properties and module
parameters put in place (:class:`Conditions`), and the dataset and build commands
the engine's ZFS ops need (:class:`GuestZfs`)."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from suite.errors import SuiteError
from suite.explore.ops import Sequence
from suite.ioengine.explore.origins import RESERVE_HUGEPAGES
from suite.ioengine.explore.served import PROBES


def prepare_guest(zguest: Any) -> str | None:
    """What a guest (a ``ZfsGuest``) needs before sequences run in it: 2 MiB pages
    reserved for the ``hugetlb`` page origin (a guest that cannot reserve them
    falls back to anon memory, and the op says so), and kprobes on the Direct I/O
    entry points, so the engine tells which path served each O_DIRECT request
    (``suite/ioengine/explore/served.py``). Returns why the probes could not be
    armed (a build before Direct I/O), or None: the engine then reads the pool's
    iostats alone."""
    zguest.zfs.guest.run(RESERVE_HUGEPAGES, timeout=60, check=False)
    try:
        zguest.kprobes().install(*PROBES)
    except SuiteError as e:
        return str(e).splitlines()[0]
    return None

@dataclass(frozen=True)
class GuestZfs:
    """What the guest engine needs for the ZFS ops: the dataset the targets live
    on, the build's ``zfs`` and ``zpool`` programs and the library directory
    they need. Given as plain paths (``--zfs-cmd PATH``), so a reproducer's
    translation of the build's commands to bare ``zfs``/``zpool`` applies."""
    dataset: str
    zfs: str
    zpool: str
    libdir: str | None = None

    @classmethod
    def from_commands(cls, dataset: str, zfs_cmd: str, zpool_cmd: str) -> "GuestZfs":
        """From ``Zfs.cmd()``'s shell prefixes, ``[LD_LIBRARY_PATH=DIR ]PROGRAM``."""
        (zfs, zlib), (zpool, plib) = _program(zfs_cmd), _program(zpool_cmd)
        return cls(dataset, zfs, zpool, zlib or plib)

    def engine_args(self) -> list[str]:
        return ["--zfs-dataset", self.dataset, "--zfs-cmd", self.zfs, "--zpool-cmd", self.zpool,
                *(["--zfs-libdir", self.libdir] if self.libdir else [])]


def _program(cmd: str) -> tuple[str, str | None]:
    """(program, LD_LIBRARY_PATH or None) of a shell prefix ``[NAME=VALUE ...] PROGRAM``."""
    words = shlex.split(cmd)
    env = dict(w.split("=", 1) for w in words[:-1] if "=" in w)
    return words[-1], env.get("LD_LIBRARY_PATH")


class Conditions:
    """Puts a sequence's dataset properties and module parameters in place (only
    those that change; the case's fixture restores the parameters afterwards).
    A zvol target's properties are the zvol's own: the session gives none here."""

    def __init__(self, zfs_guest: Any, dataset: Any) -> None:
        self.zfs, self.dataset = zfs_guest, dataset
        self.props: dict[str, str] = {}
        self.params: dict[str, int] = {}

    def __call__(self, seq: Sequence) -> None:
        changed = {k: v for k, v in sorted(seq.props.items()) if self.props.get(k) != v}
        if changed:         # one command: each costs seconds on a TCG guest
            self.zfs.zfs("set", *(f"{k}={v}" for k, v in changed.items()), self.dataset.name)
            self.props.update(changed)
        for k, v in sorted(seq.params.items()):
            if self.params.get(k) != v:
                self.zfs.set_param(k, v)
                self.params[k] = v

    def declare(self, why: str, ereports: set[str]) -> None:
        """What the sequences' ops may leave, for the case's after-case judges."""
        self.zfs.leaves.add(why, ereports=ereports)

    def guest_zfs(self) -> GuestZfs:
        """The dataset and the build's commands, for the engine's ZFS ops."""
        return GuestZfs.from_commands(self.dataset.name, self.zfs.cmd("zfs"),
                                      self.zfs.cmd("zpool"))


def dataset_props(zfs_guest: Any, name: str) -> set[str]:
    """The properties this build's datasets have."""
    r = zfs_guest.zfs("get", "-H", "-o", "property", "all", name, check=False)
    return set(r.stdout.split())
