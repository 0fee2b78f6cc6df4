"""Explore, the racing buffer (``buf: "racing"``): another thread changes the
user buffer while the request is in flight, and what a write from it may leave.

Direct I/O maps the user's pages: a write checksums and writes them in place, so
pages that change in flight can leave a block whose checksum does not match its
bytes. OpenZFS re-checks the checksum after the write (``zfs_vdev_direct_write_verify``)
and fails the write with EIO and a ``dio_verify_wr`` ereport instead; a Direct
I/O read verifies its checksum in the user's pages and, when they changed,
reports ``dio_verify_rd`` and retries through the ARC. Neither may ever leave a
checksum error, a data error or wrong bytes behind.

The rule for what a racing write may leave is per byte: the racer rewrites the
whole buffer with ``memmove`` while the kernel copies it (buffered) or the device
reads it (Direct I/O), so one page can be half one pattern and half the other at
any byte boundary; a per-page or per-record rule would call a correct mix wrong.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

PIECE = 4096            # the unit :class:`Landing` counts in (a page of the request)
START_WAIT_S = 10.0     # a racer that has not flipped by then: the request goes anyway

# What a racing op may leave without anything being wrong (suite/judges/expect.py):
# the write verify failing (EIO, and the ereport), the read verify failing (a retry).
RACING_LEAVES = {"write": ("dio_verify_wr",), "read": ("dio_verify_rd",)}


class Racer:
    """A thread flipping ``len(first)`` bytes at ``addr`` between ``second`` and
    ``first`` until the ``with`` block ends (what ZTS's manipulate_user_buffer
    and ``flip-write`` do). The copies are ``ctypes.memmove`` calls, which run
    without the GIL, so they go on while the issuing thread waits in the kernel.
    The request starts once the bytes are changing (the first flip is done);
    afterwards the buffer holds ``first``."""

    def __init__(self, addr: int, first: bytes, second: bytes) -> None:
        if len(first) != len(second):
            raise ValueError(f"racer: {len(first)} and {len(second)} bytes differ in length")
        self.addr, self.first, self.second = addr, first, second
        self.flips = 0
        self._stop = threading.Event()
        self._flipping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="explore-racer", daemon=True)

    def _run(self) -> None:
        n = len(self.first)
        while not self._stop.is_set():
            ctypes.memmove(self.addr, self.second, n)
            ctypes.memmove(self.addr, self.first, n)
            self.flips += 1
            self._flipping.set()

    def __enter__(self) -> "Racer":
        self._thread.start()
        self._flipping.wait(START_WAIT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Landing:
    """What a racing write left in its range: the first byte that is none of the
    allowed contents (None: every byte is one of them), and how many pieces of
    ``PIECE`` bytes are wholly one content, or a mix (``mixed``)."""
    first_wrong_byte: int | None
    pieces: dict[str, int] = field(default_factory=dict)


def landed(got: bytes, allowed: dict[str, bytes], base: int) -> Landing:
    """Check ``got`` (file bytes from offset ``base``) byte by byte against the
    ``allowed`` contents of the same range (name -> bytes). Whole pieces are
    compared first: most are one content, and only mixed ones are walked."""
    pieces = {name: 0 for name in allowed} | {"mixed": 0}
    for p in range(0, len(got), PIECE):
        piece = got[p:p + PIECE]
        name = next((k for k, c in allowed.items() if c[p:p + PIECE] == piece), None)
        if name is not None:
            pieces[name] += 1
            continue
        bad = next((j for j, b in enumerate(piece)
                    if all(c[p + j] != b for c in allowed.values())), None)
        if bad is not None:
            return Landing(base + p + bad, pieces)
        pieces["mixed"] += 1
    return Landing(None, pieces)
