"""The guest's emulated NVMe disks: specs, sparse images, qemu options."""
from __future__ import annotations

import errno
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from suite.errors import VMError

DISK_MARGIN_MIB = 256

# In the guest: "<namespace> <serial>" for each NVMe namespace (not the controllers).
NVME_LISTING = ("modprobe nvme 2>/dev/null; for d in /sys/block/nvme*; do "
                "case ${d##*/} in nvme*c*) continue;; esac; "
                "[ -r $d/device/serial ] && echo \"${d##*/} $(cat $d/device/serial)\"; done; true")


def parse_nvme_listing(out: str) -> dict[str, str]:
    """{serial: '/dev/nvmeXn1'} from NVME_LISTING's output."""
    found = {}
    for line in out.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and re.fullmatch(r"nvme\d+n\d+", parts[0]):
            found[parts[1].strip()] = f"/dev/{parts[0]}"
    return found


@dataclass(frozen=True)
class NvmeDisk:
    index: int
    serial: str
    lbs: int
    size_mib: int


@dataclass(frozen=True)
class NvmeSpec:
    """``count`` emulated NVMe controllers, one namespace each.

    ``lbs`` is the logical (= physical) block size, one value for all disks or
    one per disk, e.g. ``lbs=(4096, 512)``. Serials are ``{serial_prefix}{i}``.
    """

    count: int = 2
    size_mib: int = 1024
    lbs: int | tuple[int, ...] = 4096
    serial_prefix: str = "zt"

    def lbs_for(self, index: int) -> int:
        if isinstance(self.lbs, int):
            return self.lbs
        if len(self.lbs) != self.count:
            raise VMError(f"NvmeSpec has {self.count} disks but {len(self.lbs)} block sizes {self.lbs}",
                          fix="give one lbs for all disks or exactly one per disk")
        return self.lbs[index]

    def disks(self) -> list[NvmeDisk]:
        out = []
        for i in range(self.count):
            lbs = self.lbs_for(i)
            if lbs not in (512, 1024, 2048, 4096):
                raise VMError(f"NVMe logical block size {lbs} is not supported by qemu",
                              fix="use 512, 1024, 2048 or 4096")
            out.append(NvmeDisk(i, f"{self.serial_prefix}{i}", lbs, self.size_mib))
        return out

    @property
    def total_mib(self) -> int:
        return self.count * self.size_mib


def check_disk_space(workdir: Path, need_mib: int) -> None:
    free_mib = shutil.disk_usage(workdir).free // (1 << 20)
    if free_mib < need_mib + DISK_MARGIN_MIB:
        raise VMError(f"not enough free space in {workdir} for the NVMe images: need {need_mib} MiB "
                      f"(+{DISK_MARGIN_MIB} MiB margin), have {free_mib} MiB",
                      fix="free space there, point the results/workdir at a bigger filesystem, "
                          "or lower NvmeSpec.size_mib/count")


def create_sparse(path: Path, size_mib: int) -> None:
    """A blank sparse image (any previous content is discarded)."""
    with open(path, "wb") as f:
        f.truncate(size_mib << 20)


def supports_odirect(path: Path) -> bool:
    """qemu cache=none needs O_DIRECT, which tmpfs (for one) refuses."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    os.close(fd)
    return True


def nvme_qemu_opts(disks: list[NvmeDisk], images: list[Path], cache: str) -> list[str]:
    opts: list[str] = []
    for d, img in zip(disks, images):
        opts += ["-drive", f"file={img},if=none,id=nvm{d.index},format=raw,cache={cache},discard=unmap",
                 "-device", f"nvme,serial={d.serial},drive=nvm{d.index},"
                            f"logical_block_size={d.lbs},physical_block_size={d.lbs}"]
    return opts
