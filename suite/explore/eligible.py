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


def quota_writes_grow(seq: Sequence) -> Sequence:
    """``seq`` with each write cut by a refquota (``limit = "quota"``) moved to the
    file's end as the ops before it leave it (its next record boundary) and made at
    least two records long, where the file has room below ``file_size_max``. A
    refquota cuts only a write of two chunks or more that needs new space: OpenZFS
    checks a chunk against what is referenced and in flight before it, and an
    overwrite's old blocks are freed in its txg. 2026-12-07 at 30582e2f4c: a write of
    two 16K records from the end of a new file was cut (EDQUOT, one record landed);
    the quota writes explore drew returned their full counts, and so did sequence 1's
    two once moved here (why is not known yet)."""
    rec, st, ops = recordsize(seq.props), _State(seq), []
    for o in seq.ops:
        if getattr(o, "limit", "") == "quota" and getattr(o, "flags", "") != "append":
            start, n = -(-st.size // rec) * rec, max(o.len, 2 * rec)
            if start + n <= seq.file_size_max:
                o = replace(o, off=start, len=n)
        ops.append(o)
        st.after(o)
    return replace(seq, ops=tuple(ops))

