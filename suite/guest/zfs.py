"""OpenZFS inside a guest: load the build, prove it is loaded, params, pools.

Everything goes through a :class:`suite.vm.ssh.Guest` (SSH). The build tree is
visible in the guest at the same path (virtme-ng shares the host root), so the
build's own ``zpool``/``zfs``/``zinject``/``zdb`` libtool wrappers run as they are.
"""
from __future__ import annotations

import shlex
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from suite.build.recipe import BuildRecord
from suite.errors import GuestError, SuiteError
from suite.ioengine.plan import DEFAULT_PARAM_DIR as PARAMS
from suite.judges.expect import Leaves


class ModuleMismatch(SuiteError):
    """The module loaded in the guest is not the build under test."""


class ParamNotSet(SuiteError):
    """A module parameter does not read back as written."""


@dataclass
class PoolSpec:
    """A pool layout over the guest's NVMe namespaces."""
    layout: str = "stripe"            # stripe | mirror | raidz | raidz2
    ashift: int = 12
    props: dict[str, str] = field(default_factory=dict)   # pool-level -o
    name: str = "tank"
    log: int = 0                      # trailing devices that form a separate log (SLOG)

    def vdev_args(self, devices: list[str]) -> list[str]:
        if self.log:
            if len(devices) <= self.log:
                raise SuiteError(f"a pool with {self.log} log device(s) needs more than "
                                 f"{self.log} NVMe devices, the guest has {len(devices)}",
                                 fix="ask for more with @pytest.mark.guest(nvme=N)")
            main, logs = devices[:-self.log], devices[-self.log:]
            return [*PoolSpec(self.layout, self.ashift, self.props, self.name).vdev_args(main),
                    "log", *logs]
        need = {"stripe": 1, "mirror": 2, "raidz": 2, "raidz1": 2, "raidz2": 3}
        if self.layout not in need:
            raise SuiteError(f"unknown pool layout {self.layout!r}",
                             fix="use stripe, mirror, raidz or raidz2")
        if len(devices) < need[self.layout]:
            raise SuiteError(f"layout {self.layout} needs {need[self.layout]} NVMe devices, "
                             f"the guest has {len(devices)}",
                             fix="ask for more with @pytest.mark.guest(nvme=N)")
        return devices if self.layout == "stripe" else [self.layout, *devices]


