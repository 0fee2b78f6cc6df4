"""OpenZFS's own test suite (ZTS), run in a guest against the build under test.

``zfs-tests.sh`` is run in-tree, as OpenZFS's CI runs it, with what it insists on:

- a user that is not root and has passwordless sudo: the guest's ``/etc`` is a
  private overlay, so the user and its sudoers entry live only in this guest;
- a writable ``/`` (it mounts pools at ``/testpool``) and read access to the
  build tree under the host's ``/root`` (mode 700): the guest's root is the
  host's, read-only, so ZTS runs chrooted in an overlay of ``/`` with the
  guest's own ``/etc /var /tmp /dev /proc /sys /run /home`` bound in;
- three disks or more (``DISKS``): the guest's NVMe namespaces but the last,
  which carries an ext4 ``FILEDIR`` (file vdevs, results; on disk, not in RAM).

Timeouts in the runfiles are scaled by the accelerator's factor (TCG is slow);
the scaled runfiles are written next to the results, so the run can be read
back exactly. The tags to run are looked up in the build's runfiles: a tag the
build does not have is reported as absent, not as a pass.
"""
from __future__ import annotations

import re
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path

from suite.build.recipe import BuildRecord
from suite.errors import GuestError, SuiteError

USER = "ztsuser"
UID = 4242
OVL = "/mnt"                      # a tmpfs for the overlay's upper layer
ROOT = f"{OVL}/root"              # the writable root ZTS runs chrooted in
# The guest's own (writable, guest-private) directories, seen in ROOT as they are.
BINDS = ("dev", "proc", "sys", "run", "tmp", "var", "etc", "home")
FILEDIR = "/var/tmp/zts"
RUNFILES = ("common.run", "linux.run")
TIMEOUT_RE = re.compile(r"^(timeout\s*=\s*)(\d+)\s*$", re.M)
TAGS_RE = re.compile(r"^tags\s*=\s*\[([^\]]*)\]", re.M)


def zts_root(record: BuildRecord) -> Path:
    return Path(record.src_dir)


def has_zts(record: BuildRecord) -> bool:
    """The build was made with ``--zts`` (its runner and helper programs exist)."""
    src = zts_root(record)
    return (src / "scripts" / "zfs-tests.sh").exists() and \
        (src / "tests" / "test-runner" / "bin" / "test-runner.py").exists()


def runfile_tags(text: str) -> set[str]:
    """Every tag a runfile names."""
    tags: set[str] = set()
    for m in TAGS_RE.finditer(text):
        tags.update(t.strip().strip("'\"") for t in m.group(1).split(","))
    return {t for t in tags if t}


SECTION_RE = re.compile(r"^\[([^\]]+)\]\s*$", re.M)
TESTS_RE = re.compile(r"^tests\s*=\s*\[(.*?)\]", re.M | re.S)


def _names(listed: str) -> list[str]:
    return [t.strip().strip("'\"") for t in listed.split(",") if t.strip().strip("'\"")]


