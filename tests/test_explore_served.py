"""Which path served an O_DIRECT request (suite/ioengine/explore/served.py) and the
reach table's O_DIRECT cells, counted only where the Direct I/O path served them."""
from __future__ import annotations

from pathlib import Path

from suite.explore import reach
from suite.explore.ops import Op, Sequence
from suite.ioengine.explore.served import (Meter, asks_direct, dataset_of, path_of, pool_of,
                                           read_counters)

KSTAT = """12 1 0x01 26 7072 2513214530 14296538463
name                            type data
trim_extents_written            4    0
arc_read_count                  4    {ar}
arc_read_bytes                  4    0
arc_write_count                 4    {aw}
arc_write_bytes                 4    0
direct_read_count               4    {dr}
direct_read_bytes               4    0
direct_write_count              4    {dw}
direct_write_bytes              4    0
"""


PROFILE = """  dmu_read_abd                                        {r}               0
  dmu_write_abd                                       {w}               0
  zvol_read                                           9               0
"""


def _kstat(tmp_path: Path, probes: tuple[int, int] | None = None,
           **n: int) -> dict[str, int] | None:
    f, prof = tmp_path / "iostats", tmp_path / "kprobe_profile"
    f.write_text(KSTAT.format(**{"ar": 0, "aw": 0, "dr": 0, "dw": 0, **n}))
    prof.unlink(missing_ok=True)
    if probes is not None:
        prof.write_text(PROFILE.format(r=probes[0], w=probes[1]))
    return read_counters(str(f), str(prof))


def test_the_counter_that_moved_names_the_path(tmp_path: Path):
    zero = _kstat(tmp_path)
    assert zero == {"arc_read_count": 0, "arc_write_count": 0, "direct_read_count": 0,
                    "direct_write_count": 0}
    assert path_of(zero, _kstat(tmp_path, dr=1), write=False) == "dio"
    assert path_of(zero, _kstat(tmp_path, ar=2), write=False) == "arc"
    assert path_of(zero, _kstat(tmp_path, dw=1), write=False) == "memory", "a write's count"
    assert path_of(zero, _kstat(tmp_path, aw=1), write=True) == "arc"
    assert path_of(zero, _kstat(tmp_path), write=True) == "memory"
    assert path_of(None, zero, write=True) == "unmeasured"
    (tmp_path / "old").write_text("name type data\nreads 4 3\n")
    assert read_counters(str(tmp_path / "old")) is None, "a kstat without the counters"


def test_the_probes_say_direct_io_where_no_disk_read_was_counted(tmp_path: Path):
    """A Direct I/O read of a hole or of a record the dbuf cache holds moves no
    iostats counter: the entry point's kprobe says the Direct I/O path served it."""
    zero = _kstat(tmp_path, probes=(5, 7))
    assert zero is not None and zero["dmu_read_abd"] == 5 and "zvol_read" not in zero
    assert path_of(zero, _kstat(tmp_path, probes=(6, 7)), write=False) == "dio"
    assert path_of(zero, _kstat(tmp_path, probes=(5, 8)), write=True) == "dio"
    # With the probes armed, a Direct I/O count alone is not taken (another thread's).
    assert path_of(zero, _kstat(tmp_path, probes=(5, 7), dr=1), write=False) == "memory"
    assert path_of(zero, _kstat(tmp_path, probes=(5, 8), ar=1), write=False) == "arc", \
        "a write's probe does not serve a read"


def test_the_pool_is_found_from_the_mount_or_the_zvol(tmp_path: Path):
    mi = tmp_path / "mountinfo"
    mi.write_text("22 1 0:21 / / rw - ext4 /dev/vda rw\n"
                  "90 22 0:50 / /tmp/zfs/p rw - zfs p rw,xattr\n"
                  "91 90 0:51 / /tmp/zfs/p/case rw - zfs p/case rw,xattr\n")
    assert dataset_of("/tmp/zfs/p/case/x.bin", str(mi)) == "p/case"
    assert dataset_of("/tmp/zfs/p/y.bin", str(mi)) == "p"
    assert dataset_of("/etc/passwd", str(mi)) is None
    assert pool_of("/dev/zd0", zvol="tank/vol3") == "tank"
    assert Meter(None).sample() is None


def test_only_the_engines_own_direct_reads_and_writes_are_measured():
    assert asks_direct("pread", True, {}) and asks_direct("pwritev", False, {"direct": "always"})
    assert not asks_direct("pread", False, {"direct": "standard"})
    assert not asks_direct("actors", True, {}) and not asks_direct("sendfile", True, {})


