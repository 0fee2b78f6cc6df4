"""What tripped a run: the kernel's report (a failed VERIFY, a PANIC, an Oops,
a BUG), a hang the host noticed, or a guest that went away; which op was in
flight; and the signature that tells two trips apart.

The signature is the kernel's headline with its numbers taken out (``VERIFY3U(
offset, <, dn->dn_datablksz) failed (N < N)``, ``PANIC at dbuf.c:N:
dbuf_whichblock()``), so the same bug tripped by another sequence counts as a
repeat, not a new finding; a hang has no headline and is told apart by the op
it stopped in and the OpenZFS frames its tasks wait in (``suite/signatures.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable

# One definition of a kernel report's title and frames for the whole suite.
from suite.signatures import frames, normalize, report_frames, signed, untimed

__all__ = ["InFlight", "KINDS", "Trip", "frames", "kernel_trip", "normalize", "one_report",
           "signed_as"]

KINDS = ("kernel", "hang", "guest-lost")
DSTATE_MARK = "state=D"     # a task's header in the stacks the guest's DSTATE_SCRIPT prints


@dataclass(frozen=True)
class Trip:
    """A run the kernel (or the guest) cut short.

    ``kind``: ``kernel:<console kind>`` (``kernel:spl_panic``, ``kernel:oops``, ...),
    ``hang`` (no progress: the host gave the op up) or ``guest-lost`` (the guest
    went away with no report on its console). ``headline``: the kernel's line
    (a hang: the op and how long it made no progress). ``lines``: the report
    with its stack, or a hang's stacks. ``op``/``op_kind``: the op in flight.
    ``guest_fit``: the guest can run the next sequence (a hang whose task could be
    killed, leaving nothing in D state); else a fresh guest is needed."""
    kind: str
    headline: str
    op: int | None = None
    op_kind: str = ""
    lines: tuple[str, ...] = ()
    guest_fit: bool = False
    seconds: float = 0.0                # how long the run had gone when it tripped
    evidence: str = ""                  # the folder its stacks and console went to
    # The kernel's other reports of the same stop, in the console's order: a known
    # lockdep report printed 0.23 s before a KASAN use-after-free must not hide it
    # (async-dio 30582e2f4c on debian-6.1-debug, 2026-12-07). Not in the signature.
    also: tuple["Trip", ...] = ()

    def signature(self) -> tuple[str, ...]:
        """A kernel report: its title and top OpenZFS frames; a hang: the OpenZFS
        frames its tasks wait in (sorted: which task's stack is read first differs run
        to run), or the op it stopped in where no task waits in OpenZFS (msync and
        fsync stuck in zfs_fsync are one hang, met by two ops); a lost guest: the op."""
        if self.kind == "hang":
            return ("hang", *(self.waits() or (self.op_kind or "?",)))
        if self.kind == "kernel:hung_task" and self.blocked():
            return (self.kind, *self.waits())   # every blocked task, not the one named
        if self.kind == "guest-lost":
            return ("guest-lost", self.op_kind or "?")
        return (self.kind, normalize(self.headline), *report_frames(self.lines[1:], 2))

    def frames(self) -> tuple[str, ...]:
        """A kernel report's top OpenZFS frames, as a case's kernel symptom carries them."""
        return report_frames(self.lines[1:], 3)

    def blocked(self) -> bool:
        """The trip kept the stacks of the tasks in D state (a hang's, a hung-task
        report's)."""
        return any(ln.startswith("--- pid ") and DSTATE_MARK in ln for ln in self.lines)

    def waits(self) -> tuple[str, ...]:
        """A hang's OpenZFS frames: the top two of each task's stack, sorted."""
        out: set[str] = set()
        task: list[str] = []
        for ln in (*self.lines, "--- end"):
            if ln.startswith("---"):
                out.update(frames(task, 2, openzfs=True))
                task = []
            else:
                task.append(ln)
        return tuple(sorted(out))

    def text(self) -> str:
        """What a finding's ``signature`` is matched against: the kind, the
        headline, the frames (a kernel report's top OpenZFS frames, a hang's
        waits) and the report's lines, on one line (a lockdep signature names two
        locks its report prints lines apart)."""
        stack = self.waits() if self.kind == "hang" else report_frames(self.lines[1:], 3)
        return signed(f"{self.kind}: {self.headline}", stack) + " | " + " | ".join(self.lines)

    def label(self) -> str:
        at = f" in op {self.op} ({self.op_kind})" if self.op is not None else \
            f" in the target's {self.op_kind}" if self.op_kind.startswith("setup") else \
            " before the first op"
        return f"{self.kind}{at}: {self.headline}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "headline": self.headline, "op": self.op,
                "op_kind": self.op_kind, "lines": list(self.lines),
                "guest_fit": self.guest_fit, "seconds": round(self.seconds, 1),
                "evidence": self.evidence, "signature": list(self.signature()),
                **({"also": [t.to_dict() for t in self.also]} if self.also else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trip":
        return cls(str(d.get("kind", "")), str(d.get("headline", "")), d.get("op"),
                   str(d.get("op_kind", "")), tuple(d.get("lines") or ()),
                   bool(d.get("guest_fit")), float(d.get("seconds") or 0.0),
                   str(d.get("evidence", "")),
                   tuple(cls.from_dict(t) for t in d.get("also") or ()))

    def reports(self) -> tuple["Trip", ...]:
        """Every report of the stop: this one, then the others (:attr:`also`)."""
        return (replace(self, also=()), *self.also)

    def named_by(self, i: int) -> "Trip":
        """The stop named by its ``i``-th report (:meth:`reports`), the others carried."""
        reports = self.reports()
        return replace(reports[i], also=(*reports[:i], *reports[i + 1:]))


@dataclass
class InFlight:
    """Which op the engine announced last and has not finished, from its lines."""
    begun: dict[int, str] = field(default_factory=dict)     # op index -> op kind
    done: set[int] = field(default_factory=set)
    setup: str = ""                     # what the engine said its setup does, once begun

    @classmethod
    def of(cls, lines: Iterable[dict[str, Any]]) -> "InFlight":
        f = cls()
        for ln in lines:
            if ln.get("event") == "begin" and isinstance(ln.get("i"), int):
                f.begun[ln["i"]] = str(ln.get("op", ""))
            elif ln.get("event") == "op" and isinstance(ln.get("i"), int):
                f.done.add(ln["i"])
            elif ln.get("event") == "setup":
                f.setup = str(ln.get("what", ""))
        return f

    def op(self) -> tuple[int | None, str]:
        """(index, kind) of the op in flight; before any op, (None, "setup: <what>")
        once the engine said it began its setup, else (None, "")."""
        open_ = [i for i in self.begun if i not in self.done]
        if not open_:
            return None, (f"setup: {self.setup}" if self.setup and not self.begun else "")
        i = max(open_)
        return i, self.begun[i]


def one_report(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Two signatures name one failure: equal; or two kernel reports of one kind and
    title where one was signed by its title alone (its console cut before the call
    trace came), so a repeat is not taken for a new finding and shrunk again. A
    hung-task report is signed by its blocked tasks' frames, never by its title."""
    if a == b:
        return True
    return (min(len(a), len(b)) == 2 and a[:2] == b[:2] and a[0].startswith("kernel:")
            and a[0] != "kernel:hung_task")


def signed_as(sig: tuple[str, ...], seen: Iterable[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The signature among ``seen`` that names the failure ``sig`` names (:func:`one_report`)."""
    if sig in seen:
        return sig
    return next((s for s in seen if one_report(sig, s)), None)


def kernel_trip(finding: Any, op: tuple[int | None, str], seconds: float = 0.0,
                stacks: str = "") -> Trip:
    """The trip of a console finding (``suite.vm.console.Finding``): its kind,
    its line and the lines after it (the stack); ``stacks``: the stacks of every task
    in D state when it came (a hung-task report), kept instead of the report's."""
    head = finding.line.strip()
    # The console line carries a timestamp and a log prefix: the report starts after it.
    head = untimed(head)
    after = tuple(stacks.splitlines()) if DSTATE_MARK in stacks else finding.context
    return Trip(f"kernel:{finding.kind}", head[:300], op[0], op[1],
                (head, *after), False, seconds)
