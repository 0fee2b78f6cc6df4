"""Pure tests of suite.vm.accel: scale, env override, probe cache, probe verdicts."""
from __future__ import annotations

import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from suite.errors import VMError
from suite.vm import accel
from suite.vm.accel import Accel, ProbeResult


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(accel.SCALE_ENV, raising=False)
    monkeypatch.delenv(accel.CACHE_TTL_ENV, raising=False)
    accel._warned.clear()


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    k = tmp_path / "vmlinuz"
    k.write_bytes(b"not really a kernel")
    return k


def test_default_scales_and_deadline() -> None:
    assert accel.make("kvm", "x").scale == 1.0
    tcg = accel.make("tcg", "x")
    assert tcg.scale == 6.0 and tcg.deadline(10) == 60.0
    assert Accel("kvm", 1.0, "").deadline(7.5) == 7.5


def test_holds_stretch_less_than_deadlines() -> None:
    """A hold is waited out by every case that arms one: under TCG it is doubled,
    not multiplied by the deadline's 6."""
    tcg, kvm = accel.make("tcg", "x"), accel.make("kvm", "x")
    assert tcg.hold(4) == 8.0 and tcg.deadline(4) == 24.0
    assert kvm.hold(4) == 4.0
    assert Accel("tcg", 6.0, "").hold(4) == 4.0      # a hand-made Accel holds as KVM


def test_hold_env_override_is_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(accel.HOLD_SCALE_ENV, "6")
    a = accel.make("tcg", "")
    assert a.hold(4) == 24.0 and a.scale == 6.0
    monkeypatch.setenv(accel.HOLD_SCALE_ENV, "none")
    with pytest.raises(VMError, match=accel.HOLD_SCALE_ENV):
        accel.make("tcg", "")


def test_slowed_kernel_stretches_holds_unless_the_user_set_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    a = accel.make("tcg", "x").slowed(3, "the debug kernel")
    assert (a.scale, a.hold_scale) == (18.0, 6.0) and "x3 for the debug kernel" in a.reason
    monkeypatch.setenv(accel.HOLD_SCALE_ENV, "2.5")
    b = accel.make("tcg", "x").slowed(3, "the debug kernel")
    assert (b.scale, b.hold_scale) == (18.0, 2.5)
    monkeypatch.setenv(accel.SCALE_ENV, "4")
    c = accel.make("tcg", "x")
    assert c.slowed(3, "the debug kernel") is c


def test_vng_args() -> None:
    assert accel.make("tcg", "").vng_args() == ["--disable-kvm"]
    assert accel.make("kvm", "").vng_args() == []


def test_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(accel.SCALE_ENV, "2.5")
    assert accel.make("tcg", "").scale == 2.5
    assert accel.make("kvm", "").deadline(4) == 10.0


@pytest.mark.parametrize("bad", ["fast", "0", "-3"])
def test_env_override_rejects_nonsense(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(accel.SCALE_ENV, bad)
    with pytest.raises(VMError, match=accel.SCALE_ENV):
        accel.make("tcg", "")


def test_requested_tcg_needs_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accel, "probe_kvm", lambda *a: pytest.fail("probed"))
    a = accel.choose("tcg", Path("/nonexistent"))
    assert a.name == "tcg" and a.scale == 6.0


def test_unknown_request_and_missing_kernel(kernel: Path) -> None:
    with pytest.raises(VMError, match="unknown accelerator"):
        accel.choose("hvf", kernel)
    with pytest.raises(VMError, match="does not exist"):
        accel.choose("auto", kernel.with_name("missing"))


def _fake_kvm(monkeypatch: pytest.MonkeyPatch, result: ProbeResult) -> list[int]:
    calls: list[int] = []

    def probe(kernel: Path, deadline: float = 0) -> ProbeResult:
        calls.append(1)
        return result

    monkeypatch.setattr(accel, "kvm_device_problem", lambda: None)
    monkeypatch.setattr(accel, "probe_kvm", probe)
    monkeypatch.setattr(accel, "qemu_version", lambda qemu=accel.QEMU: "QEMU emulator version 7.2.22")
    return calls


