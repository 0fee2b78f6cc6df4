"""Explore, per-call flags of a read or write (``Step.flags``), as ``preadv2``/
``pwritev2``, libaio's ``aio_rw_flags`` and io_uring's ``rw_flags`` carry them:

- ``append`` (``RWF_APPEND``, writes): the bytes land at the end of the file,
  whatever the offset says, even with async writes queued before (the async-dio
  series judged an append at the EOF of submission time);
- ``dsync`` (``RWF_DSYNC``, writes): the write is on stable storage when it
  returns; its bytes judged like any write's (what survives a power cut is the
  ``power_cut`` op's ``dsync`` barrier);
- ``nowait`` (``RWF_NOWAIT``): the call may not block: ``EAGAIN`` (or
  ``EOPNOTSUPP``, a file without ``FMODE_NOWAIT``) with the file as it was, or a
  count, short included, whose bytes are right;
- ``hipri`` (``RWF_HIPRI``): a polled request; a file or ring that cannot poll
  refuses it (``EOPNOTSUPP``, ``EINVAL``) or serves it as any other.

A refusal the flag allows is the ``refused`` outcome (the file unchanged, else a
finding); everything else is judged as the request without the flag would be,
at the offset the flag says (an append: the model's end of file).
"""
from __future__ import annotations

import errno as errno_mod
from typing import TYPE_CHECKING, Any

from .model import Ctx, Outcome, changed, check_bytes, failed

if TYPE_CHECKING:
    from .requests import IoBuffer
    from .step import Step

RWF = {"hipri": 0x1, "dsync": 0x2, "nowait": 0x8, "append": 0x10}
WRITE_FLAGS = ("append", "dsync", "nowait", "hipri")
READ_FLAGS = ("nowait", "hipri")
# What each flag may be refused with (the file left as it was).
REFUSALS = {"nowait": (errno_mod.EAGAIN, errno_mod.EOPNOTSUPP),
            "hipri": (errno_mod.EOPNOTSUPP, errno_mod.EINVAL),
            "append": (errno_mod.EOPNOTSUPP,), "dsync": (errno_mod.EOPNOTSUPP,)}


def rw_flags(flags: str) -> int:
    """The ``RWF_*`` bits of a step's ``flags`` ("" : none)."""
    if not flags:
        return 0
    if flags not in RWF:
        raise ValueError(f"unknown flags {flags!r} (known: {', '.join(RWF)})")
    return RWF[flags]


def where(ctx: Ctx, flags: str, off: int) -> int:
    """The offset a request lands at: the end of the file for an append."""
    return ctx.model.size if flags == "append" else off


def refused(ctx: Ctx, flags: str, err: int, write: bool, off: int, length: int) -> Outcome | None:
    """The refusal ``flags`` allows (the file unchanged), a finding when the file
    changed anyway, or None (not a refusal this flag allows)."""
    if err not in REFUSALS.get(flags, ()):
        return None
    name = errno_mod.errorcode[err]
    if write and (how := changed(ctx, off, length)):
        return failed(f"error:{name}", f"RWF_{flags.upper()} write refused with {name}, "
                      f"yet the file changed: {how}", errname=name, extra={"flags": flags})
    return Outcome("refused", why=f"RWF_{flags.upper()}: {name} (allowed)", errname=name,
                   extra={"flags": flags})


def partial_allowed(flags: str) -> bool:
    """A short count is a correct answer to this flag (a call that may not block)."""
    return flags == "nowait"


def judge(ctx: Ctx, s: "Step", buf: "IoBuffer", res: int | None, err: int,
          stage: str | None, write: bool, data: Any) -> Outcome | None:
    """What a request's ``flags`` allow beyond the plain request's judge: a refusal
    with the file as it was, a short count whose bytes are right (``nowait``).
    None: judge it as the plain request (at ``s.off``, an append's end of file)."""
    if stage == "timeout":
        return None
    if err:
        return refused(ctx, s.flags, err, write, s.off, s.len)
    if res is None or not partial_allowed(s.flags) or s.buf == "racing":
        return None
    want = s.len if write else max(0, min(s.len, ctx.model.size - s.off))
    if not 0 < res < want:
        return None
    if write:
        ctx.model.write(s.off, data[:res])
        return Outcome(res=res, extra={"flags": s.flags, "short": True})
    bad = check_bytes(buf.gather(res), ctx.model, s.off, "read")
    return bad or Outcome(res=res, extra={"flags": s.flags, "short": True})
