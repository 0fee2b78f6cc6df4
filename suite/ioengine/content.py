"""Deterministic content: the bytes at an offset depend only on (seed, offset);
the model of which seed owns which range; comparison of what came back.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

from .plan import CANARY, PATTERN_BLOCK

# ---------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _pattern_block(seed_key: str, index: int) -> bytes:
    return hashlib.shake_256(f"{seed_key}:{index}".encode()).digest(PATTERN_BLOCK)


def _pattern_block_uncached(seed_key: str, index: int) -> bytes:
    return hashlib.shake_256(f"{seed_key}:{index}".encode()).digest(PATTERN_BLOCK)


def pattern(seed: Any, offset: int, length: int, *, cache: bool = True) -> bytes:
    """Bytes ``[offset, offset+length)`` of the file generated from ``seed``.

    The byte at absolute offset ``o`` depends only on ``(str(seed), o)``:
    4 KiB block ``o // 4096`` is ``shake_256(f"{seed}:{block}")`` squeezed to
    4096 bytes (SHAKE gives arbitrary-length output at C speed, ~0.5 GB/s;
    seeds ``1`` and ``"1"`` are the same seed). Data is incompressible, never
    all zeros, and differs between blocks, so zero fill, stale buffers and
    data from the wrong offset all show up as wrong bytes.
    """
    if offset < 0 or length < 0:
        raise ValueError(f"pattern: negative offset/length ({offset}, {length})")
    if length == 0:
        return b""
    key = str(seed)
    block = _pattern_block if cache else _pattern_block_uncached
    first = offset // PATTERN_BLOCK
    last = (offset + length - 1) // PATTERN_BLOCK
    blob = b"".join(block(key, i) for i in range(first, last + 1))
    start = offset - first * PATTERN_BLOCK
    return blob[start:start + length]


class _Zero:
    """Seed of a range that reads as zeros (hole left by an extending write)."""

    def __repr__(self) -> str:
        return "ZERO"


ZERO = _Zero()


def _subtract(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in ranges:
        if e <= lo or s >= hi:
            out.append((s, e))
            continue
        if s < lo:
            out.append((s, lo))
        if e > hi:
            out.append((hi, e))
    return out


@dataclass
class FileModel:
    """What a file must contain: the base seed plus writes laid over it."""

    path: str
    seed: Any
    size: int
    overlays: list[tuple[int, int, Any]] = field(default_factory=list)

    def record_write(self, offset: int, nbytes: int, seed: Any) -> None:
        """A write of ``nbytes`` at ``offset`` landed with ``pattern(seed)``
        (``seed=None``: the range's content is unknown, e.g. failed write)."""
        if nbytes <= 0:
            return
        if offset > self.size and seed is not None:
            self.overlays.append((self.size, offset, ZERO))
        self.overlays.append((offset, offset + nbytes, seed))
        if seed is not None:
            self.size = max(self.size, offset + nbytes)

    def expected(self, offset: int, length: int) -> tuple[bytes, list[tuple[int, int]]]:
        """Expected bytes and the absolute ranges whose content is unknown."""
        buf = bytearray(pattern(self.seed, offset, length))
        unknown: list[tuple[int, int]] = []
        end = offset + length
        for s, e, sd in self.overlays:
            lo, hi = max(s, offset), min(e, end)
            if lo >= hi:
                continue
            if sd is None:
                unknown = _subtract(unknown, lo, hi) + [(lo, hi)]
                continue
            unknown = _subtract(unknown, lo, hi)
            fill = bytes(hi - lo) if sd is ZERO else pattern(sd, lo, hi - lo)
            buf[lo - offset:hi - offset] = fill
        return bytes(buf), unknown


@dataclass
class Comparison:
    wrong_bytes: int = 0
    first_wrong_byte: int | None = None
    unverified_bytes: int = 0
    wrong_kind: str | None = None
    wrong_sample: dict[str, str] | None = None


def compare(data: bytes, expected: bytes, base: int,
            unknown: Sequence[tuple[int, int]] = ()) -> Comparison:
    """Compare ``data`` with ``expected`` (both starting at file offset ``base``)
    over their common length; ranges in ``unknown`` are not judged."""
    n = min(len(data), len(expected))
    got = bytearray(data[:n])
    want = bytearray(expected[:n])
    cmp = Comparison()
    for lo, hi in unknown:
        a, b = max(lo - base, 0), min(hi - base, n)
        if a < b:
            got[a:b] = want[a:b]
            cmp.unverified_bytes += b - a
    if got == want:
        return cmp
    diff = (int.from_bytes(got, "little") ^ int.from_bytes(want, "little")).to_bytes(n, "little")
    first = n - len(diff.lstrip(b"\x00"))
    cmp.wrong_bytes = n - diff.count(0)
    cmp.first_wrong_byte = base + first
    window = bytes(got[first:first + 64])
    if window == bytes(len(window)):
        cmp.wrong_kind = "zeros"
    elif window == bytes([CANARY]) * len(window):
        cmp.wrong_kind = "untouched"  # buffer still holds the engine's canary
    else:
        cmp.wrong_kind = "other"
    cmp.wrong_sample = {"got": bytes(got[first:first + 16]).hex(),
                        "expected": bytes(want[first:first + 16]).hex()}
    return cmp


# ---------------------------------------------------------------------------
