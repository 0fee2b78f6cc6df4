"""Draws made after a sequence's ops, each from a generator of its own so a seed's
other draws stay what they were: reads and writes turned into the kernel moving bytes
out of the target or user pages in through a pipe (``outward``), and a crash point
(``crash_point``: ``freeze`` ... ``crash``), a power cut to end a sequence
(``power_cut``), writes cut by a limit reached mid-request (``limit_writes``),
per-call flags on reads and writes (``flag_requests``), requests held in flight
while a rollback or a barrier runs (``hold_requests``), and appends submitted
together (``batch_appends``), and rewrites of blocks already on disk
(``synced_rewrites``)."""
from __future__ import annotations

import random
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from suite.explore.ops import READS, WRITES, ZFS_OPS, Op
from suite.ioengine.explore.batch import BATCH_IFACES
from suite.ioengine.explore.flags import READ_FLAGS, WRITE_FLAGS
from suite.ioengine.explore.held import UIO_FASTIOV

PAGE = 4096
POWER_LENGTHS = (4096, 16384, 131072, 1 << 20)

if TYPE_CHECKING:
    from suite.explore.gen import Choices


def outward(ops: list[Op], r: random.Random, ch: "Choices", block: bool = False) -> list[Op]:
    """``Choices.outward_share`` of the reads become a move out of the target by the
    kernel, of the writes a vmsplice of the same bytes in (same range, same O_DIRECT);
    ``block``: no copy_file_range (regular files only). The generator advances on
    reads and writes alone, so ops inserted between them (a zvol's syncs) change
    nothing."""
    outs = tuple(k for k in ("sendfile_out", "splice_out") + (() if block else ("copy_out",))
                 if k in ch.ops)
    out = []
    for o in ops:
        if o.op not in READS + WRITES:
            out.append(o)
            continue
        roll = r.random()
        if o.op in READS and outs and roll < ch.outward_share:
            o = Op(r.choice(outs), direct=o.direct, off=o.off, len=o.len)
        elif o.op in WRITES and "vmsplice_in" in ch.ops and roll < ch.outward_share:
            o = Op("vmsplice_in", direct=o.direct, off=o.off, len=o.len, data=o.data)
        out.append(o)
    return out


def _redraw(ops: list[Op], kinds: tuple[str, ...], draw: Callable[[Op], Op]) -> list[Op]:
    """Each op of ``kinds`` through ``draw`` (which advances its own generator once
    per such op, whatever it decides), the others as they are."""
    return [draw(o) if o.op in kinds else o for o in ops]


def limit_writes(ops: list[Op], r: random.Random, share: float, quota: bool) -> list[Op]:
    """``share`` of the writes cut by a limit mid-request (``Op.limit``:
    ``RLIMIT_FSIZE``, or the dataset's ``refquota`` where ``quota``: the ZFS
    commands are there). Not a racing or holed buffer's (their bytes are not the
    op's alone). The generator advances on writes alone."""
    def draw(o: Op) -> Op:
        roll, kind = r.random(), r.choice(("fsize", "quota") if quota else ("fsize",))
        return replace(o, limit=kind) if roll < share and o.buf not in ("racing", "holed") \
            else o
    return _redraw(ops, WRITES, draw)


def flag_requests(ops: list[Op], r: random.Random, share: float) -> list[Op]:
    """``share`` of the reads and writes given a per-call flag (``Op.flags``:
    ``RWF_APPEND``, ``RWF_DSYNC``, ``RWF_NOWAIT``, ``RWF_HIPRI``; reads: the last
    two). Not a racing, holed or limited one. The generator advances on reads and
    writes alone."""
    def draw(o: Op) -> Op:
        roll = r.random()
        pick = r.choice(WRITE_FLAGS if o.op in WRITES else READ_FLAGS)
        return replace(o, flags=pick) if roll < share and o.buf not in ("racing", "holed") \
            and not o.limit else o
    return _redraw(ops, READS + WRITES, draw)


BATCH_SIZES = (2, 2, 3)
BATCH_FSIZE_SHARE = 0.7     # of the batches: under RLIMIT_FSIZE with room for one
BATCH_MAX_REC = 128 << 10    # larger records: three appends would outgrow the file


def batch_appends(ops: list[Op], r: random.Random, share: float, rec: int) -> list[Op]:
    """``share`` of the writes (not a racing, holed, limited or flagged one) become an
    ``append_batch``: 2-3 ``RWF_APPEND`` O_DIRECT writes of a record each in one libaio
    or io_uring submit (the write's own interface if it is one of them),
    ``BATCH_FSIZE_SHARE`` of them under an ``RLIMIT_FSIZE`` with room for one (the
    review's stale end of file of async-dio 917a434a1a). Not where records are past
    ``BATCH_MAX_REC``. The generator advances on writes alone, four draws each."""
    if rec > BATCH_MAX_REC:
        return ops
    def draw(o: Op) -> Op:
        roll, n, cut = r.random(), r.choice(BATCH_SIZES), r.random() < BATCH_FSIZE_SHARE
        iface = r.choice(BATCH_IFACES)
        if roll >= share or o.buf in ("racing", "holed") or o.limit or o.flags:
            return o
        return Op("append_batch", iface=o.iface if o.iface in BATCH_IFACES else iface,
                  len=rec, segs=n, data=o.data, size=rec, limit="fsize" if cut else "")
    return _redraw(ops, WRITES, draw)


