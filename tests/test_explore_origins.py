"""Explore's page origins (suite/ioengine/explore/origins.py), run here on a disk
file system: every origin reads and writes through every interface, the model
knows what each carries, and a fixed seed draws every origin x op and tunable cell."""
from __future__ import annotations

from pathlib import Path

import pytest

from suite.explore import reach
from suite.explore.gen import FILE_BACKED
from suite.explore.gen import TUNABLE_CHOICES, Choices, generate, sequence_seed
from suite.explore.ops import IFACES, ORIGINS
from suite.explore.targets import param_table
from test_explore import _ops, ddir, run_engine  # noqa: F401  (ddir: a fixture)

MIB = 1 << 20


def _origin_ops() -> list[dict]:
    out, data = [], 0
    for i, buf in enumerate(ORIGINS):
        for iface in IFACES:
            for direct in (True, False):
                data += 1
                off = 4096 * (data % 12)
                out += [{"op": "pwrite", "iface": iface, "direct": direct, "off": off,
                         "len": 8192, "buf": buf, "data": data},
                        {"op": "pread", "iface": iface, "direct": direct, "off": off,
                         "len": 12288, "buf": buf},
                        {"op": "preadv", "iface": iface, "direct": direct, "off": 0,
                         "len": 16384, "buf": buf, "segs": 4}]
    return out + [{"op": "verify"}]


def test_every_origin_reads_and_writes_through_every_interface(ddir: Path):
    seq = {"seed": 11, "init_size": 65536, "file_size_max": MIB, "ops": _origin_ops()}
    rc, lines = run_engine(ddir, seq, "origins")
    out = _ops(lines)
    bad = [(o["i"], o["op"], o.get("buf"), o.get("why")) for o in out if not o["ok"]]
    assert rc == 0 and lines[-1]["ok"], bad
    used = {o["buf"] for o in out if "buf" in o}
    # hugetlb needs pages reserved (the harness does it in guests), uffd a kernel that
    # lets this user have one: where not, the op says it used anon memory
    assert set(ORIGINS) - {"hugetlb", "uffd"} <= used <= set(ORIGINS) | {"anon"}


def _file(d: Path, name: str) -> bytes:
    return (d / f"{name}.bin").read_bytes()


@pytest.mark.parametrize("origin", ["zero", "zero_read"])
def test_a_write_from_memory_never_written_writes_zeros(ddir: Path, origin: str):
    seq = {"seed": 12, "init_size": 16384, "file_size_max": MIB, "ops": [
        {"op": "pwrite", "iface": "sync", "direct": True, "off": 4096, "len": 8192,
         "buf": origin, "data": 1}, {"op": "verify"}]}
    rc, lines = run_engine(ddir, seq, origin, "--keep")
    assert rc == 0 and lines[-1]["ok"]
    assert _file(ddir, origin)[4096:12288] == bytes(8192)
    assert _file(ddir, origin)[:4096] != bytes(4096), "the rest is the initial pattern"


def test_a_child_forked_in_flight_never_changes_what_the_parent_moves(ddir: Path):
    ops = [{"op": "pwrite", "iface": i, "direct": d, "off": 0, "len": 65536, "buf": "fork",
            "data": n} for n, (i, d) in enumerate((i, d) for i in IFACES for d in (1, 0))]
    seq = {"seed": 13, "init_size": 0, "file_size_max": MIB, "ops": ops + [
        {"op": "pread", "iface": "libaio", "direct": True, "off": 0, "len": 65536,
         "buf": "fork"}, {"op": "verify"}]}
    rc, lines = run_engine(ddir, seq, "fork", "--keep")
    assert rc == 0 and lines[-1]["ok"], _ops(lines)
    assert b"\xc5" * 64 not in _file(ddir, "fork"), "the child's scribble reached the file"


