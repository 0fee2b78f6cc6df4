"""``python -m suite shell``: a guest with the build loaded and a pool, and a shell in it.

Like ``vng`` with a shell, but the guest is the one cases get: the build under
test inserted and verified, NVMe namespaces, a pool ``tank`` mounted under
/tmp/zfs, and the build's commands first on PATH.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from suite import paths
from suite.build.pipeline import BuildOptions, build
from suite.vm.ssh import virtme_key
from suite.guest.zfs import PoolSpec, Zfs
from suite.vm.accel import for_build
from suite.vm.machine import VM, NvmeSpec, VMSpec


def run_shell(opts: BuildOptions, accel: str = "auto", nvme: int = 2, keep: bool = False) -> int:
    record, _ = build(opts)
    a = for_build(accel, record.kernel)
    workdir = paths.stamped("shell")
    vm = VM(VMSpec(kernel_image=Path(record.kernel["vmlinuz"]), accel=a, workdir=workdir,
                   nvme=NvmeSpec(count=nvme), name="ozfs-shell"))
    vm.start()
    try:
        guest = vm.wait_ready()
        z = Zfs(guest, record, devices=vm.nvme_devices)
        loaded = z.load()
        z.create_pool(PoolSpec())
        bindirs = sorted({str(Path(p).parent / ".libs") for p in record.commands.values()})
        print(f"\n{record.summary()}\nloaded: {loaded}\npool tank on {z.nvme_devices()} "
              f"mounted at /tmp/zfs/tank\nconsole: {vm.console_path}\n")
        ssh = ["ssh", "-p", str(vm.port), "-i", str(virtme_key()), "-o",
               "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-t", "root@127.0.0.1",
               f"export PATH={':'.join(bindirs)}:$PATH LD_LIBRARY_PATH={bindirs[0]}; "
               f"cd /tmp/zfs/tank; exec bash --norc -i"]
        if not sys.stdin.isatty() or shutil.which("ssh") is None:
            print("no terminal here; reach the guest with:\n  " + " ".join(ssh[:-1]))
            if keep:
                while vm.alive:
                    time.sleep(5)
            return 0
        return subprocess.call(ssh)
    finally:
        if keep and sys.stdin.isatty():
            print(f"guest left running (qemu pid {vm.pid}); kill it when done")
        else:
            vm.kill()
