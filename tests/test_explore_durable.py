"""The durability model (suite/ioengine/explore/durable.py) on hand-made histories:
a lost fsynced block, a torn aligned block, a size between op boundaries and bytes
nobody wrote are each flagged; a legal outcome of a crash (any block old or new, a
size the file had at an op boundary) is not."""
from __future__ import annotations

import os
from pathlib import Path

from suite.ioengine.explore.durable import BLK, Durable, check

OLD = b"o" * (3 * BLK)


def write(buf: bytes, off: int, data: bytes) -> bytes:
    b = bytearray(buf)
    if off > len(b):
        b.extend(bytes(off - len(b)))
    b[off:off + len(data)] = data
    return bytes(b)


def history() -> tuple[Durable, bytes, bytes]:
    """Two writes after the last sync: A over block 0, then B over block 1."""
    d = Durable.of(OLD)
    a = write(OLD, 0, b"A" * BLK)
    d.changed(a, 0, BLK)
    ab = write(a, BLK, b"B" * BLK)
    d.changed(ab, BLK, BLK)
    return d, a, ab


def test_any_block_old_or_new_is_a_legal_crash():
    d, _, ab = history()
    for got in (OLD, ab, write(OLD, BLK, b"B" * BLK), write(OLD, 0, b"A" * BLK)):
        assert check(d, got) is None, got[:1] + got[BLK:BLK + 1]


def test_a_lost_fsynced_block_is_flagged():
    d, _, ab = history()
    d.synced(ab)                                    # fsync: both are durable now
    loss = check(d, OLD)
    assert loss is not None and loss.kind == "lost" and loss.at == 0
    assert "differs from them from byte +0" in loss.why     # what it holds instead
    zeros = check(d, write(ab, 0, bytes(BLK)))
    assert zeros is not None and f"it holds {BLK} zero bytes" in zeros.why


