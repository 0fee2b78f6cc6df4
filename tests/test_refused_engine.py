"""The guest engine's ``refused`` (suite/ioengine/refused.py) on the host: no VM.

The host's ext4 refuses a write to a file made immutable after it was opened
(EPERM) and takes the control write once the flag is cleared. (It does not refuse
a write at offset 0 through a descriptor opened before the file was made
append-only, which ZFS's ``zfs_write`` does: the host runs the immutable trials.)
A filesystem that accepts the refused write is reported as such.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.ioengine import refused
from suite.ioengine.plan import PAGE

ROOT = Path(__file__).resolve().parent.parent


def _flags_ok(path: Path) -> bool:
    """O_DIRECT and FS_IOC_SETFLAGS (root, a filesystem with inode flags)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError:
        return False
    try:
        refused.set_flags(fd, refused.FLAGS["immutable"])
        refused.set_flags(fd, 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def test_every_refused_write_is_eperm_leaves_the_bytes_and_its_control_lands(tmp_path):
    f = tmp_path / "f.bin"
    if not _flags_ok(f):
        pytest.skip(f"{tmp_path}: no O_DIRECT or no FS_IOC_SETFLAGS here (not root? tmpfs?)")
    r = subprocess.run([sys.executable, "-m", "suite.ioengine", "refused", "--file", str(f),
                        "--pool", "nopool", "--interface", "sync", "--interface", "libaio",
                        "--flag", "immutable"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    trials = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(trials) == 2 * 2, r.stderr
    assert r.returncode == 0, [t for t in trials if not t["ok"]]
    assert all(t["res"] == -errno.EPERM and t["error"] == "EPERM" for t in trials)
    assert all(t["control"] == t["length"] == 16 * PAGE for t in trials)
    assert all(t["tasks"] == 0 and t["control_tasks"] == 0 for t in trials)  # no taskq here
    f.write_bytes(b"x")                 # no flag left on the file: it can be written


def test_an_accepted_write_and_a_changed_file_are_problems(tmp_path, monkeypatch):
    """A filesystem that takes the write: the trial says so, and says what changed."""
    f = tmp_path / "f.bin"
    if not _flags_ok(f):
        pytest.skip(f"{tmp_path}: no O_DIRECT or no FS_IOC_SETFLAGS here")
    monkeypatch.setattr(refused, "set_flags", lambda fd, flags: None)   # the flag never holds
    t = refused.run_trial(str(f), "nopool", refused.Trial("sync", 4, "immutable", 8 * PAGE),
                          "s", 30)
    assert t.res == 8 * PAGE and not t.ok
    assert t.problems[0].startswith("accepted: wrote 32768 bytes at offset 0 of a file made "
                                    "immutable")


def _t(interface: str, tasks: int | None, control_tasks: int | None) -> dict:
    return {"interface": interface, "nsegs": 1, "flag": "immutable", "tasks": tasks,
            "control_tasks": control_tasks}


def test_a_row_that_did_not_take_its_labelled_path_is_unproven():
    from cases.test_dio_refused import label_problems
    assert label_problems([_t("libaio", 0, 1), _t("io_uring", 0, 1), _t("sync", 0, 0)], 1) == []
    assert label_problems([_t("libaio", 0, 0), _t("sync", 0, 0)], 0) == []
    said = label_problems([_t("libaio", 0, 0)], 1)
    assert said == ["libaio segs1 immutable: labelled async but its control write "
                    "dispatched no task"]
    assert "labelled synchronous but 1 task(s)" in label_problems([_t("io_uring", 1, 0)], 0)[0]
    assert "labelled synchronous" in label_problems([_t("sync", 0, 1)], 1)[0]
    assert "could not be read" in label_problems([_t("libaio", None, 1)], 1)[0]


def test_report_trials_records_every_problem_and_fails_when_trials_are_missing():
    from suite.casekit.engine import report_trials
    said: list[tuple] = []
    sym = lambda kind, detail, row="": said.append((kind, detail, row))    # noqa: E731
    lines = [{"event": "refused", "interface": "sync", "problems": ["failed EIO, not EPERM"]},
             {"event": "refused", "interface": "libaio", "problems": []},
             {"event": "other"}]
    got = report_trials(lines, "refused", 2, sym, lambda t: t["interface"],
                        lambda p: "error:EIO")
    assert len(got) == 2 and said == [("error:EIO", "failed EIO, not EPERM", "sync")]
    said.clear()
    with pytest.raises(pytest.fail.Exception, match="reported 2 of 3 trials"):
        report_trials(lines, "refused", 3, sym, str, str)
    assert said[0][0] == "no-result"
