"""Explore, what must survive a crash: the durability model beside the byte model.

Every op tells the model what it changed and what it made durable:

- a write, truncate, punch, copy or clone changes blocks (and the size); until a
  persistence point covers them they are *pending*: after a crash each aligned block
  may hold its durable bytes or the bytes of one pending change of it, never a mix
  inside it, never bytes nobody wrote;
- ``fsync``, ``fdatasync`` (the file), ``syncfs`` and a txg sync (everything) make the
  file as it is now durable; so does every op on a dataset with ``sync=always``, and a
  write with O_SYNC/O_DSYNC/RWF_DSYNC makes its own range durable;
- the size after a crash is one the file had at an op boundary since the last point
  that made the size durable.

:func:`check` judges what a file holds after recovery. Pure: tested on hand-made
histories (``tests/test_explore_durable.py``).
"""
from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass, field
from typing import Any

BLK = 4096


@dataclass
class Durable:
    """The file's durable bytes and size, and what changed since."""
    data: bytearray = field(default_factory=bytearray)
    size: int = 0
    # block offset -> the versions of that block written since it was last durable
    pending: dict[int, list[bytes]] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)      # sizes at op boundaries since

    @classmethod
    def of(cls, data: bytes) -> "Durable":
        return cls(bytearray(data), len(data))

    def changed(self, now: bytes, off: int, length: int) -> None:
        """An op changed ``[off, off+length)``; ``now`` is the whole file after it."""
        if length > 0:
            for b in range(off - off % BLK, off + length, BLK):
                self.pending.setdefault(b, []).append(bytes(now[b:b + BLK]))
        self.sizes.append(len(now))

    def resized(self, now: bytes) -> None:
        """The size changed (truncate): the blocks past the shorter size change too."""
        self.sizes.append(len(now))
        lo = min(len(now), self.size)
        hi = max(len(now), self.size)
        for b in range(lo - lo % BLK, hi, BLK):
            self.pending.setdefault(b, []).append(bytes(now[b:b + BLK]))

    def synced(self, now: bytes) -> None:
        """A persistence point for the whole file: it is durable as it is."""
        self.data, self.size = bytearray(now), len(now)
        self.pending.clear()
        self.sizes.clear()

    def synced_range(self, now: bytes, off: int, length: int) -> None:
        """An O_SYNC/O_DSYNC write: its blocks durable as they are, and the size
        (blocks past the old durable size read as holes until their own writes land)."""
        if len(self.data) < len(now):
            self.data.extend(bytes(len(now) - len(self.data)))
        del self.data[len(now):]
        for b in range(off - off % BLK, min(off + length, len(now)), BLK):
            self.data[b:b + BLK] = now[b:b + BLK]
            self.pending.pop(b, None)
        self.size = len(now)
        self.sizes.clear()

    def to_state(self) -> dict[str, Any]:
        """JSON-ready (the bytes zlib'd and base64'd): what a power cut's recovery, in
        another guest, judges the file against."""
        return {"data": _pack(bytes(self.data)), "size": self.size, "sizes": list(self.sizes),
                "pending": {str(b): [_pack(v) for v in vs] for b, vs in self.pending.items()}}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "Durable":
        return cls(bytearray(_unpack(d["data"])), int(d["size"]),
                   {int(b): [_unpack(v) for v in vs] for b, vs in d["pending"].items()},
                   [int(x) for x in d["sizes"]])


def _pack(b: bytes) -> str:
    return base64.b64encode(zlib.compress(b, 1)).decode("ascii")


def _unpack(s: str) -> bytes:
    return zlib.decompress(base64.b64decode(s))


@dataclass(frozen=True)
class Loss:
    """What a recovered file holds that no crash allows."""
    kind: str                   # lost | torn | size
    at: int
    why: str


def allowed_sizes(d: Durable) -> set[int]:
    return {d.size, *d.sizes}


def record_end_past(size: int, top: int, record: int) -> bool:
    """``size`` is past ``top`` and is the end of the ``record``-byte record holding it:
    what ZIL replay's whole-block write leaves (``zil-replay-whole-block-extends-eof``)."""
    return record > 0 and top < size and size % record == 0 and size - top < record


def holds(have: bytes, want: bytes) -> str:
    """What a lost block holds instead, for a person: zeros, or where it first differs."""
    if not any(have):
        return f"it holds {len(have)} zero bytes"
    i = next((i for i, (x, y) in enumerate(zip(have, want)) if x != y), len(have))
    same = sum(x == y for x, y in zip(have, want))
    return f"it differs from them from byte +{i} ({same} of {len(have)} bytes equal)"


def check(d: Durable, got: bytes) -> Loss | None:
    """The first block of the recovered file ``got`` no crash explains, or None."""
    if len(got) not in allowed_sizes(d):
        return Loss("size", len(got), f"the recovered size {len(got)} is none the file had "
                    f"since its last durable size {d.size} ({sorted(allowed_sizes(d))})")
    for b in range(0, len(got), BLK):
        have = got[b:b + BLK]
        old = bytes(d.data[b:b + BLK]).ljust(len(have), b"\0")[:len(have)]
        versions = [old] + [v.ljust(len(have), b"\0")[:len(have)] for v in d.pending.get(b, [])]
        if have in versions:
            continue
        if not d.pending.get(b):
            return Loss("lost", b, f"block {b} lost its durable bytes (no change of it was "
                        f"pending): {holds(have, old)}")
        mixed = all(any(v[i] == have[i] for v in versions) for i in range(len(have)))
        return Loss("torn" if mixed else "lost", b,
                    f"block {b} is {'a mix of' if mixed else 'none of'} its durable bytes and "
                    f"its {len(d.pending[b])} pending version(s)")
    return None


# Persistence points: the file's (the ZIL commits them, frozen pool or not), and the
# pool's (a txg written out: nothing is under ``zpool freeze``).
FILE_SYNCS = ("fsync", "fdatasync", "syncfs")
TXG_SYNCS = ("txg_sync", "snapshot", "rollback")


def after_op(d: Durable, op: str, before: bytes, now: bytes, frozen: bool,
             sync_always: bool) -> None:
    """Tell ``d`` what op ``op`` did, given the file before and after it."""
    if op in FILE_SYNCS or (op in TXG_SYNCS and not frozen):
        d.synced(now)
        return
    if len(now) != len(before):
        d.resized(now)
    common = min(len(now), len(before))
    for b in range(0, common, BLK):
        if now[b:b + BLK] != before[b:b + BLK]:
            d.changed(now, b, BLK)
    if sync_always and (before != now):
        d.synced(now)           # every write is on stable storage when it returns
