"""The kernel moving the target's bytes out (sendfile, splice, copy_file_range into
tmpfs) and user pages in through a pipe (vmsplice): run for real on this machine's
file system through the engine, each checked against the model, and drawn by the
generator in place of reads and writes."""
from __future__ import annotations

from pathlib import Path

from suite.explore.gen import Choices, generate
from suite.explore.ops import OUTWARD, Op
from test_explore import _ops, ddir, run_engine  # noqa: F401  (ddir: a fixture)

B = 4096


def test_each_outward_op_moves_the_model_s_bytes(ddir: Path):
    ops = [{"op": "vmsplice_in", "direct": False, "off": 100, "len": 20000, "data": 1},
           {"op": "vmsplice_in", "direct": True, "off": 8 * B, "len": 4 * B, "data": 2},
           {"op": "sendfile_out", "direct": False, "off": 0, "len": 70000},
           {"op": "sendfile_out", "direct": True, "off": 4 * B, "len": 8 * B},
           {"op": "splice_out", "direct": False, "off": 50, "len": 30000},
           {"op": "splice_out", "direct": True, "off": 0, "len": 12 * B},
           {"op": "copy_out", "direct": False, "off": 0, "len": 40000},
           {"op": "sendfile_out", "direct": False, "off": 60000, "len": 90000},   # past EOF
           {"op": "verify"}]
    rc, lines = run_engine(ddir, {"seed": 4, "init_size": 50000, "file_size_max": 1 << 20,
                                  "ops": ops}, "outward")
    out = _ops(lines)
    assert rc == 0 and lines[-1]["ok"], [o for o in out if not o["ok"]]
    assert [o["op"] for o in out] == [o["op"] for o in ops]
    assert all(o["outcome"] in ("ok", "unsupported", "einval") for o in out)
    assert out[2]["res"] == 50000 and out[7]["res"] == 0     # to EOF (50000), no further
    assert out[6]["outcome"] in ("ok", "unsupported")   # across file systems: EXDEV allowed


def test_a_move_out_that_returns_the_wrong_bytes_fails(ddir: Path):
    """The model says what the target holds; tampered behind its back, a sendfile out
    of it returns other bytes and the op fails by them."""
    ops = [{"op": "pwrite", "iface": "sync", "direct": False, "off": 0, "len": B,
            "buf": "anon", "data": 3},
           {"op": "sendfile_out", "direct": False, "off": 0, "len": B}]
    rc, lines = run_engine(ddir, {"seed": 4, "init_size": 2 * B, "file_size_max": 1 << 20,
                                  "ops": ops}, "outward-bad", "--tamper-after-data", "3")
    assert rc == 1 and lines[-1]["kind"] == "wrong-bytes" and lines[-1]["failed_at"] == 1


def test_the_generator_puts_them_in_place_of_reads_and_writes():
    seqs = [generate(s, 40, "file", 1 << 20, Choices()) for s in range(40)]
    kinds = [o.op for s in seqs for o in s.ops]
    assert set(OUTWARD) <= set(kinds)
    assert all(len(s.ops) == 40 for s in seqs)
    none = generate(3, 40, "file", 1 << 20, Choices(outward_share=0.0))
    assert not {o.op for o in none.ops} & set(OUTWARD)
    v = next(o for s in seqs for o in s.ops if o.op == "vmsplice_in")
    assert v.data and Op.from_dict(v.to_dict()) == v
