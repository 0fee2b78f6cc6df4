"""Explore, the oracle of several actors: what a correct file system may return when
reads and writes of one range overlap in time.

A run of actors leaves a history: every write (what it laid down over which range,
when it started and ended on CLOCK_MONOTONIC, the same clock for every process) and
every read (what it returned, when). Per aligned block of ``blk`` bytes, a read may
return the block's bytes before it started (the latest writes that ended before it,
or the bytes before the actors ran if none did) or the bytes of one write that
overlapped it in time; nothing else: no stale bytes of a write superseded before the
read began, no block torn between two writes, no bytes nobody wrote. A read marked
``fine`` (an mmap read, or one racing an mmap store: memcpy is not atomic) is judged
byte by byte instead. Once every actor is done, each block holds one of the writes
no other write followed (or the bytes before), and the three read paths agree
(:func:`check_final`).

Pure functions over plain records, so the rules are tested on hand-made histories
(``tests/test_explore_actors.py``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Written:
    """One write of the history: ``data`` laid over ``[off, off+len(data))``
    between ``t0`` and ``t1`` (a punch or a truncate lays down zeros)."""
    who: str
    off: int
    data: bytes
    t0: int
    t1: int
    mmap: bool = False              # a store through a mapping: not atomic

    @property
    def end(self) -> int:
        return self.off + len(self.data)

    def covers(self, b: int, blk: int) -> bool:
        return self.off <= b and b + blk <= self.end

    def block(self, b: int, blk: int) -> bytes:
        return self.data[b - self.off:b - self.off + blk]


@dataclass(frozen=True)
class Read:
    """One read: ``data`` from ``off`` between ``t0`` and ``t1``."""
    who: str
    off: int
    data: bytes
    t0: int
    t1: int
    fine: bool = False              # judged byte by byte (an mmap read)
    want: int = 0                   # the bytes it asked for (0: as many as it got)


@dataclass(frozen=True)
class Violation:
    """A block a read (or the end state) returned that no legal order explains."""
    kind: str                       # wrong-bytes | torn | paths-disagree
    at: int                         # the block's offset in the file
    why: str


def latest(ws: list[Written], before: int) -> list[Written]:
    """The writes that ended by ``before`` and that no other of them followed (one
    that started after it ended): each could be the last, in some legal order."""
    done = [w for w in ws if w.t1 <= before]
    return [w for w in done if not any(o.t0 >= w.t1 for o in done if o is not w)]


def legal(b: int, blk: int, writes: list[Written], t0: int,
          t1: int) -> tuple[list[Written], bool]:
    """The writes whose bytes block ``b`` may hold for a read between ``t0`` and
    ``t1`` (the latest before it, and those overlapping it), and whether the bytes
    before the actors may still be there (no write covering it ended before)."""
    ws = [w for w in writes if w.covers(b, blk)]
    before = latest(ws, t0)
    return before + [w for w in ws if w.t0 < t1 and w.t1 > t0], not before


def candidates(b: int, blk: int, writes: list[Written], initial: bytes, base: int,
               t0: int, t1: int) -> list[tuple[str, bytes]]:
    """(who, bytes) block ``b`` may hold for a read between ``t0`` and ``t1``;
    ``initial`` are the window's bytes before the actors, from file offset ``base``."""
    ws, initial_too = legal(b, blk, writes, t0, t1)
    out = [(w.who, w.block(b, blk)) for w in ws]
    if initial_too:
        out.append(("before", initial[b - base:b - base + blk]))
    return out


def _explained(got: bytes, cands: list[tuple[str, bytes]], fine: bool) -> bool:
    if any(got == c[:len(got)] for _, c in cands):
        return True
    if not fine:
        return False
    return all(any(i < len(c) and c[i] == byte for _, c in cands) for i, byte in enumerate(got))


def check_read(r: Read, writes: list[Written], initial: bytes, base: int,
               blk: int) -> Violation | None:
    """The first block of ``r`` no legal order explains, or None."""
    first = r.off - r.off % blk
    for b in range(first, r.off + len(r.data), blk):
        lo, hi = max(b, r.off), min(b + blk, r.off + len(r.data))
        got = r.data[lo - r.off:hi - r.off]
        cands = [(who, c[lo - b:hi - b]) for who, c in
                 candidates(b, blk, writes, initial, base, r.t0, r.t1)]
        # a store through a mapping among them: bytes of it may sit beside others'
        fine = r.fine or any(w.mmap for w in legal(b, blk, writes, r.t0, r.t1)[0])
        if _explained(got, cands, fine):
            continue
        whole = [who for who, c in cands if c[:1] == got[:1]]
        kind = "torn" if whole and not fine else "wrong-bytes"
        names = ", ".join(who for who, _ in cands)
        return Violation(kind, b, f"{r.who} read block {b} (bytes {lo}-{hi}) in "
                         f"[{r.t0}, {r.t1}] ns: none of {len(cands)} legal contents "
                         f"({names}){'; it begins as ' + whole[0] + ' and ends otherwise' if whole and kind == 'torn' else ''}")
    return None


def check_final(paths: dict[str, bytes], writes: list[Written], initial: bytes, base: int,
                blk: int) -> Violation | None:
    """Once every actor is done: the read paths (``{"buffered": ..., "O_DIRECT":
    ..., "mmap": ...}``) agree, and each block is one write no other followed, or
    the bytes before if none covered it."""
    names = list(paths)
    ref = paths[names[0]]
    for name in names[1:]:
        if paths[name] != ref:
            at = next((i for i, (x, y) in enumerate(zip(ref, paths[name])) if x != y),
                      min(len(ref), len(paths[name])))
            return Violation("paths-disagree", base + at - (base + at) % blk,
                             f"after the actors, {names[0]} and {name} differ from byte "
                             f"{base + at} ({len(ref)} and {len(paths[name])} bytes read)")
    end = max([base + len(ref)] + [w.end for w in writes])
    r = Read("the end state", base, ref, end_time(writes), end_time(writes) + 1)
    v = check_read(r, writes, initial, base, blk)
    return None if v is None else Violation(v.kind, v.at, v.why)


def end_time(writes: list[Written]) -> int:
    return max([w.t1 for w in writes] + [0]) + 1
