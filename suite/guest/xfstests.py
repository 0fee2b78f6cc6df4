"""xfstests in a guest, on the build under test (the lane of ``cases/test_xfstests.py``).

As openzfs/zfs#18845 runs it, with what the fork insists on:

- ``/sbin/zfs`` and ``/sbin/zpool`` (the fork calls them by that path): small wrappers
  in the guest's ``/usr/sbin`` (a private overlay) that run the build's commands;
- the users ``fsgqa``, ``fsgqa2`` and ``123456-fsgqa`` (appended to the guest's own
  ``/etc`` by hand: useradd cannot rewrite it on this overlay);
- TEST_DEV a dataset of a pool on the first NVMe namespace (``mountpoint=legacy``,
  ``acltype=posix``, ``xattr=sa``, ``compression=off``, ``relatime=off``,
  ``recordsize=64K``), mounted on TEST_DIR; the scratch file system a pool of its
  own over the other namespaces (SCRATCH_ZPOOL_NAME, SCRATCH_DEV_POOL);
- a profile's dataset properties on both (``direct=always``: every aligned read and
  write of the peer suite through Direct I/O) and its module parameters; the zvol
  profile runs ``FSTYP=ext4`` on two zvols instead.

``./check`` runs from a copy of the built tree in the guest's ``/var/tmp``, unpacked from its
one tar file (the host's
is read-only there, and tests write beside ``check``) with ``RESULT_BASE`` beside it; its xunit report, console and each
test's ``.out.bad``/``.full``/``.dmesg`` are fetched into the case's folder.
"""
from __future__ import annotations

import re
import shlex
import tarfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from suite.build.recipe import BuildRecord
from suite.errors import GuestError, SuiteError
from suite.progress import Step, step

TEST_POOL, SCRATCH_POOL = "xfstestpool", "xfscratch"
ZVOL_GIB = 4                # each of the zvol profile's two volumes
TEST_ZVOL, SCRATCH_ZVOL = f"{TEST_POOL}/testvol", f"{TEST_POOL}/scratchvol"
TEST_FS = f"{TEST_POOL}/testfs"
TEST_DIR, SCRATCH_MNT = "/var/tmp/xfstests/test", "/var/tmp/xfstests/scratch"
RESULTS = "/var/tmp/xfstests/results"
CONSOLE = "/var/tmp/xfstests/console.txt"
LINE_RE = re.compile(r"^[a-z0-9]+/\d{3,}\s+\S")     # "generic/133  452s", "... [not run] ..."
TREE = "/var/tmp/xfstests/tree"       # the built tree, copied where tests may write
USERS = (("fsgqa", 5001), ("fsgqa2", 5002), ("123456-fsgqa", 5003))
GROUP = ("fsgqa", 5001)
TEST_PROPS = {"acltype": "posix", "xattr": "sa", "compression": "off", "relatime": "off",
              "recordsize": "64K"}


@dataclass(frozen=True)
class Profile:
    """How the datasets are made and what the module is set to for one run."""
    name: str
    props: dict[str, str] = field(default_factory=dict)     # on TEST and SCRATCH
    params: dict[str, str] = field(default_factory=dict)    # those the build has
    zvol: bool = False          # ext4 on two zvols (zvol Direct I/O on)
    description: str = ""
    feature: str = ""           # the series feature the build must have


PROFILES = {
    "plain": Profile("plain", description="datasets as openzfs/zfs#18845 makes them"),
    "direct": Profile("direct", {"direct": "always"},
                      description="direct=always on TEST and SCRATCH: every aligned read "
                                  "and write through Direct I/O"),
    "async": Profile("async", {"direct": "always"}, {"zfs_async_dio_enabled": "1"},
                     feature="async_dio", description="direct=always and the async-dio taskq on (async-dio builds)"),
    "zvol": Profile("zvol", {}, {"zvol_dio_enabled": "1"}, zvol=True,
                    feature="zvol_dio", description="ext4 on two zvols, zvol Direct I/O on (zvol-dio builds)"),
}


