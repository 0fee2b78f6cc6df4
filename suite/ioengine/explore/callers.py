"""Explore, who issues the requests to OpenZFS: the engine itself (a user iovec from
this process), or an in-kernel caller between the engine and the file.

``loop``: the sequence's file on the dataset backs a loop device (``losetup``, with
``--direct-io=on|off`` and ``--sector-size 512|4096`` as the sequence drew them); the
ops go to ``/dev/loopN`` as to any block device, and the loop driver's kworker hands
OpenZFS bvec iterators with no user memory behind them (with direct-io on, as
O_DIRECT requests). When the ops are done the device is let go and the backing file
itself must hold what the model says.

``loopfs``: the same loop device carries an ext4 file system (``mkfs.ext4``, mounted
on a fresh folder); the target is a file in it, so the explore ops are a file's ops
(fsx-style: writes, reads, mmap, truncate, punch, copies) through ext4, whose bios the
loop driver hands OpenZFS. When the ops are done the file system is unmounted and
``e2fsck -fn`` must find it clean.

``overlay``: an overlayfs whose upper layer is a folder on the dataset (the lower one
beside it); the target is opened through the merged folder, so every request, O_DIRECT
included, reaches OpenZFS from overlayfs' own calls with overlay's file. When the ops
are done the upper file on the dataset itself must hold what the model says.

``nfs``: the kernel NFS server exports a folder of the dataset to 127.0.0.1 alone
(NFSv4.2, the export the v4 root: ``fsid=0``) and the folder is mounted back; the target
is opened through the mount, so every request reaches OpenZFS from nfsd's own calls
(reads by splice, COPY, CLONE, DEALLOCATE as the client's ops ask). The server is started
if it is not running (a short grace period) and left running for the guest's next
sequence. When the ops are done the mount and the export are let go and the file on the
dataset itself must hold what the model says.

A caller is data in the sequence (``"caller": {"kind": "loop", "dio": 1, "lbs":
4096}``); none means the engine itself.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any

CALLERS = ("loop", "loopfs", "overlay", "nfs")
NFSD = "/proc/fs/nfsd"
LOOPFS_MIN = 64 << 20           # ext4's own metadata beside a file of the sequence's size
LOOP_SECTOR_SIZES = (512, 4096)


class CallerError(OSError):
    """The caller could not be set up (no loop module, losetup refused): the run is
    a setup error, not a finding."""


@dataclass
class Loop:
    backing: str
    size: int
    dio: bool
    lbs: int
    device: str = ""

    def attach(self, timeout_s: float = 60.0) -> str:
        """The backing file made (sparse, ``size`` bytes) and a loop device over it."""
        fd = os.open(self.backing, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, self.size)
        finally:
            os.close(fd)
        subprocess.run(["modprobe", "loop"], capture_output=True, timeout=timeout_s)
        argv = ["losetup", "--find", "--show", f"--direct-io={'on' if self.dio else 'off'}",
                "--sector-size", str(self.lbs), self.backing]
        for attempt in range(5):    # two setting up at once may race for one free device
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
            if p.returncode == 0 and p.stdout.strip():
                break
            time.sleep(0.2 * (attempt + 1))
        if p.returncode != 0 or not p.stdout.strip():
            raise CallerError(p.returncode or 1, f"{' '.join(argv)}: {p.stderr.strip()}")
        self.device = p.stdout.strip()
        return self.device

    def detach(self, timeout_s: float = 60.0) -> str:
        """The device let go (its cached writes flushed to the file first); '' or why not."""
        if not self.device:
            return ""
        subprocess.run(["blockdev", "--flushbufs", self.device], capture_output=True,
                       timeout=timeout_s)
        p = subprocess.run(["losetup", "-d", self.device], capture_output=True, text=True,
                           timeout=timeout_s)
        self.device = ""
        return "" if p.returncode == 0 else f"losetup -d: {p.stderr.strip()}"

    def backing_bytes(self, n: int) -> bytes:
        """The first ``n`` bytes of the backing file, read through the page cache."""
        with open(self.backing, "rb") as f:
            return f.read(n)

    @property
    def blockdev(self) -> bool:
        return True

    def files(self) -> list[str]:
        return [self.backing]


def umount(mnt: str, timeout_s: float, patience_s: float = 10.0) -> str:
    """``mnt`` unmounted; '' or why not. A file io_uring had (registered or in a
    ring just closed) is released by a kworker a moment later: busy is retried."""
    deadline = time.monotonic() + patience_s
    while True:
        p = subprocess.run(["umount", mnt], capture_output=True, text=True, timeout=timeout_s)
        if p.returncode == 0:
            return ""
        if "busy" not in p.stderr or time.monotonic() > deadline:
            return f"umount: {p.stderr.strip()}"
        time.sleep(0.25)


def _run(argv: list[str], timeout_s: float, what: str) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise CallerError(p.returncode or 1, f"{what}: {' '.join(argv)}: "
                                             f"{(p.stderr or p.stdout).strip()[-300:]}")
    return p.stdout


@dataclass
class LoopFs:
    """ext4 on a loop device over a file on the dataset; the target is a file in it."""
    backing: str
    size: int
    dio: bool
    lbs: int
    loop: Loop | None = None
    mnt: str = ""

    @property
    def blockdev(self) -> bool:
        return False

    def attach(self, timeout_s: float = 60.0) -> str:
        self.loop = Loop(self.backing, max(LOOPFS_MIN, 8 * self.size), self.dio, self.lbs)
        dev = self.loop.attach(timeout_s)
        _run(["mkfs.ext4", "-q", "-F", "-b", "4096", dev], max(timeout_s, 120), "mkfs")
        self.mnt = self.backing + ".mnt"
        os.makedirs(self.mnt, exist_ok=True)
        _run(["mount", "-t", "ext4", dev, self.mnt], timeout_s, "mount")
        return os.path.join(self.mnt, "target")

    def detach(self, timeout_s: float = 60.0) -> str:
        """Unmounted, checked (e2fsck -fn), let go; '' or what is wrong."""
        if self.loop is None:
            return ""
        why = ""
        if self.mnt and os.path.ismount(self.mnt):
            why = umount(self.mnt, timeout_s)
        if not why:
            p = subprocess.run(["e2fsck", "-fn", self.loop.device], capture_output=True,
                               text=True, timeout=max(timeout_s, 120))
            if p.returncode != 0:
                why = f"e2fsck -fn exit {p.returncode}: " + " / ".join(
                    (p.stdout + p.stderr).strip().splitlines()[-6:])
        gone = self.loop.detach(timeout_s)
        return why or gone

    def check(self, model_bytes: bytes) -> str:
        """What the caller itself must hold once let go: e2fsck said it; nothing more."""
        return ""

    def files(self) -> list[str]:
        return [self.backing]


@dataclass
class Overlay:
    """overlayfs, its upper layer on the dataset; the target opened through it."""
    base: str
    size: int
    mnt: str = ""

    @property
    def blockdev(self) -> bool:
        return False

    def dirs(self) -> tuple[str, str, str, str]:
        return tuple(f"{self.base}.{d}" for d in ("lower", "upper", "work", "merged"))  # type: ignore[return-value]

    def attach(self, timeout_s: float = 60.0) -> str:
        lower, upper, work, merged = self.dirs()
        for d in (lower, upper, work, merged):
            os.makedirs(d, exist_ok=True)
        subprocess.run(["modprobe", "overlay"], capture_output=True, timeout=timeout_s)
        _run(["mount", "-t", "overlay", "overlay", "-o",
              f"lowerdir={lower},upperdir={upper},workdir={work}", merged], timeout_s, "mount")
        self.mnt = merged
        return os.path.join(merged, "target")

    def detach(self, timeout_s: float = 60.0) -> str:
        if not self.mnt:
            return ""
        why = umount(self.mnt, timeout_s)
        self.mnt = ""
        return why

    def upper_bytes(self, n: int) -> bytes:
        with open(os.path.join(self.dirs()[1], "target"), "rb") as f:
            return f.read(n)

    def files(self) -> list[str]:
        return []


@dataclass
class Nfs:
    """knfsd exporting a folder of the dataset, mounted back; the target opened through it."""
    base: str
    size: int
    mnt: str = ""
    exported: str = ""

    @property
    def blockdev(self) -> bool:
        return False

    def dirs(self) -> tuple[str, str]:
        return f"{self.base}.export", f"{self.base}.nfs"

    def attach(self, timeout_s: float = 60.0) -> str:
        export, mnt = self.dirs()
        for d in (export, mnt):
            os.makedirs(d, exist_ok=True)
        start_nfsd(timeout_s)
        _run(["exportfs", "-o", "rw,no_root_squash,fsid=0,insecure,no_subtree_check,sync",
              f"127.0.0.1:{export}"], timeout_s, "exportfs")
        self.exported = export
        deadline = time.monotonic() + max(timeout_s, 60.0)   # a fresh server's grace period
        while True:
            p = subprocess.run(["mount", "-t", "nfs", "-o", "vers=4.2", "127.0.0.1:/", mnt],
                               capture_output=True, text=True, timeout=timeout_s)
            if p.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise CallerError(p.returncode or 1,
                                  f"mount -t nfs 127.0.0.1:/ {mnt}: {p.stderr.strip()[-300:]}")
            time.sleep(2)
        self.mnt = mnt
        return os.path.join(mnt, "target")

    def detach(self, timeout_s: float = 60.0) -> str:
        why = umount(self.mnt, timeout_s) if self.mnt else ""
        self.mnt = ""
        if self.exported:
            subprocess.run(["exportfs", "-u", f"127.0.0.1:{self.exported}"],
                           capture_output=True, timeout=timeout_s)
            self.exported = ""
        return why

    def upper_bytes(self, n: int) -> bytes:
        with open(os.path.join(self.dirs()[0], "target"), "rb") as f:
            return f.read(n)

    def files(self) -> list[str]:
        return []


def start_nfsd(timeout_s: float) -> None:
    """The kernel NFS server, v4 only, started if no thread runs (a 10 s grace
    period); rpc.mountd too (nfsd asks it about exports)."""
    if not os.path.exists(f"{NFSD}/threads"):
        subprocess.run(["modprobe", "nfsd"], capture_output=True, timeout=timeout_s)
        _run(["mount", "-t", "nfsd", "nfsd", NFSD], timeout_s, "mount nfsd")
    with open(f"{NFSD}/threads") as f:
        running = f.read().strip() not in ("", "0")
    if not running:
        for knob in ("nfsv4gracetime", "nfsv4leasetime"):
            try:
                with open(f"{NFSD}/{knob}", "w") as f:
                    f.write("10")
            except OSError:
                pass
        os.makedirs("/var/lib/nfs/v4recovery", exist_ok=True)
        _run(["rpc.nfsd", "-N", "3", "--no-udp", "4"], timeout_s, "rpc.nfsd")
    if subprocess.run(["pgrep", "-x", "rpc.mountd"], capture_output=True).returncode != 0:
        _run(["rpc.mountd", "-N", "2", "-N", "3"], timeout_s, "rpc.mountd")


def remove_dirs(c: Loop | LoopFs | Overlay | Nfs) -> None:
    """The folders a caller made (after a passing run: a failing one keeps its files)."""
    dirs = list(c.dirs()) if isinstance(c, (Overlay, Nfs)) else \
        [c.mnt] if isinstance(c, LoopFs) else []
    for d in dirs:
        if d and os.path.isdir(d) and not os.path.ismount(d):
            shutil.rmtree(d, ignore_errors=True)


def make(caller: dict[str, Any] | None, path: str,
         size: int) -> Loop | LoopFs | Overlay | Nfs | None:
    """The caller a sequence names over its file ``path``, or None (the engine itself)."""
    if not caller:
        return None
    kind = caller.get("kind")
    if kind not in CALLERS:
        raise ValueError(f"unknown caller {kind!r} (known: {', '.join(CALLERS)})")
    if kind == "overlay":
        return Overlay(path, size)
    if kind == "nfs":
        return Nfs(path, size)
    lbs = int(caller.get("lbs", 4096))
    if lbs not in LOOP_SECTOR_SIZES:
        raise ValueError(f"loop sector size {lbs} is not one of {LOOP_SECTOR_SIZES}")
    if kind == "loopfs":
        return LoopFs(path, size, bool(caller.get("dio")), lbs)
    return Loop(path, size, bool(caller.get("dio")), lbs)


def describe(c: Loop | LoopFs | Overlay | Nfs) -> str:
    """The caller's setup, as the engine announces it."""
    if isinstance(c, Overlay):
        return f"overlayfs over {c.base}.upper (the dataset), "
    if isinstance(c, Nfs):
        return f"knfsd exporting {c.base}.export (the dataset), NFSv4.2 mounted back, "
    dio = "--direct-io=on " if c.dio else ""
    fs = "mkfs.ext4 and mount on it, " if isinstance(c, LoopFs) else ""
    return f"losetup {dio}--sector-size {c.lbs} over {c.backing}, {fs}"
