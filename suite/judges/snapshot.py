"""One guest command before and one after each case: everything the judges read.

The output is sections (``=== NAME``) so a single round trip carries the taint
mask, the kstats, ``zpool status`` and the event log. Before the case the event
log is cleared, so what it holds after is the case's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from suite.judges import kmemleak, kstats, lockdep, pins

KSTAT_ROOT = "/proc/spl/kstat/zfs"
SECTION = "=== "


def _kstat_lines(files: tuple[str, ...]) -> list[str]:
    globs = " ".join(f"{KSTAT_ROOT}/{f}" for f in files)
    return [f"for f in {globs}; do [ -f \"$f\" ] || continue; "
            f"echo \"{SECTION}kstat ${{f#{KSTAT_ROOT}/}}\"; cat \"$f\"; done"]


def kstat_script(files: tuple[str, ...]) -> str:
    """Just the kstat sections (a baseline, or a sample with every pool exported)."""
    return "\n".join(_kstat_lines(files))


def before_script(zpool: str, files: tuple[str, ...]) -> str:
    return "\n".join([f"echo '{SECTION}tainted'; cat /proc/sys/kernel/tainted",
                      *_kstat_lines(files),
                      f"{zpool} events -c >/dev/null 2>&1 || true",
                      kmemleak.before_command(),
                      pins.command(SECTION)])


def after_script(zpool: str, files: tuple[str, ...]) -> str:
    return "\n".join([f"echo '{SECTION}tainted'; cat /proc/sys/kernel/tainted",
                      *_kstat_lines(files),
                      f"echo '{SECTION}status'; {zpool} status -pvP 2>&1",
                      f"echo '{SECTION}events'; {zpool} events -v 2>&1",
                      kmemleak.after_command(SECTION),
                      lockdep.after_command(SECTION),
                      pins.command(SECTION)])


def sections(text: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    cur: list[str] | None = None
    for ln in text.splitlines():
        if ln.startswith(SECTION):
            cur = out.setdefault(ln[len(SECTION):].strip(), [])
        elif cur is not None:
            cur.append(ln)
    return {k: "\n".join(v) for k, v in out.items()}


@dataclass
class Snapshot:
    tainted: int | None = None
    kstats: dict[str, kstats.Kstat] = field(default_factory=dict)
    status: str | None = None
    events: str | None = None
    kmemleak: str | None = None     # the after-case scan's report (None: no kmemleak)
    lockdep: str | None = None      # /proc/lockdep_stats' debug_locks (None: no lockdep)
    pins: str | None = None         # /proc/vmstat's FOLL_PIN counters
    raw: str = ""

    @classmethod
    def parse(cls, text: str) -> "Snapshot":
        s = sections(text)
        taint = s.get("tainted", "").strip()
        return cls(int(taint) if taint.isdigit() else None,
                   {k[len("kstat "):]: kstats.parse(v) for k, v in s.items()
                    if k.startswith("kstat ")},
                   s.get("status"), s.get("events"), s.get("kmemleak"), s.get("lockdep"),
                   s.get("pins"), text)
