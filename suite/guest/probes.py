"""Which kernel path served a request: kprobe hit counts in the guest.

Some paths have no counter of their own (a zvol's Direct I/O and ARC paths):
the kernel's kprobes count for us. A probe is a tracefs kprobe event on an
exported function; its hit count (``kprobe_profile``) is read by the guest
engine around each trial like any kstat, so only its growth matters.

Probes are armed once per guest and never disarmed while it lives: arming and
disarming patch kernel text, which waits for every other CPU to answer an IPI.
Disarming after a case (the old way) wedged a TCG guest whose other vCPU did
not answer (``text_poke_bp`` in ``tracepoint_probe_unregister``, issue #27);
the harness must never be the cause of a hang it then blames on the case. So:

- ``options/record-cmd`` is switched off before the first event is enabled, so
  enabling an event does not hook ``sched_switch`` (whose unhooking was the
  stuck write);
- kprobe optimization is switched off, so a probe is one int3 written when it is
  armed, not a jump patched in later by a background worker while a case runs;
- ``install`` arms only the symbols not armed yet; there is no ``remove``. A
  guest that must run without probes (a benchmark) is a fresh guest.

The kernel re-arms a module's probes when the module is reloaded.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from suite.errors import GuestError

TRACEFS = "/sys/kernel/tracing"
PROFILE = f"{TRACEFS}/kprobe_profile"
GROUP = "ozfs"
# Written once, before the first probe: what keeps arming from patching text later.
# (A kernel without optimized probes has no such sysctl: nothing to switch off.)
QUIET_TRACING = (f"echo 0 > {TRACEFS}/options/record-cmd",
                 "{ test ! -e /proc/sys/debug/kprobes-optimization || "
                 "echo 0 > /proc/sys/debug/kprobes-optimization; }",
                 f"echo 0 > {TRACEFS}/tracing_on")       # the hit count is all we read


def event_name(symbol: str) -> str:
    """tracefs event names are C identifiers."""
    return re.sub(r"\W", "_", symbol)


@dataclass
class Kprobes:
    """kprobes on functions of one module, as engine counter specs; one per guest."""
    guest: object                       # suite.vm.ssh.Guest
    module: str = "zfs"
    symbols: list[str] = field(default_factory=list)    # armed in this guest

    def spec(self, symbol: str) -> dict[str, str]:
        """The engine counter spec for ``symbol``'s hit count."""
        return {"path": PROFILE, "kprobe": event_name(symbol)}

    def _events(self) -> str:
        return f"{TRACEFS}/kprobe_events"

    def arm_commands(self, symbols: list[str]) -> list[str]:
        """The guest commands that arm ``symbols`` (none of them armed yet)."""
        lines = [f"mountpoint -q {TRACEFS} || mount -t tracefs nodev {TRACEFS}"]
        if not self.symbols:
            lines += QUIET_TRACING
        for sym in symbols:
            ev = f"{GROUP}/{event_name(sym)}"
            lines.append(f"echo {shlex.quote(f'p:{ev} {self.module}:{sym}')} >> "
                         f"{self._events()}")
            lines.append(f"echo 1 > {TRACEFS}/events/{ev}/enable")
        return lines

    def install(self, *symbols: str) -> dict[str, dict[str, str]]:
        """Arm a probe on each symbol not armed yet in this guest; returns
        {symbol: counter spec} for all of ``symbols``. A symbol the module does
        not have (inlined, renamed in this build) fails with the kernel's word."""
        new = [s for s in dict.fromkeys(symbols) if s not in self.symbols]
        if new:
            r = self.guest.run(" && ".join(self.arm_commands(new)), timeout=60, check=False)
            if r.rc != 0:
                tail = self.guest.run(f"cat {TRACEFS}/error_log 2>/dev/null | tail -5",
                                      timeout=20, check=False).stdout
                raise GuestError(f"could not arm kprobes on {', '.join(new)}: "
                                 f"{r.stderr.strip()}",
                                 fix="the guest kernel needs CONFIG_KPROBE_EVENTS, and the "
                                     "module must export each symbol (not inlined): see "
                                     "available_filter_functions", detail=tail)
            self.symbols += new
        return {sym: self.spec(sym) for sym in symbols}

    def hits(self) -> dict[str, int]:
        """Current hit counts of the armed probes."""
        r = self.guest.run(f"cat {PROFILE}", timeout=20, check=False)
        from suite.ioengine.counters import parse_kprobe_profile
        counts = parse_kprobe_profile(r.stdout)
        return {s: counts.get(event_name(s), 0) for s in self.symbols}
