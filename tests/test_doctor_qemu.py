"""The doctor names the qemu the guests get, and warns on the line whose emulated
NVMe lost queued commands under TCG here (patches/notes/async-dio-write-path.md, B)."""
from __future__ import annotations

from suite.doctor import qemu_check


def test_qemu_7_is_a_warning_with_its_symptom_and_the_fix() -> None:
    c = qemu_check("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)")
    assert not c.ok and not c.required
    assert c.detail.startswith("7.2.22") and "kernel:device_timeout" in c.detail
    assert "ci/setup.sh" in c.fix and "OZFS_VMCI_QEMU" in c.fix


def test_qemu_10_is_fine_and_an_unknown_qemu_is_not() -> None:
    ok = qemu_check("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)")
    assert ok.ok and ok.detail == "10.0.2"
    assert not qemu_check("unavailable (FileNotFoundError)").ok