def test_an_o_direct_cell_is_executed_only_where_direct_io_served_it():
    seq = Sequence(1, init_size=8192, ops=(Op("pread", direct=True, buf="heap", off=0, len=4096),
                           Op("pwrite", direct=True, buf="map_target", off=0, len=4096),
                           Op("pread", buf="heap", off=0, len=4096)))
    drawn = reach.seq_cells(seq)
    assert "dio:heap:read" in drawn and "map_target:write" in drawn
    assert "dio:map_target:write" not in drawn, "a mapping of the range: ARC by design"
    lines = [{"event": "op", "i": 0, "op": "pread", "buf": "heap", "served": "dio"},
             {"event": "op", "i": 1, "op": "pwrite", "buf": "map_target", "served": "arc"},
             {"event": "op", "i": 2, "op": "pread", "buf": "heap"}]
    done = reach.run_cells(lines)
    assert "dio:heap:read" in done and "dio:map_target:write" not in done
    assert "map_target:write" in done, "executed, on the ARC's path"
    runs = [{"cells": drawn, "executed": done, "served": reach.served(lines),
             "dio_allowed": reach.dio_allowed(seq)}]
    assert reach.served_share(runs) == ("O_DIRECT requests served by Direct I/O: 1 of 2 (50%); "
                                        "the others: arc 1")
    off = {"cells": [], "executed": [], "served": {"arc": 2}, "dio_allowed": False}
    assert reach.served_share(runs + [off]).endswith(
        "where the sequence allowed Direct I/O (zfs_dio_enabled=1, direct not disabled): "
        "1 of 2 (50%)")
    assert not reach.dio_allowed(Sequence(1, params={"zfs_dio_enabled": 0}))
    table = reach.table(reach.from_runs(runs), reach.from_runs(runs, "executed"))
    assert "O_DIRECT cells executed on the Direct I/O path: 1 of 1 drawn (100%)" in table


def test_most_aligned_direct_requests_are_drawn_in_whole_records():
    """The shape OpenZFS serves by Direct I/O: before the whole-record draw, a page
    inside a record (served through the ARC) was what most aligned requests were."""
    from suite.explore.gen import Choices, recordsize, generate, sequence_seed
    whole = aligned = 0
    for k in range(60):
        seq = generate(sequence_seed(1, k), 40, "file", 3 << 20, Choices())
        rec = recordsize(seq.props)
        for o in seq.ops:
            if reach.asks_direct(seq, o) and o.aligned and o.buf != "anon_offset":
                aligned += 1
                whole += o.off % rec == 0 and o.len % rec == 0 and o.len > 0
    assert aligned > 100 and whole / aligned >= 0.5, (whole, aligned)


def test_a_kept_sequence_evicts_as_it_was_found_and_a_new_one_drops_the_caches():
    """The corpus's findings need what stayed cached (a rollback's stale pages): a
    sequence kept before eviction dropped the caches replays without dropping them."""
    from suite.explore.gen import Choices, generate
    corpus = Path(__file__).resolve().parents[1] / "cases" / "explore_corpus"
    kept = Sequence.from_json((corpus / "rollback-keeps-cached-pages.json").read_text())
    assert kept.evict == "" and "evict" not in kept.to_dict()
    new = generate(7, 10, "file", 1 << 20, Choices())
    assert new.evict == "drop" and Sequence.from_json(new.to_json()).evict == "drop"
    assert new.with_ops(new.ops[:2]).evict == "drop", "a shrunk sequence keeps it"


def test_the_arc_is_flushed_only_in_a_guest_with_the_builds_commands():
    from types import SimpleNamespace
    from suite.ioengine.explore.file import flush_arc
    calls: list[tuple[str, ...]] = []
    zfs = SimpleNamespace(run=lambda *a: calls.append(a))
    flush_arc(SimpleNamespace(drop_caches=True, zfs=zfs))
    assert calls == [("zinject", "-a")]
    flush_arc(SimpleNamespace(drop_caches=False, zfs=zfs))
    flush_arc(SimpleNamespace(drop_caches=True, zfs=None))
    assert len(calls) == 1, "a kept sequence, or no ZFS commands: the ARC is left alone"


def test_an_o_direct_cell_is_drawn_only_by_a_request_direct_io_can_serve():
    """Misaligned requests and partial-record writes go the ARC's way by design
    (OpenZFS reads the rest of a record it writes in part): no O_DIRECT cell of theirs."""
    seq = Sequence(seed=1, props={"recordsize": "16K"}, init_size=65536, ops=(
        Op("pread", direct=True, off=4096, len=8192, buf="uffd"),            # a page: yes
        Op("pread", direct=True, off=12511, len=4096, buf="fork"),           # misaligned
        Op("pwrite", direct=True, off=16384, len=32768, buf="memfd"),        # whole records
        Op("pwrite", direct=True, off=4096, len=16384, buf="hugetlb"),       # part of two
        Op("verify")))
    cells = [c for c in reach.seq_cells(seq) if c.startswith("dio:")]
    assert cells == ["dio:memfd:write", "dio:uffd:read"]
    off = Sequence(seed=1, params={"zfs_dio_enabled": 0}, ops=seq.ops)
    assert not [c for c in reach.seq_cells(off) if c.startswith("dio:")], "a control"
