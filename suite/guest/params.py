"""Names of the module parameters the guest layer itself needs (the harness's
bookkeeping of a loaded build), on the lowest floor that uses them: the cases'
building blocks (``suite/casekit/dio.py``) take them from here."""
from __future__ import annotations

# Debug builds of the async series count pinned copies: counters, not settings (never
# restored after a case, a case resets them by writing 0).
COUNTER_PARAMS = ("zfs_async_read_pinned_copies", "zfs_async_write_pinned_copies")
ASYNC_PARAM = "zfs_async_dio_enabled"
STRICT_PARAM = "zfs_dio_strict"
