"""The resident I/O engine in a guest, from the host: started once per guest
(``python -m suite.ioengine serve``, ``suite/ioengine/resident.py``), so commands fork
from an engine already imported instead of importing it over 9p each time."""
from __future__ import annotations

import shlex
import sys

from suite.errors import GuestError
from suite.ioengine.resident import DEFAULT_DIR as RESIDENT_DIR
from suite.paths import PROJECT_ROOT
from suite.vm.ssh import Background, Guest


def _pythonpath() -> str:
    return f"PYTHONPATH={shlex.quote(str(PROJECT_ROOT))} "


def start_resident(guest: Guest, python: str = sys.executable) -> Background | None:
    """Start the resident engine in ``guest`` once (per Guest object; a second
    server on the same guest sees the first and exits). It imports while the case
    sets up; commands run directly until it is ready. None if it could not start
    (then every command runs directly, as before)."""
    bg = getattr(guest, "resident_engine", None)
    if bg is not None:
        return bg
    cmd = _pythonpath() + " ".join(shlex.quote(a) for a in (
        python, "-m", "suite.ioengine", "serve", "--dir", RESIDENT_DIR))
    try:
        bg = guest.background(f"{cmd} </dev/null")
    except GuestError:
        return None
    guest.resident_engine = bg  # type: ignore[attr-defined]
    return bg
