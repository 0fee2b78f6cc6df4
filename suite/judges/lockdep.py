"""lockdep: is the lock validator still watching?

A kernel built with ``CONFIG_PROVE_LOCKING`` (the ``debian-6.1-debug`` profile)
reports the first lock-order problem it sees and then turns itself off for the
rest of the boot (``debug_locks`` 0 in ``/proc/lockdep_stats``); so does what
makes it unreliable (loading a module of a non-GPL licence, an Oops). Every case judged after that in the same guest
would pass the lockdep check without a check having run: the after-case step
reads ``debug_locks`` and says so ("not checked"), never a silent pass. The
report that turned it off is a ``kernel:lockdep`` finding of the case it came in.
"""
from __future__ import annotations

import re

PATH = "/proc/lockdep_stats"


def after_command(section: str) -> str:
    """Print ``debug_locks`` under ``section`` (nothing on a kernel without lockdep)."""
    return f"if [ -r {PATH} ]; then echo '{section}lockdep'; grep -E 'debug_locks' {PATH}; fi"


def watching(text: str) -> bool | None:
    """True while lockdep validates, False once it turned itself off, None unknown."""
    m = re.search(r"debug_locks:\s*(\d+)", text)
    return None if m is None else m.group(1) != "0"
