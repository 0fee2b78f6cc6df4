"""Shrinking a failing sequence: delta debugging (Zeller's ddmin) over its ops,
then each remaining op made simpler (aligned offset, smaller length, a plain
buffer, one segment, the sync interface or io_uring without registered files
and buffers) and the initial content smaller, each change kept only while the
sequence still fails.

Driven by ``still_fails(Sequence) -> bool`` (the session replays the candidate
in the guest), bounded by ``max_tries`` candidates (a candidate seen before is
answered from a cache and not counted), deterministic: the same sequence and
the same answers give the same result.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from suite.explore.ops import Op, Sequence

PAGE = 4096
DEFAULT_TRIES = 150


@dataclass
class ShrinkResult:
    sequence: Sequence
    tries: int                      # candidates run
    steps: list[str] = field(default_factory=list)     # each reduction kept, in order
    exhausted: bool = False         # out of tries (or told to stop) before the end


class _Tester:
    """``still_fails`` with a cache and a budget; out of budget, every answer is no."""

    def __init__(self, still_fails: Callable[[Sequence], bool], max_tries: int,
                 should_stop: Callable[[], bool] | None) -> None:
        self.still_fails, self.max_tries, self.should_stop = still_fails, max_tries, should_stop
        self.cache: dict[str, bool] = {}
        self.tries = 0
        self.exhausted = False

    def __call__(self, seq: Sequence) -> bool:
        key = seq.key()
        if key in self.cache:
            return self.cache[key]
        if self.tries >= self.max_tries or (self.should_stop is not None and self.should_stop()):
            self.exhausted = True
            return False
        self.tries += 1
        self.cache[key] = bool(self.still_fails(seq))
        return self.cache[key]


def _chunks(items: list[Op], n: int) -> list[list[Op]]:
    size, extra = divmod(len(items), n)
    out, pos = [], 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append(items[pos:pos + step])
        pos += step
    return [c for c in out if c]


def ddmin(seq: Sequence, test: Callable[[Sequence], bool], steps: list[str]) -> Sequence:
    """The smallest op list ddmin finds that still fails (1-minimal when the
    budget lasts: removing any single op makes it pass)."""
    ops, n = list(seq.ops), 2
    while len(ops) >= 2:
        chunks = _chunks(ops, n)
        kept = next((c for c in chunks if test(seq.with_ops(c))), None)
        if kept is not None:
            n = 2
        else:
            for i in range(len(chunks)):
                rest = [o for j, c in enumerate(chunks) if j != i for o in c]
                if test(seq.with_ops(rest)):
                    kept, n = rest, max(n - 1, 2)
                    break
        if kept is not None:
            steps.append(f"ddmin: {len(ops)} -> {len(kept)} ops")
            ops = kept
            continue
        if n >= len(ops):
            break
        n = min(2 * n, len(ops))
    return seq.with_ops(ops)


def simpler(op: Op) -> list[Op]:
    """Simpler versions of ``op``, the boldest first; only fields it uses change."""
    used = set(op.used_fields())
    out: list[Op] = []
    if "off" in used and op.off % PAGE:
        out.append(replace(op, off=op.off - op.off % PAGE))
    if "len" in used and op.len > PAGE and op.len % PAGE:
        out.append(replace(op, len=op.len - op.len % PAGE))
    if "len" in used and op.len > 1 and not (op.op == "actors" and op.len < 2 * PAGE):
        half = op.len // 2
        if op.len % PAGE == 0 and op.len >= 2 * PAGE:
            half -= half % PAGE
        # the least first (a page, where the length is whole pages; an actor's
        # least), then half: a length the failure does not need is cut in one try,
        # not halved to the end (30582e2f4c: 15 replays took a vmsplice from 32K to 1)
        least = PAGE if half >= PAGE and op.len % PAGE == 0 else \
            2 * PAGE if op.op == "actors" else 1
        out += [replace(op, len=n) for n in dict.fromkeys((least, half)) if n < op.len]
    if "buf" in used and (op.buf_off or op.buf == "anon_offset"):
        out.append(replace(op, buf="anon" if op.buf == "anon_offset" else op.buf, buf_off=0))
    if "buf" in used and op.buf not in ("anon", "anon_offset"):
        out.append(replace(op, buf="anon"))
    if op.op == "actors":               # fewer actors, fewer requests each (at least 2 x 1)
        out += [replace(op, segs=2)] if op.segs > 2 else []
        out += [replace(op, size=max(1, op.size // 2))] if op.size > 1 else []
    elif "segs" in used and op.segs > 1:
        out.append(replace(op, segs=1))
    if "iface" in used and op.iface != "sync":
        out.append(replace(op, iface="sync"))
    if "iface" in used and op.iface == "io_uring_fixed":      # io_uring, nothing registered
        out.append(replace(op, iface="io_uring"))
    if "src_off" in used and op.src_off % PAGE:
        out.append(replace(op, src_off=op.src_off - op.src_off % PAGE))
    return [c for c in out if c != op]


def simplify_ops(seq: Sequence, test: Callable[[Sequence], bool], steps: list[str]) -> Sequence:
    """Each op in turn, made simpler while the sequence still fails."""
    for i in range(len(seq.ops)):
        first, progress = seq.ops[i], True
        while progress:
            progress = False
            for cand in simpler(seq.ops[i]):
                trial = seq.with_ops(seq.ops[:i] + (cand,) + seq.ops[i + 1:])
                if test(trial):
                    seq, progress = trial, True
                    break
        if seq.ops[i] != first:
            steps.append(f"op {i}: {first.render()} -> {seq.ops[i].render()}")
    return seq


def simplify_init(seq: Sequence, test: Callable[[Sequence], bool], steps: list[str]) -> Sequence:
    """A smaller initial file: none at all, else halves (whole pages)."""
    first = seq.init_size
    while seq.init_size and seq.target == "file":
        half = seq.init_size // 2
        half = half - half % PAGE if half >= PAGE else half
        cand = next((c for c in (replace(seq, init_size=0), replace(seq, init_size=half))
                     if c.init_size < seq.init_size and test(c)), None)
        if cand is None:
            break
        seq = cand
    if seq.init_size != first:
        steps.append(f"initial size {first} -> {seq.init_size}")
    return seq


TAILS = (0, 1, 3, 7, 15)        # ops kept before the failing (last) one, tried in turn


def tail(seq: Sequence, test: Callable[[Sequence], bool], steps: list[str]) -> Sequence:
    """The failing (last) op with the fewest of the ops just before it that still
    fails, tried before ddmin: a kernel trip is most often the op in flight and one or
    two before it (a held write and the truncate it needed), and each candidate that
    passes is short, while ddmin's halves each run twenty ops and reboot on a trip."""
    for k in TAILS:
        if k + 1 >= len(seq.ops):
            break
        cand = seq.with_ops(seq.ops[-(k + 1):])
        if test(cand):
            steps.append(f"tail: {len(seq.ops)} -> {len(cand.ops)} ops")
            return cand
    return seq