STREAM_SHARE = 0.25         # of the held writes: a barrier timed under a stream of writes
KEEP_SHARE = 0.5            # of the held async requests: the submitting thread reaps it
VECTOR_SHARE = 0.5          # of the held requests: vectored, as many segments as fit up to
# One past UIO_FASTIOV: the kernel kmallocs the iovec array and frees it as the submitting
# call returns (KASAN sees a task that walks it later: write-iovec-use-after-free).
HEAP_IOVECS = UIO_FASTIOV + 1


def records_covering(off: int, n: int, rec: int) -> tuple[int, int]:
    """The records ``[off, off+n)`` touches: a write Direct I/O serves (a part of a
    record goes through the ARC and is never held, nor async)."""
    start = off - off % rec
    end = -(-(off + n) // rec) * rec
    return start, end - start


REWRITTEN = ("pwrite", "pwritev")      # the writes a synced rewrite lays down again
# ops that leave the target's bytes as they were
LEAVE_BYTES = READS + ("mmap_read", "sendfile_out", "splice_out", "copy_out")


def whole_blocks(o: Op, rec: int) -> bool:
    """``o`` is an O_DIRECT write of whole ``rec`` blocks on aligned pages: what a zvol
    serves by Direct I/O. Its buffer is not asked (a racing one stays racing where write
    verify is on, the build's draw): a gate's base and head draw the same rewrites."""
    return o.op in REWRITTEN and o.direct and o.len > 0 and o.off % rec == 0 and \
        o.len % rec == 0 and o.buf not in ("holed", "anon_offset") and \
        o.buf_off % PAGE == 0 and not o.limit and not o.flags


def _untouched(kept: list[Op], o: Op) -> list[Op]:
    """The writes of ``kept`` whose bytes ``o`` leaves as they were."""
    if o.op in LEAVE_BYTES or o.len <= 0:
        return kept
    return [k for k in kept if k.off + k.len <= o.off or o.off + o.len <= k.off]


def synced_rewrites(ops: list[Op], r: random.Random, share: float, rec: int) -> list[Op]:
    """``share`` of the O_DIRECT writes of whole blocks are followed by a ``txg_sync``
    and that write again: a rewrite of blocks already on disk with their very bytes,
    which is what nopwrite (compression and a dedup-capable checksum) and dedup act on.
    Drawn apart, a rewrite lands in the txg of the write it repeats, or after other
    writes changed its blocks, and never reaches them (zvol-dio 68a939265f's nopwrite
    VERIFY: at seed 1 the first such rewrite was the 20th sequence). The generator
    advances on those writes alone."""
    out: list[Op] = []
    for o in ops:
        out.append(o)
        if whole_blocks(o, rec) and r.random() < share:
            out += [Op("txg_sync"), o]
    return out


def synced_rewrite_at(ops: tuple[Op, ...] | list[Op]) -> list[int]:
    """Indexes of the writes that repeat an earlier write (same op, range and bytes,
    nothing written over it since) with a ``txg_sync`` between: rewrites of blocks on
    disk with their bytes."""
    synced: list[Op] = []
    pending: list[Op] = []
    at = []
    for i, o in enumerate(ops):
        if o.op == "txg_sync":
            synced, pending = synced + pending, []
            continue
        if o.op in REWRITTEN and o.buf != "racing" and \
                any((s.off, s.len, s.data) == (o.off, o.len, o.data) for s in synced):
            at.append(i)
        synced, pending = _untouched(synced, o), _untouched(pending, o)
        if o.op in REWRITTEN and o.buf != "racing":     # its bytes: one of two
            pending.append(o)
    return at


def hold_requests(ops: list[Op], r: random.Random, share: float,
                  props: dict[str, str] | None = None,
                  stream: random.Random | None = None,
                  keep: random.Random | None = None, rec: int = 128 << 10,
                  vector: random.Random | None = None) -> list[Op]:
    """``share`` of the O_DIRECT reads and writes (aligned, a buffer of their own; sync,
    libaio, io_uring) become a request held in flight by ``zinject -E`` while something
    else runs (``held_read`` then a rollback; ``held_write`` then a barrier, or a later write and
    a barrier: suite/ioengine/explore/held.py). Only where the dataset caches no data
    (``primarycache`` metadata or none: a read the dbuf cache serves issues no I/O to
    hold). A held write covers the whole records (``rec`` bytes) of its range. A held
    write's ``then`` is ``stream`` (fsync timed under a stream of later writes) for
    ``STREAM_SHARE`` of them, drawn from ``stream``, a generator of its own;
    ``KEEP_SHARE`` of the async ones are reaped by their submitting thread (``keep``:
    the thread lives; else it exits once it submitted, and with it the stack the
    kernel built the request's iovec on), drawn from ``keep``, another.
    ``VECTOR_SHARE`` are vectored (``segs``: page-sized or larger segments, up to
    ``HEAP_IOVECS``, where the kernel's iovec array is on the heap, not the submitter's
    stack; a vectored write grows to that many pages), drawn from ``vector``, a third.
    The generators advance on reads and writes alone."""
    if (props or {}).get("primarycache", "all") == "all":
        return ops
    def draw(o: Op) -> Op:
        roll = r.random()
        then = r.choice(("rollback",) if o.op in READS else ("fsync", "syncfs", "later_write"))
        if stream is not None and stream.random() < STREAM_SHARE and o.op in WRITES:
            then = "stream"
        hold_ms = r.choice((1000, 3000))
        kept = keep is not None and keep.random() < KEEP_SHARE and o.iface != "sync"
        vectored = vector is not None and vector.random() < VECTOR_SHARE
        if roll < share and o.direct and o.iface in ("sync", "libaio", "io_uring") and \
                o.buf not in ("racing", "holed") and not o.limit and not o.flags and \
                o.off % PAGE == 0 and o.len % PAGE == 0 and 0 < o.len <= 1 << 20:
            # a vectored write grows to one page a segment of a heap iovec (its records)
            want = max(o.len, HEAP_IOVECS * PAGE) if vectored else o.len
            off, n = records_covering(o.off, want, rec) if o.op in WRITES else (o.off, o.len)
            segs = min(HEAP_IOVECS, n // PAGE) if vectored else 1
            return Op("held_read" if o.op in READS else "held_write", iface=o.iface,
                      off=off, len=n, data=o.data, then=then, slow_ms=hold_ms, keep=kept,
                      segs=segs if segs > 1 else 0)
        return o
    return _redraw(ops, READS + WRITES, draw)


def crash_point(ops: list[Op], r: random.Random, share: float) -> list[Op]:
    """``share`` of the sequences: the op at a drawn index becomes ``freeze`` and the op
    2-8 later ``crash``, where no snapshot, rollback or txg sync lies between (on a
    frozen pool a txg is never written: only the ZIL keeps what is synced; and a
    snapshot a later rollback names stays)."""
    if len(ops) < 4 or r.random() >= share:
        return ops
    for _ in range(8):
        i = r.randrange(len(ops) - 3)
        j = min(len(ops) - 1, i + r.choice((2, 3, 5, 8)))
        if not any(o.op in ZFS_OPS + ("held_read", "held_write") for o in ops[i:j + 1]):
            out = list(ops)
            out[i], out[j] = Op("freeze"), Op("crash")
            return out
    return ops


def power_cut(r: random.Random, ch: "Choices", file_size_max: int, token: int,
              slow: bool = False, shaped: bool = False) -> Op | None:
    """``Choices.power_share`` of the sequences: a ``power_cut`` to end them (in place of
    their verify): 1-4 O_DIRECT writes through libaio or io_uring (or none), a barrier
    drawn among fsync, fdatasync, syncfs, RWF_DSYNC on the writes (``dsync``) and none;
    ``slow`` (a file, the ZFS commands given): half of them with the pool's disks slowed
    (``slow_ms``) so the writes are in flight at the barrier. Data tokens from ``token``
    on (past every other op's).

    ``shaped`` (the sequence runs with the async O_DIRECT path on): the durability
    shape the async barriers must honour, drawn ``Choices.power_share_async`` of the
    time: async writes, on slowed disks, and a barrier."""
    if r.random() >= (ch.power_share_async if shaped else ch.power_share):
        return None
    iface = r.choice(("libaio", "libaio", "io_uring", "sync"))
    segs = r.choice((1, 2, 4))
    length = r.choice([n for n in POWER_LENGTHS if n * segs <= file_size_max] or [PAGE])
    off = r.randrange(0, max(1, (file_size_max - length * segs) // PAGE + 1)) * PAGE
    barrier = r.choice(("fsync", "fsync", "fdatasync", "syncfs", "dsync", ""))
    if shaped:
        iface = "libaio" if iface == "sync" else iface
        barrier = barrier or "fsync"
        slow_ms = r.choice((250, 1000)) if slow else 0
    else:
        slow_ms = r.choice((0, 0, 250, 1000)) if slow and iface != "sync" else 0
    return Op("power_cut", iface=iface, off=off, len=length, segs=segs, data=1000 + token,
              barrier=barrier, slow_ms=slow_ms)
