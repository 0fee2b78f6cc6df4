"""Self-tests of ``suite explore --target zvol`` (no VM): zvol sequences are a
function of their seed and hold only ops a block device can do; the session
makes a zvol per run with the sequence's properties and runs the engine on it
as a block device (here a regular file stands in for each zvol, the engine
runs for real), shrinks and saves a zvol finding as a zvol sequence; the
guest's zvol maker issues the right commands and refuses a build that makes
no zvol; the engine's ``--zvol``; the reproducer keeps only the finding's zvol.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.casekit.zvol import Zvol
from suite.errors import GuestError
from suite.explore.gen import (BLOCK_OPS, OP_WEIGHTS, ZVOL_PROP_CHOICES, Choices, generate,
                               sequence_seed, size_of)
from suite.explore.ops import IO_OPS, WRITES, Sequence
from suite.explore.budget import parse_budget
from suite.explore.session import Explorer, LocalRunner, Settings, explore
from suite.explore.targets import NoZvols, choices_for
from suite.explore.zvol import GuestZvols
from suite.ioengine.explore import ops as explore_ops

REPO = Path(__file__).resolve().parent.parent
KIB = 1 << 10
MIB_2 = 2 << 20
# What a block device cannot do (the engine's blockdev mode has no file to
# resize, fallocate, copy into, clone into, snapshot or roll back).
FILE_ONLY = {"truncate", "punch_hole", "zero_range", "copy_range", "clone_range",
             "snapshot", "rollback", "txg_sync"}
ZVOL_OPS = {"pread", "preadv", "pwrite", "pwritev", "mmap_read", "mmap_write", "sendfile",
            "splice", "fsync", "fdatasync", "syncfs", "evict", "verify", "actors",
            "sendfile_out", "splice_out", "vmsplice_in"}
HAVE = {"volblocksize", "volsize", "compression", "checksum", "sync", "primarycache"}
# Misaligned O_DIRECT left out of runs on this machine (see tests/test_explore.py ALIGNED).
ALIGNED = Choices(misaligned_share=0.0, params=("zvol_dio_enabled",))


# ---------------------------------------------------------------------------
# the generator
# ---------------------------------------------------------------------------

def test_the_same_seed_gives_the_same_zvol_sequence_in_any_process():
    ch = Choices(params=("zvol_dio_enabled",))
    seq = generate(42, 50, "zvol", 3 << 20, ch)
    text = seq.to_json()
    assert generate(42, 50, "zvol", 3 << 20, ch).to_json() == text
    code = ("from suite.explore.gen import Choices, generate; import sys; sys.stdout.write("
            "generate(42, 50, 'zvol', 3 << 20, Choices(params=('zvol_dio_enabled',))).to_json())")
    for hashseed in ("0", "4242"):
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                             text=True, timeout=60, env={**os.environ, "PYTHONHASHSEED": hashseed})
        assert out.returncode == 0, out.stderr
        assert out.stdout == text
    d = json.loads(text)
    assert d["target"] == "zvol" and Sequence.from_json(text).target == "zvol"
    assert "volblocksize" in seq.props and "recordsize" not in seq.props
    assert set(seq.params) == {"zvol_dio_enabled"} and seq.init_size == 3 << 20
    assert len({generate(s, 50, "zvol", 3 << 20, ch).to_json() for s in range(1, 6)}) == 5


def test_a_zvol_sequence_draws_the_same_ops_whatever_the_build_has():
    """A gate runs one seed on the base (no zvol_dio_enabled) and the series."""
    for s in range(10):
        full = generate(sequence_seed(3, s), 40, "zvol", MIB_2,
                        Choices(params=("zvol_dio_enabled",)))
        stock = generate(sequence_seed(3, s), 40, "zvol", MIB_2,
                         Choices(vol_have=("checksum", "compression")))
        assert full.ops == stock.ops
        assert stock.params == {} and set(stock.props) <= {"volblocksize", "checksum",
                                                           "compression"}
        assert "volblocksize" in stock.props                 # every zvol has one
        assert stock.props["volblocksize"] == full.props["volblocksize"]


def test_zvol_syncs_are_inserted_without_changing_the_other_draws():
    """The nopwrite family needs a write, a txg sync, then the same bytes again: a
    zvol sequence gets syncs from their own generator; without the ZFS commands (or
    with the share at 0) it is the very sequence it was before syncs existed."""
    for s in range(20):
        seed = sequence_seed(5, s)
        base = generate(seed, 60, "zvol", MIB_2, Choices(params=("zvol_dio_enabled",)))
        # (the synced rewrites, a draw of their own: tests/test_explore_rewrite.py)
        synced = generate(seed, 60, "zvol", MIB_2, Choices(zfs_ops=True, synced_rewrite_share=0.0,
                                                          params=("zvol_dio_enabled",)))
        none = generate(seed, 60, "zvol", MIB_2, Choices(zfs_ops=True, zvol_sync_share=0.0,
                                                        synced_rewrite_share=0.0,
                                                        params=("zvol_dio_enabled",)))
        assert none == base and "txg_sync" not in {o.op for o in base.ops}
        assert [o for o in synced.ops if o.op != "txg_sync"] == list(base.ops)
    counts = [sum(o.op == "txg_sync" for o in generate(sequence_seed(5, s), 60, "zvol", MIB_2,
                                                         Choices(zfs_ops=True)).ops)
              for s in range(20)]
    assert sum(counts) > 20 and sum(1 for c in counts if c) >= 15      # most have one


def test_the_generator_never_emits_a_file_only_op_for_a_zvol():
    seqs = [generate(s, 80, "zvol", 1 << 20, Choices(zfs_ops=True, params=("zvol_dio_enabled",)))
            for s in range(60)]
    kinds = {o.op for q in seqs for o in q.ops}
    # txg_sync, the one pool op, comes from a generator of its own (zvol_sync_share), and
    # so does a power cut (in place of the verify: tests/test_explore_power.py)
    assert kinds == ZVOL_OPS | {"txg_sync", "power_cut"} and \
        not kinds & (FILE_ONLY - {"txg_sync"})
    assert set(BLOCK_OPS) == ZVOL_OPS and set(OP_WEIGHTS) - set(BLOCK_OPS) == FILE_ONLY
    assert {q.props["volblocksize"] for q in seqs} == set(ZVOL_PROP_CHOICES["volblocksize"])
    assert {q.params["zvol_dio_enabled"] for q in seqs} == {0, 1}
    for q in seqs:
        assert q.init_size == 1 << 20 and "recordsize" not in q.props
        for o in q.ops:
            if o.op in IO_OPS + ("mmap_read", "mmap_write", "sendfile", "splice"):
                assert 0 <= o.off and o.off + o.len <= 1 << 20, o       # inside the window
            if o.op in ("sendfile", "splice"):
                assert o.src_off + o.len <= 1 << 20, o
    # whole volblocks written with O_DIRECT: the shape the zvol Direct I/O path takes
    whole = [o for q in seqs for o in q.ops if o.op in WRITES and o.direct and o.aligned
             and o.off % size_of(q.props["volblocksize"]) == 0
             and o.len % size_of(q.props["volblocksize"]) == 0]
    assert len(whole) > 20
    # asked for nothing but file ops, a zvol has nothing to run: said so
    with pytest.raises(ValueError, match="leaves no op for a zvol"):
        generate(1, 10, "zvol", 1 << 20, Choices(ops=("truncate", "clone_range")))


def test_choices_for_a_zvol_keep_what_a_zvol_of_the_build_has():
    ch = choices_for("zvol", HAVE | {"recordsize"}, lambda p: p == "zvol_dio_enabled")
    assert ch.params == ("zvol_dio_enabled",) and "direct" not in (ch.vol_have or ())
    assert set(ch.vol_have or ()) == HAVE - {"volsize"}
    stock = choices_for("zvol", HAVE, lambda p: False)
    assert stock.params == ()
    f = choices_for("file", {"recordsize", "compression"}, lambda p: p == "zfs_dio_strict")
    assert set(f.props) == {"recordsize", "compression"} and f.params == ("zfs_dio_strict",)


# ---------------------------------------------------------------------------
# the session, with regular files standing in for zvols
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ddir():
    """A directory on a disk filesystem (/var/tmp: tmpfs may refuse O_DIRECT)."""
    d = Path(tempfile.mkdtemp(prefix="explore-zvol-selftest-", dir="/var/tmp"))
    try:
        probe = d / "probe"
        probe.write_bytes(bytes(8192))
        try:
            fd = os.open(probe, os.O_RDONLY | os.O_DIRECT)
            buf = mmap.mmap(-1, 4096)
            with memoryview(buf) as mv:
                os.preadv(fd, [mv], 0)
            os.close(fd)
            buf.close()
        except OSError as e:
            pytest.skip(f"{d} refuses O_DIRECT ({e}): the engine's O_DIRECT ops cannot run here")
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


class StandInZvols:
    """A ZvolMaker whose zvols are regular files (the engine, given --blockdev,
    writes them over like a device); records what it was asked."""
    parent = "fake/ds"

    def __init__(self, root: Path, have: set[str] | None = None, refuse: str = "") -> None:
        self.root, self.have, self.refuse = root, HAVE if have is None else have, refuse
        root.mkdir(parents=True, exist_ok=True)
        self.created: list[tuple[str, int, int, dict[str, str]]] = []
        self.destroyed: list[str] = []
        self.queues: list[str] = []
        self.asked = 0

    def properties(self) -> set[str]:
        self.asked += 1
        if self.refuse:
            raise NoZvols(self.refuse, fix="explore files: --target file")
        return set(self.have)

    def create(self, name: str, size: int, volblocksize: int, props: dict[str, str],
               queue: str = "bio") -> Zvol:
        size = -(-size // volblocksize) * volblocksize
        dev = self.root / f"{name}.zd"
        dev.write_bytes(b"\x77" * size)
        self.created.append((name, size, volblocksize, dict(props)))
        self.queues.append(queue)
        return Zvol(f"{self.parent}/{name}", str(dev), volblocksize, size, queue)

    def destroy(self, name: str) -> str | None:
        self.destroyed.append(name)
        (self.root / f"{name.rsplit('/', 1)[1]}.zd").unlink()
        return None


class Recording(LocalRunner):
    def __init__(self, *extra: str) -> None:
        super().__init__(*extra)
        self.runs: list[tuple[Sequence, str, list[str]]] = []

    def run_sequence(self, seq_file, target, timeout_s, extra=()):
        self.runs.append((Sequence.from_json(Path(seq_file).read_text()), target, list(extra)))
        return super().run_sequence(seq_file, target, timeout_s, extra)


def test_the_session_makes_a_zvol_per_run_with_its_properties(ddir: Path):
    root = ddir / "per-run"
    work = root / "ds"
    work.mkdir(parents=True)
    zvols, runner, applied = StandInZvols(root / "zvols"), Recording(), []
    s = Settings(str(work), root / "engine", root / "explore", n_ops=25,
                 file_size_max=256 * KIB, target="zvol")
    res = explore(runner, s, 5, parse_budget("4x"), ALIGNED, log=lambda _: None,
                  configure=lambda q: applied.append((q.props, q.params)), zvols=zvols)
    assert [r["state"] for r in res.runs] == ["ok"] * 4, res.runs
    assert zvols.asked == 1 and len(zvols.created) == len(runner.runs) == 4
    for (seq, path, extra), made, (props, params) in zip(runner.runs, zvols.created, applied):
        name = made[0]
        assert seq.target == "zvol" and "recordsize" not in seq.props
        assert "direct" not in seq.props                    # a zvol of this build lacks it
        vbs = size_of(seq.props["volblocksize"])
        assert made == (name, 256 * KIB, vbs,
                        {k: v for k, v in seq.props.items() if k != "volblocksize"})
        assert {"compression", "checksum", "sync", "primarycache"} <= set(made[3])
        assert path == str(zvols.root / f"{name}.zd")        # the /dev/zdN the maker gave
        assert extra == ["--blockdev", "--scratch", f"{work}/{name}", "--zvol",
                         f"fake/ds/{name}"]                  # no ZFS ops on a zvol
        assert props == {} and params == seq.params          # set at birth, not zfs set
    assert len({m[0] for m in zvols.created}) == 4              # a fresh zvol each run
    assert zvols.destroyed == [f"fake/ds/{m[0]}" for m in zvols.created]   # passed: gone
    summary = json.loads((root / "explore" / "summary.json").read_text())
    assert summary["target"] == "zvol"


def test_a_zvol_finding_is_shrunk_on_fresh_zvols_and_saved_as_a_zvol_sequence(ddir: Path):
    root = ddir / "finding"
    work = root / "ds"
    work.mkdir(parents=True)
    zvols, runner = StandInZvols(root / "zvols"), Recording("--tamper-after-data", "3")
    s = Settings(str(work), root / "engine", root / "explore", n_ops=12,
                 file_size_max=128 * KIB, shrink_tries=60, target="zvol")
    res = explore(runner, s, 7, parse_budget("10x"), ALIGNED, log=lambda _: None, zvols=zvols)
    assert len(res.findings) == 1 and not res.no_result
    f = res.findings[0]
    assert f.kind == "wrong-bytes" and f.confirmed and len(f.minimal.ops) < len(f.original.ops)
    saved = Sequence.from_json(f.json_path.read_text())
    assert saved == f.minimal and saved.target == "zvol" and '"target": "zvol"' in \
        f.json_path.read_text()
    assert saved.init_size == 128 * KIB and saved.props == f.original.props
    names = [m[0] for m in zvols.created]
    assert len(names) == len(set(names)) == res.replays == len(runner.runs)
    # each earlier zvol destroyed (a failed one before the next run), the last kept
    assert zvols.destroyed == [f"fake/ds/{n}" for n in names[:-1]]
    assert names[-1].endswith("-confirm") and (zvols.root / f"{names[-1]}.zd").exists()
    text = f.txt_path.read_text()
    assert "target zvol" in text and "zfs create -V 131072 -o " in text
    assert "--blockdev --scratch" in text and "--zvol POOL/DATASET/VOL" in text


def test_a_sequence_replays_only_on_its_own_kind_of_target(ddir: Path, tmp_path: Path):
    zseq = generate(3, 5, "zvol", 64 * KIB)
    files = Explorer(LocalRunner(), Settings(str(tmp_path), tmp_path, tmp_path), Choices())
    with pytest.raises(ValueError, match="Settings\\(target='zvol'\\)"):
        files.replay(zseq, "x")
    with pytest.raises(ValueError, match="needs a zvol maker"):
        Explorer(LocalRunner(), Settings(str(tmp_path), tmp_path, tmp_path, target="zvol"),
                 Choices())
    zvols = StandInZvols(tmp_path / "z")
    ex = Explorer(LocalRunner(), Settings(str(tmp_path), tmp_path, tmp_path, target="zvol"),
                  Choices(), zvols=zvols)
    with pytest.raises(ValueError, match="Settings\\(target='file'\\)"):
        ex.replay(generate(3, 5, "file", 64 * KIB), "y")
    assert zvols.created == []


def test_the_session_refuses_a_build_that_makes_no_zvol(tmp_path: Path):
    runner = Recording()
    zvols = StandInZvols(tmp_path / "z", refuse="this build cannot make a zvol on tank")
    with pytest.raises(NoZvols, match="cannot make a zvol") as ei:
        explore(runner, Settings(str(tmp_path), tmp_path, tmp_path, target="zvol"), 1,
                parse_budget("1x"), zvols=zvols)
    assert "--target file" in str(ei.value) and runner.runs == [] and zvols.created == []


# ---------------------------------------------------------------------------
# the guest's zvol maker, with stand-ins for the guest's zfs and engine
# ---------------------------------------------------------------------------

class FakeGuestZfs:
    """What GuestZvols (and casekit's create_zvol) use of suite.guest.zfs.Zfs."""

    def __init__(self, params: dict[str, int] | None = None, create_rc: int = 0,
                 props: tuple[str, ...] = tuple(sorted(HAVE))) -> None:
        self.params, self.create_rc, self.props = params or {}, create_rc, props
        self.calls: list[tuple[str, ...]] = []
        self.ignores_blk_mq = False     # a build whose zvols never take blk-mq
        self.guest = SimpleNamespace(run=self._run)

    def _run(self, cmd: str, timeout: float = 0, check: bool = True):
        self.calls.append(("guest", cmd))
        mq = self.params.get("zvol_use_blk_mq") == 1 and not self.ignores_blk_mq
        rc = 0 if "/mq" not in cmd or mq else 1         # test -d /sys/block/zdN/mq
        return SimpleNamespace(rc=rc, stdout="", stderr="")

    def set_param(self, name: str, value: object) -> None:
        self.calls.append(("param", name, str(value)))
        self.params[name] = int(value)      # type: ignore[call-overload]

    def has_param(self, name: str) -> bool:
        return name in self.params

    def get_param(self, name: str) -> str:
        return str(self.params[name])

    def zfs(self, *args: str, check: bool = True, timeout: float = 120):
        self.calls.append(("zfs", *args))
        rc = self.create_rc if args[0] == "create" else 0
        if check and rc:
            raise GuestError(f"zfs {' '.join(args)}: exit {rc}", fix="see its output")
        out = "\n".join(self.props) if args[0] == "get" else ""
        return SimpleNamespace(rc=rc, stdout=out, stderr="cannot create 'x'" if rc else "")


def guest_zvols(zfs: FakeGuestZfs, dev: str | None = "/dev/zd16") -> GuestZvols:
    def oneshot(*args: str, timeout: float = 120) -> list[dict]:
        zfs.calls.append(("engine", *args))
        return [{"event": "zvol", "name": args[1], "dev": dev}]
    engine = SimpleNamespace(guest=zfs.guest, oneshot=oneshot)
    ds = SimpleNamespace(name="tank/case", mountpoint="/tmp/zfs/tank/case",
                         pool=SimpleNamespace(zfs=zfs, name="tank"))
    return GuestZvols(zfs, ds, engine)          # type: ignore[arg-type]


def test_the_guest_maker_probes_creates_with_the_properties_and_destroys():
    zfs = FakeGuestZfs()
    maker = guest_zvols(zfs)
    assert maker.parent == "tank/case"
    assert maker.properties() == HAVE and maker.properties() == HAVE     # asked once
    probe = "tank/case/explore-probe"
    zcalls = [c for c in zfs.calls if c[0] == "zfs"]
    assert zcalls == [("zfs", "create", "-V", str(1 << 20), "-o", "volblocksize=16384", "-o",
                       "primarycache=metadata", "-o", "compression=off", probe),
                      ("zfs", "get", "-H", "-o", "property", "all", probe),
                      ("zfs", "destroy", "-f", probe)]
    assert ("engine", "zvol-dev", probe, "--wait-s", "60") in zfs.calls   # waits for /dev/zdN
    assert any(c[0] == "guest" and "nowatch" in c[1] for c in zfs.calls)  # udev kept off them
    zfs.calls.clear()
    zv = maker.create("explore-9-0001-s0", 100000, 131072,
                      {"checksum": "sha256", "compression": "lz4", "primarycache": "all",
                       "sync": "always"})
    assert zv == Zvol("tank/case/explore-9-0001-s0", "/dev/zd16", 131072, 131072)
    assert not [c for c in zfs.calls if c[0] == "param"]        # bio: the default, not set
    create = next(c for c in zfs.calls if c[:2] == ("zfs", "create"))
    assert create == ("zfs", "create", "-V", "131072", "-o", "volblocksize=131072",
                      "-o", "primarycache=all", "-o", "compression=lz4", "-o", "checksum=sha256",
                      "-o", "sync=always", "tank/case/explore-9-0001-s0")
    assert maker.destroy(zv.name) is None


def test_the_guest_maker_refuses_a_build_that_makes_no_zvol_and_says_what_to_do():
    with pytest.raises(NoZvols, match="zvol_inhibit_dev=1: this build makes no /dev/zdN") as ei:
        guest_zvols(FakeGuestZfs(params={"zvol_inhibit_dev": 1})).properties()
    assert "--target file" in str(ei.value)
    assert guest_zvols(FakeGuestZfs(params={"zvol_inhibit_dev": 0})).properties() == HAVE
    with pytest.raises(NoZvols, match="cannot make a zvol on tank") as ei:
        guest_zvols(FakeGuestZfs(create_rc=1)).properties()
    assert "--target file" in str(ei.value)
    with pytest.raises(NoZvols, match="cannot make a zvol on tank"):    # no /dev/zdN came
        guest_zvols(FakeGuestZfs(), dev=None).properties()
    with pytest.raises(NoZvols, match="no volblocksize"):
        guest_zvols(FakeGuestZfs(props=("recordsize", "compression"))).properties()
    with pytest.raises(GuestError, match="explore: zvol tank/case/v could not be made"):
        guest_zvols(FakeGuestZfs(create_rc=1)).create("v", 8192, 4096, {})


# ---------------------------------------------------------------------------
# the engine: --zvol, and EIO from a racing write to a block device
# ---------------------------------------------------------------------------

def _explore_run(d: Path, seq: Sequence, *args: str) -> tuple[int, list[dict]]:
    f = d / f"zv-{seq.seed}.seq.json"
    f.write_text(seq.to_json())
    p = subprocess.run([sys.executable, "-m", "suite.ioengine", "explore-run", str(f), *args],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    return p.returncode, [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]


def test_the_engine_runs_a_zvol_by_name_as_a_block_device(ddir: Path):
    dev = ddir / "stand-in.zd"
    dev.write_bytes(b"\x55" * (320 * KIB))
    seq = generate(sequence_seed(4, 0), 30, "zvol", 256 * KIB, ALIGNED)
    rc, lines = _explore_run(ddir, seq, "--file", str(dev), "--zvol", "fake/ds/v",
                             "--scratch", str(ddir / "zv"))
    assert rc == 0 and lines[-1]["ok"] and lines[-1]["size"] == 256 * KIB, lines[-3:]
    # --zvol means a block device: written over, never truncated
    assert dev.stat().st_size == 320 * KIB and dev.read_bytes()[256 * KIB:] == b"\x55" * 64 * KIB
    rc, lines = _explore_run(ddir, seq, "--file", str(ddir / "zd-gone"), "--zvol",
                             "fake/ds/none", "--scratch", str(ddir / "zv"), "--op-timeout", "0.5")
    assert rc == 4 and lines[-1]["stage"] == "setup"
    assert "no /dev/zdN serves zvol fake/ds/none" in lines[-1]["error"]
    rc, lines = _explore_run(ddir, seq, "--file", str(dev), "--zvol", "fake/ds/v")
    assert rc == 2 and "--scratch" in lines[-1]["error"]


def test_eio_from_a_racing_write_to_a_block_device_is_a_finding(monkeypatch, tmp_path: Path):
    """A zvol retries a Direct I/O write whose buffer changed through the ARC
    (zvol-dio's dio-write-error-not-retried fix); a file may refuse it with EIO."""
    from suite.ioengine.explore.requests import Target
    dev = tmp_path / "dev.img"
    dev.write_bytes(bytes(16384))
    t = Target(str(dev), str(tmp_path / "s"), True, 5.0)
    ctx = explore_ops.Ctx(t, explore_ops.Model(bytes(16384)), 8, b"")
    try:
        monkeypatch.setattr(t, "issue", lambda *a: (-errno.EIO, errno.EIO, "syscall"))
        monkeypatch.setattr(explore_ops, "settle_racing_write", lambda c, s, refused:
                            explore_ops.Outcome("refused" if refused else "ok"))
        racing = explore_ops.Step("pwrite", off=0, len=4096, buf="racing", data=1)
        assert explore_ops.op_write(ctx, racing).kind == "error:EIO"
        t.blockdev = False                              # the same on a file: allowed
        assert explore_ops.op_write(ctx, racing).outcome == "refused"
        assert explore_ops.op_write(ctx, dataclasses.replace(racing, buf="anon")).kind == \
            "error:EIO"
    finally:
        t.close()


# ---------------------------------------------------------------------------
# the reproducer, the command line
# ---------------------------------------------------------------------------

def test_the_reproducer_of_a_zvol_finding_makes_only_its_zvol(tmp_path: Path):
    from suite.report.repro import only_the_finding, write_reproducer
    from suite.symptoms import CaseVerdict, Symptom
    eng = "PYTHONPATH=/work/main /usr/bin/python3 -m suite.ioengine"
    zfs = "LD_LIBRARY_PATH=/b/.libs /b/.libs/zfs"

    def run(n: int, label: str) -> list[str]:
        name = f"explore-5-{n:04d}-{label}"
        return [f"{zfs} create -V 131072 -o volblocksize=16384 -o compression=lz4 tank/case/{name}",
                f"{eng} zvol-dev tank/case/{name} --wait-s 60",
                "command -v udevadm >/dev/null || exit 0; udevadm settle -t 60 || true",
                f"{eng} explore-run /tmp/ozfs-engine/{name}.seq.json --file /dev/zd{16 * n} "
                f"--blockdev --scratch /tmp/zfs/tank/case/{name} --zvol tank/case/{name}",
                f"{zfs} destroy -f tank/case/{name}"]
    knob = "/sys/module/zfs/parameters/zvol_dio_enabled"
    param = f"echo 1 > {knob}; cat {knob}"
    cmds = [param, *run(1, "s0"), *run(2, "shrink"), *run(3, "confirm")][:-1]   # kept: no destroy
    kept = [c for c, _ in only_the_finding([(c, False) for c in cmds])]
    named = [c for c in kept if "explore-5-" in c]
    assert kept[0] == param and len(named) == 3             # create, zvol-dev, explore-run
    assert all("explore-5-0003-confirm" in c for c in named)
    case = tmp_path / "case"
    (case / "engine").mkdir(parents=True)
    (case / "engine" / "explore-5-0003-confirm.seq.json").write_text("{}")
    (case / "commands.log").write_text("\n".join(
        ["[t] g $ echo 'ozfs-vmci: begin test_explore' > /dev/kmsg",
         *[f"[t] g $ {c}" for c in cmds],
         "[t] g $ # ozfs-vmci: end of the case; the harness's checks follow"]) + "\n")
    v = CaseVerdict("cases/test_explore.py::test_explore", "failed",
                    [Symptom("error:EIO", "explore seed 5 op 1 (pwrite ...): EIO")], "boom")
    sh = write_reproducer(case, v.nodeid, v).read_text()
    assert "must 'zfs create -V 131072 -o volblocksize=16384 -o compression=lz4 " \
           "tank/case/explore-5-0003-confirm'" in sh
    assert sh.count("zfs create -V") == 1 and "--zvol tank/case/explore-5-0003-confirm" in sh


def test_the_command_line_and_the_gate_take_the_target(monkeypatch, tmp_path: Path):
    import suite.cli as cli
    from suite.explore import lane
    from suite.campaign import gate
    seen: dict[str, list[str]] = {}

    def fake_cases(args, results, pytest_args, timeout, targets):
        seen["args"] = list(args)
        return None, "", 0.0
    monkeypatch.setattr(lane, "run_cases", fake_cases)
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    assert cli.main(["explore", "--series", "zvol-dio", "--target", "zvol", "--budget",
                     "15m", "--seed", "3"]) == 2           # no verdict from the fake session
    args = seen["args"]
    assert args[args.index("--explore-target") + 1] == "zvol"
    assert args[args.index("--explore-budget") + 1] == "900s"
    cli.main(["explore", "--budget", "2x"])
    assert seen["args"][seen["args"].index("--explore-target") + 1] == "file"
    with pytest.raises(SystemExit):
        cli.main(["explore", "--target", "blockdev"])

    def fake_gate(series, base, selection, extra, reruns, series_on_base=False, head_params=(),
                  label=""):
        seen["gate"] = extra
        raise SystemExit(0)
    monkeypatch.setattr(gate, "run_gate", fake_gate)
    with pytest.raises(SystemExit):
        cli.main(["gate", "--series", "zvol-dio", "--explore", "10m", "--explore-target", "zvol"])
    assert seen["gate"][seen["gate"].index("--explore-target") + 1] == "zvol"
    from _pytest.config.argparsing import Parser
    from suite.plugin import hooks
    parser = Parser(_ispytest=True)         # the plugin's options, as pytest registers them
    hooks.pytest_addoption(parser)
    ns = parser.parse_known_args(["--explore-target", "zvol"])
    assert ns.explore_target == "zvol"


def test_the_report_page_says_a_session_explored_zvols(tmp_path: Path):
    from suite.report.page import sections
    for target in ("zvol", "file"):
        ex = tmp_path / target / "cases" / "test_explore" / "explore"
        ex.mkdir(parents=True)
        (ex / "summary.json").write_text(json.dumps({
            "master_seed": 3, "budget": "900s", "target": target, "sequences": 1, "replays": 1,
            "elapsed_s": 60, "runs": [{"k": 0, "seed": 9, "state": "ok"}], "findings": [],
            "no_result": []}))
    zvol = sections.explore([("", [tmp_path / "zvol"])])
    assert zvol is not None and "master seed 3, budget 900s, on a zvol: 1 sequence(s)" in \
        zvol.intro[0]
    plain = sections.explore([("", [tmp_path / "file"])])
    assert plain is not None and "budget 900s: 1 sequence(s)" in plain.intro[0]


def test_a_sequence_names_a_target_it_can_run_on():
    d = generate(1, 3, "zvol", 64 * KIB).to_dict()
    assert Sequence.from_dict(d).target == "zvol"
    with pytest.raises(ValueError, match="target 'zdev' is not one of file, blockdev, zvol"):
        Sequence.from_dict({**d, "target": "zdev"})
    with pytest.raises(ValueError, match="target must be one of file, blockdev, zvol"):
        generate(1, 3, "zdev", 64 * KIB)


def test_avoided_ops_are_never_drawn_and_the_rest_keep_their_sequences():
    """--explore-avoid, as syzkaller disables a call that hangs: no sequence holds
    an avoided op; names are checked; avoiding nothing changes nothing."""
    from suite.errors import SuiteError
    from suite.explore.gen import generate
    have = {"recordsize", "direct", "compression"}
    ch = choices_for("file", have, lambda p: True, ["splice", "sendfile,mmap_write"])
    assert not {"splice", "sendfile", "mmap_write"} & set(ch.ops) and "pread" in ch.ops
    kinds = {op.op for seed in range(200) for op in generate(seed, 30, "file", 1 << 20, ch).ops}
    assert not {"splice", "sendfile", "mmap_write"} & kinds and {"pread", "verify"} <= kinds
    plain = choices_for("file", have, lambda p: True)
    assert choices_for("file", have, lambda p: True, []) == plain
    assert generate(7, 30, "file", 1 << 20, plain) == \
        generate(7, 30, "file", 1 << 20, choices_for("file", have, lambda p: True, [""]))
    with pytest.raises(SuiteError, match="splic: no such op"):
        choices_for("file", have, lambda p: True, ["splic"])
    with pytest.raises(SuiteError, match="every sequence ends with a verify"):
        choices_for("file", have, lambda p: True, ["verify"])


def test_some_writes_lay_down_an_earlier_write_s_very_bytes_again():
    """Rewrites of identical data (what nopwrite and dedup act on: the zvol Direct
    I/O nopwrite panic needed one): same offset, length and data token as an
    earlier write; a sequence that draws none is the one it was without them."""
    from suite.explore.gen import Choices, generate
    rewrites = plain = 0
    for seed in range(120):
        # (the zvol Direct I/O shape's racing writes cover whole blocks: their keys move)
        seq = generate(seed, 40, "zvol", 3 << 20, Choices(zvol_dio_shape_share=0.0))
        seen: set[tuple[int, int, int]] = set()
        again = False
        for op in seq.ops:
            if op.op in ("pwrite", "pwritev", "vmsplice_in"):
                key = (op.off, op.len, op.data)
                again |= key in seen
                rewrites += key in seen
                seen.add(key)
                assert op.op != "pwritev" or 1 <= op.segs <= op.len
        if not again:
            plain += 1
            assert seq == generate(seed, 40, "zvol", 3 << 20, Choices(rewrite_share=0.0,
                                                                     zvol_dio_shape_share=0.0))
        assert generate(seed, 40, "zvol", 3 << 20) == \
            generate(seed, 40, "zvol", 3 << 20)                    # same seed, same sequence
    assert rewrites > 40 and plain > 10
    none = [generate(s, 40, "file", 3 << 20, Choices(rewrite_share=0.0)) for s in range(50)]
    assert all(len({(o.off, o.len, o.data) for o in q.ops if o.op.startswith("pwrite")})
               == sum(1 for o in q.ops if o.op.startswith("pwrite")) for q in none)


def test_a_third_of_zvol_sequences_take_the_blk_mq_queue_and_other_draws_stay():
    """zvol_use_blk_mq is drawn from a generator of its own: where the build has the
    parameter a third of the sequences ask for blk-mq, and every other draw of a seed
    is what it was without it (saved seeds replay as they were)."""
    both = Choices(params=("zvol_dio_enabled", "zvol_use_blk_mq"))
    old = Choices(params=("zvol_dio_enabled",))
    seqs = [generate(s, 30, "zvol", 1 << 20, both) for s in range(120)]
    mq = sum(q.params["zvol_use_blk_mq"] for q in seqs)
    assert 25 <= mq <= 55, mq
    for s, q in enumerate(seqs[:20]):
        before = generate(s, 30, "zvol", 1 << 20, old)
        assert q.ops == before.ops and q.props == before.props
        assert {k: v for k, v in q.params.items() if k != "zvol_use_blk_mq"} == before.params
    assert Sequence.from_json(seqs[0].to_json()).params == seqs[0].params


def test_each_zvol_is_made_for_the_queue_its_sequence_drew(ddir: Path):
    root = ddir / "queues"
    work = root / "ds"
    work.mkdir(parents=True)
    zvols, runner = StandInZvols(root / "zvols"), Recording()
    s = Settings(str(work), root / "engine", root / "explore", n_ops=12,
                 file_size_max=128 * KIB, target="zvol")
    ch = Choices(misaligned_share=0.0, params=("zvol_dio_enabled", "zvol_use_blk_mq"),
                 blk_mq_share=0.5)
    res = explore(runner, s, 11, parse_budget("6x"), ch, log=lambda _: None,
                  configure=lambda q: None, zvols=zvols)
    assert [r["state"] for r in res.runs] == ["ok"] * len(runner.runs)
    want = ["blk-mq" if seq.params["zvol_use_blk_mq"] else "bio" for seq, _, _ in runner.runs]
    assert zvols.queues == want and set(want) == {"bio", "blk-mq"}, want


def test_a_blk_mq_zvol_sets_the_parameter_and_is_checked_not_assumed():
    zfs = FakeGuestZfs(params={"zvol_use_blk_mq": 0})
    zv = guest_zvols(zfs).create("mq", 65536, 16384, {}, queue="blk-mq")
    assert zv.queue == "blk-mq" and ("param", "zvol_use_blk_mq", "1") in zfs.calls
    assert any(c[0] == "guest" and c[1] == "test -d /sys/block/zd16/mq" for c in zfs.calls)
    zfs = FakeGuestZfs(params={"zvol_use_blk_mq": 0})
    zfs.ignores_blk_mq = True
    with pytest.raises(GuestError, match="made for the blk-mq queue but /sys/block/zd16/mq "
                                         "is missing") as ei:
        guest_zvols(zfs).create("mq", 65536, 16384, {}, queue="blk-mq")
    assert "zvol_use_blk_mq" in str(ei.value)
    zfs = FakeGuestZfs(params={"zvol_use_blk_mq": 1})     # left on by something else
    with pytest.raises(GuestError, match="made for the bio queue but .* exists"):
        guest_zvols(zfs).create("b", 65536, 16384, {})


def test_zvol_sequences_of_a_direct_io_build_run_under_its_conditions():
    """zvol Direct I/O's own conditions in 40% of the zvol sequences of a build that has
    it: the path on and write verify on (a racing write must be retried through the
    ARC, zvol-dio 17b61d93af), half of them with sha256 and lz4 (a rewrite of a synced
    block is a nopwrite, 68a939265f); a build without the switch draws as it did."""
    from dataclasses import replace as with_
    from suite.explore.gen import Choices, generate, sequence_seed
    from suite.explore.ops import WRITES
    ch = Choices(zfs_ops=True, params=("zvol_dio_enabled", "zvol_use_blk_mq",
                                       "zfs_vdev_direct_write_verify"),
                 vol_have=("volblocksize", "compression", "checksum", "sync", "primarycache"),
                 synced_rewrite_share=0.0)      # its own draw: tests/test_explore_rewrite.py
    seqs = [generate(sequence_seed(1, k), 40, "zvol", 3 << 20, ch) for k in range(200)]
    both = [q for q in seqs if q.params["zvol_dio_enabled"] == 1 and
            q.params["zfs_vdev_direct_write_verify"] == 1]
    racing = [q for q in both if any(o.op in WRITES and o.buf == "racing" and o.direct
                                     for o in q.ops)]
    assert len(both) >= 0.45 * len(seqs) and len(racing) >= 0.3 * len(seqs)
    # a quarter of a shaped sequence's aligned O_DIRECT writes race
    from suite.explore.gen import zvol_dio_shaped
    shaped = [o for q in seqs if zvol_dio_shaped(q.seed, ch) for o in q.ops
              if o.op in ("pwrite", "pwritev") and o.direct and o.off % 4096 == 0
              and o.len % 4096 == 0]
    assert 0.2 < sum(o.buf == "racing" for o in shaped) / len(shaped) < 0.4
    nop = [q for q in both if q.props["checksum"] == "sha256" and q.props["compression"] == "lz4"]
    assert len(nop) >= 0.2 * len(seqs)
    off = with_(ch, zvol_dio_shape_share=0.0)
    plain = [generate(sequence_seed(1, k), 40, "zvol", 3 << 20, off) for k in range(200)]
    assert sum(1 for q in plain if q.params["zvol_dio_enabled"] == 1 and
               q.params["zfs_vdev_direct_write_verify"] == 1) < 0.4 * len(plain)
    # the ops are what they were (but their buffers: a racing write verify keeps, or
    # the shape gives, or write verify off makes an ordinary one); a racing O_DIRECT
    # write the shape gives covers whole blocks of the zvol (Direct I/O serves only
    # those: a part of a block goes through the ARC, where nothing is verified)
    def ours(q, o):
        return zvol_dio_shaped(q.seed, ch) and o.buf == "racing" and o.direct
    from suite.explore.gen import recordsize
    moved = 0
    for q, p in zip(seqs, plain):
        rec = recordsize(q.props)
        for a, b in zip(q.ops, p.ops):
            if ours(q, a) and (a.off, a.len) != (b.off, b.len):
                assert a.off % rec == 0 and a.len % rec == 0 and a.off <= b.off and \
                    b.off + b.len <= a.off + a.len, (a, b, rec)
                moved += 1
            else:
                assert (a.op, a.off, a.len, a.data) == (b.op, b.off, b.len, b.data)
    assert moved > 5
    lacks = with_(ch, params=("zvol_use_blk_mq",))
    stock = [generate(sequence_seed(1, k), 40, "zvol", 3 << 20, lacks) for k in range(20)]
    assert all("zvol_dio_enabled" not in q.params for q in stock)
    # (the same ops on a gate's two sides: test_a_zvol_sequence_draws_the_same_ops_...)
