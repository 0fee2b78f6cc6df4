#!/usr/bin/env python3
"""Benchmark: how long a guest takes to boot and to run a trivial command.

    python bench/vm_boot.py [--accel auto|kvm|tcg] [--kernel /boot/vmlinuz-X] [--boots 1] [--cmds 10]
                            [--guests 1] [--cpus 2]

Prints numbers only (no pass/fail): accelerator choice, vng start to qemu
holding the SSH port, boot to first command (SSH + setup script), the round
trip of ``true`` over an open connection, and a small CPU-bound guest command
(``python3`` summing 3M integers). ``--guests N`` boots N guests at once (as N
pytest-xdist workers do) and ``--cpus`` sets each one's vCPUs: what
``suite/vm/cpus.py`` chooses from.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.vm import accel  # noqa: E402
from suite.vm.machine import VM, NvmeSpec, VMSpec  # noqa: E402


def default_kernel() -> Path:
    running = Path(f"/boot/vmlinuz-{platform.release()}")
    if running.is_file():
        return running
    found = sorted(Path("/boot").glob("vmlinuz-*"))
    if not found:
        sys.exit("no /boot/vmlinuz-*; pass --kernel")
    return found[-1]


def one_boot(kernel: Path, acc: accel.Accel, nvme: int, cmds: int, workdir: Path,
             cpus: int = 2, name: str = "ozvm-bench") -> dict[str, float]:
    spec = VMSpec(kernel_image=kernel, accel=acc, workdir=workdir, name=name,
                  nvme=NvmeSpec(count=nvme, size_mib=256), cpus=cpus)
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
        s = time.monotonic()
        g.run("python3 -c 'sum(range(3000000))'", timeout=acc.deadline(60), log=False)
        t_py = time.monotonic() - s
    finally:
        v.kill()
    return {"port": t_port, "ready": t_ready, "first": t_first, "python": t_py,
            "cmd_min": min(lat), "cmd_med": statistics.median(lat), "cmd_max": max(lat)}


def boot_together(kernel: Path, acc: accel.Accel, a: argparse.Namespace) -> list[dict[str, float]]:
    """``a.guests`` guests booted and driven at the same time, one thread each."""
    out: list[dict[str, float]] = [{} for _ in range(a.guests)]

    def one(i: int) -> None:
        with tempfile.TemporaryDirectory(prefix="ozvm-bench-") as tmp:
            out[i] = one_boot(kernel, acc, a.nvme, a.cmds, Path(tmp), a.cpus, f"ozvm-bench{i}")
    threads = [threading.Thread(target=one, args=(i,)) for i in range(a.guests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    ap.add_argument("--kernel", type=Path, default=None)
    ap.add_argument("--boots", type=int, default=1)
    ap.add_argument("--cmds", type=int, default=10)
    ap.add_argument("--nvme", type=int, default=2)
    ap.add_argument("--guests", type=int, default=1, help="guests booted at once")
    ap.add_argument("--cpus", type=int, default=2, help="vCPUs of each guest")
    a = ap.parse_args()
    kernel = a.kernel or default_kernel()

    t = time.monotonic()
    acc = accel.choose(a.accel, kernel)
    print(f"kernel        {kernel}")
    print(f"accel         {acc.name} (scale x{acc.scale:g}) chosen in {time.monotonic() - t:.2f}s: {acc.reason}")
    print(f"guests        {a.guests} at once, {a.cpus} vCPU(s) each")
    for i in range(a.boots):
        for j, r in enumerate(boot_together(kernel, acc, a)):
            if not r:
                print(f"boot {i + 1}.{j}: failed (see the traceback above)")
                continue
            print(f"boot {i + 1}.{j}: qemu holds SSH port {r['port']:6.2f}s | ready (ssh+setup) "
                  f"{r['ready']:6.2f}s | boot to first command {r['first']:6.2f}s | `true` x{a.cmds}: "
                  f"min {r['cmd_min'] * 1000:.0f} ms, median {r['cmd_med'] * 1000:.0f} ms, "
                  f"max {r['cmd_max'] * 1000:.0f} ms | python {r['python']:5.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
