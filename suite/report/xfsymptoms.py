"""What a failed xfstests test printed, as the suite's symptom kinds.

A test's ``.out.bad`` is its output where it differs from the golden ``.out``. The
lines it added that name an errno (``returned -14``, ``EFAULT``, ``Bad address``)
give the kinds the known bugs' symptoms are written in (``suite/symptoms.py``):
``EINVAL``, ``EFAULT``, else ``error:<NAME>``. ``suite bugs --xfstests`` credits a
bug only when a test failing at its bad commit shows one of the bug's own kinds.
"""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path

NEGATIVE = re.compile(r"\b(?:returned|return|ret|res|result|error|err)\W{0,3}-(\d{1,3})\b",
                      re.IGNORECASE)
NAMED = re.compile(r"\bE[A-Z0-9]{2,15}\b")
STRERROR = {os.strerror(n): name for n, name in errno.errorcode.items()}


def kind(name: str) -> str:
    return name if name in ("EINVAL", "EFAULT") else f"error:{name}"


def errno_kinds(lines: list[str]) -> list[str]:
    """The errno kinds the lines name, in the order they first appear."""
    found: list[str] = []
    for line in lines:
        names = [errno.errorcode.get(int(n), "") for n in NEGATIVE.findall(line)]
        names += [n for n in NAMED.findall(line) if hasattr(errno, n)]
        names += [name for text, name in STRERROR.items() if text in line]
        found += [kind(n) for n in names if n]
    return list(dict.fromkeys(found))


def added_lines(bad: Path, golden: Path | None) -> list[str]:
    """The lines of ``bad`` the golden output lacks (all of them without one)."""
    if not bad.exists():
        return []
    want = set(golden.read_text(errors="replace").splitlines()) \
        if golden is not None and golden.exists() else set()
    return [ln for ln in bad.read_text(errors="replace").splitlines() if ln not in want]


def of_test(results_dir: Path, test: str, tree: Path | None) -> list[str]:
    """The kinds of ``test``'s failure: its ``.out.bad`` under ``results_dir`` (./check's
    RESULT_BASE as collected) against the tree's golden ``tests/<test>.out``."""
    bad = next(iter(sorted(results_dir.glob(f"**/{test}.out.bad"))), None)
    if bad is None:
        return []
    golden = tree / "tests" / f"{test}.out" if tree is not None else None
    return errno_kinds(added_lines(bad, golden))