def profile(name: str) -> Profile:
    if name not in PROFILES:
        raise SuiteError(f"unknown xfstests profile {name!r}",
                         fix=f"use one of {', '.join(PROFILES)}")
    return PROFILES[name]


def wrappers_script(zfs) -> str:
    """``/usr/sbin/zfs`` and ``/usr/sbin/zpool`` running the build's commands."""
    lines = []
    for tool in ("zfs", "zpool"):
        body = f"#!/bin/sh\nexec env {zfs.cmd(tool)} \"$@\"\n"
        lines.append(f"printf %s {shlex.quote(body)} > /usr/sbin/{tool} && "
                     f"chmod 755 /usr/sbin/{tool}")
    return "\n".join(lines)


def users_script() -> str:
    g, gid = GROUP
    out = [f"grep -q '^{g}:' /etc/group || echo '{g}:x:{gid}:' >> /etc/group"]
    for u, uid in USERS:
        out += [f"if ! grep -q '^{u}:' /etc/passwd; then",
                f"  echo '{u}:x:{uid}:{gid}::/var/tmp/home-{uid}:/bin/sh' >> /etc/passwd",
                f"  echo '{u}:*:19000:0:99999:7:::' >> /etc/shadow || true",
                f"  mkdir -p /var/tmp/home-{uid} && chown {uid}:{gid} /var/tmp/home-{uid}",
                "fi"]
    return "\n".join(out)


# What the fork calls but never defines, in the lane's own words. local.config is read
# by common/config in ./check and in every test's shell, so a function defined here is
# there when common/rc calls it; the fork's own definition, if it ever has one, comes
# later (common/rc) and wins. Seen: _require_no_compress (generic/274, 275, 427) calls
# _require_zfs_no_compress, and on stock master generic/427 failed only by
# "_require_zfs_no_compress: command not found" in its output.
FORK_GAPS = """\
_require_zfs_no_compress()
{
\tcase " $ZFS_MKFS_OPTIONS " in
\t*" compression=off "*) ;;
\t*) _notrun "the scratch file system may be compressed (ZFS_MKFS_OPTIONS: $ZFS_MKFS_OPTIONS)" ;;
\tesac
}
"""


def local_config(p: Profile, test_dev: str, scratch: list[str]) -> str:
    """The ``local.config`` of a profile over the guest's devices (on ZFS, with the
    helpers the fork lacks: ``FORK_GAPS``)."""
    if p.zvol:
        lines = ["export FSTYP=ext4", f"export TEST_DEV={test_dev}",
                 f"export SCRATCH_DEV={scratch[0]}"]
    else:
        opts = " ".join(f"-O {k}={v}" for k, v in sorted(p.props.items()))
        lines = ["export FSTYP=zfs", f"export TEST_DEV={TEST_FS}",
                 f"export SCRATCH_ZPOOL_NAME={SCRATCH_POOL}",
                 f"export SCRATCH_DEV_POOL=\"{' '.join(scratch)}\"",
                 f"export ZFS_MKFS_OPTIONS=\"-O compression=off {opts}\"".replace("  ", " ")]
    lines += [f"export TEST_DIR={TEST_DIR}", f"export SCRATCH_MNT={SCRATCH_MNT}",
              f"export RESULT_BASE={RESULTS}"]
    return "\n".join(lines) + "\n" + ("" if p.zvol else FORK_GAPS)