class Zfs:
    """The build under test, driven inside one guest."""

    def __init__(self, guest, record: BuildRecord, mnt_root: str = "/tmp/zfs",
                 devices: Callable[[], dict[str, str]] | None = None,
                 load_params: dict[str, str] | None = None) -> None:
        self.guest = guest
        self.record = record
        # zfs.ko parameters every load of this guest passes (``--zfs-param``: a gate's
        # head side with a tunable the pull request adds)
        self.load_params = dict(load_params or {})
        self.mnt_root = mnt_root
        self._devices = devices        # VM.nvme_devices: {serial: /dev/nvmeXn1}
        self.leaves = Leaves()         # what the running case may leave (suite/judges)

    # -- commands --------------------------------------------------------------

    def cmd(self, name: str) -> str:
        """Shell prefix that runs the build's ``name`` command in the guest.

        The build tree's ``./zfs`` is a libtool wrapper script (2-4 s per call
        under TCG); the real binary is ``.libs/zfs`` and only needs the build's
        library directory, so call that directly when it is there.
        """
        wrapper = Path(self.record.commands[name])
        real = wrapper.parent / ".libs" / wrapper.name
        if real.exists():
            return (f"LD_LIBRARY_PATH={shlex.quote(str(real.parent))} "
                    f"{shlex.quote(str(real))}")
        return shlex.quote(str(wrapper))

    def run(self, tool: str, *args: str, timeout: float = 120, check: bool = True):
        line = " ".join([self.cmd(tool), *map(shlex.quote, args)])
        return self.guest.run(line, timeout=timeout, check=check)

    def zpool(self, *args: str, **kw):
        return self.run("zpool", *args, **kw)

    def zfs(self, *args: str, **kw):
        return self.run("zfs", *args, **kw)

    def zinject(self, *args: str, **kw):
        """zinject; a fault it arms is declared as what the case may leave behind."""
        self.leaves.from_zinject(args)
        return self.run("zinject", *args, **kw)

    # -- modules ---------------------------------------------------------------

    def loaded_srcversions(self) -> dict[str, str | None]:
        """srcversion of the loaded spl and zfs (None: not loaded), in one command."""
        r = self.guest.run("for m in spl zfs; do echo $m $(cat /sys/module/$m/srcversion "
                           "2>/dev/null || echo -); done", timeout=30, check=False)
        seen = dict(ln.split() for ln in r.stdout.splitlines() if len(ln.split()) == 2)
        return {m: (None if seen.get(m, "-") == "-" else seen[m]) for m in ("spl", "zfs")}

    def load(self, params: dict[str, str] | None = None, timeout: float = 120) -> dict[str, str]:
        """insmod the build's spl.ko and zfs.ko (never the distribution's), then verify
        (srcversion, and each of the guest's ``load_params`` reading back as given)."""
        params = {**self.load_params, **(params or {})}
        want = {m: self.record.modules[m].srcversion for m in ("spl", "zfs")}
        loaded = self.loaded_srcversions()
        if loaded == want:
            return self.verify(loaded)
        for mod in ("zfs", "spl"):        # something else is loaded: take it out
            if loaded[mod] is not None:
                self.guest.run(f"rmmod {mod}", timeout=timeout, check=False)
        deps = " ".join(self.record_deps())
        # /etc/zfs for the pools' cache file: without it every pool created posts a
        # config_cache_write ereport (the guest's /etc has no OpenZFS installed).
        self.guest.run("mkdir -p /etc/zfs" + (f"; modprobe -a {deps}" if deps else ""),
                       timeout=timeout, check=False)
        args = " ".join(f"{k}={v}" for k, v in (params or {}).items())
        for mod in ("spl", "zfs"):
            path = self.record.modules[mod].path
            extra = args if mod == "zfs" else ""
            r = self.guest.run(f"insmod {shlex.quote(path)} {extra}", timeout=timeout,
                               check=False)
            if r.rc != 0:
                dmesg = self.guest.run("dmesg | tail -40", timeout=20, check=False).stdout
                raise GuestError(f"insmod {path} failed: {r.stderr.strip()}",
                                 fix="the build does not fit this guest kernel (see dmesg), "
                                     "or a --zfs-param it does not have",
                                 detail=dmesg)
        self.check_params(self.load_params)
        return self.verify()

    def check_params(self, params: dict[str, str]) -> None:
        """Each of ``params`` reads back as given (a build may ignore one at load)."""
        for name, want in params.items():
            got = self.get_param(name)
            if got != str(want):
                raise ParamNotSet(f"load-time parameter {name}={want} reads back {got}",
                                  fix="the build ignores it at load; check the series")

    def reload(self, params: dict[str, str], timeout: float = 120) -> dict[str, str]:
        """Load zfs.ko again with load-time ``params`` (e.g. a taskq depth that
        cannot change later); every pool must be exported first. Verified: the
        build's srcversion, and each parameter reading back as given."""
        r = self.guest.run("rmmod zfs", timeout=timeout, check=False)
        if r.rc != 0:
            raise GuestError(f"rmmod zfs failed: {r.stderr.strip()}",
                             fix="export every pool (and stop its users) before a reload")
        loaded = self.load(params, timeout)
        self.check_params(params)
        return loaded

    def export_import(self, pool: str, timeout: float = 300) -> None:
        """Export and import ``pool``: nothing of its data stays cached in memory."""
        self.zpool("export", pool, timeout=timeout)
        self.zpool("import", "-d", "/dev", pool, timeout=timeout)

    def record_deps(self) -> list[str]:
        """Kernel modules spl.ko/zfs.ko depend on (modinfo in the guest)."""
        kos = " ".join(shlex.quote(m.path) for m in self.record.modules.values())
        r = self.guest.run(f"modinfo -F depends {kos}", timeout=30, check=False)
        deps = {d for ln in r.stdout.split() for d in ln.split(",") if d}
        return sorted(deps - {"spl", "zfs"})

    def verify(self, loaded: dict[str, str | None] | None = None) -> dict[str, str]:
        """Prove the loaded spl/zfs are this build: srcversion must match the record."""
        loaded = loaded or self.loaded_srcversions()
        for mod in ("spl", "zfs"):
            want, got = self.record.modules[mod].srcversion, loaded[mod]
            if got != want:
                raise ModuleMismatch(
                    f"loaded {mod} srcversion {got or '(not loaded)'} is not the build "
                    f"under test ({want}, {self.record.modules[mod].path})",
                    fix="a distribution or stale module is loaded: rmmod zfs spl, or let "
                        "the suite boot a fresh guest")
        return {m: v for m, v in loaded.items() if v}

    # -- module parameters ------------------------------------------------------

    def has_param(self, name: str) -> bool:
        return self.guest.run(f"test -e {PARAMS}/{name}", timeout=20, check=False).rc == 0

    def first_param(self, *names: str) -> str | None:
        """The first of several spellings the loaded build has (names change in a series)."""
        r = self.guest.run("ls " + PARAMS, timeout=20, check=False)
        have = set(r.stdout.split())
        return next((n for n in names if n in have), None)

    def get_param(self, name: str) -> str:
        return self.guest.run(f"cat {PARAMS}/{name}", timeout=20).stdout.strip()

    def set_param(self, name: str, value: object) -> None:
        """Write a module parameter and read it back: a write the build ignores or
        refuses fails here, so no condition runs under a label it does not have."""
        want = str(int(value) if isinstance(value, bool) else value)
        r = self.guest.run(f"echo {shlex.quote(want)} > {PARAMS}/{name}; cat {PARAMS}/{name}",
                           timeout=20, check=False)
        got = r.stdout.strip()
        if r.rc != 0 or got != want:
            raise ParamNotSet(f"module parameter {name}={want} did not take: reads back "
                              f"{got or '(nothing)'} ({r.stderr.strip() or 'rc ' + str(r.rc)})",
                              fix="the build lacks or ignores it; check the series and "
                                  f"{PARAMS}")

    def param_values(self) -> dict[str, str]:
        """Every zfs module parameter's current value, in one command."""
        return parse_params(self.guest.run(PARAMS_SCRIPT, timeout=30, log=False).stdout)

    def restore_params(self, before: dict[str, str], ignore: tuple[str, ...] = ()) -> list[str]:
        """Put back every parameter that differs from ``before``; returns their names.

        ParamNotSet if one does not read back as it was (the guest is then not
        fit for the next case).
        """
        now = self.param_values()
        changed = [k for k, v in before.items() if k not in ignore and now.get(k) != v]
        for name in changed:
            self.set_param(name, before[name])
        return changed

    @contextmanager
    def params(self, **values: object) -> Iterator[dict[str, str]]:
        """Set module parameters for a block, restore the old values after."""
        old: dict[str, str] = {}
        try:
            for k, v in values.items():
                old[k] = self.get_param(k)
                self.set_param(k, v)
            yield old
        finally:
            for k, v in old.items():
                try:
                    self.set_param(k, v)
                except GuestError:
                    pass

    # -- devices and pools --------------------------------------------------------

    def nvme_devices(self) -> list[str]:
        """NVMe namespaces ordered by their serial (zt0, zt1, ...), not probe order."""
        if self._devices is None:
            raise SuiteError("this Zfs was made without the VM's device map",
                             fix="construct it as Zfs(guest, record, devices=vm.nvme_devices)")
        return [dev for _, dev in sorted(self._devices().items())]

    def pool_create_args(self, spec: PoolSpec, devices: list[str] | None = None) -> list[str]:
        """``zpool`` arguments that create ``spec`` on the guest's NVMe devices."""
        devices = devices if devices is not None else self.nvme_devices()
        args = ["create", "-f", "-o", f"ashift={spec.ashift}", "-m",
                f"{self.mnt_root}/{spec.name}"]
        for k, v in spec.props.items():
            args += ["-o", f"{k}={v}"]
        return [*args, spec.name, *spec.vdev_args(devices)]

    def create_pool(self, spec: PoolSpec, devices: list[str] | None = None) -> "Pool":
        args = self.pool_create_args(spec, devices)
        self.zpool("destroy", "-f", spec.name, check=False)
        for attempt in range(CREATE_TRIES):
            r = self.zpool(*args, timeout=300, check=attempt == CREATE_TRIES - 1)
            if r.rc == 0:
                break
            if not any(m in r.stderr + r.stdout for m in DEVICES_SETTLING):
                # another refusal: raise it as zpool said it (never run it again: a
                # second create that succeeds would leave the loop making a third)
                raise GuestError(f"zpool create refused (rc={r.rc}): "
                                 f"{(r.stderr or r.stdout).strip()[:300]}",
                                 fix="see the case's commands.log for the devices and "
                                     "what was on them")
            # The disks of the pool just destroyed are still being re-read (partition
            # table, udev): zfs-2.3.9 under TCG refused a mirror on them right after
            # the stripe was destroyed. Wait for udev, then try again.
            self.guest.run("udevadm settle -t 120 2>/dev/null; sleep 2", timeout=150,
                           check=False)
            # The refused attempt posted ereport.fs.zfs.vdev.unknown for the disk it
            # could not open (zfs-2.4.4, TCG): the harness's doing, not the case's.
            self.leaves.add(f"zpool create retried: {r.stderr.strip()[:80]}",
                            ereports=RETRY_EREPORTS)
            if LABEL_LATE in r.stderr + r.stdout and attempt == CREATE_TRIES - 2:
                # Each create labels the disks again and waits 30 s for udev: on a guest
                # where udev takes longer it never succeeds. The last try gets one
                # partition a disk, made here and waited for, and labels nothing.
                args = self.pool_create_args(spec, self.partitioned(devices))
        return Pool(self, spec.name, spec)

    def partitioned(self, devices: list[str] | None = None) -> list[str]:
        """One GPT partition over each disk, its node waited for (udev, up to 10 min
        under the guest's pace): their paths, for a pool whose vdevs are partitions
        (libzfs labels nothing then, and waits for nothing). A case that names a
        whole disk to ``zinject -d`` finds no such vdev in that pool."""
        disks = devices if devices is not None else self.nvme_devices()
        parts = [partition_path(d) for d in disks]
        make = "; ".join(f"sgdisk -Z {d} >/dev/null; sgdisk -n 1:0:0 -t 1:BF01 {d} >/dev/null"
                         for d in disks)          # gdisk: ci/apt-packages.txt
        wait = " && ".join(f"test -b {q}" for q in parts)
        self.guest.run(f"{make}; udevadm settle -t 600 2>/dev/null; "
                       f"for i in $(seq 600); do {wait} && break; sleep 1; done; {wait}",
                       timeout=1300)
        return parts

    def pools(self) -> list[str]:
        r = self.zpool("list", "-H", "-o", "name", check=False)
        return r.stdout.split()