def test_a_write_from_the_targets_own_mapping_writes_its_bytes_back(ddir: Path):
    seq = {"seed": 14, "init_size": 65536, "file_size_max": MIB, "ops": [
        {"op": "pwrite", "iface": "io_uring", "direct": True, "off": 8192, "len": 16384,
         "buf": "map_target", "data": 1},
        {"op": "pread", "iface": "sync", "direct": True, "off": 8192, "len": 16384,
         "buf": "map_target"},
        {"op": "pwrite", "iface": "sync", "direct": True, "off": 131072, "len": 4096,
         "buf": "map_target", "data": 2}, {"op": "verify"}]}
    rc, lines = run_engine(ddir, seq, "maptarget")
    out = _ops(lines)
    assert rc == 0 and lines[-1]["ok"], out
    assert [o["buf"] for o in out[:3]] == ["map_target", "map_target", "anon"], \
        "past EOF there is nothing to map: anon, and said so"


def test_a_fixed_seed_draws_every_origin_op_tunable_and_caller_cell():
    ch = Choices(params=tuple(sorted(param_table("file"))), zfs_ops=True)
    # 400: the NFS caller is ~4.5% of file sequences and its actors cells (2-4 actors at
    # once) ~0.1% each; 400 sequences of seed 1 draw them all (100 drew 3 of 6 NFS cells)
    r = reach.drawn(generate(sequence_seed(1, k), 40, "file", 3 * MIB, ch) for k in range(400))
    assert r.missing() == []
    assert set(TUNABLE_CHOICES) <= {t.split("=")[0] for t in r.tunables}
    # a build without a tunable never draws it
    bare = Choices(params=("zfs_dio_strict",))
    assert all(set(generate(sequence_seed(1, k), 10, "file", MIB, bare).params) ==
               {"zfs_dio_strict"} for k in range(5))


def test_origins_leave_the_other_draws_of_a_seed_as_they_were():
    ch = Choices(params=("zfs_dio_strict",))
    old = Choices(params=("zfs_dio_strict",), origins=(), tunable_values={})
    for k in range(10):
        a = generate(sequence_seed(2, k), 40, "file", 3 * MIB, ch)
        b = generate(sequence_seed(2, k), 40, "file", 3 * MIB, old)
        # io_uring_fixed with a ZFS file's pages is the same request unregistered
        # (io_uring registers no file-backed memory): the draw is the same
        def iface(o, other):
            uring = ("io_uring", "io_uring_fixed")
            return "io_uring*" if o.iface in uring and \
                (o.buf in FILE_BACKED or other.buf in FILE_BACKED) else o.iface
        assert [(x.op, x.off, x.len, iface(x, y)) for x, y in zip(a.ops, b.ops)] == \
            [(y.op, y.off, y.len, iface(y, x)) for x, y in zip(a.ops, b.ops)]
        assert a.props == b.props and a.params == b.params
        assert not any(o.iface == "io_uring_fixed" and o.buf in FILE_BACKED for o in a.ops)


def test_the_table_counts_drawn_and_executed_per_sequence():
    r = reach.Reach()
    r.add(["uffd:read", "uffd:read", "zero:write"], ["zfs_dio_enabled=0"])
    r.add(["uffd:read"], [])
    ex = reach.Reach()
    ex.add(["anon:read"], [])
    text = reach.table(r, ex)
    assert "uffd" in text and "2/0" in text and "zfs_dio_enabled" in text
    assert reach.run_cells([{"event": "op", "op": "pwrite", "buf": "fork"},
                            {"event": "begin", "op": "pread"}]) == ["fork:write"]


def test_no_racing_write_runs_without_write_verify():
    """Without zfs_vdev_direct_write_verify a racing Direct I/O write may store a block
    whose checksum is not its data's (documented): found in a guest as 12 checksum errors
    and the engine killed by SIGBUS in its mmap read-back. The generator draws none."""
    ch = Choices(params=tuple(sorted(param_table("file"))))
    seqs = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, ch) for k in range(60)]
    off = [s for s in seqs if s.params.get("zfs_vdev_direct_write_verify") == 0]
    on = [s for s in seqs if s.params.get("zfs_vdev_direct_write_verify") == 1]
    assert off and on
    assert not any(o.buf == "racing" and o.op in ("pwrite", "pwritev") for s in off for o in s.ops)
    assert any(o.buf == "racing" and o.op in ("pwrite", "pwritev") for s in on for o in s.ops)