def prepare_script(zfs, p: Profile, devices: list[str]) -> tuple[str, str, list[str]]:
    """(script, TEST_DEV, scratch devices): the guest made ready for ./check."""
    q = shlex.quote
    test_disk, scratch = devices[0], devices[1:]
    props = {**TEST_PROPS, **p.props}
    zpool, zfs_ = zfs.cmd("zpool"), zfs.cmd("zfs")
    steps = ["set -e", "modprobe loop 2>/dev/null || true", wrappers_script(zfs), users_script(),
             f"mkdir -p {TEST_DIR} {SCRATCH_MNT} {RESULTS}",
             f"{zpool} destroy -f {TEST_POOL} 2>/dev/null || true",
             f"{zpool} destroy -f {SCRATCH_POOL} 2>/dev/null || true"]
    # The parameters first: every request of the run, mkfs's included, sees them.
    for k, v in sorted(p.params.items()):
        steps.append(f"if [ -e /sys/module/zfs/parameters/{k} ]; then echo {q(v)} > "
                     f"/sys/module/zfs/parameters/{k}; else echo 'no parameter {k}' >&2; fi")
    if p.zvol:      # both zvols in one pool over every namespace (one 4 GiB disk held
        size = f"{ZVOL_GIB}G"           # less than two 2 GiB volumes and their metadata)
        steps += [f"{zpool} create -f -O mountpoint=legacy {TEST_POOL} "
                  f"{' '.join(q(d) for d in devices)}",
                  f"{zfs_} create -V {size} -o volblocksize=16K {TEST_ZVOL}",
                  f"{zfs_} create -V {size} -o volblocksize=16K {SCRATCH_ZVOL}"]
        # their /dev/zdN are found by name after the script (no OpenZFS udev rules in
        # the guest: /dev/zvol/... never appears); ext4 is made on them then
        test_dev, scratch = TEST_ZVOL, [SCRATCH_ZVOL]
    else:
        opts = " ".join(f"-o {k}={v}" for k, v in sorted(props.items()))
        steps += [f"{zpool} create -f -O mountpoint=legacy {TEST_POOL} {q(test_disk)}",
                  f"{zfs_} create -o mountpoint=legacy {opts} {TEST_FS}",
                  f"mount -t zfs {TEST_FS} {TEST_DIR}"]
        test_dev = TEST_FS
    return "\n".join(steps), test_dev, scratch


@dataclass
class XfstestsRun:
    rc: int | None
    out_dir: Path
    console: str
    config: str


def run(zfs, archive: Path, p: Profile, selection: list[str], exclude_file: Path | None,
        out_dir: Path, timeout: float,
        zvol_dev: Callable[[str], str] | None = None) -> XfstestsRun:
    """./check with ``selection`` (``-g aio``, ``generic/091``, ...) in the guest of
    ``zfs`` (the build loaded and verified), from the built tree's ``archive``
    (``Tree.archive()``); the guest's pools are the lane's. ``zvol_dev``: a zvol's
    ``/dev/zdN`` by its name (the zvol profile; the engine's ``zvol-dev``)."""
    devices = zfs.nvme_devices()
    if len(devices) < 2:
        raise SuiteError(f"the xfstests lane needs 2 NVMe namespaces or more (TEST and "
                         f"SCRATCH), the guest has {len(devices)}",
                         fix="mark the case @pytest.mark.guest(nvme=4, ...)")
    g = zfs.guest
    out_dir.mkdir(parents=True, exist_ok=True)
    script, test_dev, scratch = prepare_script(zfs, p, devices)
    (out_dir / "prepare.sh").write_text(script + "\n")
    g.run(script, timeout=600)
    if p.zvol:
        if zvol_dev is None:
            raise SuiteError("the zvol profile needs a way to find a zvol's /dev/zdN",
                             fix="pass zvol_dev (cases/test_xfstests.py passes the engine's)")
        test_dev, scratch = zvol_dev(test_dev), [zvol_dev(d) for d in scratch]
        fs = f"mkfs.ext4 -q -F {test_dev} && mount {test_dev} {TEST_DIR}"
        (out_dir / "prepare.sh").write_text(script + "\n" + fs + "\n")
        g.run(fs, timeout=600)
    config = local_config(p, test_dev, scratch)
    (out_dir / "local.config").write_text(config)
    g.put(out_dir / "local.config", "/var/tmp/xfstests/local.config")
    args = ["-R", "xunit-quiet"]
    if exclude_file is not None and any(s.startswith("-g") for s in selection):
        g.put(exclude_file, "/var/tmp/xfstests/exclude.txt")
        args += ["-E", "/var/tmp/xfstests/exclude.txt"]
    # A copy in the guest's own /var/tmp: the host's tree is read-only there, and tests
    # write beside ./check (fio's verify state files: generic/299 failed on them).
    # Unpacked from one tar file: 9p costs per file, not per byte.
    g.run(f"rm -rf {TREE} && mkdir -p {TREE} && tar -xf {shlex.quote(str(archive))} "
          f"-C {TREE}", timeout=600)
    inner = (f"cd {TREE} && HOST_OPTIONS=/var/tmp/xfstests/local.config "
             f"RESULT_BASE={RESULTS} ./check {' '.join(map(shlex.quote, args + selection))}")
    # ./check under `timeout`: at the budget it is stopped in the guest, and what ran
    # is still collected (a test cut short has no result: "not run").
    with step(f"xfstests ./check, profile {p.name}") as s, \
            watching(g, CONSOLE, s):
        r = g.run(f"( timeout -k 30 {int(timeout)} sh -c {shlex.quote(inner)} ) "
                  f"> {CONSOLE} 2>&1; echo rc=$?", timeout=timeout + 120, check=False)
    m = re.search(r"rc=(\d+)", r.stdout)
    collect(g, out_dir)
    console = (out_dir / "console.txt").read_text(errors="replace") \
        if (out_dir / "console.txt").exists() else ""
    return XfstestsRun(int(m.group(1)) if m else None, out_dir, console, config)


