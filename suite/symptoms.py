"""Symptoms: why a case failed, as records a machine can match.

A case that fails says *how* it failed: EINVAL on the async row, wrong bytes at
the tail, served by the ARC where Direct I/O was due, tasks stuck in D state with
these functions on their stacks, the guest lost. The plugin writes them into the
case's ``verdict.json``; ``python -m suite bugs`` says a known bug was *caught*
only when a targeted case failed with the bug's own symptom, and *inconclusive*
when it failed for any other reason.

Kinds (strings, so manifests can name them):

- I/O outcomes: ``EINVAL``, ``EFAULT``, ``error:<ERRNO>``, ``short``,
  ``wrong-bytes``, ``overrun``, ``no-EINVAL`` (success where EINVAL was due),
  ``served-by-ARC`` / ``served-by-DIO`` (the other path than the one due),
  ``paths-disagree`` (``suite explore``: O_DIRECT, buffered and mmap reads of one
  file returned different bytes);
- writes: ``past-end`` (the file grew past what the call said it wrote),
  ``no-short`` (a write the limit should have cut came back whole),
  ``accepted`` (a write the file had to refuse, EPERM, came back as written),
  ``past-limit`` (a file grew past RLIMIT_FSIZE), ``no-EFBIG``, ``order``
  (appends landed out of submission order), ``size``, ``mixed`` (a range
  neither wholly old nor wholly new);
- barriers: ``early-barrier`` (fsync/syncfs returned before a write submitted
  before it completed), ``late-barrier`` (it kept waiting for later writes),
  ``lost-after-barrier`` (acknowledged bytes gone after a power cut),
  ``slow-fsync``; ``starved`` (an async read waited behind held writes);
  ``over-limit`` (more bytes in flight than the admission budget allows);
- proof missing (never a catch): ``no-result`` (the I/O was never issued or
  never completed), ``unproven`` (counters missing or frozen, a parameter not
  read back, a condition not shown to take its path);
- guest state: ``D-state`` (with the stack functions), ``kernel:<kind>``
  (``kernel:warning``, ``kernel:hung_task``, ``kernel:lockdep``,
  ``kernel:spl_panic``, ``kernel:slub`` (a SLUB red zone or poison report), ...),
  ``guest-lost``, ``hang`` (an operation that did not finish in its deadline),
  ``teardown`` (a step of letting the case's dataset or pool go returned an error,
  e.g. ``zpool export``: pool is busy),
  ``killed`` (a command in the guest died of a signal while the guest still answered:
  with ``kernel:user_trap`` on the console, user memory went bad under it);
- what the case left behind (``suite/judges``): ``taint:<letter>`` (a new kernel
  taint bit), ``kstat:wrap`` / ``kstat:limit`` (accounting that did not balance),
  ``pins:leak`` / ``pins:overrelease`` (user pages pinned and not unpinned, or unpinned twice),
  ``pool:<read|write|cksum|state|data-errors>`` and ``ereport:<class>`` (what the
  case did not declare), ``ondisk:scrub`` / ``ondisk:zdb`` / ``kstat:leak``
  (``--thorough``);
- harness: ``guest-error``, ``not-armed``, ``setup``, ``backstop``,
  ``assertion`` (a failed assert that recorded no symptom), ``harness`` (a step
  of the harness's own, named in the detail, failed or hung the guest; what the
  kernel printed from then on is its evidence, not a ``kernel:*`` finding).
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from suite.signatures import signed, title

# Kinds that never count as a catch: the case proved nothing about the kernel.
INFRASTRUCTURE = frozenset({"no-result", "unproven", "guest-lost", "guest-error",
                            "not-armed", "setup", "backstop", "assertion", "harness"})

# What a case's own reads and writes returned, judged by the engine once every
# request had completed: nothing is left in flight, no fault armed. A failure with
# only these leaves a guest as fit as a pass does once its dataset is released
# (suite/plugin/fixtures.py ``pool``); any other kind recycles the guest.
SETTLED = frozenset({"EINVAL", "EFAULT", "short", "wrong-bytes", "overrun", "no-EINVAL",
                     "served-by-ARC", "served-by-DIO", "paths-disagree", "past-end",
                     "no-short", "past-limit", "no-EFBIG", "order", "size", "mixed",
                     "accepted"})


def settled(kinds: Iterable[str]) -> bool:
    """True when a failure's symptoms are all data outcomes (:data:`SETTLED`,
    ``error:<ERRNO>``) and there is at least one."""
    kinds = list(kinds)
    return bool(kinds) and all(k in SETTLED or k.startswith("error:") for k in kinds)


@dataclass(frozen=True)
class Symptom:
    kind: str
    detail: str = ""
    row: str = ""                       # the condition (table row) it showed in
    # D-state: function names on the stuck stacks; kernel:*: the report's top OpenZFS frames
    stack: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = f" [{self.row}]" if self.row else ""
        return f"{self.kind}{where}: {self.detail}" if self.detail else f"{self.kind}{where}"

    def signed(self) -> str:
        """The symptom with the frames it stopped in (``kind: detail @ f1 < f2``):
        what a known finding's ``signature`` is matched against (suite/signatures.py)."""
        return signed(str(self), self.stack)

    def signature(self) -> str:
        """What tells this failure from another of its kind (the gate's "fails
        differently"): a kernel report's title and top frames, the frames a task in
        D state waits in; any other kind by its kind and row (its detail carries
        counts that differ run to run)."""
        if self.kind.startswith("kernel:"):     # a lockdep report's detail names its locks
            return signed(f"{self.kind}: {title(self.detail)}", self.stack[:3])
        if self.kind == "D-state":
            return signed(self.kind, self.stack[:3])
        return f"{self.kind} [{self.row}]" if self.row else self.kind

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stack"] = list(self.stack)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Symptom":
        return cls(d["kind"], d.get("detail", ""), d.get("row", ""), tuple(d.get("stack", ())))