def select_tests(text: str, wanted: list[str], tag: str = "") -> tuple[str, list[str]]:
    """The runfile cut down to the ``wanted`` tests (``dio_loopback_dev`` or
    ``functional/direct/dio_loopback_dev``), in sections carrying ``tag`` if
    given; each kept test stays in its own section with that section's setup,
    cleanup, tags and timeout. Returns (runfile, the tests kept, as
    ``functional/direct/NAME``). ``[DEFAULT]`` is kept, other sections dropped."""
    heads = list(SECTION_RE.finditer(text))
    out = [text[:heads[0].start()] if heads else text]
    kept: list[str] = []
    for i, h in enumerate(heads):
        body = text[h.start():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        section = h.group(1).split(":")[0].removeprefix("tests/")       # functional/direct
        m = TESTS_RE.search(body)
        if not m:
            out.append(body)                    # [DEFAULT]
            continue
        if tag and tag not in runfile_tags(body):
            continue
        take = [t for t in _names(m.group(1)) if t in wanted or f"{section}/{t}" in wanted]
        if take:
            out.append(body[:m.start()] + "tests = [" + ", ".join(f"'{t}'" for t in take)
                       + "]" + body[m.end():])
            kept += [f"{section}/{t}" for t in take]
    return "".join(out), kept


def scale_timeouts(text: str, scale: float) -> str:
    """The runfile with every ``timeout = N`` multiplied by ``scale`` (0 stays 0:
    it means no timeout)."""
    def repl(m: re.Match) -> str:
        n = int(m.group(2))
        return f"{m.group(1)}{int(n * scale) if n else 0}"
    return TIMEOUT_RE.sub(repl, text)


def tests_in_tag(record: BuildRecord, tag: str, wanted: list[str]) -> list[str]:
    """Which of ``wanted`` the build's runfiles run under ``tag``."""
    found: list[str] = []
    for name in RUNFILES:
        f = zts_root(record) / "tests" / "runfiles" / name
        if f.exists():
            found += select_tests(f.read_text(), wanted, tag)[1]
    return found


def available_tags(record: BuildRecord) -> set[str]:
    tags: set[str] = set()
    for name in RUNFILES:
        f = zts_root(record) / "tests" / "runfiles" / name
        if f.exists():
            tags |= runfile_tags(f.read_text())
    return tags


@dataclass
class ZtsRun:
    tags: list[str]
    rc: int | None
    output: str            # zfs-tests.sh's console: runner lines, then zts-report's
    out_dir: Path          # runfiles used, console, the runner's log directory (tar)
    disks: list[str]


GUEST_MODULES = ("loop", "overlay")


def prepare_guest_script(src: Path, filedir_dev: str) -> str:
    """Root-side setup, idempotent within one guest: the writable root ZTS runs
    in (``ROOT``), its user, its FILEDIR."""
    q = shlex.quote
    binds = " ".join(BINDS)
    return "\n".join([
        "set -e",
        # Kernel modules the tests reach for that nothing loads on its own:
        # without loop, direct/dio_loopback_dev fails at losetup ("No such device").
        f"for m in {' '.join(GUEST_MODULES)}; do modprobe $m 2>/dev/null || true; done",
        # FILEDIR first: the bind mounts below copy the mount tree as it is now.
        f"if ! grep -q ' {FILEDIR} ' /proc/mounts; then",
        f"  mkfs.ext4 -q -F {q(filedir_dev)}",
        f"  mkdir -p {FILEDIR} && mount {q(filedir_dev)} {FILEDIR}",
        "fi",
        # ZTS mounts its pools at /testpool..., and the guest's / is the host's,
        # read-only: ZTS runs chrooted in an overlay of / (upper layer on a tmpfs
        # of its own; /tmp is an overlay already, which cannot be an upper),
        # with the guest's own writable directories bound in.
        f"if ! grep -q ' {ROOT} overlay ' /proc/mounts; then",
        f"  mount -t tmpfs -o size=2g tmpfs {OVL}",
        f"  mkdir -p {OVL}/up {OVL}/work {ROOT}",
        f"  mount -t overlay overlay -o lowerdir=/,upperdir={OVL}/up,workdir={OVL}/work "
        f"{ROOT} || {{ dmesg | tail -5; exit 1; }}",
        f"  for d in {binds}; do mount --rbind /$d {ROOT}/$d; done",
        "fi",
        f"chmod 755 {ROOT}/root",
        # Appended by hand: useradd fails to rewrite /etc/shadow on this overlay.
        f"if ! id {USER} >/dev/null 2>&1; then",
        f"  echo '{USER}:x:{UID}:{UID}::/var/tmp/{USER}:/bin/sh' >> /etc/passwd",
        f"  echo '{USER}:x:{UID}:' >> /etc/group",
        f"  echo '{USER}:*:19000:0:99999:7:::' >> /etc/shadow || true",
        f"  mkdir -p /var/tmp/{USER} && chown {UID}:{UID} /var/tmp/{USER}",
        "fi",
        f"echo '{USER} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{USER}",
        f"chmod 440 /etc/sudoers.d/{USER}",
        f"mkdir -p {FILEDIR}/runfiles && chown -R {USER} {FILEDIR}",
        f"test -x {ROOT}{q(str(src / 'scripts' / 'zfs-tests.sh'))}",
        # zfs-tests.sh (as the user) links the commands it allows into the tree's
        # tests/zfs-tests/bin: the user must own it (a copy-up in the overlay).
        # A fresh constrained PATH each run (zfs-tests.sh links what it needs
        # and keeps a link that exists): a link left from another build's tree
        # would run that build's commands.
        f"rm -rf {ROOT}{q(str(src / 'tests' / 'zfs-tests' / 'bin'))}",
        f"mkdir -p {ROOT}{q(str(src / 'tests' / 'zfs-tests' / 'bin'))}",
        f"chown -R {USER} {ROOT}{q(str(src / 'tests' / 'zfs-tests' / 'bin'))}",
        f"chroot {ROOT} sudo -u {USER} sudo -n id -un",
    ])


def run_tags(zfs, record: BuildRecord, tags: list[str], out_dir: Path, scale: float,
             timeout: float, tests: list[str] = ()) -> ZtsRun:
    """Run ``tags`` with ``zfs-tests.sh`` in the guest of ``zfs`` (a ``Zfs`` with
    the build loaded and verified), only ``tests`` of them if given (see
    ``select_tests``). Every NVMe namespace but the last becomes a ZTS disk, so
    the caller must not hold a pool on them."""
    src = zts_root(record)
    if not has_zts(record):
        raise SuiteError(f"build {record.key} has no ZFS Test Suite",
                         fix="build with --zts (pytest: -m zts turns it on)")
    devices = zfs.nvme_devices()
    if len(devices) < 4:
        raise SuiteError(f"the ZTS lane needs 4 NVMe namespaces (3 disks + FILEDIR), "
                         f"the guest has {len(devices)}",
                         fix="mark the case @pytest.mark.guest(nvme=4, ...)")
    disks, filedir_dev = devices[:-1], devices[-1]
    g = zfs.guest
    out_dir.mkdir(parents=True, exist_ok=True)
    g.run(prepare_guest_script(src, filedir_dev), timeout=300)
    runfiles = []
    for name in RUNFILES:
        text = (src / "tests" / "runfiles" / name).read_text()
        local = out_dir / name
        text = scale_timeouts(text, scale)
        if tests:
            text, _ = select_tests(text, list(tests), tags[0] if len(tags) == 1 else "")
        local.write_text(text)
        remote = f"{FILEDIR}/runfiles/{name}"
        g.put(local, remote)
        runfiles.append(remote)
    env = {"DISKS": " ".join(disks), "KEEP": " ".join(zfs.pools()) or "rpool"}
    inner = (f"cd {FILEDIR} && sudo -u {USER} env " +
             " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) +
             f" {shlex.quote(str(src / 'scripts' / 'zfs-tests.sh'))} -v"
             f" -d {FILEDIR} -r {','.join(runfiles)} -T {','.join(tags)}")
    cmd = (f"chroot {ROOT} sh -c {shlex.quote(inner)} > {FILEDIR}/console.txt 2>&1; "
           f"echo rc=$?")
    r = g.run(cmd, timeout=timeout, check=False)
    m = re.search(r"rc=(\d+)", r.stdout)
    rc = int(m.group(1)) if m else None
    console = out_dir / "console.txt"
    g.get(f"{FILEDIR}/console.txt", console)
    output = console.read_text(errors="replace")
    _fetch_logs(g, output, out_dir)
    return ZtsRun(tags, rc, output, out_dir, disks)


def _fetch_logs(g, output: str, out_dir: Path) -> None:
    """The runner's log directory (per-test stdout/stderr), as one tarball."""
    m = re.search(r"^\s*Log directory:\s*(\S+)", output, re.M)
    if not m:
        return
    remote = f"{FILEDIR}/logs.tar.gz"
    try:
        g.run(f"tar -C {shlex.quote(m.group(1))} -czf {remote} .", timeout=300)
        local = g.get(remote, out_dir / "test_results.tar.gz")
        with tarfile.open(local) as t:       # proof it is readable; kept as the artifact
            t.getmembers()
    except (GuestError, tarfile.TarError) as e:
        (out_dir / "test_results.error.txt").write_text(f"{e}\n")


def salvage_console(g, out_dir: Path) -> str:
    """What zfs-tests.sh printed so far, when the run was cut short; "" if the
    guest cannot give it."""
    try:
        local = g.get(f"{FILEDIR}/console.txt", out_dir / "console.partial.txt", timeout=60)
        return local.read_text(errors="replace")
    except (GuestError, OSError):
        return ""
