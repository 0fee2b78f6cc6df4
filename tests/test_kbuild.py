"""A kernel profile that builds its kernel (suite/build/kbuild.py): fragments, the
key, the cache, the lock and the apt errors. No real kernel build: a fake
``make`` and ``virtme-configkernel`` on PATH, a tarball of one Makefile."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
from pathlib import Path

import pytest

from suite.build import kbuild
from suite.build import recipe as recipe_mod
from suite.build.kbuild import BuildSpec, Fragment
from suite.build.kernel import Kernel, load_profile, resolve_kernel
from suite.errors import BuildError, KernelError

RELEASE = "6.1.99-ozfs-debug"

FAKE_CONFIGKERNEL = """#!/bin/sh
# virtme-configkernel --defconfig --custom FILE: the fragment becomes the config,
# minus what FAKE_DROP names (a dependency Kconfig found off)
while [ $# -gt 0 ]; do [ "$1" = --custom ] && frag=$2; shift; done
grep '^CONFIG_' "$frag" | grep -v "^${FAKE_DROP:-NONE}=" > .config
echo "Configured."
"""

FAKE_MAKE = f"""#!/bin/sh
echo "$*" >> "$FAKE_MAKE_LOG"
for a in "$@"; do
  case "$a" in
    kernelrelease) echo {RELEASE} ;;
    bzImage) sleep "${{FAKE_MAKE_SLEEP:-0}}"; mkdir -p arch/x86/boot
             echo "  CC      init/main.o"; echo "  CC [M]  fs/fake.o"
             echo kernel > arch/x86/boot/bzImage ;;
    modules) echo "0x1 sym vmlinux EXPORT_SYMBOL" > Module.symvers ;;
    INSTALL_MOD_PATH=*) d=${{a#INSTALL_MOD_PATH=}}/lib/modules/{RELEASE}
             mkdir -p "$d"; touch "$d/modules.dep" ;;
  esac
done
"""


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def bench(tmp_path, monkeypatch):
    """A spec whose tools are fakes; returns (spec, make log)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _exe(bin_ / "virtme-configkernel", FAKE_CONFIGKERNEL)
    _exe(bin_ / "make", FAKE_MAKE)
    src = tmp_path / "linux-source-6.1"
    src.mkdir()
    (src / "Makefile").write_text("VERSION = 6\n")
    tarball = tmp_path / "linux-source-6.1.tar.xz"
    subprocess.run(["tar", "-cJf", str(tarball), "-C", str(tmp_path), "linux-source-6.1"],
                   check=True)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OZFS_VMCI_KERNEL_CCACHE", "0")
    log = tmp_path / "make.log"
    monkeypatch.setenv("FAKE_MAKE_LOG", str(log))
    monkeypatch.setattr(kbuild, "installed_version", lambda p: "6.1.99-1")
    monkeypatch.setattr(kbuild, "base_config", lambda: "CONFIG_VIRTIO=y\n")
    monkeypatch.setattr(kbuild, "compiler", lambda: "gcc (fake) 12")
    spec = BuildSpec("dbg", "linux-source-6.1", str(tarball), ("flex", "bison"), (
        Fragment("release", "own release", ('CONFIG_LOCALVERSION="-ozfs-debug"',)),
        Fragment("kasan", "memory errors", ("CONFIG_KASAN=y", "CONFIG_KASAN_INLINE=y")),
        Fragment("kmemleak", "off by default", ("CONFIG_DEBUG_KMEMLEAK_AUTO_SCAN=n",)),
    ))
    return spec, log


def make_calls(log: Path, target: str) -> int:
    return sum(target in ln.split() for ln in log.read_text().splitlines()) if log.exists() else 0


# -- fragments and the key ---------------------------------------------------------

def test_fragments_assemble_in_order_each_with_its_reason(bench):
    spec, _ = bench
    text = spec.fragment_text()
    assert spec.items() == ['CONFIG_LOCALVERSION="-ozfs-debug"', "CONFIG_KASAN=y",
                            "CONFIG_KASAN_INLINE=y", "CONFIG_DEBUG_KMEMLEAK_AUTO_SCAN=n"]
    lines = text.splitlines()
    assert lines.index("##: kasan: memory errors") < lines.index("CONFIG_KASAN=y") \
        < lines.index("CONFIG_DEBUG_KMEMLEAK_AUTO_SCAN=n")
    with pytest.raises(KernelError, match="needs a name and a reason"):
        BuildSpec.from_toml("p", {"source_package": "s", "tarball": "t",
                                  "fragment": [{"name": "x", "config": ["CONFIG_A=y"]}]})
    with pytest.raises(KernelError, match="malformed"):
        BuildSpec.from_toml("p", {"source_package": "s", "tarball": "t",
                                  "fragment": [{"name": "x", "reason": "r", "config": ["KASAN=y"]}]})


def test_the_debug_profile_asks_for_the_debug_options_and_gives_reasons():
    p = load_profile("debian-6.1-debug")
    assert p.build is not None and p.build.source_package == "linux-source-6.1"
    items = set(p.build.items())
    for want in ("CONFIG_KASAN_GENERIC=y", "CONFIG_KASAN_INLINE=y", "CONFIG_KFENCE=y",
                 "CONFIG_PROVE_LOCKING=y", "CONFIG_DEBUG_ATOMIC_SLEEP=y", "CONFIG_DEBUG_KMEMLEAK=y",
                 "CONFIG_GCOV_KERNEL=y", "CONFIG_GCOV_PROFILE_ALL=n", "CONFIG_BLK_DEV_NVME=y",
                 "CONFIG_IO_URING=y", "CONFIG_KPROBE_EVENTS=y", "CONFIG_BLK_DEV_LOOP=y",
                 "CONFIG_MODULE_UNLOAD=y", "CONFIG_ZLIB_DEFLATE=y"):
        assert want in items, want
    assert all(f.reason for f in p.build.fragments)
    names = [i.split("=")[0] for i in p.build.items()]
    assert len(names) == len(set(names)), "an item asked for twice"
    assert p.zfs_license == "GPL"


def test_a_profile_gives_openzfs_make_its_variables_with_a_reason(tmp_path, monkeypatch):
    """The debug kernel's KASAN makes OpenZFS's zstd call user-space ASan; the profile
    turns that off on make's command line, and a build with it has a key of its own."""
    from suite import paths
    from suite.build.kernel import Kernel
    p = load_profile("debian-6.1-debug")
    assert p.zfs_make == ("KCFLAGS=-DZSTD_ASAN_DONT_POISON_WORKSPACE=1",)
    k = Kernel("x", "6.1", tmp_path / "vmlinuz", tmp_path, tmp_path, tmp_path)
    assert "zfs_make" not in k.identity()
    assert dataclasses.replace(k, zfs_make=p.zfs_make).identity()["zfs_make"] == p.zfs_make[0]
    monkeypatch.setattr(paths, "vmimages_dir", lambda: tmp_path)
    (tmp_path / "a.toml").write_text('[zfs]\nmake = ["KCFLAGS=-DX"]\n')
    with pytest.raises(KernelError, match="needs a make_reason"):
        load_profile("a")
    (tmp_path / "b.toml").write_text('[zfs]\nmake = ["-j9"]\nmake_reason = "r"\n')
    with pytest.raises(KernelError, match="VAR=VALUE"):
        load_profile("b")


def test_a_profile_boots_its_guests_with_its_append_and_says_why(tmp_path, monkeypatch):
    from suite import paths
    from suite.build.kernel import boot_append
    assert boot_append("debian-6.1-debug") == ("kmemleak=on", "kasan_multi_shot")
    assert boot_append("debian-6.1") == () and boot_append("/boot/vmlinuz-x") == ()
    from suite.build.kernel import slowdown
    from suite.vm.accel import HOLD_SCALE_ENV, SCALE_ENV, Accel
    assert slowdown("debian-6.1-debug") == 4 and slowdown("debian-6.1") == 1
    tcg = Accel("tcg", 6.0, "no KVM", hold_scale=2.0)
    monkeypatch.delenv(SCALE_ENV, raising=False)
    monkeypatch.delenv(HOLD_SCALE_ENV, raising=False)
    slow = tcg.slowed(4, "debug")
    assert slow.deadline(60) == 1440 and slow.hold(4) == 32 and "x4 for debug" in slow.reason
    assert tcg.slowed(1, "plain") is tcg
    monkeypatch.setenv(SCALE_ENV, "9")
    kept = tcg.slowed(4, "debug")                   # the user's factor is the whole one
    assert kept.deadline(60) == 360 and kept.hold(4) == 32
    monkeypatch.setenv(HOLD_SCALE_ENV, "3")
    assert tcg.slowed(4, "debug") is tcg
    (tmp_path / "p.toml").write_text('name = "p"\n[vm]\nappend = ["x=1"]\n')
    monkeypatch.setattr(paths, "vmimages_dir", lambda: tmp_path)
    with pytest.raises(KernelError, match=r"\[vm\] append needs a reason"):
        boot_append("p")
    (tmp_path / "q.toml").write_text('name = "q"\n[vm]\nslowdown = 3\n')
    with pytest.raises(KernelError, match="slowdown_reason"):
        slowdown("q")


def test_same_inputs_same_key_and_every_input_changes_it(bench, monkeypatch):
    spec, _ = bench
    key = kbuild.key_of(kbuild.inputs(spec, "6.1.99-1"))
    assert key == kbuild.key_of(kbuild.inputs(spec, "6.1.99-1")) and len(key) == 16
    changed = dataclasses.replace(spec, fragments=(
        *spec.fragments[:1], Fragment("kasan", "memory errors", ("CONFIG_KASAN=y",
                                                                 "CONFIG_KASAN_OUTLINE=y")),
        spec.fragments[2]))
    added = dataclasses.replace(spec, fragments=(*spec.fragments,
                                                 Fragment("kfence", "r", ("CONFIG_KFENCE=y",))))
    reworded = dataclasses.replace(spec, fragments=(
        dataclasses.replace(spec.fragments[0], reason="said differently"), *spec.fragments[1:]))
    keys = {kbuild.key_of(kbuild.inputs(s, "6.1.99-1")) for s in (changed, added)}
    keys.add(kbuild.key_of(kbuild.inputs(spec, "6.1.100-1")))          # source version
    monkeypatch.setattr(kbuild, "base_config", lambda: "CONFIG_VIRTIO=n\n")   # virtme-ng's base
    keys.add(kbuild.key_of(kbuild.inputs(spec, "6.1.99-1")))
    assert key not in keys and len(keys) == 4
    monkeypatch.setattr(kbuild, "base_config", lambda: "CONFIG_VIRTIO=y\n")
    assert kbuild.key_of(kbuild.inputs(reworded, "6.1.99-1")) == key   # a reason is not the kernel


# -- building, the cache, the lock ----------------------------------------------------

def test_a_build_is_recorded_and_a_second_call_builds_nothing(bench):
    spec, log = bench
    built, now = kbuild.ensure(spec)
    assert now and built.release == RELEASE
    kdir = Path(built.tree).parent
    assert Path(built.vmlinuz) == kdir / "boot" / f"vmlinuz-{RELEASE}"
    assert Path(built.modules) == kdir / "lib" / "modules" / RELEASE
    assert (kdir / "record.json").exists() and set(built.seconds) >= {"unpack", "configure",
                                                                       "make", "install"}
    assert built.objects == 2 and "make bzImage modules" in Path(built.log).read_text()
    assert make_calls(log, "bzImage") == 1 and make_calls(log, "modules_prepare") == 1
    again, now2 = kbuild.ensure(spec)
    assert not now2 and again.key == built.key
    assert make_calls(log, "bzImage") == 1 and make_calls(log, "modules_install") == 1


def test_a_profile_that_builds_resolves_to_the_built_tree(bench, tmp_path, monkeypatch):
    spec, _ = bench
    images = tmp_path / "vmimages"
    images.mkdir()
    (images / "dbg.toml").write_text(
        f'name = "dbg"\n[build]\nsource_package = "linux-source-6.1"\n'
        f'tarball = "{spec.tarball}"\n'
        f'[[build.fragment]]\nname = "k"\nreason = "r"\nconfig = ["CONFIG_KASAN=y"]\n'
        f'[zfs]\nlicense = "GPL"\nreason = "lockdep"\n')
    monkeypatch.setenv("OZFS_VMCI_VMIMAGES", str(images))
    with pytest.raises(KernelError, match="not built yet") as e:
        resolve_kernel("dbg", allow_install=False)
    assert "python -m suite build --kernel dbg" in e.value.fix
    k = resolve_kernel("dbg")
    assert k.vmlinuz.name == f"vmlinuz-{RELEASE}" and k.vmlinuz.is_file()
    assert k.headers == k.source and (k.headers / "Module.symvers").exists()
    assert k.modules == k.vmlinuz.parent.parent / "lib" / "modules" / RELEASE
    assert k.identity()["zfs_license"] == "GPL"
    assert resolve_kernel("dbg", allow_install=False) == k


def test_two_workers_at_once_build_the_kernel_once(bench, monkeypatch):
    spec, log = bench
    monkeypatch.setenv("FAKE_MAKE_SLEEP", "2")
    results: list = []
    errors: list = []

    def worker() -> None:
        try:
            results.append(kbuild.ensure(spec))
        except BaseException as e:      # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert make_calls(log, "bzImage") == 1
    assert sorted(now for _, now in results) == [False, True]
    assert len({b.key for b, _ in results}) == 1 and Path(results[0][0].vmlinuz).is_file()


def test_an_item_kconfig_dropped_fails_naming_it_and_keeps_no_half_build(bench, monkeypatch):
    spec, log = bench
    monkeypatch.setenv("FAKE_DROP", "CONFIG_KASAN_INLINE")
    with pytest.raises(BuildError) as e:
        kbuild.ensure(spec)
    assert "lacks 1 item" in e.value.what
    assert "CONFIG_KASAN_INLINE=y (got absent; fragment kasan)" in e.value.detail
    assert make_calls(log, "bzImage") == 0
    key = kbuild.key_of(kbuild.inputs(spec, "6.1.99-1"))
    assert not (kbuild.kernels_dir() / key).exists()
    assert list((kbuild.kernels_dir() / "failed").glob(f"{key}-*.log"))


def test_a_half_build_is_wiped_not_trusted(bench):
    spec, log = bench
    key = kbuild.key_of(kbuild.inputs(spec, "6.1.99-1"))
    (kbuild.kernels_dir() / key / "linux").mkdir(parents=True)     # killed mid-build
    assert kbuild.cached(key) is None
    built, now = kbuild.ensure(spec)
    assert now and kbuild.cached(key) is not None and make_calls(log, "bzImage") == 1


# -- apt -------------------------------------------------------------------------------

APT_CMD = "apt-get install -y -q --no-install-recommends linux-source-6.1 flex bison"


def test_no_linux_source_and_no_way_to_install_it_names_the_command(bench, monkeypatch):
    spec, log = bench
    monkeypatch.setattr(kbuild, "installed_version", lambda p: None)
    with pytest.raises(KernelError) as e:
        kbuild.ensure(spec, allow_install=False)
    assert "linux-source-6.1 is not installed" in e.value.what
    assert e.value.fix == "python -m suite build --kernel dbg"
    monkeypatch.setenv("OZFS_VMCI_NO_INSTALL", "1")
    with pytest.raises(KernelError) as e:
        kbuild.ensure(spec)
    assert e.value.fix == APT_CMD
    assert make_calls(log, "bzImage") == 0


def test_apt_failing_to_install_linux_source_names_the_command_and_shows_apt(bench, tmp_path,
                                                                          monkeypatch):
    spec, _ = bench
    calls = tmp_path / "apt.calls"
    _exe(tmp_path / "bin" / "apt-get",
         f'#!/bin/sh\necho "$*" >> {calls}\necho "E: Unable to locate package linux-source-6.1"\n'
         f'exit 100\n')
    monkeypatch.setattr(kbuild, "installed_version", lambda p: None)
    monkeypatch.setattr(kbuild, "can_install", lambda: True)
    with pytest.raises(KernelError) as e:
        kbuild.ensure(spec)
    assert e.value.what == "apt-get could not install linux-source-6.1 flex bison"
    assert e.value.fix == APT_CMD and "Unable to locate package" in e.value.detail
    assert "update -q" in calls.read_text()         # the lists were refreshed once


# -- OpenZFS for this kernel -------------------------------------------------------------

def test_meta_license_relabel_and_the_build_key(tmp_path):
    (tmp_path / "META").write_text("Name:          zfs\nLicense:       CDDL\nAuthor: x\n")
    assert recipe_mod.relabel(tmp_path, "GPL")
    assert "License:       GPL\n" in (tmp_path / "META").read_text()
    assert not recipe_mod.relabel(tmp_path, "GPL")
    (tmp_path / "META").write_text("Name: zfs\n")
    with pytest.raises(BuildError, match="no License: line"):
        recipe_mod.relabel(tmp_path, "GPL")
    k = Kernel("p", "6.1.99-ozfs-debug", tmp_path / "v", tmp_path, tmp_path, tmp_path)
    assert "zfs_license" not in k.identity()
    assert k.identity() != dataclasses.replace(k, zfs_license="GPL").identity()


def test_a_kernel_step_counts_its_objects_and_names_a_failure(tmp_path):
    """kbuild's steps go through the one step runner (suite/build/steps.py)."""
    from suite.build import kbuild
    from suite.errors import BuildError
    log = tmp_path / "build.log"
    script = "echo '  CC      kernel/fork.o'; echo '  CC [M]  fs/nfs/inode.o'; echo '  LD      vmlinux'"
    n = kbuild.run_logged(["sh", "-c", script], tmp_path, dict(os.environ), log, "make", 60)
    assert n == 2 and "fs/nfs/inode.o" in log.read_text()
    with pytest.raises(BuildError, match=r"make failed \(exit 2\)") as e:
        kbuild.run_logged(["sh", "-c", "echo 'foo.c:1: error: bad'; exit 2"], tmp_path,
                          dict(os.environ), log, "make", 60)
    assert "error: bad" in e.value.detail
