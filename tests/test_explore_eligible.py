"""Which O_DIRECT requests Direct I/O could serve where they stand in a sequence
(suite/explore/eligible.py): the reach table draws its O_DIRECT cells from those
alone. Each rule on a hand-made sequence, with the request it must keep beside it."""
from __future__ import annotations

from dataclasses import replace

from suite.explore import reach
from suite.explore.eligible import servable
from suite.explore.ops import Op, Sequence


def can(seq: Sequence) -> list[bool]:
    return servable(seq, reach.asks_direct)


def dio_cells(seq: Sequence) -> list[str]:
    return [c for c in reach.seq_cells(seq) if c.startswith("dio:")]


def rd(off: int, buf: str = "heap", **kw) -> Op:
    return Op("pread", direct=True, off=off, len=4096, buf=buf, **kw)


def test_a_read_at_or_past_the_end_of_the_file_is_not_drawn():
    seq = Sequence(1, init_size=8192, ops=(rd(4096), rd(8192, "fork")))
    assert can(seq) == [True, False]
    grown = Sequence(1, init_size=8192, ops=(
        Op("pwrite", off=8192, len=4096, buf="anon"), rd(8192, "fork")))
    assert can(grown) == [False, True], "a buffered write moved the end: now inside"
    cut = Sequence(1, init_size=65536, ops=(Op("truncate", size=4096), rd(8192, "fork")))
    assert can(cut) == [False, False]


def test_a_rollback_brings_back_the_size_of_its_snapshot():
    seq = Sequence(1, init_size=4096, ops=(
        Op("snapshot", data=3), Op("pwrite", off=4096, len=8192, buf="anon", data=1),
        rd(8192), Op("rollback", data=3), rd(8192)))
    assert can(seq) == [False, False, True, False, False]


def test_a_range_a_mapping_cached_is_not_drawn_until_dropped():
    seq = Sequence(1, init_size=1 << 20, evict="drop", ops=(
        Op("mmap_read", off=5000, len=1), rd(4096, "map_private_zfs"), rd(8192),
        Op("evict"), rd(4096, "map_private_zfs")))
    assert can(seq) == [False, False, True, False, True]
    assert dio_cells(seq) == ["dio:heap:read", "dio:map_private_zfs:read"]


def test_a_dirty_mapped_page_stays_cached_past_an_evict_until_a_barrier():
    seq = Sequence(1, init_size=1 << 20, evict="drop", ops=(
        Op("mmap_write", off=4096, len=1, data=1), Op("evict"), rd(4096),
        Op("fsync"), Op("evict"), rd(4096)))
    assert can(seq) == [False, False, False, False, False, True]


def test_an_evict_that_drops_nothing_leaves_the_range_cached():
    seq = Sequence(1, init_size=1 << 20, evict="", ops=(
        Op("mmap_read", off=0, len=4096), Op("evict"), rd(0)))
    assert can(seq)[-1] is False


def test_rwf_nowait_is_never_drawn_and_an_append_lands_at_the_end():
    rec = {"recordsize": "16K"}
    seq = Sequence(1, props=rec, init_size=16384, ops=(
        rd(0, flags="nowait"), rd(0, flags="hipri"),
        Op("pwrite", direct=True, off=0, len=16384, buf="memfd", flags="append"),
        Op("pwrite", direct=True, off=0, len=16384, buf="hugetlb", flags="append")))
    assert can(seq) == [False, True, True, True], "appends at 16384, then 32768: whole records"
    odd = Sequence(1, props=rec, init_size=5000, ops=(
        Op("pwrite", direct=True, off=0, len=16384, buf="memfd", flags="append"),))
    assert can(odd) == [False], "the end of the file is off a record: part of two"


def test_rwf_hipri_on_a_buffered_descriptor_is_not_drawn_even_under_direct_always():
    """direct=always makes a buffered descriptor's reads Direct I/O, but the kernel
    refuses RWF_HIPRI (polled I/O) on a descriptor opened without O_DIRECT: EINVAL."""
    seq = Sequence(1, props={"direct": "always"}, init_size=65536, ops=(
        Op("pread", direct=False, off=0, len=4096, buf="fork", flags="hipri"),
        Op("pread", direct=False, off=0, len=4096, buf="fork"),
        Op("pread", direct=True, off=0, len=4096, buf="memfd", flags="hipri")))
    assert can(seq) == [False, True, True]


def test_a_write_cut_by_a_refquota_goes_where_openzfs_can_cut_it():
    """A refquota stops an O_DIRECT write part way only when its first record gets a
    transaction of its own: while the file is one block smaller than a record. The
    first quota write moves to the front, at the first record boundary at or past the
    initial size, two to four records long (fewer than four below 128K records); the
    others go to the file's end as the ops before them left it, two records at least,
    where there is room."""
    from suite.explore.eligible import quota_writes_grow
    q = Op("pwrite", iface="libaio", direct=True, off=0, len=4096, buf="heap", data=2,
           limit="quota")
    w = Op("pwrite", off=40000, len=100, buf="anon", data=1)
    small = Sequence(1, init_size=12000, file_size_max=1 << 20, props={"recordsize": "16K"},
                     ops=(w, q, Op("verify"), q))
    out = quota_writes_grow(small).ops
    assert [o.op for o in out] == ["pwrite", "pwrite", "verify", "pwrite"]
    assert (out[0].off, out[0].len, out[0].limit) == (16384, 32768, "quota")
    assert out[1] == w and out[3].off == 49152 and out[3].len == 32768
    wide = replace(small, ops=(replace(q, len=1 << 19),))
    assert quota_writes_grow(wide).ops[0].len == 4 * 16384 - 4096     # one transaction past that
    big = replace(small, props={"recordsize": "128K"}, ops=(replace(q, len=1 << 19),))
    assert (quota_writes_grow(big).ops[0].off, quota_writes_grow(big).ops[0].len) == \
        (131072, 1 << 19)
    seq = Sequence(1, init_size=20000, file_size_max=1 << 20, props={"recordsize": "16K"},
                   ops=(w, q, q, Op("verify")))
    out = quota_writes_grow(seq).ops                # a file past one record: at its end
    assert [(o.off, o.len) for o in out[1:3]] == [(49152, 32768), (81920, 32768)]
    assert out[0] == seq.ops[0] and out[3] == seq.ops[3] and out[1].data == 2
    full = Sequence(1, init_size=(1 << 20) - 16384, file_size_max=1 << 20,
                    props={"recordsize": "16K"}, ops=(q,))
    assert quota_writes_grow(full) == full                # no room for two records
    fsize = Sequence(1, init_size=0, props={"recordsize": "16K"},
                     ops=(Op("pwrite", off=0, len=4096, buf="heap", limit="fsize"),))
    assert quota_writes_grow(fsize) == fsize
