"""Pinned user pages: every page Direct I/O pins must be unpinned by the time the
case is over.

``/proc/vmstat`` counts pages pinned with ``FOLL_PIN`` (``nr_foll_pin_acquired``)
and unpinned (``nr_foll_pin_released``) since boot: OpenZFS's Direct I/O pins its
callers' pages that way (``zfs_uio_pin_user_pages``), as io_uring does for fixed
buffers and, from Linux 6.5, the block layer's own O_DIRECT. Between the snapshot
before a case and the one after it (no request in flight, the case's processes
gone) the two must have moved by the same amount: a difference is pages still
pinned, held by nobody: an error path that forgot to unpin (``pins:leak``), or
unpinned twice (``pins:overrelease``), which no byte check sees.
"""
from __future__ import annotations

import re

ACQUIRED, RELEASED = "nr_foll_pin_acquired", "nr_foll_pin_released"


def command(section: str) -> str:
    """Print both counters under ``section`` (kernels before 5.7 have neither)."""
    return f"echo '{section}pins'; grep -E '^nr_foll_pin_' /proc/vmstat"


def held(text: str | None) -> int | None:
    """Pages pinned and not yet released, by the counters in ``text``; None if absent."""
    if not text:
        return None
    vals = dict(re.findall(r"^(nr_foll_pin_\w+)\s+(\d+)", text, re.M))
    if ACQUIRED not in vals or RELEASED not in vals:
        return None
    return int(vals[ACQUIRED]) - int(vals[RELEASED])
