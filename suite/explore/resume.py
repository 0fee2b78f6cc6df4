"""Past a known finding: a sequence that fails as a known upstream finding on the
guest's kernel (``patches/upstream/findings.toml``) stops at that op, and whatever it drew after it (a power cut,
a freeze, the ops of the other actors) is never run. On a kernel where such a finding
is frequent (sendfile and splice out of a ``direct=always`` file on Linux 6.1) that
was most of the sequences' tails. The session runs the same sequence again without
the op that failed, as ddmin would drop it, up to ``MAX_RESUMES`` times per sequence;
after a known hang (on a fresh guest), without that op from there on.
Not for a failure known only by its signature (``--known``): the table of upstream
findings also names their consequences (``explore_after``: the reads after a
rollback), so a run past one does not turn its aftermath into a new finding; a bare
signature cannot.
"""
from __future__ import annotations

from typing import Any, Callable

from suite.explore.failure import direct
from suite.explore.judge import Verdict
from suite.explore.ops import Op, Sequence

MAX_RESUMES = 3


def past_known(seq: Sequence, v: Verdict, resumes: int,
               claims: Callable[[Op], bool] | None = None) -> Sequence | None:
    """``seq`` without the op it failed at as a known finding; None when that op was its
    last (nothing is left to reach), the failure named no op, or ``resumes`` is used up.
    ``claims``: the later ops the finding would fail the same way (a kernel's limit:
    every such op on this kernel), left out with it."""
    i = v.failed_at
    if resumes >= MAX_RESUMES or i is None or not 0 <= i < len(seq.ops) - 1:
        return None
    later = [o for o in seq.ops[i + 1:] if claims is None or not claims(o)]
    return seq.with_ops(seq.ops[:i] + tuple(later))


def kernel_limit_claims(seq: Sequence, finding: Any) -> Callable[[Op], bool] | None:
    """The ops a finding that is a kernel's limit on Direct I/O (``linux_before``: on
    an older kernel every such op fails so; ``explore_direct``: the ops asking for
    Direct I/O) claims: its ``explore_ops`` that ask for it. None for any other finding
    (its failure depends on what came before: only the op that failed is left out)."""
    if not getattr(finding, "linux_before", "") or not getattr(finding, "explore_direct", False):
        return None
    ops = set(getattr(finding, "explore_ops", ()))
    return lambda o: o.op in ops and direct(seq, o)


def past_known_hang(seq: Sequence, v: Verdict, op: str, resumes: int) -> Sequence | None:
    """``seq`` without the ``op`` that hung as a known finding, from the one that hung
    on (they would hang too: the op is avoided from now on, as in the sequences
    generated after); the ops before it ran and stay. None as :func:`past_known`."""
    i = v.failed_at
    if resumes >= MAX_RESUMES or i is None or not 0 <= i < len(seq.ops) - 1:
        return None
    return seq.with_ops(seq.ops[:i] + tuple(o for o in seq.ops[i:] if o.op != op))


def carried(before: Sequence, after: Sequence, origin: tuple[int, ...]) -> tuple[int, ...]:
    """Where each op of ``after`` (``before`` run again past a known finding: some of its
    ops left out) stood in the generated sequence, given ``origin`` for ``before``'s:
    a failure's op named the same way in every run of a sequence."""
    out, j = [], 0
    for o in after.ops:
        while j < len(before.ops) and before.ops[j] is not o:
            j += 1
        out.append(origin[j] if j < len(origin) else -1)
        j += 1
    return tuple(out)


def original(origin: tuple[int, ...], i: int | None) -> int | None:
    """Op ``i`` of a run as the generated sequence numbers it."""
    return origin[i] if i is not None and 0 <= i < len(origin) else i


def sequences_run(runs: list[dict]) -> int:
    """The sequences an exploration ran (what an ``Nx`` budget counts): a run past a
    known finding is the same sequence again."""
    return sum(1 for r in runs if not r.get("resumed"))
