"""Which kernel path served a request: kprobe hit counts in the guest.

Some paths have no counter of their own (a zvol's Direct I/O and ARC paths):
the kernel's kprobes count for us. A probe is a tracefs kprobe event on an
exported function; its hit count (``kprobe_profile``) is read by the guest
engine around each trial like any kstat. Probes live in their own group, are
removed when the case ends, and are re-armed by the kernel when the module they
sit in is reloaded.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from suite.errors import GuestError

TRACEFS = "/sys/kernel/tracing"
PROFILE = f"{TRACEFS}/kprobe_profile"
GROUP = "ozfs"


def event_name(symbol: str) -> str:
    """tracefs event names are C identifiers."""
    return re.sub(r"\W", "_", symbol)


@dataclass
class Kprobes:
    """kprobes on functions of one module, as engine counter specs."""
    guest: object                       # suite.guest.ssh.Guest
    module: str = "zfs"
    symbols: list[str] = field(default_factory=list)

    def spec(self, symbol: str) -> dict[str, str]:
        """The engine counter spec for ``symbol``'s hit count."""
        return {"path": PROFILE, "kprobe": event_name(symbol)}

    def _events(self) -> str:
        return f"{TRACEFS}/kprobe_events"

    def install(self, *symbols: str) -> dict[str, dict[str, str]]:
        """Arm a probe on each symbol (those of an earlier ``install`` are
        replaced); returns {symbol: counter spec}. A symbol the module does not
        have (inlined, renamed in this build) fails with the kernel's word."""
        self.remove()
        lines = [f"mountpoint -q {TRACEFS} || mount -t tracefs nodev {TRACEFS}"]
        for sym in symbols:
            ev = f"{GROUP}/{event_name(sym)}"
            lines.append(f"echo {shlex.quote(f'p:{ev} {self.module}:{sym}')} >> "
                         f"{self._events()}")
            lines.append(f"echo 1 > {TRACEFS}/events/{ev}/enable")
        # The hit count is all we read: keep the ring buffer from filling.
        lines.append(f"echo 0 > {TRACEFS}/tracing_on")
        r = self.guest.run(" && ".join(lines), timeout=60, check=False)
        if r.rc != 0:
            tail = self.guest.run(f"cat {TRACEFS}/error_log 2>/dev/null | tail -5", timeout=20,
                                  check=False).stdout
            raise GuestError(f"could not arm kprobes on {', '.join(symbols)}: "
                             f"{r.stderr.strip()}",
                             fix="the guest kernel needs CONFIG_KPROBE_EVENTS, and the module "
                                 "must export each symbol (not inlined): see "
                                 "available_filter_functions", detail=tail)
        self.symbols = list(symbols)
        return {sym: self.spec(sym) for sym in symbols}

    def hits(self) -> dict[str, int]:
        """Current hit counts of the armed probes."""
        r = self.guest.run(f"cat {PROFILE}", timeout=20, check=False)
        from suite.ioengine.counters import parse_kprobe_profile
        counts = parse_kprobe_profile(r.stdout)
        return {s: counts.get(event_name(s), 0) for s in self.symbols}

    def remove(self) -> None:
        """Disable and delete every probe of the group (best effort)."""
        self.guest.run(
            f"test -d {TRACEFS}/events/{GROUP} || exit 0; "
            f"echo 0 > {TRACEFS}/events/{GROUP}/enable; "
            f"grep -o '^[pr]:{GROUP}/[^ ]*' {self._events()} | sed 's/^[pr]:/-:/' | "
            f"while read -r ev; do echo \"$ev\" >> {self._events()}; done; "
            f"echo 1 > {TRACEFS}/tracing_on", timeout=60, check=False)
        self.symbols = []
