"""Rewrites of blocks on disk with their very bytes (nopwrite's shape): drawn after a
``txg_sync``, from a generator of their own, and counted in the reach table only where
Direct I/O served the rewrite."""
from __future__ import annotations

import random
from dataclasses import replace

from suite.explore import reach
from suite.explore.gen import Choices, generate, sequence_seed
from suite.explore.ops import Op
from suite.explore.reshape import synced_rewrite_at, synced_rewrites

REC = 16384
ZVOL_PARAMS = ("zfs_vdev_direct_write_verify", "zvol_dio_enabled", "zvol_use_blk_mq")


def _w(off: int, n: int, data: int, buf: str = "anon") -> Op:
    return Op("pwrite", iface="libaio", direct=True, off=off, len=n, buf=buf, data=data)


def test_a_whole_block_write_is_followed_by_a_sync_and_itself_and_nothing_else_is():
    ops = [_w(0, REC, 1), _w(4096, 4096, 2), _w(REC, REC, 3, buf="holed"),
           replace(_w(2 * REC, REC, 4), direct=False), Op("verify")]
    out = synced_rewrites(ops, random.Random(0), 1.0, REC)
    assert [o.render() for o in out] == [o.render() for o in
                                          [ops[0], Op("txg_sync"), ops[0], *ops[1:]]]
    assert synced_rewrites(ops, random.Random(0), 0.0, REC) == ops


def test_a_rewrite_counts_only_after_a_sync_and_with_nothing_written_over_it():
    a = _w(0, REC, 1)
    assert synced_rewrite_at([a, Op("txg_sync"), a]) == [2]
    assert synced_rewrite_at([a, a]) == []                                # same txg
    assert synced_rewrite_at([a, Op("txg_sync"), _w(4096, 4096, 9), a]) == []   # bytes changed
    read = Op("pread", iface="sync", direct=True, off=0, len=REC, buf="anon")
    assert synced_rewrite_at([a, Op("txg_sync"), read, _w(REC, REC, 2), a]) == [4]
    assert synced_rewrite_at([a, Op("txg_sync"), _w(0, REC, 2)]) == []    # other bytes
    racing = _w(0, REC, 1, buf="racing")                                  # bytes in flux
    assert synced_rewrite_at([racing, Op("txg_sync"), a]) == []
    assert synced_rewrite_at([a, Op("txg_sync"), racing]) == []


def _added_pairs(with_: tuple[Op, ...], without: tuple[Op, ...]) -> bool:
    """``with_`` is ``without`` with (txg_sync, the op just before) pairs added."""
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def fits(i: int, j: int) -> bool:
        if i == len(with_):
            return j == len(without)
        pair = i >= 1 and with_[i].op == "txg_sync" and with_[i + 1:i + 2] == (with_[i - 1],)
        return (pair and fits(i + 2, j)) or \
            (j < len(without) and with_[i] == without[j] and fits(i + 1, j + 1))
    return fits(0, 0)


def test_zvol_sequences_draw_synced_rewrites_whatever_the_build_and_keep_every_other_draw():
    on = Choices(params=ZVOL_PARAMS, zfs_ops=True)
    off = replace(on, synced_rewrite_share=0.0)
    drew = 0
    for k in range(30):
        seed = sequence_seed(1, k)
        with_, without = generate(seed, 40, "zvol", 3 << 20, on), \
            generate(seed, 40, "zvol", 3 << 20, off)
        assert (with_.props, with_.params) == (without.props, without.params)
        assert _added_pairs(with_.ops, without.ops), k
        stock = generate(seed, 40, "zvol", 3 << 20, replace(on, params=()))
        assert [(o.op, o.off, o.len, o.data) for o in stock.ops] == \
            [(o.op, o.off, o.len, o.data) for o in with_.ops]   # a gate's base: the same ops
        drew += with_.ops != without.ops
    assert drew >= 5            # about a third of the zvol sequences at seed 1
    files = Choices(params=("zfs_dio_enabled",), zfs_ops=True)
    seq = generate(sequence_seed(1, 0), 40, "file", 3 << 20, files)
    assert seq == generate(sequence_seed(1, 0), 40, "file", 3 << 20,
                           replace(files, synced_rewrite_share=0.0))


def test_the_reach_cell_is_drawn_by_the_shape_and_executed_only_where_direct_io_served_it():
    on = Choices(params=ZVOL_PARAMS, zfs_ops=True)
    seq = next(s for s in (generate(sequence_seed(1, k), 40, "zvol", 3 << 20, on)
                           for k in range(30)) if synced_rewrite_at(s.ops))
    at = synced_rewrite_at(seq.ops)[0]
    assert reach.REWRITE_CELL in reach.seq_cells(seq)

    def line(i: int, served: str) -> dict:
        return {"event": "op", "i": i, "op": "pwrite", "ok": True, "outcome": "ok",
                "buf": "anon", "served": served}
    assert reach.REWRITE_CELL in reach.run_cells([line(at, "dio")], seq)
    assert reach.REWRITE_CELL not in reach.run_cells([line(at, "arc")], seq)
    assert reach.REWRITE_CELL not in reach.run_cells([line(at - 2, "dio")], seq)
    assert reach.REWRITE_CELL in reach.drawn([seq]).cells
