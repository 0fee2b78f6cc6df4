"""Explore's in-kernel callers (suite/ioengine/explore/callers.py): a sequence whose
ops go through a loop device over its file, here on a disk file system (root and
loop devices needed: skipped, and said, where the machine has none)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from suite.explore.gen import BLOCK_OPS, Choices, generate, sequence_seed
from suite.explore.ops import Sequence
from suite.ioengine.explore import callers
from suite.ioengine.explore.model import Model
from suite.ioengine.explore.run import _backing_check
from test_explore import ALIGNED, _ops, ddir, run_engine  # noqa: F401  (ddir: a fixture)

MIB = 1 << 20


def loop_usable() -> str:
    try:
        p = subprocess.run(["losetup", "--find"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"losetup: {e}"
    return "" if p.returncode == 0 else f"no free loop device here: {p.stderr.strip()}"


def loop_sequence(dio: int, lbs: int) -> Sequence:
    for k in range(200):
        s = generate(sequence_seed(3, k), 30, "file", MIB, ALIGNED)
        if s.caller.get("kind") == "loop":
            return Sequence.from_dict({**s.to_dict(), "caller": {"kind": "loop", "dio": dio,
                                                                 "lbs": lbs}})
    raise AssertionError("no loop sequence in 200")


def test_a_loop_sequence_takes_block_device_ops_and_says_so():
    seqs = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, Choices()) for k in range(60)]
    loops = [s for s in seqs if s.caller.get("kind") == "loop"]
    assert 0.1 < len(loops) / len(seqs) < 0.45
    for s in loops:
        assert {o.op for o in s.ops} <= set(BLOCK_OPS) and s.init_size == 3 * MIB
        assert s.caller["dio"] in (0, 1) and s.caller["lbs"] in (512, 4096)
        assert "losetup --direct-io=" in s.render()
        assert Sequence.from_json(s.to_json()) == s
    plain = next(s for s in seqs if not s.caller)
    assert "caller" not in plain.to_dict(), "a sequence without one reads as it always did"


@pytest.mark.parametrize("dio,lbs", [(1, 4096), (0, 512)])
def test_a_loop_sequence_runs_through_the_device_and_the_file_holds_the_model(
        ddir: Path, dio: int, lbs: int):
    why = loop_usable()
    if why:
        pytest.skip(why)
    seq = loop_sequence(dio, lbs)
    rc, lines = run_engine(ddir, seq, f"loop{dio}{lbs}")
    assert rc == 0 and lines[-1]["ok"], [o for o in _ops(lines) if not o["ok"]]
    setup = next(ln for ln in lines if ln["event"] == "setup")
    assert f"--sector-size {lbs} over" in setup["what"]
    assert ("--direct-io=on" in setup["what"]) == bool(dio)
    assert not (ddir / f"loop{dio}{lbs}.bin").exists(), "a passing run removes its file"
    listed = subprocess.run(["losetup", "-j", str(ddir / f"loop{dio}{lbs}.bin")],
                            capture_output=True, text=True).stdout
    assert listed == "", "the loop device was let go"


def test_a_backing_file_that_differs_from_the_model_is_a_finding(tmp_path: Path):
    f = tmp_path / "backing"
    f.write_bytes(b"a" * 8192)
    loop = callers.Loop(str(f), 8192, True, 4096)          # not attached: nothing to let go
    assert _backing_check(loop, Model(b"a" * 8192)) is None
    bad = _backing_check(loop, Model(b"a" * 4096 + b"b" * 4096))
    assert bad is not None and bad.kind == "wrong-bytes" and "backing file" in bad.why


def test_a_caller_the_engine_does_not_know_is_refused():
    with pytest.raises(ValueError, match="unknown caller"):
        callers.make({"kind": "smb"}, "/x", 4096)
    with pytest.raises(ValueError, match="sector size"):
        callers.make({"kind": "loop", "lbs": 1024}, "/x", 4096)
    assert callers.make({}, "/x", 4096) is None


def caller_sequence(caller: dict) -> Sequence:
    s = generate(sequence_seed(5, 0), 30, "file", MIB, ALIGNED)
    return Sequence.from_dict({**s.to_dict(), "caller": caller})


def test_file_systems_between_are_drawn_with_file_ops_and_no_zfs_op():
    seqs = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, Choices(zfs_ops=True))
            for k in range(100)]
    kinds = {s.caller.get("kind") for s in seqs}
    assert {"loop", "loopfs", "overlay", "nfs", None} == kinds
    for s in seqs:
        if s.caller.get("kind") in ("loopfs", "overlay", "nfs"):
            assert not {o.op for o in s.ops} & {"snapshot", "rollback", "txg_sync"}
            assert Sequence.from_json(s.to_json()) == s
    fs = next(s for s in seqs if s.caller.get("kind") == "loopfs")
    assert "ext4 made and mounted on it" in fs.render()


@pytest.mark.parametrize("caller", [{"kind": "loopfs", "dio": 1, "lbs": 4096},
                                    {"kind": "loopfs", "dio": 0, "lbs": 512},
                                    {"kind": "overlay"}])
def test_a_file_system_between_runs_and_is_checked_and_let_go(ddir: Path, caller: dict):
    why = loop_usable()
    if why:
        pytest.skip(why)
    rc, lines = run_engine(ddir, caller_sequence(caller), f"fs-{caller['kind']}")
    assert rc == 0 and lines[-1]["ok"], [o for o in _ops(lines) if not o["ok"]]
    setup = next(ln for ln in lines if ln["event"] == "setup")["what"]
    assert ("mkfs.ext4" in setup) == (caller["kind"] == "loopfs")
    assert ("overlayfs" in setup) == (caller["kind"] == "overlay")
    mounts = Path("/proc/mounts").read_text()
    assert str(ddir) not in mounts, "the file system was unmounted"
    assert not list(ddir.glob(f"fs-{caller['kind']}*.mnt")) and \
        not list(ddir.glob(f"fs-{caller['kind']}*.upper")), "a passing run removes its folders"


def test_an_ext4_that_does_not_check_clean_is_a_finding(tmp_path: Path):
    why = loop_usable()
    if why:
        pytest.skip(why)
    fs = callers.LoopFs(str(tmp_path / "backing"), MIB, True, 4096)
    target = fs.attach()
    Path(target).write_bytes(b"x" * 65536)
    subprocess.run(["umount", fs.mnt], check=True)
    with open(fs.backing, "r+b") as f:              # the first block group's descriptors
        f.seek(4096)
        f.write(bytes(4096))
    bad = _backing_check(fs, Model(b"x" * 65536))
    assert bad is not None and bad.kind == "fsck" and "e2fsck -fn exit" in bad.why, bad
    assert subprocess.run(["losetup", "-j", fs.backing], capture_output=True,
                          text=True).stdout == "", "the loop device was let go all the same"


def test_an_overlay_upper_file_that_differs_from_the_model_is_a_finding(tmp_path: Path):
    ov = callers.Overlay(str(tmp_path / "ov"), MIB)
    for d in ov.dirs():
        Path(d).mkdir()
    (Path(ov.dirs()[1]) / "target").write_bytes(b"a" * 8192)
    assert _backing_check(ov, Model(b"a" * 8192)) is None
    bad = _backing_check(ov, Model(b"a" * 4096 + b"b" * 4096))
    assert bad is not None and bad.kind == "wrong-bytes" and "upper file" in bad.why
    short = _backing_check(ov, Model(b"a" * 9000))
    assert short is not None and short.kind == "size"


def test_nfs_is_drawn_from_a_generator_of_its_own_and_said():
    """Adding the NFS caller changed no sequence that does not draw it."""
    seqs = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, Choices(zfs_ops=True))
            for k in range(200)]
    without = [generate(sequence_seed(1, k), 40, "file", 3 * MIB,
                        Choices(zfs_ops=True, nfs_share=0.0)) for k in range(200)]
    nfs = [k for k, s in enumerate(seqs) if s.caller.get("kind") == "nfs"]
    assert 4 <= len(nfs) <= 40, len(nfs)
    assert all(seqs[k] == without[k] for k in range(200) if k not in nfs)
    assert all(not without[k].caller for k in nfs), "only caller-less sequences draw NFS"
    assert "NFSv4.2 mount of the kernel's NFS server" in seqs[nfs[0]].render()


def test_through_nfs_only_the_datasets_always_is_direct_io():
    from suite.explore.failure import direct
    from suite.explore.ops import Op
    s = caller_sequence({"kind": "nfs"})
    o = Op("pread", direct=True, len=4096)
    assert not direct(Sequence.from_dict({**s.to_dict(), "props": {"direct": "standard"}}), o)
    assert direct(Sequence.from_dict({**s.to_dict(), "props": {"direct": "always"}}), o)


def test_a_read_through_nfs_is_the_splice_finding_where_it_stands():
    from suite.explore.crashes.avoid import known_failure
    from suite.report import upstream
    fs = upstream.load()
    hit = known_failure("wrong-bytes", "pread", "6.1.0-57-amd64", fs, direct=True, caller="nfs")
    assert hit is not None and hit.id == "sendfile-from-direct-always-moves-nothing"
    assert known_failure("wrong-bytes", "pread", "6.12.0", fs, direct=True, caller="nfs") is None
    assert known_failure("wrong-bytes", "pread", "6.1.0", fs, direct=False, caller="nfs") is None
    assert known_failure("wrong-bytes", "pread", "6.1.0", fs, direct=True) is None


def nfs_usable() -> str:
    """Why the kernel NFS server cannot run here ('' if it can)."""
    from suite.explore.targets import nfs_server
    if not nfs_server():
        return "nfs-kernel-server is not installed"
    if os.geteuid() != 0:
        return "not root"
    subprocess.run(["modprobe", "nfsd"], capture_output=True)
    if "\tnfsd\n" not in Path("/proc/filesystems").read_text():
        return "no nfsd on this kernel (modprobe nfsd failed: a container?)"
    return ""


def test_a_sequence_through_nfs_runs_and_the_export_holds_the_model(ddir: Path):
    why = nfs_usable()
    if why:
        pytest.skip(why)
    rc, lines = run_engine(ddir, caller_sequence({"kind": "nfs"}), "fs-nfs")
    assert rc == 0 and lines[-1]["ok"], [o for o in _ops(lines) if not o["ok"]]
    assert "knfsd exporting" in next(ln for ln in lines if ln["event"] == "setup")["what"]
    assert str(ddir) not in Path("/proc/mounts").read_text(), "the NFS mount was let go"
