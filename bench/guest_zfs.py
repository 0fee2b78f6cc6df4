#!/usr/bin/env python3
"""Benchmark: the fixed costs a case pays in a guest with a ZFS build.

    python bench/guest_zfs.py [--series async-dio] [--accel auto] [--resets 5] [--poison]

Prints numbers only: boot to first command, module load (insmod spl+zfs and
srcversion check), pool create (stripe over 2 NVMe namespaces), pool reset the
way cases do it (dataset create + destroy), median of --resets, and a fixed I/O
round (64 MiB written and read back with O_DIRECT and buffered, then the dataset
destroyed: the allocations and frees a case makes). ``--poison`` boots with the
kernel's own poisoning (``POISON``, the guest shape of the teardown cases): run
it with and without to see what poisoning costs a case.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.build.pipeline import BuildOptions, build  # noqa: E402
from suite.guest.lifecycle import POISON  # noqa: E402
from suite.guest.zfs import PoolSpec, Zfs  # noqa: E402
from suite.vm.vng import BASE_APPEND  # noqa: E402
from suite.vm.accel import choose  # noqa: E402
from suite.vm.machine import VM, NvmeSpec, VMSpec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", action="append", default=[])
    ap.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    ap.add_argument("--resets", type=int, default=5)
    ap.add_argument("--poison", action="store_true",
                    help="boot with init_on_free=1 page_poison=1 slub_debug=FZP")
    a = ap.parse_args()
    record, _ = build(BuildOptions(series=a.series or ["async-dio"]))
    kernel = Path(record.kernel["vmlinuz"])
    acc = choose(a.accel, kernel)
    print(f"build {record.key} ({record.source['describe']}), kernel {kernel.name}, "
          f"accel {acc.name}")
    with tempfile.TemporaryDirectory(prefix="ozvm-bench-") as tmp:
        vm = VM(VMSpec(kernel_image=kernel, accel=acc, workdir=Path(tmp),
                       nvme=NvmeSpec(count=2, size_mib=1024), name="ozvm-bench-zfs",
                       append=list(BASE_APPEND) + (list(POISON) if a.poison else [])))
        t = time.monotonic()
        vm.start()
        try:
            guest = vm.wait_ready()
            guest.run("true", timeout=60)
            boot = time.monotonic() - t
            z = Zfs(guest, record, devices=vm.nvme_devices)
            t = time.monotonic()
            z.load()
            load = time.monotonic() - t
            t = time.monotonic()
            pool = z.create_pool(PoolSpec())
            create = time.monotonic() - t
            resets = []
            for _ in range(a.resets):
                t = time.monotonic()
                ds = pool.dataset("case", {"primarycache": "metadata"})
                z.zfs("destroy", "-R", "-f", ds.name)
                resets.append(time.monotonic() - t)
            rounds = [io_round(z, pool) for _ in range(3)]
        finally:
            vm.kill()
    print(f"boot to first command  {boot:6.1f} s")
    print(f"module load + verify   {load:6.1f} s")
    print(f"pool create (2 NVMe)   {create:6.1f} s")
    print(f"kernel command line    {'poisoning: ' + ' '.join(POISON) if a.poison else 'default'}")
    print(f"pool reset (dataset)   median {statistics.median(resets):.1f} s, "
          f"min {min(resets):.1f}, max {max(resets):.1f} over {len(resets)}")
    print(f"I/O round (64 MiB)     median {statistics.median(rounds):.1f} s, "
          f"min {min(rounds):.1f}, max {max(rounds):.1f} over {len(rounds)}")
    return 0


IO_ROUND = ("dd if=/dev/urandom of={d}/src bs=1M count=64 status=none && "
            "dd if={d}/src of={d}/dio bs=1M oflag=direct status=none && "
            "dd if={d}/dio of=/dev/null bs=1M iflag=direct status=none && "
            "dd if={d}/dio of={d}/buf bs=128k status=none && sync")


def io_round(z: Zfs, pool) -> float:
    """A dataset created, 64 MiB through O_DIRECT and buffered paths, destroyed."""
    t = time.monotonic()
    ds = pool.dataset("bench", {"recordsize": "128K"})
    z.guest.run(IO_ROUND.format(d=ds.mountpoint), timeout=600)
    z.zfs("destroy", "-R", "-f", ds.name)
    return time.monotonic() - t


if __name__ == "__main__":
    raise SystemExit(main())
