"""Evidence from a guest in trouble, gathered before the VM is killed.

- ``DSTATE_SCRIPT`` + ``parse_dstate``: every task in D state with its kernel
  stack (the one D-state detector: ``aftercase`` samples with it too);
- ``parse_sysrq_blocked``: the same from sysrq-w / hung-task reports on the
  console, for when SSH is dead;
- ``collect_evidence(guest, vm, outdir, reason)`` gathers, each step under a
  short deadline: D-state tasks with their stacks, sysrq-w, dmesg, the console
  tail (which also receives sysrq output when SSH is dead; then Alt-SysRq-w and -l are
  pressed through the qemu monitor), the console findings and qemu's state.
  It writes files into ``outdir`` (``summary.txt`` last) and returns an
  ``Evidence`` whose ``summary()`` fits in a pytest failure report.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from suite.errors import SuiteError
from suite.vm.console import ConsoleWatcher, Finding, scan

if TYPE_CHECKING:
    from suite.vm.ssh import Guest
    from suite.vm.machine import VM


# --------------------------------------------------------------------------- D-state tasks


@dataclass(frozen=True)
class DTask:
    pid: int
    comm: str
    state: str = "D"
    wchan: str = ""
    stack: tuple[str, ...] = ()

    def format(self, max_frames: int | None = None) -> str:
        frames = self.stack if max_frames is None else self.stack[:max_frames]
        head = f"--- pid {self.pid} ({self.comm}) state={self.state}"
        head += f" wchan={self.wchan} ---" if self.wchan else " ---"
        more = [f"    ... {len(self.stack) - len(frames)} more frames"] if len(frames) < len(self.stack) else []
        return "\n".join([head, *frames, *more])


# Lists every thread in D state: header line, then /proc/<pid>/task/<tid>/stack.
# Reads only stat/comm/wchan/stack: /proc/<pid>/cmdline (ps) can block on the
# mmap lock of exactly the tasks we are after.
DSTATE_SCRIPT = r"""
for s in /proc/[0-9]*/task/[0-9]*/stat; do
  read -r st < "$s" 2>/dev/null || continue
  rest=${st##*) }; state=${rest%% *}
  [ "$state" = D ] || continue
  t=${s%/stat}; tid=${t##*/}
  comm=$(cat "$t/comm" 2>/dev/null); wchan=$(cat "$t/wchan" 2>/dev/null)
  [ -n "$wchan" ] && [ "$wchan" != 0 ] || wchan=?
  echo "--- pid $tid ($comm) state=D wchan=$wchan ---"
  cat "$t/stack" 2>/dev/null
done
true
"""

# "state=D wchan=..." (our sampler) or "state=D (disk sleep) wchan=..." (explore's
# watchdog, from /proc/<pid>/status)
_HEADER = re.compile(r"^--- pid (\d+) \((.*)\) state=(\S+)(?: \([^)]*\))?(?: wchan=(\S+))? ---\s*$")
_FRAME = re.compile(r"^\s*\[<[0-9a-fx]+>\]\s+\S")


def parse_dstate(text: str) -> list[DTask]:
    """Tasks from ``--- pid N (comm) state=D ---`` blocks followed by ``[<0>] frame`` lines."""
    tasks: list[DTask] = []
    cur: dict | None = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            if cur:
                tasks.append(DTask(**cur))
            cur = {"pid": int(m[1]), "comm": m[2], "state": m[3], "wchan": m[4] or "", "stack": ()}
            continue
        if cur is not None and _FRAME.match(line):
            cur["stack"] = cur["stack"] + (line.strip(),)
        elif cur is not None:
            tasks.append(DTask(**cur))
            cur = None
    if cur:
        tasks.append(DTask(**cur))
    return tasks


def stuck_summary(tasks: list[DTask], most: int = 8) -> tuple[str, tuple[str, ...]]:
    """How a D-state symptom names stuck tasks: ``"pid (comm), ..."`` (the first
    ``most``, each once) and the functions on all their stacks, each once, in order."""
    from suite.symptoms import stack_functions
    funcs: list[str] = []
    for t in tasks:
        funcs += [f for f in stack_functions(t.stack) if f not in funcs]
    names = ", ".join(list(dict.fromkeys(f"{t.pid} ({t.comm})" for t in tasks))[:most])
    return names, tuple(funcs)


_TS = r"^(?:\[\s*\d+\.\d+\]\s?)?"
_SYSRQ_TASK = re.compile(_TS + r"task:(\S+)\s+state:(\S)\s.*?\bpid:\s*(\d+)")
_SYSRQ_FRAME = re.compile(_TS + r"\s*(\?\s+)?([A-Za-z_.][\w.]*\+0x[0-9a-f]+/0x[0-9a-f]+(?: \[\w+\])?)\s*$")
_SYSRQ_END = re.compile(_TS + r"\s*(</TASK>|task:)")


def parse_sysrq_blocked(text: str) -> list[DTask]:
    """Tasks from sysrq-w / hung-task reports on the console (``task:dd state:D ... pid:691``).

    Unreliable frames (``? foo+0x..``) are dropped. The last report of a pid wins.
    """
    found: dict[int, DTask] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _SYSRQ_TASK.search(lines[i])
        i += 1
        if not m:
            continue
        frames: list[str] = []
        while i < len(lines) and not _SYSRQ_END.search(lines[i]):
            f = _SYSRQ_FRAME.search(lines[i])
            if f and not f[1]:
                frames.append(f[2])
            i += 1
        found[int(m[3])] = DTask(int(m[3]), m[1], m[2], "", tuple(frames))
    return list(found.values())


# --------------------------------------------------------------------------- evidence


@dataclass
class Evidence:
    reason: str
    outdir: Path
    ssh_alive: bool
    dstate: list[DTask] = field(default_factory=list)
    dstate_source: str = ""  # 'ssh' (/proc/<pid>/stack) or 'console' (sysrq-w)
    findings: list[Finding] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def summary(self, max_tasks: int = 6, max_frames: int = 14, max_findings: int = 8) -> str:
        out = [f"evidence: {self.reason}",
               f"  guest ssh: {'alive' if self.ssh_alive else 'DEAD'}; files in {self.outdir}"]
        if self.findings:
            out.append(f"  console findings ({len(self.findings)}):")
            out += [f"    {f}" for f in self.findings[:max_findings]]
        if self.dstate:
            out.append(f"  tasks in D state ({len(self.dstate)}, from {self.dstate_source}):")
            for t in self.dstate[:max_tasks]:
                out += ["    " + ln for ln in t.format(max_frames).splitlines()]
            if len(self.dstate) > max_tasks:
                out.append(f"    ... {len(self.dstate) - max_tasks} more in dstate.txt")
        else:
            out.append("  no task in D state")
        if self.problems:
            out.append("  evidence gaps: " + "; ".join(self.problems))
        return "\n".join(out)


def _step_timeout(vm: "VM", seconds: float, cap: float) -> float:
    return min(vm.spec.accel.deadline(seconds), cap)


def _guest_step(ev: Evidence, guest: "Guest", name: str, cmd: str, timeout: float) -> str | None:
    """Run one evidence command; record a gap instead of raising."""
    try:
        r = guest.run(cmd, timeout=timeout, check=False)
    except SuiteError as exc:
        ev.problems.append(f"{name}: {exc.what}")
        return None
    path = ev.outdir / f"{name}.txt"
    path.write_text(r.stdout + (f"\n--- stderr ---\n{r.stderr}" if r.stderr.strip() else ""))
    ev.files[name] = path
    return r.stdout


def _wait_console_quiet(vm: "VM", quiet: float = 1.0, limit: float = 8.0) -> None:
    """Let sysrq output reach console.log: wait until it stops growing (bounded)."""
    end = time.monotonic() + limit
    size, since = vm.console_size(), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.25)
        now = vm.console_size()
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


EXTRA_COMMANDS: dict[str, str] = {
    "zfs-dbgmsg": "tail -n 400 /proc/spl/kstat/zfs/dbgmsg 2>/dev/null; true",
    "meminfo": "cat /proc/meminfo",
}


def collect_evidence(guest: "Guest | None", vm: "VM", outdir: Path, reason: str,
                     watcher: ConsoleWatcher | None = None,
                     extra: dict[str, str] | None = None,
                     console_lines: int = 600) -> Evidence:
    """Gather what explains a hang/crash into ``outdir``; never hangs, never raises for gaps."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "reason.txt").write_text(reason + "\n")
    ev = Evidence(reason=reason, outdir=outdir, ssh_alive=False)
    step = _step_timeout(vm, 5, 20)

    if guest is None and vm.alive and vm.port is not None:
        guest = vm.guest()
    if guest is not None and vm.alive:
        ev.ssh_alive = guest.alive(timeout=_step_timeout(vm, 3, 10))
    qemu = vm.health()
    if qemu:
        ev.problems.append(qemu)

    if ev.ssh_alive and guest is not None:
        text = _guest_step(ev, guest, "dstate", DSTATE_SCRIPT, step)
        if text is not None:
            ev.dstate, ev.dstate_source = parse_dstate(text), "ssh"
        sysrq_ok = _guest_step(ev, guest, "sysrq-w", "echo w > /proc/sysrq-trigger", step) is not None
        _guest_step(ev, guest, "dmesg", "dmesg", _step_timeout(vm, 10, 30))
        for name, cmd in (EXTRA_COMMANDS if extra is None else extra).items():
            _guest_step(ev, guest, name, cmd, step)
    else:
        sysrq_ok = False
    if not sysrq_ok and vm.alive and not qemu:
        # SSH is gone: blocked tasks (w) and what every CPU is running (l), so
        # a task spinning at high priority shows as well as one asleep
        for key in ("w", "l"):
            try:
                vm.sysrq(key)
            except SuiteError as exc:
                ev.problems.append(f"sysrq-{key} via qemu monitor: {exc.what}")

    if vm.alive and not qemu:
        _wait_console_quiet(vm)
    tail = vm.console_tail(console_lines)
    (outdir / "console-tail.txt").write_text(tail + "\n")
    ev.files["console-tail"] = outdir / "console-tail.txt"
    if not ev.dstate:
        from_console = [t for t in parse_sysrq_blocked(tail) if t.state == "D"]
        if from_console:
            ev.dstate, ev.dstate_source = from_console, "console"
    if ev.dstate:
        (outdir / "dstate-parsed.txt").write_text("\n".join(t.format() for t in ev.dstate) + "\n")

    if watcher is not None:
        watcher.poll()
        ev.findings = list(watcher.findings)
    else:
        ev.findings = scan(tail)
    if ev.findings:
        (outdir / "findings.txt").write_text(
            "\n\n".join(f"{f}\n" + "\n".join("    " + c for c in f.context) for f in ev.findings) + "\n")
        ev.files["findings"] = outdir / "findings.txt"
    (outdir / "summary.txt").write_text(ev.summary() + "\n")
    ev.files["summary"] = outdir / "summary.txt"
    return ev
