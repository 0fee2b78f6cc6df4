"""Names of the module parameters the guest layer itself needs (the harness's
bookkeeping of a loaded build), on the lowest floor that uses them: the cases'
building blocks (``suite/casekit/dio.py``) take them from here."""
from __future__ import annotations

import re

from suite.errors import SuiteError

# Debug builds of the async series count pinned copies: counters, not settings (never
# restored after a case, a case resets them by writing 0).
COUNTER_PARAMS = ("zfs_async_read_pinned_copies", "zfs_async_write_pinned_copies")
ASYNC_PARAM = "zfs_async_dio_enabled"
STRICT_PARAM = "zfs_dio_strict"


def load_params(assignments: list[str]) -> dict[str, str]:
    """``--zfs-param NAME=VALUE`` options as {name: value}; a malformed one is refused."""
    out: dict[str, str] = {}
    for a in assignments:
        name, sep, value = a.partition("=")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not value.strip():
            raise SuiteError(f"--zfs-param {a!r} is not NAME=VALUE",
                             fix="e.g. --zfs-param zfs_vdev_direct_write_verify=0")
        out[name] = value.strip()
    return out