def test_a_torn_aligned_block_is_flagged():
    d, _, _ = history()
    torn = write(OLD, 0, b"A" * (BLK // 2))         # half of A's block, half the old bytes
    loss = check(d, torn)
    assert loss is not None and loss.kind == "torn" and loss.at == 0


def test_bytes_nobody_wrote_are_flagged():
    d, _, _ = history()
    loss = check(d, write(OLD, 2 * BLK, b"Z" * BLK))     # block 2 never changed
    assert loss is not None and loss.kind == "lost" and loss.at == 2 * BLK


def test_a_size_between_op_boundaries_is_flagged_and_one_at_a_boundary_is_not():
    d = Durable.of(OLD)
    grown = write(OLD, 3 * BLK, b"G" * 100)          # 3 blocks + 100 bytes
    d.changed(grown, 3 * BLK, 100)
    assert check(d, grown) is None and check(d, OLD) is None
    loss = check(d, grown[:3 * BLK + 50])
    assert loss is not None and loss.kind == "size"


def test_a_truncate_pending_lets_the_tail_be_either():
    d = Durable.of(OLD)
    short = OLD[:BLK + 10]
    d.resized(short)
    assert check(d, short) is None and check(d, OLD) is None
    d.synced(short)
    assert check(d, OLD) is not None                 # the truncate was made durable


def test_an_o_dsync_write_is_durable_alone():
    d, a, ab = history()
    d.synced_range(ab, BLK, BLK)                     # B written with RWF_DSYNC
    assert check(d, write(OLD, BLK, b"B" * BLK)) is None     # A may still be lost
    loss = check(d, a)                               # but B may not
    assert loss is not None and loss.at == BLK


# --- freeze and crash in the engine, with stand-in zpool commands ---------------------

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from suite.explore.gen import Choices, generate  # noqa: E402
from suite.explore.ops import CRASH_OPS, ZFS_OPS  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# ``freeze`` keeps a copy of the file; ``import`` puts it back: a pool that kept
# nothing written after the freeze, not even what the ZIL committed. ``lossless``:
# import keeps the file as it is (everything survived).
ZPOOL = """#!/bin/sh
echo "zpool $*" >> {log}
case "$1" in
  freeze) cp {target} {target}.frozen ;;
  import) [ -e {lossless} ] || cp {target}.frozen {target} ;;
esac
exit 0
"""


def run(tmp_path: Path, ops: list[dict], lossless: bool) -> tuple[int, list[dict], str]:
    target, log, bins = tmp_path / "t.bin", tmp_path / "zpool.log", tmp_path / "bin"
    bins.mkdir()
    flag = tmp_path / "lossless"
    if lossless:
        flag.touch()
    (bins / "zpool").write_text(ZPOOL.format(log=log, target=target, lossless=flag))
    (bins / "zfs").write_text("#!/bin/sh\nexit 0\n")
    for t in ("zpool", "zfs"):
        (bins / t).chmod(0o755)
    seq = tmp_path / "s.json"
    seq.write_text(json.dumps({"seed": 1, "init_size": 3 * BLK, "file_size_max": 1 << 20,
                               "ops": ops}))
    p = subprocess.run([sys.executable, "-m", "suite.ioengine", "explore-run", str(seq),
                        "--file", str(target), "--zfs-dataset", "fake/ds",
                        "--zfs-cmd", str(bins / "zfs"), "--zpool-cmd", str(bins / "zpool")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    lines = [ln for ln in lines if ln.get("event") != "cleanup"]   # after the done line
    return p.returncode, lines, log.read_text() if log.exists() else ""


W = {"op": "pwrite", "iface": "sync", "direct": False, "off": 0, "len": BLK, "buf": "anon"}


@pytest.mark.parametrize("synced,lossless,expect", [
    (True, True, None),             # fsynced and kept: fine
    (False, False, None),           # never synced and lost: a crash may do that
    (True, False, "crash-lost"),    # fsynced and lost: the finding
])
def test_a_crash_loses_only_what_was_never_synced(tmp_path, synced, lossless, expect):
    ops = [dict(W, data=1), {"op": "freeze"}, dict(W, off=BLK, data=2)] + \
        ([{"op": "fsync"}] if synced else []) + [{"op": "crash"}, {"op": "verify"}]
    rc, lines, log = run(tmp_path, ops, lossless)
    done = lines[-1]
    assert "zpool freeze fake" in log and "zpool export fake" in log and "zpool import fake" in log
    assert done["kind"] == expect, done
    assert rc == (1 if expect else 0)
    if expect:
        crash = [ln for ln in lines if ln.get("op") == "crash" and ln["event"] == "op"][0]
        assert "block 4096" in crash["why"] and crash["first_wrong_byte"] == BLK


def test_a_freeze_the_sequence_never_crashed_is_recovered_at_its_end(tmp_path):
    rc, lines, log = run(tmp_path, [{"op": "freeze"}, dict(W, data=1), {"op": "fsync"}],
                         lossless=False)
    assert "zpool import fake" in log                   # the pool is not left frozen
    assert lines[-1]["kind"] == "crash-lost" and rc == 1


def test_the_generator_draws_crash_points_with_no_txg_op_inside():
    seqs = [generate(s, 40, "file", 1 << 20, Choices(zfs_ops=True)) for s in range(60)]
    crashed = [s for s in seqs if any(o.op == "freeze" for o in s.ops)]
    # a crash point needs the ZFS commands, which a sequence with a caller has none of
    able = [s for s in seqs if not s.caller]
    assert not any(s.caller for s in crashed)
    assert 0.15 < len(crashed) / len(able) < 0.5
    for s in crashed:
        kinds = [o.op for o in s.ops]
        i, j = kinds.index("freeze"), kinds.index("crash")
        assert 2 <= j - i <= 8 and not set(kinds[i:j]) & set(ZFS_OPS)
        assert len(s.ops) == 40
    plain = [generate(s, 40, "file", 1 << 20, Choices(zfs_ops=False)) for s in range(20)]
    assert not any(o.op in CRASH_OPS for s in plain for o in s.ops)     # no ZFS commands


def test_crash_points_are_counted_drawn_executed_and_per_minute():
    from suite.explore import reach
    seq = next(s for s in (generate(k, 40, "file", 1 << 20, Choices(zfs_ops=True))
                           for k in range(40)) if any(o.op == "freeze" for o in s.ops))
    assert "crash:freeze" in reach.seq_cells(seq)
    lines = [{"event": "op", "op": "crash", "outcome": "ok"},
             {"event": "op", "op": "crash", "outcome": "failed", "kind": "zfs-command"}]
    assert reach.crash_points(lines) == 1 and "crash:freeze" in reach.run_cells(lines, seq)
    # a power cut whose recovered file is wrong was still reached and executed
    cut = [{"event": "power-cut", "slow_ms": 250},
           {"event": "op", "op": "power_cut", "outcome": "failed", "kind": "crash-lost"}]
    assert reach.crash_points(cut, "power_cut") == 1
    assert {"crash:power", "crash:power-slow"} <= set(reach.run_cells(cut))
    assert reach.crash_points([{"event": "op", "op": "power_cut", "outcome": "failed",
                                "kind": "no-result"}], "power_cut") == 0
    assert reach.crash_rate([{"crashes": 3, "seconds": 60}, {"crashes": 1, "seconds": 60,
                                                             "power_cuts": 1}]) == \
        ("4 crash points (zpool freeze, then export + import) and 1 power cuts (a fresh guest "
         "on the same disks) in 2.0 min (2.00 a minute; 0.50 a minute)")


def test_a_size_grown_to_the_end_of_the_last_record_is_told_apart():
    """ZIL replay's whole-block write (zil-replay-whole-block-extends-eof) leaves the
    file at the end of the record holding its durable size: the why says so, and
    only for that size (a size past it by another amount, or not past every allowed
    one, says nothing of records)."""
    from suite.ioengine.explore.powercut import past_last_record
    d = Durable.of(b"x" * 2904128)
    loss = check(d, bytes(2916352))
    assert loss is not None and loss.kind == "size"
    assert past_last_record(d, 2916352, 16384) == \
        "; past every one, at the end of the file's last 16384-byte record"
    assert past_last_record(d, 2916352 + 16384, 16384) == "; past every one"
    assert past_last_record(d, 2900000, 16384) == ""
    assert past_last_record(d, 2916352, 4096) == "; past every one"


def test_a_freeze_first_gives_the_dataset_a_zil_chain(tmp_path: Path, monkeypatch):
    """On a frozen pool a ZIL made from nothing is not found at import (its header is
    written in a txg that never reaches the disk): after a rollback reset it, every
    block synced on the frozen pool came back "lost" on stock master. The freeze first
    makes the chain, as OpenZFS's slog replay tests do: a synced write, the file gone."""
    from suite.ioengine.explore import zfs as zmod
    seen: list[tuple[str, list[str]]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        seen.append(("fsync", sorted(p.name for p in tmp_path.iterdir())))
        real_fsync(fd)

    class Tools:
        pool, timeout_s = "tank", 5.0

        def run(self, *args):
            seen.append(("run", list(args)))
            return type("R", (), {"rc": 0, "line": " ".join(args), "err": ""})()

    monkeypatch.setattr(zmod.os, "fsync", fsync)
    target = type("T", (), {"path": str(tmp_path / "x.bin"), "blockdev": False})()
    ctx = type("C", (), {"zfs": Tools(), "frozen": False, "durable": None, "target": target})()
    assert zmod.op_freeze(ctx, None).ok and ctx.frozen
    assert seen == [("fsync", [".explore-zil-header"]), ("run", ["zpool", "freeze", "tank"])]
    assert list(tmp_path.iterdir()) == [], "the scratch file is gone again"