CREATE_TRIES = 3
LABEL_LATE = "failed to detect device partitions"
# zpool's words while the disks of the pool just destroyed are re-read (master
# under TCG also said "one or more devices could not be opened")
DEVICES_SETTLING = ("currently unavailable", "is busy", "Device or resource busy",
                    "could not be opened",
                    # libzfs waits for the partition node of the disk it labelled, and
                    # gives up (ENODEV) when udev is late: the debug kernel under TCG,
                    # beside other guests ("failed to detect device partitions on
                    # '/dev/nvme0n1p1': 19", 2026-12-06, two impact map runs)
                    LABEL_LATE)
RETRY_EREPORTS = {"unknown"}        # ereport.fs.zfs.vdev.unknown of a refused create


def partition_path(disk: str) -> str:
    """The first partition of ``disk``: ``/dev/nvme0n1`` -> ``/dev/nvme0n1p1``,
    ``/dev/vdb`` -> ``/dev/vdb1``."""
    return f"{disk}p1" if disk[-1:].isdigit() else f"{disk}1"


PARAMS_SCRIPT = f"(cd {PARAMS} && grep -H . * 2>/dev/null); true"


def parse_params(text: str) -> dict[str, str]:
    """``name:value`` lines of PARAMS_SCRIPT as a dict (the first value of a name)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name not in out:
            out[name] = value.strip()
    return out


@dataclass
class Pool:
    zfs: Zfs
    name: str
    spec: PoolSpec

    def dataset(self, name: str, props: dict[str, str] | None = None) -> "Dataset":
        """A fresh dataset (one zfs call when nothing is left over from before)."""
        full = f"{self.name}/{name}"
        args = ["create"]
        for k, v in (props or {}).items():
            args += ["-o", f"{k}={v}"]
        r = self.zfs.zfs(*args, full, check=False)
        if r.rc != 0:       # left over from a case that did not clean up: start over
            self.zfs.zfs("destroy", "-R", "-f", full, check=False)
            self.zfs.zfs(*args, full)
        return Dataset(self, full, f"{self.zfs.mnt_root}/{full}")

    def status(self) -> str:
        return self.zfs.zpool("status", "-v", self.name, check=False).stdout

@dataclass
class Dataset:
    pool: Pool
    name: str
    mountpoint: str

    def path(self, filename: str) -> str:
        return f"{self.mountpoint}/{filename}"
