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


# ---------------------------------------------------------------- what a report names
#
# A lockdep report's headline says only its class ("possible circular locking
# dependency detected"); two different lock-order bugs read the same there. The
# lines after it name the locks, where each was taken and by which task:
#
#   z_wr_iss/214 is trying to acquire lock:
#   ffff888 (&ms->ms_lock){+.+.}-{3:3}, at: metaslab_check_free_impl+0x1a2/0x3c0 [zfs]
#   but task is already holding lock:
#   ffff888 (&dn->dn_dbufs_mtx){+.+.}-{3:3}, at: dbuf_free_range+0x1f4/0x9c0 [zfs]
#
#   zvol_tq-0/771 is trying to release lock (&zv->zv_suspend_lock) at:
#   [<ffffffffc0a4c3e4>] zvol_read+0x894/0xa00 [zfs]
#
# ``describe`` turns them into one line a finding's ``signature`` can match
# (patches/upstream/findings.toml), so a known report does not hide a new one of the
# same class.

_TASK_ACQ = re.compile(r"(\S+?)/\d+ is trying to acquire lock:")
_TASK_REL = re.compile(r"(\S+?)/\d+ is trying to release lock \(([^)]*)\) at:")
_HOLDING = re.compile(r"but task is already holding lock:")
_LOCK = re.compile(r"\((?P<lock>[^(){}]+)\)\{[^}]*\}(?:-\{[^}]*\})?, at: (?P<fn>[\w.]+)")
_AT = re.compile(r"\] (?P<fn>[\w.]+)\+0x")


def _strip(line: str) -> str:
    """A console line without its ``[  12.3]`` timestamp."""
    return re.sub(r"^\s*\[\s*[\d.]+\]\s?", "", line).strip()


def _lock_after(lines: list[str], i: int) -> tuple[str, str] | None:
    for ln in lines[i + 1:i + 3]:
        m = _LOCK.search(ln)
        if m:
            return m["lock"], m["fn"]
    return None


def describe(context: list[str] | tuple[str, ...]) -> str:
    """What the report after a lockdep headline names: "T acquiring L1 at f1 while
    holding L2 at f2", "T releasing L at f", or "" when the lines are not there."""
    lines = [_strip(x) for x in context]
    acq = hold = None
    task = ""
    for i, ln in enumerate(lines):
        m = _TASK_REL.search(ln)
        if m:
            at = next((a["fn"] for a in map(_AT.search, lines[i + 1:i + 3]) if a), "?")
            return f"{m[1]} releasing {m[2]} at {at}"
        m = _TASK_ACQ.search(ln)
        if m and acq is None:
            task, acq = m[1], _lock_after(lines, i)
        elif _HOLDING.search(ln) and hold is None:
            hold = _lock_after(lines, i)
    if acq is None:
        return ""
    said = f"{task} acquiring {acq[0]} at {acq[1]}"
    return said + (f" while holding {hold[0]} at {hold[1]}" if hold else "")
