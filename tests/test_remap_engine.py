"""The guest engine's ``remap-cross`` (suite/ioengine/remap.py) on the host: no VM.

The host's filesystem cannot clone (FICLONERANGE: EOPNOTSUPP or EXDEV) but
copy_file_range copies, so the byte check and the report are exercised for real.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from suite.ioengine import forked, remap
from suite.ioengine.content import pattern

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path, *args: str) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "suite.ioengine", "remap-cross", "--dir",
                        str(tmp_path), "--records", "2", "--record", "65536", *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    return r.returncode, json.loads(r.stdout.splitlines()[-1])


def test_copies_in_both_directions_leave_each_file_the_others_first_half(tmp_path):
    rc, out = _run(tmp_path, "--mover", "copy_file_range", "--seconds", "0.5")
    assert rc == 0 and not out["stuck"]
    assert all(s["done"] > 0 and not s["errors"] for s in out["sides"]), out["sides"]
    assert out["wrong_bytes"] == {"remap-a.bin": 0, "remap-b.bin": 0}


def test_a_mover_the_filesystem_refuses_is_counted_as_its_errno_not_done(tmp_path):
    rc, out = _run(tmp_path, "--mover", "ficlonerange", "--seconds", "0.2")
    # tmpfs/ext4 cannot clone; a filesystem that can would leave no errors.
    for s in out["sides"]:
        assert s["done"] > 0 or sum(s["errors"].values()) > 0, s
        if s["errors"]:
            assert set(s["errors"]) <= {os.strerror(e) for e in (95, 18, 22, 1)}, s["errors"]


def test_the_byte_check_finds_one_wrong_byte(tmp_path):
    half = 8192
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(pattern("x", 0, half) + pattern("y", 0, half))
    b.write_bytes(pattern("y", 0, half) + pattern("x", 0, half))
    assert remap.check_swapped(str(a), str(b), ("x", "y"), half) == {"a": 0, "b": 0}
    data = bytearray(b.read_bytes())
    data[half + 100] ^= 0xFF
    b.write_bytes(bytes(data))
    assert remap.check_swapped(str(a), str(b), ("x", "y"), half) == {"a": 0, "b": 1}
    b.write_bytes(bytes(data[:-10]))
    assert remap.check_swapped(str(a), str(b), ("x", "y"), half)["b"] == 11


def test_a_side_past_its_deadline_is_reported_running_with_its_state(tmp_path):
    pid = os.fork()
    if pid == 0:            # a side that never finishes: its pipe never closes
        time.sleep(30)
        os._exit(0)
    rfd, wfd = os.pipe()
    try:
        bufs, running = forked.collect({pid: rfd}, time.monotonic() + 0.3)
        assert running == [pid] and bufs[pid] == b""
        st = remap.proc_state(pid)
        assert st["state"] in ("S", "D"), st
        t0 = time.monotonic()
        forked.reap({pid: rfd}, running)       # killed, never waited for
        assert time.monotonic() - t0 < 1
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    finally:
        os.close(wfd)


def test_a_side_holds_none_of_the_commands_output(tmp_path):
    """A side stuck in the kernel cannot exit: if it held the command's stdout the
    caller would wait for an EOF past the report. Each side's fds 0-2 are /dev/null."""
    d = remap.Direction("a-to-b", str(tmp_path / "a"), str(tmp_path / "b"))
    for p in (d.src, d.dst):
        open(p, "wb").close()
    r, w = os.pipe()
    saved = os.dup(1)
    os.dup2(w, 1)                # the side's parent's stdout is this pipe, and only fd 1
    os.close(w)
    try:
        pid, rfd = forked.fork_json(
            lambda: remap.asdict(remap._side(d, "copy_file_range", 4096, 4096,
                                             time.monotonic() + 5)), lambda e: {})
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    try:
        import select
        # The parent closed its copy of w: only a side still holding it keeps r open.
        ready, _, _ = select.select([r], [], [], 2.0)
        assert ready and os.read(r, 1) == b"", "the side still holds the command's stdout"
    finally:
        os.waitpid(pid, 0)
        os.close(rfd)
        os.close(r)