def finished_lines(console: str) -> list[str]:
    """./check's line of each test that finished (a line is written when the test
    starts and completed when it ends: the last one, unterminated, is still running)."""
    done = console[:console.rfind("\n") + 1] if "\n" in console else ""
    return [ln.rstrip() for ln in done.splitlines() if LINE_RE.match(ln)]


@contextmanager
def watching(g, console: str, s: Step, every: float = 30.0) -> Iterator[None]:
    """While ./check runs (an hour under TCG), say each test as it finishes: a second
    SSH channel reads its console every ``every`` seconds."""
    stop = threading.Event()
    said = 0

    def poll() -> None:
        nonlocal said
        while not stop.wait(every):
            try:
                text = g.run(f"cat {console} 2>/dev/null || true", timeout=60, log=False).stdout
            except Exception:           # noqa: BLE001 - the run itself reports a lost guest
                continue
            lines = finished_lines(text)
            for ln in lines[said:]:
                s.tick(" ".join(ln.split()), force=True)
            said = max(said, len(lines))
    t = threading.Thread(target=poll, name="xfstests-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=5)


def collect(g, out_dir: Path) -> None:
    """The console and the results folder (xunit report, per-test files) as they are."""
    try:
        g.get(CONSOLE, out_dir / "console.txt", timeout=120)
    except (GuestError, OSError) as e:
        (out_dir / "console.error.txt").write_text(f"{e}\n")
    remote = "/var/tmp/xfstests/results.tar.gz"
    try:
        g.run(f"tar -C {RESULTS} -czf {remote} .", timeout=300)
        local = g.get(remote, out_dir / "results.tar.gz", timeout=300)
        with tarfile.open(local) as t:
            t.extractall(out_dir / "results", filter="data")
    except (GuestError, OSError, tarfile.TarError) as e:
        (out_dir / "results.error.txt").write_text(f"{e}\n")


def not_for(record: BuildRecord, p: Profile) -> str:
    """Why the build cannot run profile ``p`` ('' when it can): the async and zvol
    profiles need the series that adds their path."""
    need = p.feature
    if need and need not in (record.features or []):
        return (f"profile {p.name!r} needs a build with {need} "
                f"({', '.join(record.features or []) or 'this build has no series feature'})")
    return ""
