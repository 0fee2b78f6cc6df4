"""Where the suite keeps things: caches (survive runs) and results (one per run).

Everything can be moved with environment variables so CI can point caches at a
persistent volume:

- ``OZFS_VMCI_CACHE``  (default ``~/.cache/ozfs-vmci``): git objects, builds, ccache.
- ``OZFS_VMCI_RESULTS`` (default ``./results``): per-run logs and tables.
"""
from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    env = os.environ.get("OZFS_VMCI_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "ozfs-vmci"
    root.mkdir(parents=True, exist_ok=True)
    return root


def git_cache() -> Path:
    """One bare repository holding the objects of every source ever fetched."""
    return cache_root() / "git" / "objects.git"


def builds_dir() -> Path:
    return cache_root() / "builds"


def ccache_dir() -> Path:
    env = os.environ.get("OZFS_VMCI_CCACHE_DIR")
    return Path(env) if env else cache_root() / "ccache"


def case_slug(nodeid: str) -> str:
    """A case's folder name under ``<run>/cases/`` (the node id past its file)."""
    import re
    return re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid.split("::", 1)[-1])[:120]


def results_root() -> Path:
    env = os.environ.get("OZFS_VMCI_RESULTS")
    return Path(env) if env else Path.cwd() / "results"


def claim_dir(parent: Path, stem: str) -> Path:
    """A new folder ``parent/stem``, or ``stem-2``, ``stem-3``... when another run took
    the name (two runs started in the same second): claimed by ``mkdir``, so two
    processes never share one."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        d = parent / (stem if n == 1 else f"{stem}-{n}")
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent / stem}: 999 runs of that name; clear {parent}")


def stamped(prefix: str, suffix: str = "") -> Path:
    """A new results folder ``<prefix>-<YYYYmmdd-HHMMSS><suffix>`` (claimed)."""
    import time
    return claim_dir(results_root(), f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}{suffix}")


def patches_dir() -> Path:
    return Path(os.environ.get("OZFS_VMCI_PATCHES", PROJECT_ROOT / "patches"))


def vmimages_dir() -> Path:
    return Path(os.environ.get("OZFS_VMCI_VMIMAGES", PROJECT_ROOT / "vmimages"))


def write_json(path: Path, data: object) -> None:
    """``path`` written whole or not at all (tmp + rename: several xdist workers may
    write the same file, a reader never sees half)."""
    import json
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)
