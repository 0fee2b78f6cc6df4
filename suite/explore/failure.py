"""What tells explore's failures apart: their signature, and which op caused
wrong bytes: the last op before the failing one that changed the first wrong
byte (a write over it, a punch, a clone into it, a truncate that cut it, a
rollback, which changes every byte).

Every sequence ends with a ``verify`` (sync, buffered), so the op that *shows*
wrong bytes says little: two corruptions seen at verify are told apart by what
laid the bytes down. The cause is part of a data failure's signature
(:func:`suite.explore.session.signature`) and what a known finding's
``explore_after`` names (a rollback between a write and the read).
"""
from __future__ import annotations

from dataclasses import replace

from suite.explore.crashes.trip import one_report
from suite.explore.judge import Verdict
from suite.explore.ops import Op, Sequence
from suite.ioengine.explore.served import wants_direct

# Ops that change every byte of the target at once.
WHOLE = ("rollback",)
# Ops that lay bytes down over [off, off + len) of the target.
RANGED = ("pwrite", "pwritev", "mmap_write", "punch_hole", "zero_range", "copy_range",
          "clone_range", "sendfile", "splice", "vmsplice_in", "actors", "power_cut", "tamper")


def changes(op: Op, byte: int) -> bool:
    """``op`` changed the byte at file offset ``byte``."""
    if op.op in WHOLE:
        return True
    if op.op == "truncate":
        return op.size <= byte          # cut it (a later grow reads it as zero)
    if op.op in RANGED:
        length = op.len * max(1, op.segs) if op.op == "power_cut" else op.len
        return op.off <= byte < op.off + length
    return False


def cause(seq: Sequence, failed_at: int | None, byte: int | None) -> Op | None:
    """The last op before ``failed_at`` that changed ``byte`` (None: the initial
    content, or nothing to go by)."""
    if failed_at is None or byte is None:
        return None
    for op in reversed(seq.ops[:max(0, failed_at)]):
        if changes(op, byte):
            return op
    return None


def label(op: Op | None) -> str:
    """``after pwrite O_DIRECT``, ``after rollback``, ``after the initial content``."""
    if op is None:
        return "after the initial content"
    how = "" if op.op in WHOLE or op.op == "truncate" else \
        (" O_DIRECT" if op.direct else " buffered")
    return f"after {op.op}{how}"


def direct(seq: Sequence, op: Op) -> bool:
    """``op`` asked OpenZFS for Direct I/O: O_DIRECT, or a dataset of ``direct=always``.
    Through NFS the server's own requests reach OpenZFS, buffered whatever the client
    asked: Direct I/O only where the dataset says ``always``."""
    if seq.caller.get("kind") == "nfs":
        return seq.props.get("direct") == "always"
    return wants_direct(op.direct, seq.props)


def signature(seq: Sequence, v: Verdict) -> tuple[str, ...]:
    """What tells two failures apart before shrinking: the symptom kind, the
    failing op's kind, interface and O_DIRECT-ness, and for wrong bytes the op
    that last changed the first wrong one (``wrong-bytes verify sync buffered
    after rollback``: :mod:`.failure`); a run the kernel cut short, the kernel's
    report (``Trip.signature``: title and top OpenZFS frames)."""
    if v.trip is not None:
        return v.trip.signature()
    return failure_signature(v.kind, seq, v.failed_at, v.first_wrong_byte)


def same_failure(v: Verdict, r: Verdict) -> bool:
    """``r`` fails as ``v`` did: its kind, and for a trip the same kernel report."""
    return named_as(v, r) is not None


def named_as(v: Verdict, r: Verdict) -> Verdict | None:
    """``r`` as the failure ``v`` is, or None: ``r`` itself when it fails as ``v`` did;
    for a trip, ``r`` named by the report of its stop that is ``v``'s (a stop's reports
    come in any order: the 1-op replay of a held libaio write at async-dio 30582e2f4c
    on the debug kernel printed a KASAN use-after-free in ``zfs_uioskip`` <
    ``zfs_write_impl`` first, then the one in ``dmu_write_uio_direct`` it was shrunk
    for, 1 s later)."""
    if not r.failed:
        return None
    if v.trip is None:
        return r if r.kind == v.kind else None
    if r.trip is None:
        return None
    i = next((i for i, t in enumerate(r.trip.reports()) if t.kind == v.kind and
              one_report(t.signature(), v.trip.signature())), None)
    if not i:               # None: no report of the stop is v's; 0: the first is
        return None if i is None else r
    t = r.trip.named_by(i)
    return replace(r, kind=t.kind, why=t.headline, failed_at=t.op, trip=t)


def failure_signature(kind: str | None, seq: Sequence, failed_at: int | None,
                      first_wrong_byte: int | None = None) -> tuple[str, ...]:
    """:func:`signature` from its parts (a summary's run records them)."""
    op = seq.ops[failed_at] if failed_at is not None and 0 <= failed_at < len(seq.ops) else None
    if op is None:
        return (kind or "no-result",)
    sig = (kind or "no-result", op.op, op.iface, "direct" if op.direct else "buffered")
    if first_wrong_byte is None:
        return sig
    return (*sig, label(cause(seq, failed_at, first_wrong_byte)))
