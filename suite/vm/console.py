"""The guest's console: what counts as kernel trouble, and reading console.log.

- ``scan(text)`` finds panics, Oopses, BUG:, WARNING:, lockdep, KASAN, hung
  tasks, RCU stalls and user processes killed by a trap (GPF, segfault) in kernel log text, minus the allow-list in
  ``vmimages/kernel-log-allow.toml`` (every entry with its reason).
- ``ConsoleWatcher(path)`` scans ``console.log`` incrementally from an offset,
  so a case sees only the lines printed while it ran.
- ``tail``/``size``/``since``: the console log as a file.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Pattern

# --------------------------------------------------------------------------- patterns


@dataclass(frozen=True)
class Rule:
    kind: str
    severity: str  # 'fatal' (kernel dead), 'error', 'warning'
    regex: Pattern[str]


def _rule(kind: str, severity: str, pattern: str) -> Rule:
    return Rule(kind, severity, re.compile(pattern))


# First match wins, so specific kinds come before the generic BUG:/WARNING:.
RULES: tuple[Rule, ...] = (
    _rule("kasan", "error", r"\bBUG: KASAN:|\bKASAN: "),
    _rule("kfence", "error", r"\bBUG: KFENCE: "),
    _rule("ubsan", "error", r"\bUBSAN: "),
    # DEBUG_ATOMIC_SLEEP (the debug profile): a sleep under a spinlock or with
    # preemption off, which on a stock kernel shows only as a rare deadlock.
    _rule("atomic_sleep", "error", r"BUG: sleeping function called from invalid context"
                                   r"|BUG: scheduling while atomic|BUG: workqueue leaked lock"),
    _rule("lockdep", "error", r"possible circular locking dependency|possible recursive locking"
                              r"|inconsistent lock state|possible irq lock inversion"
                              r"|suspicious RCU usage|bad unlock balance detected|held lock freed"),
    _rule("hung_task", "error", r"blocked for more than \d+ seconds|\bhung_task\b"),
    _rule("rcu_stall", "error", r"self-detected stall|\brcu: INFO\b|\bRCU stall|rcu_\w+ detected stalls?"),
    _rule("lockup", "error", r"soft lockup - CPU#|hard LOCKUP"),
    _rule("panic", "fatal", r"Kernel panic - not syncing"),
    _rule("spl_panic", "error", r"\bPANIC at \S+:\d+:|\bVERIFY3?\w*\(.*\) failed"),
    _rule("slub", "error", r"\bBUG [\w.:-]+ \(.*\): |Redzone overwritten|Poison overwritten"
                           r"|Object padding overwritten|Freepointer corrupt"),
    # A user process killed by a trap: its memory was corrupted, e.g. by a Direct I/O
    # read landing in pages it no longer owned. The kernel itself is alive.
    _rule("user_trap", "error", r"\btraps: \S+\[\d+\] |\S+\[\d+\]: segfault at "),
    _rule("oops", "error", r"\bOops\b|general protection fault|BUG: unable to handle|Unable to handle kernel"),
    _rule("bug", "error", r"\bBUG: |kernel BUG at "),
    # The (emulated) disk stopped completing commands; then ZFS suspends the pool and
    # every later I/O of it waits for ever. Named for what they are, not as warnings.
    _rule("device_timeout", "error", r"\bnvme\d+: I/O \d+ (?:\([^)]*\) )?QID \d+ timeout"),
    _rule("pool_suspended", "error", r"Pool '[^']+' has encountered an uncorrectable I/O failure "
                                     r"and has been suspended"),
    _rule("warning", "warning", r"\bWARNING: "),
)

# Kinds that mean the guest kernel is gone.
PANIC_KINDS = frozenset({"panic"})
# KASAN reports while a guest boots, before any module, past which the boot is given up
# and another guest booted: under kasan_multi_shot the early-boot wild-memory-access
# some TCG boots of the debug profile meet (in do_raw_spin_lock from handle_edge_irq,
# 1 boot in 6) repeats for ever; one such boot wrote 6.6 million console lines (378 MB)
# in 10 min and never reached its script.
BOOT_STORM_REPORTS = 20


@dataclass(frozen=True)
class BootTrouble:
    what: str
    retry: bool         # the kernel's own fault, before OpenZFS: boot another guest

    @property
    def fix(self) -> str:
        return ("the kernel's, not the build's: see the console tail" if self.retry
                else "read the console tail below")


def boot_trouble(new: list["Finding"], seen: list["Finding"]) -> BootTrouble | None:
    """What says a booting guest will not come up: a panic among the ``new``
    findings, or a storm of KASAN reports among all ``seen`` so far."""
    fatal = [f for f in new if f.kind in PANIC_KINDS]
    if fatal:
        return BootTrouble(f"guest kernel crashed while booting: {fatal[0].line}", False)
    kasan = [f for f in seen if f.kind == "kasan"]
    if len(kasan) >= BOOT_STORM_REPORTS:
        return BootTrouble(f"guest kernel reported {len(kasan)} KASAN errors while booting, "
                           f"before any module, and goes on (the first: {kasan[0].line.strip()})",
                           True)
    return None

def load_allow(path: Path | None = None) -> tuple[str, ...]:
    """The allow-list (``vmimages/kernel-log-allow.toml``): every entry has a reason."""
    import tomllib

    from suite.errors import SuiteError
    from suite.paths import vmimages_dir
    path = path or vmimages_dir() / "kernel-log-allow.toml"
    try:
        entries = tomllib.loads(path.read_text()).get("allow", [])
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SuiteError(f"cannot read the kernel log allow-list {path}: {e}",
                         fix="fix its TOML syntax") from e
    for e in entries:
        if not e.get("pattern") or not str(e.get("reason", "")).strip():
            raise SuiteError(f"{path}: every [[allow]] entry needs a pattern and a reason",
                             fix=f"give a reason for {e.get('pattern')!r}")
        re.compile(e["pattern"])
    return tuple(e["pattern"] for e in entries)


# Lines that match a rule but are not trouble.
DEFAULT_ALLOW: tuple[str, ...] = load_allow()


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str
    line: str
    lineno: int  # 1-based, in the scanned text (or console.log for a watcher)
    context: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.kind}: {self.line.strip()}"


def compile_allow(allow: Iterable[str | Pattern[str]]) -> list[Pattern[str]]:
    return [a if isinstance(a, re.Pattern) else re.compile(a) for a in allow]


def match_line(line: str, allow: list[Pattern[str]], rules: Iterable[Rule] = RULES) -> Rule | None:
    """The rule ``line`` trips, or None (also None if the allow-list covers it)."""
    for rule in rules:
        if rule.regex.search(line):
            if any(a.search(line) for a in allow):
                return None
            return rule
    return None


# Lines kept after a finding's line: a lockdep report names its locks there, and a
# report's call trace gives the OpenZFS frames of its signature (suite/signatures.py).
CONTEXT = 40


def scan(text: str, allow: Iterable[str | Pattern[str]] = DEFAULT_ALLOW,
         rules: Iterable[Rule] = RULES, context: int = CONTEXT, first_lineno: int = 1) -> list[Finding]:
    """Findings in kernel log ``text``, one per matching line, in order."""
    allow_re = compile_allow(allow)
    rules = tuple(rules)
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        rule = match_line(line, allow_re, rules)
        if rule:
            out.append(Finding(rule.kind, rule.severity, line.rstrip(), first_lineno + i,
                               tuple(ln.rstrip() for ln in lines[i + 1:i + 1 + context])))
    return out


def worst(findings: Iterable[Finding]) -> str | None:
    order = {"fatal": 0, "error": 1, "warning": 2}
    sev = sorted((f.severity for f in findings), key=lambda s: order.get(s, 9))
    return sev[0] if sev else None


class ConsoleWatcher:
    """Incremental scan of a growing console.log, starting at ``offset``.

    ``offset=None`` starts at the current end of the file, so a watcher created
    when a case starts only sees that case's lines. Only complete lines are
    scanned; a partial last line waits for the next ``poll``.
    """

    def __init__(self, path: Path, offset: int | None = None,
                 allow: Iterable[str | Pattern[str]] = DEFAULT_ALLOW) -> None:
        self.path = Path(path)
        self.start = self._size() if offset is None else offset
        self.pos = self.start
        self.lineno = 1  # line number (relative to start) of the next unread line
        self.allow = compile_allow(allow)
        self.findings: list[Finding] = []
        self._cut: list[int] = []   # findings whose context the end of a poll cut short

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def _read_new(self) -> str:
        size = self._size()
        if size < self.pos:  # truncated/replaced: start over
            self.start = self.pos = 0
            self.lineno = 1
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read(size - self.pos)
        except FileNotFoundError:
            return ""
        cut = data.rfind(b"\n")
        if cut < 0:
            return ""
        data = data[:cut + 1]
        self.pos += len(data)
        return data.decode(errors="replace")

    def poll(self) -> list[Finding]:
        """New findings since the last poll (also appended to ``self.findings``)."""
        text = self._read_new()
        if not text:
            return []
        self._complete(text.splitlines())
        new = scan(text, self.allow, first_lineno=self.lineno)
        self.lineno += text.count("\n")
        self._cut += [len(self.findings) + i for i, f in enumerate(new)
                      if len(f.context) < CONTEXT]
        self.findings.extend(new)
        return new

    def _complete(self, lines: list[str]) -> None:
        """Give the findings a poll cut short the lines that followed them: a
        report's first line may arrive in one poll and the locks it names in the next."""
        still = []
        for i in self._cut:
            f = self.findings[i]
            more = tuple(ln.rstrip() for ln in lines[:CONTEXT - len(f.context)])
            self.findings[i] = replace(f, context=f.context + more)
            if len(self.findings[i].context) < CONTEXT:
                still.append(i)
        self._cut = still

    def text(self, max_bytes: int = 4 << 20) -> str:
        """Everything written since ``start`` (at most the last ``max_bytes``)."""
        size = self._size()
        begin = max(self.start, size - max_bytes)
        try:
            with open(self.path, "rb") as f:
                f.seek(begin)
                return f.read(size - begin).decode(errors="replace")
        except FileNotFoundError:
            return ""




def tail(path: Path, n: int, max_bytes: int = 1 << 20) -> str:
    """The last ``n`` lines of a (growing) log file."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            f.seek(max(0, end - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-n:])


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def since(path: Path, offset: int) -> str:
    """Everything written after byte ``offset``."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
