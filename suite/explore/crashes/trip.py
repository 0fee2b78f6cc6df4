"""What tripped a run: the kernel's report (a failed VERIFY, a PANIC, an Oops,
a BUG), a hang the host noticed, or a guest that went away; which op was in
flight; and the signature that tells two trips apart.

The signature is the kernel's headline with its numbers taken out (``VERIFY3U(
offset, <, dn->dn_datablksz) failed (N < N)``, ``PANIC at dbuf.c:N:
dbuf_whichblock()``), so the same bug tripped by another sequence counts as a
repeat, not a new finding; a hang has no headline and is told apart by the op
it stopped in and the frame its task waits in.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

KINDS = ("kernel", "hang", "guest-lost")

_NUMBER = re.compile(r"\b(0x[0-9a-fA-F]+|\d+)\b")
_FRAME = re.compile(r"^\s*(?:\[[^\]]*\]\s*)*(?:\?\s*)?([A-Za-z_][\w.]*)\+0x[0-9a-f]+/0x[0-9a-f]+")
_STACK_FRAME = re.compile(r"^\s*\[<[0-9a-f]+>\]\s+([A-Za-z_][\w.]*)\+0x")
# Frames every stack passes through: not what tells a bug apart.
_PLUMBING = re.compile(r"^(dump_stack|show_stack|spl_|__schedule|schedule|io_schedule|"
                       r"do_syscall|entry_SYSCALL|__x64_sys|x64_sys_call|ret_from_fork|kthread|"
                       r"print_|panic|__warn|report_bug|handle_bug|exc_|asm_|cv_wait|"
                       r"__cv_wait|taskq_|worker_thread|process_one_work|do_exit|"
                       r"rwsem_down|down_|mutex_lock|__mutex_lock|rwsem|percpu_rwsem)")


def normalize(text: str) -> str:
    """``text`` with its numbers (values, addresses, line numbers) taken out."""
    return _NUMBER.sub("N", text.strip())


def frames(lines: Iterable[str], limit: int = 4) -> tuple[str, ...]:
    """The first ``limit`` functions of a kernel stack (a report's call trace
    ``func+0x../0x..``, or ``/proc/PID/stack``'s ``[<..>] func+0x..``), the
    plumbing every stack shares left out."""
    out: list[str] = []
    for ln in lines:
        m = _FRAME.match(ln) or _STACK_FRAME.match(ln)
        if m and not _PLUMBING.match(m.group(1)) and m.group(1) not in out:
            out.append(m.group(1))
            if len(out) >= limit:
                break
    return tuple(out)


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

    def signature(self) -> tuple[str, ...]:
        if self.kind == "hang":         # the stacks of a hang differ run to run
            return ("hang", self.op_kind or "?")
        if self.kind == "guest-lost":
            return ("guest-lost", self.op_kind or "?")
        return (self.kind, normalize(self.headline), *frames(self.lines, 2))

    def label(self) -> str:
        at = f" in op {self.op} ({self.op_kind})" if self.op is not None else \
            f" in the target's {self.op_kind}" if self.op_kind.startswith("setup") else \
            " before the first op"
        return f"{self.kind}{at}: {self.headline}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "headline": self.headline, "op": self.op,
                "op_kind": self.op_kind, "lines": list(self.lines),
                "guest_fit": self.guest_fit, "seconds": round(self.seconds, 1),
                "evidence": self.evidence, "signature": list(self.signature())}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trip":
        return cls(str(d.get("kind", "")), str(d.get("headline", "")), d.get("op"),
                   str(d.get("op_kind", "")), tuple(d.get("lines") or ()),
                   bool(d.get("guest_fit")), float(d.get("seconds") or 0.0),
                   str(d.get("evidence", "")))


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


def kernel_trip(finding: Any, op: tuple[int | None, str], seconds: float = 0.0) -> Trip:
    """The trip of a console finding (``suite.vm.console.Finding``): its kind,
    its line and the lines after it (the stack)."""
    head = finding.line.strip()
    # The console line carries a timestamp and a log prefix: the report starts after it.
    head = re.sub(r"^\[\s*\d+\.\d+\]\s*", "", head)
    return Trip(f"kernel:{finding.kind}", head[:300], op[0], op[1],
                (head, *finding.context), False, seconds)
