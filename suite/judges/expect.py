"""What a case declares it leaves behind: the faults it injected and their marks.

Declared two ways, both adding to one ``Leaves`` per case:

- by the fault itself: ``Zfs.zinject`` reads its own arguments (``-e corrupt -d
  DEV``: checksum errors on DEV and their ereports; ``-e io``: I/O errors and the
  data errors they leave; ``-E``: delay ereports) so a zinject case need not
  repeat what it did;
- by the case: ``@pytest.mark.leaves(ereports=[...], errors=[...], vdevs=[...],
  data_errors=True)`` for what a fault outside zinject causes (a buffer changed
  in flight fails Direct I/O write verification: ``dio_verify_wr``).

Anything the case did not declare is a finding.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Leaves:
    ereports: set[str] = field(default_factory=set)     # checksum, io, data, delay, ...
    errors: set[str] = field(default_factory=set)       # read, write, cksum
    vdevs: set[str] = field(default_factory=set)        # where errors may show ('' any)
    data_errors: bool = False                           # permanent errors may be listed
    why: list[str] = field(default_factory=list)        # what declared each, for the report

    def add(self, why: str, ereports=(), errors=(), vdevs=(), data_errors: bool = False) -> None:
        self.ereports |= set(ereports)
        self.errors |= set(errors)
        self.vdevs |= {v.rsplit("/", 1)[-1] for v in vdevs}
        self.data_errors = self.data_errors or data_errors
        self.why.append(why)

    def allows_errors(self, vdev: str, kind: str) -> bool:
        if kind not in self.errors:
            return False
        base = vdev.rsplit("/", 1)[-1]
        return not self.vdevs or "" in self.vdevs or any(same_disk(base, v) for v in self.vdevs)

    def from_marker(self, kwargs: dict) -> None:
        self.add("@pytest.mark.leaves(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
                 + ")", kwargs.get("ereports", ()), kwargs.get("errors", ()),
                 kwargs.get("vdevs", ()), bool(kwargs.get("data_errors", False)))

    def from_zinject(self, args: tuple[str, ...]) -> None:
        """What ``zinject ARGS`` will leave, when it arms a fault (not ``-c``)."""
        if not args or args[0] in ("-c", "-l") or "-c" in args:
            return
        opt = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("-")}
        dev = opt.get("-d", "")
        what = "zinject " + " ".join(args)
        if "-E" in opt or "-D" in opt:
            # I/O held past zio_slow_io_ms posts delay ereports, past the deadman's
            # ziotime deadman ones: both are what holding it means.
            self.add(what, ereports={"delay", "deadman"})
            return
        err = opt.get("-e", "")
        if err in ("corrupt", "checksum"):
            # On a device the layout may heal it; on a file's data (no -d) it is lost.
            # An O_DIRECT read that fails its checksum reports dio_verify_rd (it is
            # then retried through the ARC).
            self.add(what, ereports={"checksum", "data", "dio_verify_rd"}, errors={"cksum"},
                     vdevs={dev}, data_errors=not dev)
        elif err in ("io", "nxio", "dtl", "decompress", "decrypt"):
            # On a file's data (no -d) the fault is armed on the block's read, which a
            # leaf vdev issues: it may count as a READ error of that vdev (seen on
            # zfs-2.3.9 and zfs-2.4.4). That is the injected fault's mark.
            self.add(what, ereports={"io", "data", "checksum", "decompress", "authentication"},
                     errors={"read", "write"} if dev else {"read"},
                     vdevs={dev} if dev else set(),
                     data_errors=True)      # unrecoverable where the layout has no copy
        elif err:
            self.add(what, ereports={err})


_PARTITION = re.compile(r"p?\d+$")


def same_disk(vdev: str, declared: str) -> bool:
    """``nvme0n1p1`` is the disk ``nvme0n1`` a case injected on: ``zpool create`` on a
    whole disk labels it and uses its first partition (the vdev's name then ends in
    ``p1`` or ``1``)."""
    if vdev == declared:
        return True
    return bool(declared) and vdev.startswith(declared) and \
        bool(_PARTITION.fullmatch(vdev[len(declared):]))
