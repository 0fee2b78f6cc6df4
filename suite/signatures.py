"""Signatures: what makes a failure *that* bug, not just a failure of its kind.

syzkaller titles a crash by the kernel's headline and the first frames that are
not plumbing; kdevops' expunge lists name the failure, not "a test failed". The
suite matches a known finding, tells a repeat in ``suite explore`` from a new
failure, and tells the gate's "still failing" from "fails differently" the same
way:

- a kernel report: its title with numbers, addresses and timestamps taken out
  (``VERIFY3U(max_lr_seq, <, lr->lrc_seq) failed (N < N)``) and the top OpenZFS
  frames of its stack (``zil_parse < zil_replay``);
- a hang or a task in D state: the OpenZFS frames its tasks wait in;
- anything else: its kind and (explore) the op shape that showed it and the op
  that caused it (:func:`suite.explore.session.signature`).

A symptom's *signed* text (:meth:`suite.symptoms.Symptom.signed`) is what a
finding's ``signature`` regular expression is matched against.
"""
from __future__ import annotations

import re
from typing import Iterable

# Numbers: decimal, 0x-hex, and bare hex of 8+ digits (an oops' ``address:
# ff5a7904076cbb48``: each run's differs, and one oops must shrink as one)
_NUMBER = re.compile(r"\b(0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|\d+)\b")
_TIMESTAMP = re.compile(r"^\s*(?:<\d+>)?\s*\[\s*\d+\.\d+\]\s*")
# A report's call trace ``func+0x../0x.. [zfs]``, or /proc/PID/stack's ``[<..>] func+0x..``.
_FRAME = re.compile(r"^\s*(?:\[[^\]]*\]\s*)*(?:\?\s*)?([A-Za-z_][\w.]*)\+0x[0-9a-f]+/0x[0-9a-f]+")
_GUESSED = re.compile(r"^\s*(?:\[[^\]]*\]\s*)*\?\s")
_STACK_FRAME = re.compile(r"^\s*\[<[0-9a-f]+>\]\s+([A-Za-z_][\w.]*)\+0x")
_OPENZFS_MODULE = re.compile(r"\[(zfs|spl)\]\s*$")
# Frames every stack passes through: not what tells a bug apart.
PLUMBING = re.compile(r"^(dump_stack|show_stack|spl_|__schedule|schedule|io_schedule|"
                      r"do_syscall|entry_SYSCALL|__x64_sys|x64_sys_call|ret_from_fork|kthread|"
                      r"print_|panic|__warn|report_bug|handle_bug|exc_|asm_|cv_wait|"
                      r"__cv_wait|taskq_|worker_thread|process_one_work|do_exit|"
                      r"rwsem_down|down_|mutex_lock|__mutex_lock|rwsem|percpu_rwsem)")


def normalize(text: str) -> str:
    """``text`` with its numbers (values, addresses, line numbers) taken out."""
    return _NUMBER.sub("N", text.strip())


def untimed(line: str) -> str:
    """A console line without its timestamp (``[  12.345678] ``) and log level."""
    return _TIMESTAMP.sub("", line.strip())


def title(line: str) -> str:
    """A kernel report's title: its line without the console's timestamp, its
    numbers taken out (``[ 12.3] VERIFY0(len) failed (-4096)`` ->
    ``VERIFY0(len) failed (-N)``)."""
    return normalize(untimed(line))


def frames(lines: Iterable[str], limit: int = 4, openzfs: bool = False) -> tuple[str, ...]:
    """The first ``limit`` functions of a kernel stack (a report's call trace or
    ``/proc/PID/stack``), the plumbing every stack shares left out; with
    ``openzfs``, only frames of the zfs and spl modules."""
    lines = list(lines)
    return _frames(lines, limit, openzfs, guessed=False) or \
        _frames(lines, limit, openzfs, guessed=True)


def _frames(lines: list[str], limit: int, openzfs: bool, guessed: bool) -> tuple[str, ...]:
    """:func:`frames`; ``guessed``: with the frames the unwinder was not sure of (``? f``:
    a stale return address left on the stack, which differs run to run: a KASAN report
    of async-dio 30582e2f4c began ``? dbuf_rele`` in one boot and ``? spl_kmem_cache_free``
    in the next), taken only when a stack has no other."""
    out: list[str] = []
    for ln in lines:
        m = _FRAME.match(_TIMESTAMP.sub("", ln)) or _STACK_FRAME.match(ln)
        if not m or PLUMBING.match(m.group(1)) or m.group(1) in out:
            continue
        if (openzfs and not _OPENZFS_MODULE.search(ln)) or \
                (not guessed and _GUESSED.match(_TIMESTAMP.sub("", ln))):
            continue
        out.append(m.group(1))
        if len(out) >= limit:
            break
    return tuple(out)


def report_frames(context: Iterable[str], limit: int = 3) -> tuple[str, ...]:
    """The top OpenZFS frames of a kernel report (the lines after its title),
    else its top frames of any module (a report raised outside OpenZFS)."""
    context = list(context)
    return frames(context, limit, openzfs=True) or frames(context, limit)


def signed(text: str, stack: Iterable[str]) -> str:
    """A symptom's text with the frames it stopped in: ``text @ f1 < f2``."""
    stack = tuple(stack)
    return f"{text} @ {' < '.join(stack)}" if stack else text


def matches(pattern: str, text: str) -> bool:
    """A finding's ``signature`` (a regular expression) found in a signed text."""
    return bool(pattern) and re.search(pattern, text) is not None