def test_auto_falls_back_to_tcg_with_one_warning(monkeypatch: pytest.MonkeyPatch, kernel: Path) -> None:
    calls = _fake_kvm(monkeypatch, ProbeResult(False, "guest hung after Probing EDD", 12.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = accel.choose("auto", kernel)
        b = accel.choose("auto", kernel)
    assert a.name == b.name == "tcg" and "Probing EDD" in a.reason
    assert len(calls) == 1, "second choose() must use the cached verdict"
    assert len([w for w in caught if issubclass(w.category, accel.AccelWarning)]) == 1


def test_auto_uses_kvm_when_probe_succeeds(monkeypatch: pytest.MonkeyPatch, kernel: Path) -> None:
    _fake_kvm(monkeypatch, ProbeResult(True, "Linux version in 0.4s", 0.4))
    a = accel.choose("auto", kernel)
    assert a == Accel("kvm", 1.0, "Linux version in 0.4s")


def test_explicit_kvm_that_does_not_work_is_an_error(monkeypatch: pytest.MonkeyPatch, kernel: Path) -> None:
    _fake_kvm(monkeypatch, ProbeResult(False, "qemu aborted", 0.1))
    with pytest.raises(VMError, match="--accel tcg"):
        accel.choose("kvm", kernel)


def test_missing_dev_kvm_skips_probe(monkeypatch: pytest.MonkeyPatch, kernel: Path) -> None:
    monkeypatch.setattr(accel, "kvm_device_problem", lambda: "/dev/kvm does not exist")
    monkeypatch.setattr(accel, "probe_kvm", lambda *a: pytest.fail("probed"))
    with pytest.warns(accel.AccelWarning, match="/dev/kvm"):
        assert accel.choose("auto", kernel).name == "tcg"


def test_cache_key_depends_on_kernel_qemu_and_host(monkeypatch: pytest.MonkeyPatch, kernel: Path) -> None:
    monkeypatch.setattr(accel, "qemu_version", lambda qemu=accel.QEMU: "QEMU 7.2")
    base = accel.host_fingerprint(kernel)
    assert set(base) == {"kernel", "kernel_stat", "qemu", "host"}
    k1 = accel.cache_key(base)
    assert accel.cache_key({**base, "qemu": "QEMU 8.0"}) != k1
    assert accel.cache_key({**base, "host": "6.8.0"}) != k1
    assert accel.cache_key({**base, "kernel": "/boot/other"}) != k1
    assert accel.cache_key(dict(base)) == k1


def test_cache_expires(tmp_path: Path) -> None:
    path = tmp_path / "verdict.json"
    accel.write_cached(path, ProbeResult(True, "ok", 1.0), {"k": "v"})
    assert accel.read_cached(path, ttl=3600) == ProbeResult(True, "ok", 1.0)
    assert accel.read_cached(path, ttl=3600, now=time.time() + 7200) is None
    path.write_text("{garbage")
    assert accel.read_cached(path, ttl=3600) is None


def test_cached_probe_reprobes_after_ttl(monkeypatch: pytest.MonkeyPatch, kernel: Path) -> None:
    calls = _fake_kvm(monkeypatch, ProbeResult(False, "nope", 1.0))
    assert accel.cached_probe(kernel) == (ProbeResult(False, "nope", 1.0), False)
    assert accel.cached_probe(kernel)[1] is True
    monkeypatch.setenv(accel.CACHE_TTL_ENV, "0")
    time.sleep(0.01)
    assert accel.cached_probe(kernel)[1] is False
    assert len(calls) == 2


def _fake_proc(script: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script], start_new_session=True)


def test_watch_probe_verdicts(tmp_path: Path) -> None:
    console, err = tmp_path / "console", tmp_path / "err"
    err.write_text("")
    # kernel ran
    console.write_bytes(b"Probing EDD\n[0.0] Linux version 6.1.0\n")
    p = _fake_proc("import time; time.sleep(30)")
    try:
        r = accel._watch_probe(p, console, err, time.monotonic(), 5)
    finally:
        accel._kill_group(p)
    assert r.ok
    # guest hangs after the BIOS
    console.write_bytes(b"Probing EDD (edd=off to disable)... ok\n")
    p = _fake_proc("import time; time.sleep(30)")
    try:
        r = accel._watch_probe(p, console, err, time.monotonic(), 0.5)
    finally:
        accel._kill_group(p)
    assert not r.ok and "Probing EDD" in r.reason and "within" in r.reason
    # qemu aborts
    err.write_text("qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n")
    console.write_bytes(b"")
    p = _fake_proc("raise SystemExit(1)")
    r = accel._watch_probe(p, console, err, time.monotonic(), 10)
    assert not r.ok and "rc=1" in r.reason and "MSR" in r.reason


def test_the_guests_qemu_is_the_one_fingerprinted(monkeypatch: pytest.MonkeyPatch,
                                                   kernel: Path) -> None:
    from types import SimpleNamespace
    monkeypatch.delenv(accel.QEMU_BIN_ENV, raising=False)
    assert accel.guest_qemu() == accel.QEMU
    monkeypatch.setenv(accel.QEMU_BIN_ENV, "/opt/q10/qemu-system-x86_64")
    seen: list[str] = []

    def run(cmd, **kw):
        seen.append(cmd[0])
        return SimpleNamespace(stdout="QEMU emulator version 10.0.2\n", returncode=0)
    monkeypatch.setattr(accel.subprocess, "run", run)
    assert accel.host_fingerprint(kernel)["qemu"] == "QEMU emulator version 10.0.2"
    assert seen == ["/opt/q10/qemu-system-x86_64"]    # a verdict per qemu, not per PATH's
