"""The guest engine's ``unpinnable`` (suite/ioengine/unpinnable.py) on the host: no VM.

The host's own filesystem answers O_DIRECT requests with a PROT_NONE page in the
buffer as Linux does (EFAULT); the judging of what a trial may return is checked
on made-up results.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.ioengine import unpinnable
from suite.ioengine.plan import PAGE

ROOT = Path(__file__).resolve().parent.parent


def _direct_ok(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644))
        return True
    except OSError:
        return False


def test_every_trial_on_the_host_fails_cleanly_and_its_control_succeeds(tmp_path):
    f = tmp_path / "f.bin"
    if not _direct_ok(f):
        pytest.skip(f"{tmp_path}: no O_DIRECT on this filesystem (tmpfs?)")
    r = subprocess.run([sys.executable, "-m", "suite.ioengine", "unpinnable", "--file", str(f),
                        "--interface", "sync", "--interface", "libaio"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    trials = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(trials) == 2 * 2 * 2 * 2, r.stderr
    assert r.returncode == 0, [t for t in trials if not t["ok"]]
    assert all(t["control"] == t["length"] for t in trials)
    # a hole at the first page moves nothing: EFAULT, or at most 0 bytes
    assert all(t["res"] in (-errno.EFAULT, 0) for t in trials if t["hole"] == 0)


def _trial(res: int, hole_page: int = 5) -> unpinnable.Trial:
    return unpinnable.Trial("sync", "read", 1, 16 * PAGE, hole_page * PAGE, res=res,
                            error="" if res >= 0 else "E")


def test_the_judge_allows_efault_or_stopping_at_the_hole_and_nothing_else():
    expect = bytes(range(256)) * (16 * PAGE // 256)
    for res in (-errno.EFAULT, 0, 5 * PAGE, 3 * PAGE + 17):
        t = _trial(res)
        unpinnable.judge(t, 5 * PAGE, expect, expect)
        assert t.ok, (res, t.problems)
    t = _trial(6 * PAGE)
    unpinnable.judge(t, 5 * PAGE, expect, expect)
    assert "past the unpinnable page" in t.problems[0]
    t = _trial(-errno.EIO)
    unpinnable.judge(t, 5 * PAGE, expect, expect)
    assert "not EFAULT" in t.problems[0]
    t = _trial(4 * PAGE)
    moved = bytearray(expect)
    moved[100] ^= 1
    unpinnable.judge(t, 5 * PAGE, bytes(moved), expect)
    assert t.problems == ["1 wrong bytes in the 16384 it reported"]


def test_the_case_names_each_problem_by_a_symptom_kind():
    sys.path.insert(0, str(ROOT))
    from cases.test_dio_unpinnable import _kind
    assert _kind("failed EINVAL, not EFAULT") == "error:EINVAL"
    assert _kind("returned 24576 bytes, past the unpinnable page at 20480") == "overrun"
    assert _kind("3 wrong bytes in the 16384 it reported") == "wrong-bytes"
    assert _kind("7 bytes past the 0 reported are neither old nor new; size 65536") == "mixed"
    assert _kind("the control request with the buffer whole returned -14") == "short"
