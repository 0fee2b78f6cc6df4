"""Pure tests of suite.vm.machine / suite.vm.ssh pieces that need no guest."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from suite.errors import VMError
from suite.vm import channel
from suite.vm import accel, disks, machine as vm, monitor, ports, vng
from suite.vm.machine import NvmeSpec, VMSpec


def _spec(tmp_path: Path, **kw) -> VMSpec:
    return VMSpec(kernel_image=Path("/boot/vmlinuz-test"), accel=accel.make("tcg", "test"),
                  workdir=tmp_path, **kw)


def test_nvme_spec_per_disk_block_sizes() -> None:
    disks = NvmeSpec(count=2, size_mib=64, lbs=(4096, 512)).disks()
    assert [(d.serial, d.lbs) for d in disks] == [("zt0", 4096), ("zt1", 512)]
    assert NvmeSpec(count=3).total_mib == 3072
    with pytest.raises(VMError, match="block sizes"):
        NvmeSpec(count=3, lbs=(4096, 512)).disks()
    with pytest.raises(VMError, match="not supported"):
        NvmeSpec(count=1, lbs=8192).disks()


def test_vng_command_line(tmp_path: Path) -> None:
    v = vm.VM(_spec(tmp_path, nvme=NvmeSpec(count=2, size_mib=8, lbs=(4096, 512)), memory="2G"))
    v.images = [tmp_path / "nvme0.img", tmp_path / "nvme1.img"]
    for img in v.images:
        disks.create_sparse(img, 8)
    v._prepare_monitor()
    cmd = v.vng_command(40123)
    assert cmd[:3] == ["vng", "--run", "/boot/vmlinuz-test"]
    assert "--disable-kvm" in cmd and "--ssh-tcp" in cmd and "--verbose" in cmd
    assert cmd[cmd.index("--ssh") + 1] == "40123" and cmd[cmd.index("--memory") + 1] == "2G"
    opts = [c for c in cmd if c.startswith("--qemu-opts=")]
    assert len(opts) == 1, "qemu options must be one '--qemu-opts=...' word"
    assert "serial=zt0,drive=nvm0,logical_block_size=4096,physical_block_size=4096" in opts[0]
    assert "serial=zt1,drive=nvm1,logical_block_size=512,physical_block_size=512" in opts[0]
    assert f"-monitor unix:{tmp_path}/monitor.sock,server=on,wait=off" in opts[0]
    assert cmd[cmd.index("--") + 1:][:2] == ["bash", "-c"]



def test_extra_qemu_options_from_the_environment_land_in_the_guest_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v = vm.VM(_spec(tmp_path))
    monkeypatch.delenv(vng.QEMU_OPTS_ENV, raising=False)
    assert "-trace" not in " ".join(v.qemu_opts())
    monkeypatch.setenv(vng.QEMU_OPTS_ENV, "-D {workdir}/qemu.log -trace 'pci_nvme_err*'")
    opts = v.qemu_opts()
    assert opts[-4:] == ["-D", f"{v.workdir}/qemu.log", "-trace", "pci_nvme_err*"]
    monkeypatch.setenv(accel.QEMU_BIN_ENV, "/opt/qemu10/bin/qemu-system-x86_64")
    v._prepare_monitor()
    cmd = v.vng_command(40123)
    assert cmd[cmd.index("--qemu") + 1] == "/opt/qemu10/bin/qemu-system-x86_64"

def test_images_are_sparse(tmp_path: Path) -> None:
    img = tmp_path / "d.img"
    disks.create_sparse(img, 256)
    st = img.stat()
    assert st.st_size == 256 << 20 and st.st_blocks * 512 < (1 << 20)


def test_disk_space_error_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(VMError) as e:
        disks.check_disk_space(tmp_path, 1 << 40)  # 1 EiB
    assert str(tmp_path) in e.value.what and e.value.fix


def test_unsafe_workdir_rejected(tmp_path: Path) -> None:
    with pytest.raises(VMError, match="characters"):
        vng.check_safe_path(tmp_path / "a b,c", "VM workdir")
    vng.check_safe_path(tmp_path / "gw0-vm_1.x", "VM workdir")


def test_port_leases_are_unique_and_skip_busy_ports() -> None:
    leases = [ports.lease_port() for _ in range(5)]
    try:
        assert len({lease.port for lease in leases}) == 5
        with pytest.raises(VMError, match="another suite VM"):
            ports.lease_port(leases[0].port)
    finally:
        for lease in leases:
            lease.release()
    with socket.socket() as s:  # a port some other program listens on
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(VMError, match="in use"):
            ports.lease_port(s.getsockname()[1])


def test_workdir_lock(tmp_path: Path) -> None:
    a, b = vm.VM(_spec(tmp_path)), vm.VM(_spec(tmp_path))
    a._lock_workdir()
    try:
        with pytest.raises(VMError, match="used by another running VM"):
            b._lock_workdir()
    finally:
        a.kill()
    b._lock_workdir()
    b.kill()


def test_hmp_output_cleaning() -> None:
    raw = b"i\x1b[K\x1b[Dinfo status\x1b[K\r\nVM status: running\r\n(qemu) "
    assert monitor.clean_hmp_output(raw) == "VM status: running"


def test_remote_wrapper_reports_pid_and_avoids_bashrc() -> None:
    w = channel.wrap("echo 'hi there'")
    assert w.startswith("printf '\\036OZVM-PID %s\\n' $$ >&2; exec bash --norc -c ")
    assert w.endswith("'echo '\"'\"'hi there'\"'\"''")


class _FakeChan:
    def close(self) -> None:
        pass


def test_pid_line_is_cut_from_stderr_even_after_noise() -> None:
    ex = channel._Exec(None, _FakeChan(), "x")  # type: ignore[arg-type]
    ex._take_stderr(b"pyenv: cannot rehash\n\x1eOZVM-")
    assert ex.pid is None
    ex._take_stderr(b"PID 4242\nreal stderr\n")
    assert ex.pid == 4242
    assert bytes(ex.err) == b"pyenv: cannot rehash\nreal stderr\n"
    ex._take_stderr(b"more\n")
    assert bytes(ex.err).endswith(b"more\n")


class _ClosedChan(_FakeChan):
    """A channel whose guest vanished: closed, EOF, no exit status (paramiko: -1)."""
    eof_received = True
    closed = True

    def recv_ready(self) -> bool:
        return False

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        return True

    def recv_exit_status(self) -> int:
        return -1


def test_a_channel_closed_without_exit_status_is_a_lost_guest() -> None:
    ex = channel._Exec(None, _ClosedChan(), "x")  # type: ignore[arg-type]
    assert ex.step()
    assert ex.lost and ex.rc is None


def test_power_cut_reboot_reuses_the_images_and_refuses_missing_ones(tmp_path: Path) -> None:
    spec = _spec(tmp_path, nvme=NvmeSpec(count=1, size_mib=8))
    first = vm.VM(spec)
    first._prepare_disks()
    (img,) = first.images
    with open(img, "r+b") as f:             # what the old guest left on its disk
        f.write(b"pool label")
    again = vm.VM(_spec(tmp_path, nvme=NvmeSpec(count=1, size_mib=8), reuse_images=True))
    again._prepare_disks()
    assert img.read_bytes()[:10] == b"pool label"
    fresh = vm.VM(spec)
    fresh._prepare_disks()
    assert img.read_bytes()[:10] == bytes(10), "a new guest starts on blank disks"
    img.unlink()
    with pytest.raises(VMError, match="cannot reuse"):
        vm.VM(_spec(tmp_path, nvme=NvmeSpec(count=1, size_mib=8), reuse_images=True))._prepare_disks()


def test_shape_kernel_arguments_reach_the_command_line(tmp_path: Path) -> None:
    v = vm.VM(_spec(tmp_path, nvme=NvmeSpec(count=0),
                    append=["sysrq_always_enabled", "init_on_alloc=0"]))
    cmd = v.vng_command(40124)
    pairs = [cmd[i + 1] for i, c in enumerate(cmd) if c == "--append"]
    assert pairs == ["sysrq_always_enabled", "init_on_alloc=0"]


def test_every_guest_skips_the_timer_check_a_busy_tcg_host_fails(tmp_path: Path) -> None:
    cmd = vm.VM(_spec(tmp_path, nvme=NvmeSpec(count=0))).vng_command(40124)
    pairs = [cmd[i + 1] for i, c in enumerate(cmd) if c == "--append"]
    assert "no_timer_check" in pairs and "sysrq_always_enabled" in pairs


class _ListingGuest:
    """A guest whose NVMe listing shows the second disk only from its second answer."""

    def __init__(self) -> None:
        self.asked = 0

    def run(self, script: str, timeout: float):
        self.asked += 1
        out = "nvme0n1 zt0\n" + ("nvme1n1 zt1\n" if self.asked > 1 else "")
        return type("R", (), {"stdout": out})()


def test_nvme_map_is_asked_until_whole_then_kept_for_the_boot(tmp_path: Path) -> None:
    v = vm.VM(_spec(tmp_path, nvme=NvmeSpec(count=2, size_mib=8)))
    g = _ListingGuest()
    v.guest = lambda: g                                  # type: ignore[method-assign]
    want = {"zt0": "/dev/nvme0n1", "zt1": "/dev/nvme1n1"}
    assert v.nvme_devices(timeout=30) == want and g.asked == 2     # waited for zt1
    assert v.nvme_devices() == want and g.asked == 2               # kept: no round trip
    v.nvme_devices()["zt0"] = "changed"                            # a copy, not the memo
    assert v.nvme_devices() == want