def shrink(seq: Sequence, still_fails: Callable[[Sequence], bool],
           max_tries: int = DEFAULT_TRIES, failed_at: int | None = None,
           should_stop: Callable[[], bool] | None = None) -> ShrinkResult:
    """The smallest sequence found that still fails. ``failed_at``: the op that
    failed (the ops after it are cut first, with one try, then the ops long before
    it: :func:`tail`); -1: the run failed before its first op (the target's setup),
    so no op at all is tried first."""
    test = _Tester(still_fails, max_tries, should_stop)
    steps: list[str] = []
    if failed_at is not None and failed_at + 1 < len(seq.ops):
        cut = seq.with_ops(seq.ops[:failed_at + 1])
        if test(cut):
            steps.append(f"cut after the failing op {failed_at}: {len(seq.ops)} -> "
                         f"{len(cut.ops)} ops" if failed_at >= 0 else
                         f"the setup alone fails: {len(seq.ops)} -> 0 ops")
            seq = cut
    if failed_at is not None and failed_at > 0 and len(seq.ops) == failed_at + 1:
        seq = tail(seq, test, steps)
    while not test.exhausted:
        before = seq.key()
        seq = simplify_init(simplify_ops(ddmin(seq, test, steps), test, steps), test, steps)
        if seq.key() == before:
            break
    return ShrinkResult(seq, test.tries, steps, test.exhausted)
