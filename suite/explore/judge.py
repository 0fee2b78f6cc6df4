"""What a run of ``explore-run`` came to, from its JSON lines: every op came back
and was right (``ok``), op N failed with a kind and a reason (``failed``), or
the run proved nothing (``no-result``: the engine died, never said it was
done, or did not run every op); and the text a person reads about it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from suite.explore.crashes.trip import Trip
from suite.explore.ops import ZFS_OPS, Sequence

STATES = ("ok", "failed", "no-result")


@dataclass
class Verdict:
    state: str                          # ok | failed | no-result
    failed_at: int | None = None        # the op that failed (no-result: the one in flight)
    kind: str | None = None             # wrong-bytes, short, error:EIO, ..., no-result
    why: str = ""
    first_wrong_byte: int | None = None
    ops_run: int = 0
    einval: list[int] = field(default_factory=list)      # misaligned O_DIRECT refused
    unsupported: list[str] = field(default_factory=list)  # "op 3 punch_hole: ..."
    refused: list[int] = field(default_factory=list)     # declined as allowed: racing EIO
    leaves: list[str] = field(default_factory=list)      # ereports its ops said they may leave
    trip: Trip | None = None            # the kernel, a hang or a lost guest ended the run

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["trip"] = self.trip.to_dict() if self.trip else None
        return d

    def line(self) -> str:
        if self.state == "ok":
            return f"ok ({self.ops_run} ops, {len(self.einval)} EINVAL allowed, " \
                   f"{len(self.unsupported)} unsupported)"
        at = f" at op {self.failed_at}" if self.failed_at is not None else ""
        return f"{self.state}{at}: {self.kind}: {self.why}"


def in_flight(lines: list[dict[str, Any]]) -> int | None:
    done = {ln.get("i") for ln in lines if ln.get("event") == "op"}
    begun = [ln.get("i") for ln in lines if ln.get("event") == "begin" and ln.get("i") not in done]
    return begun[-1] if begun else None


def trip_verdict(trip: Trip, lines: list[dict[str, Any]]) -> Verdict:
    """A run the kernel (or a hang, or a lost guest) cut short: failed at the op in
    flight, of the trip's kind, its headline the reason."""
    ops = [ln for ln in lines if ln.get("event") == "op"]
    return Verdict("failed", trip.op, trip.kind, trip.headline, ops_run=len(ops),
                   einval=[ln["i"] for ln in ops if ln.get("outcome") == "einval"],
                   refused=[ln["i"] for ln in ops if ln.get("outcome") == "refused"],
                   trip=trip)


def judge(lines: list[dict[str, Any]], n_ops: int, rc: int | None = None,
          stderr: str = "") -> Verdict:
    """The verdict of one run of a sequence of ``n_ops`` ops."""
    ops = [ln for ln in lines if ln.get("event") == "op"]
    done = next((ln for ln in reversed(lines) if ln.get("event") == "explore-done"), None)
    if done is None:
        errors = [ln for ln in lines if ln.get("event") == "error"]
        why = "; ".join(f"{e.get('stage')}: {e.get('error')}" for e in errors) or \
            f"the engine never said it was done (rc={rc}){': ' + stderr.strip()[-500:] if stderr.strip() else ''}"
        flying = in_flight(lines)
        if flying is not None:
            why += f" (op {flying} was in flight)"
        return Verdict("no-result", flying, "no-result", why, ops_run=len(ops))
    v = Verdict("failed" if not done.get("ok") else "ok", done.get("failed_at"), done.get("kind"),
                done.get("why") or "", done.get("first_wrong_byte"), len(ops),
                [ln["i"] for ln in ops if ln.get("outcome") == "einval"],
                [f"op {ln['i']} {ln['op']}: {ln.get('why')}" for ln in ops
                 if ln.get("outcome") == "unsupported"],
                [ln["i"] for ln in ops if ln.get("outcome") == "refused"],
                sorted({e for ln in ops for e in ln.get("leaves") or ()}))
    if v.state == "ok" and len(ops) != n_ops:
        return Verdict("no-result", None, "no-result", f"the engine reported {len(ops)} of "
                       f"{n_ops} ops and called it done", ops_run=len(ops))
    if v.state == "failed" and not v.kind:
        v.kind = "no-result"
    return v


def report_text(seq: Sequence, verdict: Verdict, *, original: Sequence | None = None,
                original_verdict: Verdict | None = None, confirmed: bool | None = None,
                tries: int | None = None, label: str = "",
                replay_file: str = "SEQUENCE.json", dead: str = "") -> str:
    """A finding for a person: what failed, then the (shrunk) sequence one op a
    line, the failing op marked, and how to replay it."""
    lines = [f"explore{' ' + label if label else ''}: sequence {seq.seed}: {verdict.line()}"]
    if verdict.first_wrong_byte is not None:
        lines.append(f"first wrong byte at file offset {verdict.first_wrong_byte}")
    if original is not None and len(original.ops) != len(seq.ops):
        how = f" in {tries} replays" if tries is not None else ""
        lines.append(f"shrunk from {len(original.ops)} to {len(seq.ops)} ops{how}")
        if original_verdict is not None and original_verdict.failed_at is not None:
            lines.append(f"(the original failed at op {original_verdict.failed_at}: "
                         f"{original.ops[original_verdict.failed_at].render()})")
    if confirmed is not None:
        lines.append("replayed once more: " + ("failed the same way" if confirmed
                                               else "did NOT fail again (flaky?)"))
    if dead:
        lines.append(f"not confirmed, the session ended: {dead}")
    if verdict.trip is not None:
        t = verdict.trip
        lines.append("in flight: " + (f"op {t.op} ({t.op_kind})" if t.op is not None
                                      else f"no op yet: the target's {t.op_kind or 'setup'}") +
                     f", {t.seconds:.0f}s into the run; the guest "
                     + ("was kept" if t.guest_fit else "was replaced by a fresh one"))
        shown = [ln for ln in t.lines if ln.strip()][:40]
        if shown:
            lines += ["the kernel's lines:" if t.kind.startswith("kernel:") else "stacks:",
                      *("  " + ln for ln in shown)]
        if t.also:
            lines += ["the kernel's other reports of that stop:",
                      *(f"  {o.label()}" for o in t.also)]
        if t.evidence:
            lines.append(f"evidence: {t.evidence}")
    lines += ["", seq.render(mark=verdict.failed_at), ""]
    if seq.target == "zvol":
        lines += ["replay in a guest with the build loaded (the zvol made as above, "
                  "the parameters set):",
                  f"  python -m suite.ioengine explore-run {replay_file} --file /dev/zdN "
                  "--blockdev --scratch /POOL/DATASET/x --zvol POOL/DATASET/VOL"]
    else:
        lines += ["replay in a guest with the build loaded (the dataset set as above):",
                  f"  python -m suite.ioengine explore-run {replay_file} --file "
                  "/POOL/DATASET/x.bin" + (" --zfs-dataset POOL/DATASET" if any(
                      o.op in ZFS_OPS for o in seq.ops) else "")]
    if verdict.einval or verdict.unsupported or verdict.refused:
        lines.append(f"allowed on the way: EINVAL at ops {verdict.einval}; refused (racing "
                     f"writes' EIO, holed buffers' EFAULT) at ops {verdict.refused}; unsupported: "
                     f"{verdict.unsupported or 'none'}")
    return "\n".join(lines) + "\n"