_FUNC = re.compile(r"([A-Za-z_][\w.]*)\+0x[0-9a-f]+")


def stack_functions(frames: Iterable[str]) -> tuple[str, ...]:
    """``[<0>] zfsvfs_teardown+0x1a/0x2b0 [zfs]`` -> ``zfsvfs_teardown`` (in order)."""
    out = []
    for f in frames:
        m = _FUNC.search(f)
        if m:
            out.append(m[1])
    return tuple(out)


PASSED = ("passed", "xpassed")          # outcomes of a case that ran and passed


@dataclass
class CaseVerdict:
    """What one case came to: written as ``verdict.json`` in its folder. ``xfailed``:
    it failed by a known upstream finding's symptoms alone (the reason names it);
    ``xpassed``: a case a known finding names passed (suite/plugin/expected.py)."""
    nodeid: str
    outcome: str                        # passed | failed | error | skipped | xfailed | xpassed
    symptoms: list[Symptom] = field(default_factory=list)
    reason: str = ""                    # skip reason, or the first line of the failure

    def to_json(self) -> str:
        return json.dumps({"nodeid": self.nodeid, "outcome": self.outcome,
                           "reason": self.reason,
                           "symptoms": [s.to_dict() for s in self.symptoms]}, indent=1)

    @classmethod
    def load(cls, path: Path) -> "CaseVerdict":
        d = json.loads(path.read_text())
        return cls(d["nodeid"], d["outcome"], [Symptom.from_dict(s) for s in d["symptoms"]],
                   d.get("reason", ""))


@dataclass(frozen=True)
class SymptomSpec:
    """The symptom that counts for a known bug (``[[bugs]] symptom`` in a manifest).

    ``kinds``: any of these kinds counts. ``rows``: a regex the failing row
    (condition label) must match, e.g. ``async=1``: the same symptom on a control
    row is not this bug. ``stack``: for ``D-state``, functions that must all be on
    the stuck tasks' stacks. ``also``: kinds that may accompany the symptom (the
    consequences of a deadlock: a hang, the hung-task report). ``op``: for explore, a
    regex the failing op (as the failure's detail renders it) must match: an early
    barrier is fsync's bug only where an fsync returned early, not a syncfs.
    """
    kinds: tuple[str, ...]
    rows: str = ""
    stack: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    op: str = ""

    @classmethod
    def from_dict(cls, d: dict) -> "SymptomSpec":
        kinds = d.get("kinds") or ()
        if not kinds:
            raise ValueError("a bug's symptom needs kinds = [...]")
        return cls(tuple(kinds), d.get("rows", ""), tuple(d.get("stack", ())),
                   tuple(d.get("also", ())), d.get("op", ""))

    def matches(self, s: Symptom) -> bool:
        if s.kind not in self.kinds:
            return False
        if self.rows and not re.search(self.rows, s.row):
            return False
        if self.stack and not all(f in s.stack for f in self.stack):
            return False
        return True

    def describe(self) -> str:
        out = " or ".join(self.kinds)
        if self.rows:
            out += f" on rows matching /{self.rows}/"
        if self.stack:
            out += f" with {', '.join(self.stack)} on the stacks"
        if self.op:
            out += f" (explore: in an op matching /{self.op}/)"
        return out


def judge_case(spec: SymptomSpec, v: CaseVerdict) -> tuple[str, str]:
    """('caught'|'passed'|'skipped'|'inconclusive', why) for one targeted case."""
    if v.outcome in PASSED:
        return "passed", ""
    if v.outcome == "skipped":
        return "skipped", v.reason
    hits = [s for s in v.symptoms if spec.matches(s)]
    others = [s for s in v.symptoms if not spec.matches(s) and s.kind not in spec.also]
    if hits and not others:
        return "caught", str(hits[0])
    if not v.symptoms:
        return "inconclusive", f"{v.outcome} with no recorded symptom: {v.reason}"
    if hits:
        return "inconclusive", f"{hits[0]} but also {others[0]}"
    if not others:
        return "inconclusive", f"only {v.symptoms[0]}: the bug's own symptom did not show"
    return "inconclusive", f"{v.outcome} for another reason: {others[0]}"
