"""A file's size after a crash is one it had: ZIL replay of whole-block records.

A write of at least ``zfs_immediate_write_sz`` (32 KiB) that an fsync commits is
logged ``WR_INDIRECT``: one record per block, the block written by ``dmu_sync()``.
``zfs_replay_write()`` replays a record shorter than its block as the whole block
and resets the end of file (``z_replay_eof``) only when the file is shorter than
the record's end. Finding ``zil-replay-whole-block-extends-eof`` (stock OpenZFS,
met by explore's power cut, then read in the code): when the file is already
longer, the whole-block write moves its size to the block's end, a size the file
never had, zeros past its old end.

The crash: ``zpool freeze`` (no txg reaches the pool after it), the writes and
their fsync, export and import: only the ZIL brings the writes back. The files are
laid down with an fsync first: the log's header must be on disk before the freeze,
or nothing logged after it is found at import (ZTS's slog_replay tests do the same). One file per
row, all under one freeze, each judged by its size and every byte after the
import. The first row is the finding's shape; the others are controls every build
must pass: a write whose records are whole blocks, one that extends the file (the
replay's reset of the end of file), one small enough to be copied into the log.
"""
from __future__ import annotations

import hashlib

import pytest

from suite.casekit.tables import Table
from suite.ioengine.explore.durable import record_end_past

pytestmark = [pytest.mark.vm]

RECORD = 16384
BASE, NEW = 0x5A, 0x61
# row: (file size on disk before the freeze, write offset, write length)
ROWS = {
    "last-record-inside": (40000, 4096, 32768),     # its last record: 4 KiB of 32768..49151
    "whole-records": (40000, 0, 32768),             # two whole blocks
    "extends-file": (40000, 24576, 32768),          # ends at 57344, past the old end
    "copied-small": (40000, 36864, 1024),           # WR_COPIED: the bytes in the record
}


def expected(size: int, off: int, length: int) -> bytes:
    data = bytearray([BASE]) * size
    end = off + length
    if end > size:
        data.extend(bytes(end - size))
    data[off:end] = bytes([NEW]) * length
    return bytes(data)


def sum_of(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.mark.pool(props={"recordsize": "16K", "compression": "off", "sync": "standard",
                         "logbias": "latency"})
def test_replayed_write_keeps_the_size(dio, accel, symptom):
    z, pool = dio.zfs, dio.pool
    for row, (size, _, _) in ROWS.items():      # fsync: the log's header is on disk
        z.guest.run(f"xfs_io -f -c 'pwrite -q -S {BASE:#x} 0 {size}' -c fsync "
                    f"{dio.path(row)}", timeout=accel.deadline(60))
    z.zpool("sync", pool, timeout=accel.deadline(120))
    z.zpool("freeze", pool)
    for row, (_, off, length) in ROWS.items():      # one pwrite call each, then fsync
        z.guest.run(f"xfs_io -c 'pwrite -q -b {length} -S {NEW:#x} {off} {length}' "
                    f"-c fsync {dio.path(row)}", timeout=accel.deadline(60))
    z.export_import(pool, timeout=accel.deadline(300))
    rows, failures = {}, []
    for row, (size, off, length) in ROWS.items():
        want = expected(size, off, length)
        out = z.guest.run(f"stat -c %s {dio.path(row)} && md5sum < {dio.path(row)}",
                          timeout=accel.deadline(60)).stdout.split()
        got_size, got_sum = int(out[0]), out[1]
        rows[row] = {"size_before": size, "write_end": off + length,
                     "size_expected": len(want), "size_after": got_size,
                     "bytes_right": int(got_sum == sum_of(want))}
        if got_size != len(want):
            past = record_end_past(got_size, len(want), RECORD)
            detail = (f"after freeze, fsync and import the file is {got_size} B, a size it "
                      f"never had (written to {len(want)} B)"
                      + (f": the end of its last {RECORD}-byte record" if past else ""))
            symptom("crash-size", detail, row=row)
            failures.append(f"{row}: {detail}")
        elif got_sum != sum_of(want):
            detail = f"after freeze, fsync and import the bytes differ from those written"
            symptom("lost-after-barrier", detail, row=row)
            failures.append(f"{row}: {detail}")
    table = Table("sizes after ZIL replay (recordsize 16K, zpool freeze, export/import)", rows,
                  columns=("size_before", "write_end", "size_expected", "size_after",
                           "bytes_right"),
                  notes=["one xfs_io pwrite call then fsync per file, all under one freeze"],
                  failures=failures)
    dio.write_table(table)
    assert not failures, "\n" + table.text()
