#!/usr/bin/env python3
"""Benchmark: how long a guest takes to boot and to run a trivial command.

    python bench/vm_boot.py [--accel auto|kvm|tcg] [--kernel /boot/vmlinuz-X] [--boots 1] [--cmds 10]

Prints numbers only (no pass/fail): accelerator choice, vng start to qemu
holding the SSH port, boot to first command (SSH + setup script), and the
round trip of ``true`` over an open connection.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite import accel  # noqa: E402
from suite.vm.machine import VM, NvmeSpec, VMSpec  # noqa: E402


def default_kernel() -> Path:
    running = Path(f"/boot/vmlinuz-{platform.release()}")
    if running.is_file():
        return running
    found = sorted(Path("/boot").glob("vmlinuz-*"))
    if not found:
        sys.exit("no /boot/vmlinuz-*; pass --kernel")
    return found[-1]


def one_boot(kernel: Path, acc: accel.Accel, nvme: int, cmds: int, workdir: Path) -> dict[str, float]:
    spec = VMSpec(kernel_image=kernel, accel=acc, workdir=workdir, name="ozvm-bench",
                  nvme=NvmeSpec(count=nvme, size_mib=256))
    v = VM(spec)
    t0 = time.monotonic()
    try:
        v.start()
        t_port = time.monotonic() - t0
        g = v.wait_ready()
        t_ready = time.monotonic() - t0
        g.run("true", timeout=acc.deadline(10))
        t_first = time.monotonic() - t0
        lat = []
        for _ in range(cmds):
            s = time.monotonic()
            g.run("true", timeout=acc.deadline(10), log=False)
            lat.append(time.monotonic() - s)
    finally:
        v.kill()
    return {"port": t_port, "ready": t_ready, "first": t_first,
            "cmd_min": min(lat), "cmd_med": statistics.median(lat), "cmd_max": max(lat)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    ap.add_argument("--kernel", type=Path, default=None)
    ap.add_argument("--boots", type=int, default=1)
    ap.add_argument("--cmds", type=int, default=10)
    ap.add_argument("--nvme", type=int, default=2)
    a = ap.parse_args()
    kernel = a.kernel or default_kernel()

    t = time.monotonic()
    acc = accel.choose(a.accel, kernel)
    print(f"kernel        {kernel}")
    print(f"accel         {acc.name} (scale x{acc.scale:g}) chosen in {time.monotonic() - t:.2f}s: {acc.reason}")
    for i in range(a.boots):
        with tempfile.TemporaryDirectory(prefix="ozvm-bench-") as tmp:
            r = one_boot(kernel, acc, a.nvme, a.cmds, Path(tmp))
        print(f"boot {i + 1}: qemu holds SSH port {r['port']:6.2f}s | ready (ssh+setup) {r['ready']:6.2f}s | "
              f"boot to first command {r['first']:6.2f}s | `true` x{a.cmds}: "
              f"min {r['cmd_min'] * 1000:.0f} ms, median {r['cmd_med'] * 1000:.0f} ms, "
              f"max {r['cmd_max'] * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
