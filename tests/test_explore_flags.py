"""Per-call flags of explore's reads and writes (suite/ioengine/explore/flags.py), run
here by the guest engine on a local file: an append lands at the end of the file on
every interface, a refusal a flag allows leaves the file as it was."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from suite.explore import reach
from suite.explore.gen import Choices, generate
from suite.explore.ops import Op, Sequence
from suite.ioengine.explore.flags import refused, rw_flags
from suite.ioengine.explore.model import Ctx, Model
from tests.test_explore import _ops, ddir, run_engine  # noqa: F401  (ddir: a fixture)

MIB = 1 << 20


def test_flags_come_from_a_generator_of_their_own():
    with_, without = (generate(5, 60, "file", MIB, Choices(zfs_ops=True, flags_share=s))
                      for s in (0.5, 0.0))
    assert [(o.op, o.off, o.len) for o in with_.ops] == \
        [(o.op, o.off, o.len) for o in without.ops]
    flagged = [o for o in with_.ops if o.flags]
    assert flagged and all(o.flags in ("nowait", "hipri") for o in flagged
                           if o.op in ("pread", "preadv"))
    assert [Op.from_dict(o.to_dict()) for o in with_.ops] == list(with_.ops)
    assert any(c.startswith("flag:") for c in reach.seq_cells(with_))
    assert not any(o.flags for o in generate(5, 60, "zvol", MIB, Choices()).ops if
                   o.flags == "append"), "no append to a block device"
    assert rw_flags("append") == 0x10 and rw_flags("") == 0


@pytest.mark.parametrize("iface", ["sync", "libaio", "io_uring"])
def test_an_append_lands_at_the_end_of_the_file(ddir: Path, iface: str):
    seq = Sequence(seed=4, init_size=5000, file_size_max=MIB, ops=(
        Op("pwrite", iface=iface, off=0, len=4096, data=1, flags="append"),
        Op("pwritev", iface=iface, off=0, len=8192, segs=3, data=2, flags="append"),
        Op("pwrite", iface=iface, direct=True, off=0, len=8192, data=3, flags="dsync"),
        Op("verify")))
    rc, lines = run_engine(ddir, seq, f"append-{iface}")
    ops = _ops(lines)
    if any(o["outcome"] == "unsupported" for o in ops):
        pytest.skip(f"{iface} here: {[o['why'] for o in ops if o['outcome'] == 'unsupported']}")
    assert rc == 0 and lines[-1]["ok"], lines[-3:]
    assert [o["size"] for o in ops[:3]] == [9096, 17288, 17288]
    assert all(o["flags"] for o in ops[:3])
    assert {"flag:append:write", "flag:dsync:write"} <= set(reach.run_cells(lines))


def test_a_refusal_the_flag_allows_leaves_the_file_as_it_was(tmp_path: Path):
    f = tmp_path / "t.bin"
    f.write_bytes(b"\0" * 8192)
    fd = os.open(f, os.O_RDWR)
    try:
        ctx = Ctx(target=type("T", (), {"fd": fd, "blockdev": False})(),
                  model=Model(b"\0" * 8192), seed=1, source=b"")
        o = refused(ctx, "nowait", errno.EAGAIN, True, 0, 4096)
        assert o is not None and o.outcome == "refused" and o.errname == "EAGAIN"
        assert refused(ctx, "nowait", errno.EIO, True, 0, 4096) is None, "not its refusal"
        assert refused(ctx, "dsync", errno.EAGAIN, True, 0, 4096) is None
        os.pwrite(fd, b"\x22" * 512, 0)
        bad = refused(ctx, "nowait", errno.EAGAIN, True, 0, 4096)
        assert bad is not None and bad.outcome == "failed" and bad.kind == "error:EAGAIN"
    finally:
        os.close(fd)
