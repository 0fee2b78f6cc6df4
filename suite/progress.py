"""Progress for long steps (fetch, configure, make, boot) and a log tee.

A step prints one line when it starts and one when it ends, with the elapsed
time; in between, ``tick`` prints at most one line every ``interval`` seconds so
a 14-minute build shows it is alive without flooding a CI log.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, TextIO


@dataclass
class Step:
    name: str
    out: TextIO = field(default_factory=lambda: sys.stderr)
    interval: float = 15.0
    started: float = field(default_factory=time.monotonic)
    _last: float = 0.0

    def tick(self, message: str, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.interval:
            self._last = now
            self.out.write(f"  [{self.name} +{now - self.started:5.0f}s] {message}\n")
            self.out.flush()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


@contextmanager
def step(name: str, out: TextIO | None = None, interval: float = 15.0) -> Iterator[Step]:
    s = Step(name, out or sys.stderr, interval)
    s.out.write(f"==> {name}\n")
    s.out.flush()
    ok = False
    try:
        yield s
        ok = True
    finally:
        s.out.write(f"<== {name}: {'done' if ok else 'FAILED'} in {s.elapsed:.1f}s\n")
        s.out.flush()
