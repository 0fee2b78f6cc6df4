"""Which O_DIRECT requests of a sequence the Direct I/O path could serve where they
stand: the reach table draws an O_DIRECT cell only from those.

OpenZFS serves an O_DIRECT request another way, by design, when:

- it is off a page (offset, length, buffer), or a write of part of a record (the
  rest of the record must be read: the ARC's way);
- it carries ``RWF_NOWAIT`` (the zpl has no ``FMODE_NOWAIT``: ``EOPNOTSUPP``), or
  ``RWF_HIPRI`` on a descriptor opened without O_DIRECT (a ``direct=always`` dataset's
  buffered descriptor: the kernel refuses polled I/O there, ``EINVAL``);
- a read starts at or past the end of the file (nothing to read);
- its range is in the page cache: a mapping of the target read or wrote those pages
  since they were last dropped (``zn_has_cached_data``: the ARC's way, coherent with
  the mapping). ``mmap_read``/``mmap_write`` cache their pages; an ``evict`` with the
  kernel's caches dropped (a sequence's ``evict = "drop"``) drops the clean ones; a
  barrier (``fsync``, ``fdatasync``, ``syncfs``) cleans the dirty ones; a truncate
  drops those past the new size; ``verify`` drops what its mapping cached.

One pass over the ops, pure: the file's size (what writes, moves, truncates and a
rollback leave) and the pages cached. Approximate where the sequence alone cannot
say (a write cut by a limit counts whole); tested on hand-made sequences
(``tests/test_explore_eligible.py``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from suite.explore.ops import IO_OPS, READS, SYNC_OPS, Sequence, recordsize

PAGE = 4096
SPA_OLD_MAXBLOCKSIZE = 128 * 1024    # the records zfs_write borrows a buffer for at any length
# Ops that lay bytes at [off, off+len) of the target (and may move its end).
EXTENDERS = IO_OPS + ("copy_range", "clone_range", "sendfile", "splice", "vmsplice_in",
                      "held_write", "actors")


def by_design(seq: Sequence, o: Any) -> bool:
    """The request's own shape lets Direct I/O serve it: on a page (a write: whole
    records), not ``RWF_NOWAIT``, and ``RWF_HIPRI`` only on an O_DIRECT descriptor."""
    flags = getattr(o, "flags", "")
    if not o.aligned or flags == "nowait" or (flags == "hipri" and not o.direct):
        return False
    if o.op in READS:
        return True
    rec = recordsize(seq.props)
    return o.off % rec == 0 and o.len % rec == 0


def _pages(off: int, length: int) -> range:
    return range(off // PAGE, -(-(off + length) // PAGE))


class _State:
    """The target as the ops leave it: its size, its cached pages (clean or dirty)."""

    def __init__(self, seq: Sequence):
        self.size = seq.init_size
        self.clean: set[int] = set()
        self.dirty: set[int] = set()
        self.snaps: dict[int, int] = {}          # snapshot data token -> size then
        self.drops = seq.evict == "drop"

    def cached(self, off: int, length: int) -> bool:
        pages = set(_pages(off, length))
        return bool(pages & self.clean or pages & self.dirty)

    def after(self, o: Any) -> None:
        op = o.op
        if op == "mmap_read":
            self.clean |= set(_pages(o.off, o.len)) - self.dirty
        elif op == "mmap_write":
            self.dirty |= set(_pages(o.off, o.len))
        elif op in SYNC_OPS:
            self.clean |= self.dirty
            self.dirty.clear()
        elif op == "evict" and self.drops:
            self.clean.clear()
        elif op == "truncate":
            last = -(-o.size // PAGE)
            self.clean = {p for p in self.clean if p < last}
            self.dirty = {p for p in self.dirty if p < last}
            self.size = o.size
        elif op == "snapshot":
            self.snaps[o.data] = self.size
        elif op == "rollback" and o.data in self.snaps:
            self.size = self.snaps[o.data]
        if op in EXTENDERS and op not in READS:
            if getattr(o, "flags", "") == "append":
                self.size += o.len
            else:
                self.size = max(self.size, o.off + o.len)


def servable(seq: Sequence, asks: Any) -> list[bool]:
    """Per op: an O_DIRECT request (``asks(seq, op)``) that Direct I/O could serve
    where it stands in the sequence (:func:`by_design`, a read inside the file, its
    range not in the page cache)."""
    st, out = _State(seq), []
    for o in seq.ops:
        at = replace(o, off=st.size) if getattr(o, "flags", "") == "append" else o
        ok = o.op in IO_OPS and asks(seq, o) and by_design(seq, at) and \
            not st.cached(at.off, at.len) and (o.op not in READS or o.off < st.size)
        out.append(ok)
        st.after(o)
    return out


def _quota_len(length: int, rec: int) -> int:
    """A quota write's length: two records at least; under 128K records fewer than
    four (OpenZFS commits a deferred first record of its own only below that)."""
    n = max(length, 2 * rec)
    return n if rec >= SPA_OLD_MAXBLOCKSIZE else min(n, 4 * rec - PAGE)


def _placed(o: Any) -> bool:
    """A write cut by a refquota that ``quota_writes_grow`` places (an append lands
    at the end of the file whatever its offset)."""
    return getattr(o, "limit", "") == "quota" and getattr(o, "flags", "") != "append"


def quota_writes_grow(seq: Sequence) -> Sequence:
    """``seq`` with its writes cut by a refquota (``limit = "quota"``) where OpenZFS
    can cut them. A refquota is checked before each transaction against what is
    referenced and in flight, so it stops a write part way only when the write spans
    two transactions and the first needs new space. An O_DIRECT write is one
    transaction, except while the file is one block smaller than a record: then its
    first record goes through the ARC in a transaction of its own (``zfs_write``'s
    ``o_direct_defer``, under the whole-file range lock that grows the block).

    So the first quota write moves to the front of the sequence, at the first record
    boundary at or past ``init_size`` and two to four records long, where the file
    starts smaller than a record; the others (and that one where the file starts
    bigger) go to the file's end as the ops before them leave it, two records long at
    least, where ``file_size_max`` leaves room. Measured 2026-12-07 at 30582e2f4c: a
    write of two 16K records from the end of a new file was cut (EDQUOT, one record
    landed); quota writes moved to the end of a file of many records returned their
    full counts (one transaction)."""
    rec = recordsize(seq.props)
    quota = [i for i, o in enumerate(seq.ops) if _placed(o)]
    if not quota:
        return seq
    ops = list(seq.ops)
    first = ops[quota[0]]
    start, n = -(-seq.init_size // rec) * rec, _quota_len(first.len, rec)
    moved = -(-seq.init_size // 512) * 512 < rec and start + n <= seq.file_size_max
    if moved:
        del ops[quota[0]]
        ops.insert(0, replace(first, off=start, len=n))
    st, out = _State(seq), []
    for i, o in enumerate(ops):
        if _placed(o) and not (moved and i == 0):
            start, n = -(-st.size // rec) * rec, max(o.len, 2 * rec)
            if start + n <= seq.file_size_max:
                o = replace(o, off=start, len=n)
        out.append(o)
        st.after(o)
    return replace(seq, ops=tuple(out))
