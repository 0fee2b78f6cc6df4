"""kmemleak: objects the kernel allocated that nothing points at any more.

On a kernel built with ``CONFIG_DEBUG_KMEMLEAK`` and booted with ``kmemleak=on``
(the ``debian-6.1-debug`` profile), the before-case step writes ``clear`` to
``/sys/kernel/debug/kmemleak`` (every suspect reported so far is forgotten) and the
after-case step writes ``scan`` and reads what is reported: the leaks the case made.
A leak is the module's when a frame of its allocation stack is in OpenZFS
(``[spl]``, ``[zfs]``, ...): those are findings; the others are counted and kept in
the evidence (a kernel-internal leak the case's I/O may have caused is worth a look,
but it is not this build's to answer for).

kmemleak reports an object only once it has been unreferenced for about 5 s, so a
leak made in a case's last seconds may be reported after the next case: the finding
says how old the object was (``age``) so the reader can tell.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

PATH = "/sys/kernel/debug/kmemleak"
# OpenZFS's kernel modules (2.2+: spl and zfs; older trees split zfs into these).
MODULES = ("spl", "zfs", "icp", "zcommon", "znvpair", "zavl", "zunicode", "zlua", "zzstd")
_FRAME_MODULE = re.compile(r"\[(" + "|".join(MODULES) + r")\]\s*$")


def before_command() -> str:
    """Forget every suspect so far (a no-op on a kernel without kmemleak)."""
    return f"[ -w {PATH} ] && echo clear > {PATH} 2>/dev/null || true"


def after_command(section: str) -> str:
    """Scan now and print the report under ``section`` (nothing without kmemleak)."""
    return (f"if [ -w {PATH} ]; then echo scan > {PATH} 2>/dev/null; "
            f"echo '{section}kmemleak'; cat {PATH}; fi")


@dataclass
class Leak:
    address: str
    size: int
    comm: str = ""
    age: str = ""
    frames: list[str] = field(default_factory=list)

    @property
    def module(self) -> str | None:
        """The first OpenZFS module on the allocation stack, if any."""
        for f in self.frames:
            if m := _FRAME_MODULE.search(f):
                return m.group(1)
        return None

    def where(self) -> str:
        """The allocation stack's OpenZFS frames (function+offset), outermost last."""
        own = [re.sub(r"^\[<[0-9a-f]+>\]\s*", "", f).strip() for f in self.frames
               if _FRAME_MODULE.search(f)]
        return " <- ".join(own[:4])


def parse(text: str) -> list[Leak]:
    leaks: list[Leak] = []
    cur: Leak | None = None
    in_trace = False
    for ln in text.splitlines():
        if m := re.match(r"unreferenced object (0x[0-9a-f]+) \(size (\d+)\):", ln):
            cur = Leak(m.group(1), int(m.group(2)))
            leaks.append(cur)
            in_trace = False
        elif cur is None:
            continue
        elif m := re.match(r'\s+comm "(.*)", pid \d+, jiffies \d+(?: \(age ([\d.]+s)\))?', ln):
            cur.comm, cur.age = m.group(1), m.group(2) or ""
        elif ln.strip() == "backtrace:" or ln.strip().startswith("backtrace (crc"):
            in_trace = True
        elif in_trace and ln.strip().startswith("[<"):
            cur.frames.append(ln.strip())
    return leaks
