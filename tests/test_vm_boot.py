"""Boot the distro kernel in a real virtme-ng guest and exercise vm/guest/console/evidence.

One guest (2 NVMe disks, lbs 4096 and 512) is shared by the module; the
D-state test runs last because it leaves a task stuck until it resumes the
device. Skips cleanly when vng, qemu or a bootable kernel is missing.

Environment: OZFS_VMCI_TEST_KERNEL (vmlinuz to boot), OZFS_VMCI_ACCEL
(auto|kvm|tcg, default auto).
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from suite.errors import GuestError, VMError
from suite.guest import evidence
from suite.vm.ssh import Guest
from suite.vm import accel as accel_mod, console
from suite.vm.machine import VM, NvmeSpec, VMSpec

pytestmark = pytest.mark.vm


def _kernel() -> Path | None:
    env = os.environ.get("OZFS_VMCI_TEST_KERNEL")
    if env:
        return Path(env)
    running = Path(f"/boot/vmlinuz-{platform.release()}")
    if running.is_file():
        return running
    found = sorted(Path("/boot").glob("vmlinuz-*"), key=_version_key)
    return found[-1] if found else None


def _version_key(p: Path) -> list[tuple[int, str]]:
    """Natural order: vmlinuz-6.12 sorts after vmlinuz-6.1.0."""
    return [(int(x), "") if x.isdigit() else (-1, x) for x in re.split(r"(\d+)", p.name)]


def _skip_reason(kernel: Path | None) -> str | None:
    for tool in ("vng", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (pip install virtme-ng / apt-get install qemu-system-x86)"
    if kernel is None or not kernel.is_file():
        return f"no kernel to boot ({kernel or '/boot/vmlinuz-*'}); set OZFS_VMCI_TEST_KERNEL"
    if not os.access(kernel, os.R_OK):
        return f"kernel {kernel} is not readable (run as root or chmod it)"
    release = kernel.name.removeprefix("vmlinuz-")
    if not Path(f"/lib/modules/{release}").is_dir():
        return f"no /lib/modules/{release} for {kernel} (nvme/dm modules are needed)"
    return None


KERNEL = _kernel()
SKIP = _skip_reason(KERNEL)


@pytest.fixture(scope="module")
def vm_accel() -> accel_mod.Accel:
    if SKIP:
        pytest.skip(SKIP)
    assert KERNEL is not None
    return accel_mod.choose(os.environ.get("OZFS_VMCI_ACCEL", "auto"), KERNEL)


@pytest.fixture(scope="module")
def booted(vm_accel: accel_mod.Accel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    assert KERNEL is not None
    spec = VMSpec(kernel_image=KERNEL, accel=vm_accel, workdir=tmp_path_factory.mktemp("vm"),
                  nvme=NvmeSpec(count=2, size_mib=512, lbs=(4096, 512)), name="ozvm-selftest")
    with VM(spec) as v:
        sys.stderr.write(f"\n[vm] {vm_accel.name} boot to SSH: {v.boot_seconds:.1f}s "
                         f"(port {v.port}, {v.workdir})\n")
        yield v


@pytest.fixture
def guest(booted: VM, tmp_path: Path) -> Guest:
    g = booted.guest()
    g.set_log(tmp_path / "commands.log")
    return g


def test_boot_and_basic_command(booted: VM, guest: Guest) -> None:
    assert booted.alive and booted.boot_seconds is not None
    r = guest.run("uname -r; id -u", timeout=booted.spec.accel.deadline(10))
    assert r.stdout.split() == [KERNEL.name.removeprefix("vmlinuz-"), "0"]  # type: ignore[union-attr]
    assert r.rc == 0 and r.stderr == "" and r.duration > 0
    assert guest.alive()
    assert "Linux version" in booted.console_path.read_text(errors="replace")
    assert "vng --run" in (booted.workdir / "vm.cmd").read_text()


def test_nvme_serial_mapping_and_block_sizes(booted: VM, guest: Guest) -> None:
    devs = booted.nvme_devices()
    assert set(devs) == {"zt0", "zt1"}
    for serial, want in (("zt0", 4096), ("zt1", 512)):
        dev = devs[serial].removeprefix("/dev/")
        r = guest.run(f"cat /sys/block/{dev}/device/serial /sys/block/{dev}/queue/logical_block_size "
                      f"/sys/block/{dev}/queue/physical_block_size; blockdev --getsize64 /dev/{dev}",
                      timeout=booted.spec.accel.deadline(10))
        got_serial, lbs, pbs, size = r.stdout.split()
        assert (got_serial, int(lbs), int(pbs), int(size)) == (serial, want, want, 512 << 20)


def test_failure_and_check_false(booted: VM, guest: Guest) -> None:
    with pytest.raises(GuestError) as e:
        guest.run("echo to-stderr >&2; exit 3", timeout=booted.spec.accel.deadline(10))
    assert "rc=3" in e.value.what and "to-stderr" in e.value.detail
    r = guest.run("exit 4", timeout=booted.spec.accel.deadline(10), check=False)
    assert r.rc == 4


def test_timeout_kills_remote_command(booted: VM, guest: Guest) -> None:
    t0 = time.monotonic()
    with pytest.raises(GuestError, match="deadline"):
        guest.run("sleep 101 & sleep 102; echo never", timeout=3)
    assert time.monotonic() - t0 < 3 + booted.spec.accel.deadline(5)
    left = guest.run("ps -eo args | grep -cE '^sleep 10[12]$' || true", timeout=booted.spec.accel.deadline(10))
    assert left.stdout.strip() == "0", "timed-out command (and its children) must be killed"


def test_parallel_channels(booted: VM, guest: Guest) -> None:
    results: dict[str, tuple[float, float]] = {}
    errors: list[BaseException] = []

    def one(tag: str) -> None:
        try:
            r = guest.run("date +%s.%N; sleep 3; date +%s.%N", timeout=booted.spec.accel.deadline(20))
            start, end = map(float, r.stdout.split())
            results[tag] = (start, end)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    (a0, a1), (b0, b1) = results["a"], results["b"]
    assert a0 < b1 and b0 < a1, f"the two commands did not overlap in the guest: {results}"


def test_background_and_signal(booted: VM, guest: Guest) -> None:
    bg = guest.background("trap 'echo got-term; exit 7' TERM; echo started; "
                          "while true; do sleep 0.2; done")
    deadline = time.monotonic() + booted.spec.accel.deadline(10)
    while "started" not in bg.output_so_far()[0]:
        assert time.monotonic() < deadline, "background command never started"
        time.sleep(0.1)
    assert not bg.done and bg.pid is not None
    with pytest.raises(GuestError, match="still running"):
        bg.wait(timeout=0.5)
    bg.signal("TERM")
    r = bg.wait(timeout=booted.spec.accel.deadline(10))
    assert bg.done and r.rc == 7 and "got-term" in r.stdout



def test_a_command_killed_by_a_signal_is_not_a_lost_guest(booted: VM, guest: Guest) -> None:
    """sshd reports a signal death as exit-signal, which paramiko drops: the channel
    closes with no exit status, like a guest that went away. The suite's own I/O engine
    died so (a GPF) at a bad commit and was reported as a lost guest."""
    t = booted.spec.accel.deadline(10)
    with pytest.raises(GuestError, match="killed by a signal") as e:
        guest.run("echo before; kill -SEGV $$", timeout=t)
    assert "before" in e.value.detail
    bg = guest.background("kill -KILL $$")
    with pytest.raises(GuestError, match="killed by a signal"):
        bg.wait(timeout=t)
    assert guest.run("echo still-here", timeout=t).stdout.strip() == "still-here"

def test_put_get_sftp_and_cat_fallback(booted: VM, guest: Guest, tmp_path: Path) -> None:
    data = os.urandom(300_000)
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    src.chmod(0o750)
    digest = hashlib.sha256(data).hexdigest()
    t = booted.spec.accel.deadline(20)

    guest.put(src, "/tmp/blob.bin", timeout=t)
    assert guest.sftp_ok is True
    r = guest.run("sha256sum /tmp/blob.bin; stat -c %a /tmp/blob.bin", timeout=t)
    assert r.stdout.split() == [digest, "/tmp/blob.bin", "750"]
    back = guest.get("/tmp/blob.bin", tmp_path / "back.bin", timeout=t)
    assert back.read_bytes() == data

    plain = Guest(booted.port, name="no-sftp")  # type: ignore[arg-type]
    plain.sftp_ok = False  # as if the guest sshd had no sftp subsystem
    try:
        plain.put(src, "/tmp/blob2.bin", timeout=t)
        assert plain.run("sha256sum < /tmp/blob2.bin", timeout=t).stdout.split()[0] == digest
        assert plain.get("/tmp/blob2.bin", tmp_path / "back2.bin", timeout=t).read_bytes() == data
        with pytest.raises(GuestError, match="cannot read"):
            plain.get("/tmp/does-not-exist", tmp_path / "x", timeout=t)
    finally:
        plain.close()


def test_case_log_has_commands_results_and_timestamps(booted: VM, guest: Guest, tmp_path: Path) -> None:
    log = tmp_path / "case.log"
    guest.set_log(log)
    guest.run("echo logged-out; echo logged-err >&2", timeout=booted.spec.accel.deadline(10))
    guest.run("exit 9", timeout=booted.spec.accel.deadline(10), check=False)
    text = log.read_text()
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] ozvm-selftest \$ echo logged-out", text, re.M)
    assert "  | logged-out" in text and "  ! logged-err" in text
    assert re.search(r"rc=0 \d+\.\d\ds", text) and "rc=9" in text


def test_console_watcher_sees_guest_kmsg(booted: VM, guest: Guest) -> None:
    w = console.ConsoleWatcher(booted.console_path)
    guest.run("echo 'WARNING: ozvm selftest marker' > /dev/kmsg", timeout=booted.spec.accel.deadline(10))
    deadline = time.monotonic() + booted.spec.accel.deadline(5)
    while not w.findings and time.monotonic() < deadline:
        w.poll()
        time.sleep(0.2)
    assert [f.kind for f in w.findings] == ["warning"] and "selftest marker" in w.findings[0].line


def test_qemu_monitor(booted: VM) -> None:
    assert "running" in booted.monitor("info status")


def test_second_vm_side_by_side(booted: VM, vm_accel: accel_mod.Accel, tmp_path: Path) -> None:
    """A second guest next to the module one: own port, files, workdir; same workdir refused."""
    assert KERNEL is not None
    with pytest.raises(VMError, match="used by another running VM"):
        VM(VMSpec(kernel_image=KERNEL, accel=vm_accel, workdir=booted.workdir)).start()
    spec = VMSpec(kernel_image=KERNEL, accel=vm_accel, workdir=tmp_path / "second", memory="1G",
                  nvme=NvmeSpec(count=1, size_mib=64, lbs=512), name="ozvm-second")
    with VM(spec) as other:
        sys.stderr.write(f"\n[vm] second guest boot to SSH (first one running): {other.boot_seconds:.1f}s\n")
        assert other.port != booted.port and other.alive and booted.alive
        assert other.nvme_devices() == {"zt0": "/dev/nvme0n1"}
        assert other.guest().run("hostname", timeout=vm_accel.deadline(10)).stdout.strip() == "ozvm-second"
        assert booted.guest().run("hostname", timeout=vm_accel.deadline(10)).stdout.strip() == "ozvm-selftest"
    assert not other.alive and booted.alive


def test_qemu_exit_during_start_is_reported(vm_accel: accel_mod.Accel, tmp_path: Path) -> None:
    assert KERNEL is not None
    spec = VMSpec(kernel_image=KERNEL, accel=vm_accel, workdir=tmp_path / "bad",
                  nvme=NvmeSpec(count=0), extra_qemu_opts=["-device", "ozvm-no-such-device"])
    v = VM(spec)
    with pytest.raises(VMError) as e:
        v.start()
    assert "qemu exited" in e.value.what and "ozvm-no-such-device" in e.value.detail
    assert not v.alive


def test_frozen_guest_never_hangs(booted: VM, tmp_path: Path) -> None:
    """A guest that stops answering (qemu 'stop': TCP still accepted by slirp) must not hang us."""
    g = Guest(booted.port, name="frozen")  # type: ignore[arg-type]
    g.connect(timeout=booted.spec.accel.deadline(10))
    booted.monitor("stop")
    try:
        t0 = time.monotonic()
        assert not g.alive(timeout=3)
        assert time.monotonic() - t0 < 10
        t0 = time.monotonic()
        with pytest.raises(GuestError):
            g.run("true", timeout=3)
        assert time.monotonic() - t0 < 15
        t0 = time.monotonic()
        ev = evidence.collect_evidence(g, booted, tmp_path / "evidence", "selftest: frozen guest")
        assert not ev.ssh_alive
        assert time.monotonic() - t0 < 60, "evidence collection must stay within its step deadlines"
    finally:
        booted.monitor("cont")
        g.close()
    assert booted.guest().alive(timeout=booted.spec.accel.deadline(5))


def test_guest_frozen_mid_command_is_noticed_by_the_heartbeat(booted: VM) -> None:
    """qemu paused (monitor 'stop': the process runs, the guest is silent) while a long
    command runs: the command fails with "stopped answering" within the heartbeat
    silence (10 s KVM, 60 s TCG), not at its own 15-minute deadline."""
    g = booted.guest()
    timer = threading.Timer(3.0, booted.monitor, args=("stop",))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(GuestError, match="stopped answering: no answer to a heartbeat"):
            g.run("sleep 900", timeout=900)
        took = time.monotonic() - t0
        assert took < 3 + booted.heartbeat_silence + 20, f"noticed after {took:.0f}s"
    finally:
        timer.join()
        booted.monitor("cont")
        g.watch(booted.health, booted.heartbeat_silence)     # alive again
    assert g.alive(timeout=booted.spec.accel.deadline(5))


def test_qemu_stopped_by_a_signal_is_noticed_at_once(booted: VM) -> None:
    """SIGSTOP on qemu: the host sees state T and fails the command within seconds."""
    g = booted.guest()
    bg = g.background("sleep 900")
    assert booted.qemu_state() in ("R", "S"), booted.qemu_state()
    pid = booted._qemu_pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(GuestError, match="qemu is stopped"):
            bg.wait(900)
        assert time.monotonic() - t0 < 10
        assert "frozen" in (booted.health() or "")
    finally:
        os.kill(pid, signal.SIGCONT)
        g.watch(booted.health, booted.heartbeat_silence)
    assert booted.health() is None
    assert g.alive(timeout=booted.spec.accel.deadline(5))


def _wait_for_dstate(guest: Guest, comm: str, timeout: float) -> list[evidence.DTask]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tasks = evidence.parse_dstate(guest.run(evidence.DSTATE_SCRIPT, timeout=timeout).stdout)
        mine = [t for t in tasks if t.comm == comm]
        if mine:
            return mine
        time.sleep(0.5)
    raise AssertionError(f"no {comm} task reached D state within {timeout:.0f}s")


def test_dstate_task_evidence(booted: VM, guest: Guest, tmp_path: Path) -> None:
    """dd on a suspended dm device sits in D state; the evidence must carry its kernel stack."""
    t = booted.spec.accel.deadline(10)
    dev = booted.nvme_devices()["zt1"]
    guest.run(f"modprobe dm_mod; echo \"0 $(blockdev --getsz {dev}) linear {dev} 0\" | dmsetup create ozvm_trap "
              "&& dmsetup suspend ozvm_trap", timeout=t)
    bg = guest.background("dd if=/dev/zero of=/dev/mapper/ozvm_trap bs=4096 count=1 oflag=direct")
    try:
        _wait_for_dstate(guest, "dd", booted.spec.accel.deadline(10))

        w = console.ConsoleWatcher(booted.console_path, offset=0)
        ev = evidence.collect_evidence(guest, booted, tmp_path / "evidence", "selftest: dd on suspended dm",
                                    watcher=w)
        assert ev.ssh_alive and ev.dstate_source == "ssh"
        dd = [task for task in ev.dstate if task.comm == "dd"]
        assert dd and any("submit_bio_wait" in f or "blkdev_" in f for f in dd[0].stack), ev.summary()
        assert "dd" in ev.summary() and "submit_bio_wait" in ev.summary()
        for name in ("dstate", "dmesg", "console-tail", "summary"):
            assert ev.files[name].is_file(), name
        assert "task:dd" in ev.files["dmesg"].read_text(), "sysrq-w output should be in dmesg"

        # SSH "dead": only the qemu monitor (Alt-SysRq-w) and the console remain
        dead = Guest(1, name="dead")  # port 1: nothing listens there
        t0 = time.monotonic()
        ev2 = evidence.collect_evidence(dead, booted, tmp_path / "evidence-nossh", "selftest: ssh dead")
        assert time.monotonic() - t0 < booted.spec.accel.deadline(10) + 30
        assert not ev2.ssh_alive and ev2.dstate_source == "console"
        dd2 = [task for task in ev2.dstate if task.comm == "dd"]
        assert dd2 and any("submit_bio_wait" in f for f in dd2[0].stack), ev2.summary()
    finally:
        guest.run("dmsetup resume ozvm_trap", timeout=t, check=False)
        r = bg.wait(timeout=booted.spec.accel.deadline(10))
        guest.run("dmsetup remove ozvm_trap", timeout=t, check=False)
    assert r.rc == 0, r.stderr


def test_port_collision_is_retried(vm_accel: accel_mod.Accel, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program grabs the leased port before qemu binds it: start() retries with a new one."""
    import socket

    from suite.vm import machine as vm_mod, ports

    assert KERNEL is not None
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real_lease = vm_mod.lease_port
    calls: list[int] = []

    def lease(port: int | None = None, attempts: int = 50) -> ports.PortLease:
        calls.append(1)
        return ports.PortLease(taken) if len(calls) == 1 else real_lease(port, attempts)

    monkeypatch.setattr(vm_mod, "lease_port", lease)
    v = VM(VMSpec(kernel_image=KERNEL, accel=vm_accel, workdir=tmp_path / "retry", nvme=NvmeSpec(count=0)))
    try:
        v.start()
        assert len(calls) == 2 and v.port != taken and v.alive
        assert vm_mod.HOSTFWD_FAILED in v.console_path.read_text(errors="replace")
    finally:
        v.kill()
        squatter.close()
