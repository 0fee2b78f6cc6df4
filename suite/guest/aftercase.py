"""Judge the guest after every case, pass or fail.

A case that passed but left the guest wedged (a task stuck in D state, a kernel
WARNING or lockdep splat, a hung-task report) has not passed: the bug may leave
the bytes right. After each case the plugin observes the guest:

- is it alive (qemu running, SSH answering)?
- tasks in D state, sampled more than once (a stuck task, not an I/O blip),
  with their kernel stacks;
- kernel lines since the case began (``console.ConsoleWatcher``), minus the
  allow-list in ``vmimages/kernel-log-allow.toml``;
- did the case's own dataset teardown hang?

``Observation.verdict()`` turns that into a reason (empty: the guest is fit)
and the symptoms that go into the case's ``verdict.json``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from suite.guest.evidence import DSTATE_SCRIPT, DTask, parse_dstate, stuck_summary
from suite.judges import lockdep
from suite.judges.judge import Finding as Leftover
from suite.signatures import report_frames
from suite.symptoms import Symptom
from suite.vm.console import Finding

if TYPE_CHECKING:
    from suite.vm.ssh import Guest


@dataclass
class Observation:
    alive: bool
    stuck: list[DTask] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    teardown_problem: str = ""
    harness: str = ""                   # a harness step failed or hung the guest
    harness_findings: list[Finding] = field(default_factory=list)
    leftovers: list[Leftover] = field(default_factory=list)   # suite/judges findings

    def verdict(self) -> tuple[str, list[Symptom]]:
        """(reason the guest is unfit, or ''; symptoms for the case's verdict)."""
        reasons: list[str] = []
        symptoms: list[Symptom] = []
        if self.harness:
            # The harness's, not the case's: what the kernel printed since the step
            # began is its evidence, never a kernel:* finding about the build.
            said = "; ".join(f"{f.kind}: {f.line.strip()[:160]}"
                             for f in self.harness_findings[:3])
            reasons.append(self.harness)
            symptoms.append(Symptom("harness", self.harness + (f" (the kernel then "
                                                               f"reported {said})" if said else "")))
        if not self.alive:
            reasons.append("guest stopped answering")
            symptoms.append(Symptom("guest-lost", "the guest stopped answering after the case"))
        if self.stuck:
            names, funcs = stuck_summary(self.stuck)
            reasons.append(f"tasks stuck in D state: {names}")
            symptoms.append(Symptom("D-state", names, stack=funcs))
        seen: set[str] = set()
        for f in self.findings:
            if f.kind in seen:
                continue
            seen.add(f.kind)
            symptoms.append(Symptom(f"kernel:{f.kind}", kernel_detail(f)[:300],
                                    stack=report_frames(f.context)))
        if self.findings:
            reasons.append(f"kernel reported: {self.findings[0].line.strip()}")
        for f in self.leftovers:
            symptoms.append(Symptom(f.kind, f.detail[:300]))
        if self.leftovers:
            reasons.append(f"it left behind {self.leftovers[0].kind}: {self.leftovers[0].detail}"
                           + (f" (+{len(self.leftovers) - 1} more)" if len(self.leftovers) > 1
                              else ""))
        if self.teardown_problem:
            reasons.append(self.teardown_problem)
            # A step that ran out of time hung; one that returned an error (zpool
            # export: "pool is busy") failed: a finding too, named for what it was.
            # One the kernel's report cut short proved nothing more than that report.
            kind = ("no-result" if "cut short" in self.teardown_problem else
                    "hang" if "hung" in self.teardown_problem else "teardown")
            symptoms.append(Symptom(kind, self.teardown_problem))
        return "; ".join(reasons), symptoms


def kernel_detail(f: Finding) -> str:
    """A console finding as a symptom's detail: its line, and for a lockdep report
    the locks, functions and task the lines after it name (two reports of one class
    are told apart, and an upstream finding's ``signature`` can match its own)."""
    said = lockdep.describe(f.context) if f.kind == "lockdep" else ""
    return f.line.strip() + (f": {said}" if said else "")


# Kernel findings after which the guest still answers as before: a rule the kernel
# saw broken with nothing broken yet (lockdep, a sleep in atomic context). The
# after-case judges still run after them (kmemleak, pinned pages, accounting): on
# the debug profile every zvol case draws a known lockdep report, and skipping the
# judges there would leave every zvol case unjudged for leaks.
JUDGEABLE_KINDS = frozenset({"lockdep", "atomic_sleep"})


def judgeable(alive: bool, stuck: list, found: list[Finding], harness: str) -> bool:
    """Whether the after-case judges may still ask this guest: it answers, no task
    is stuck, the harness's steps finished, and the kernel reported nothing worse
    than :data:`JUDGEABLE_KINDS`."""
    return (alive and not stuck and not harness
            and all(f.kind in JUDGEABLE_KINDS for f in found))


def dstate_sample(guest: "Guest", timeout: float) -> list[DTask]:
    return parse_dstate(guest.run(DSTATE_SCRIPT, timeout=timeout, check=False, log=False).stdout)


def stuck_tasks(guest: "Guest", scale: float, samples: int = 3) -> list[DTask]:
    """Tasks in D state in every one of ``samples`` samples, a few seconds apart.

    Raises GuestError if the guest stops answering while sampled.
    """
    timeout = 15 * scale
    current = {t.pid: t for t in dstate_sample(guest, timeout)}
    for i in range(1, samples):
        if not current:
            return []
        time.sleep(min(10.0, 2 * scale) * i)
        again = {t.pid: t for t in dstate_sample(guest, timeout)}
        current = {pid: again[pid] for pid in current if pid in again}
    return sorted(current.values(), key=lambda t: t.pid)
