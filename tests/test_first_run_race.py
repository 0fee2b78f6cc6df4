"""A first run on an empty cache, with several processes at once.

On a fresh machine both xdist workers seeded the git object cache at the same
time and the second one's ``os.replace`` failed with ENOTEMPTY, erroring every
case of that worker. Here four processes (standing in for workers, or two
sessions started at once) resolve the same ref against one empty cache,
released at the same instant: every one must get the commit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gitrepo import commit, sh

from suite.locks import LockTimeout, file_lock

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time
from suite.source.objects import ObjectCache
url, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    time.sleep(0.0005)
try:
    r = ObjectCache().resolve(url, "master")
    print(json.dumps({"commit": r.commit}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
"""


def _race(tmp_path: Path, n: int, script: str, *args: str) -> list[dict]:
    env = dict(os.environ, OZFS_VMCI_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    start = time.time() + 1.5          # let every interpreter start first
    procs = [subprocess.Popen([sys.executable, "-c", script, *args, str(start)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        out.append(json.loads(lines[-1]) if lines else {"error": stderr[-500:]})
    return out


def test_processes_seeding_an_empty_cache_at_once_all_succeed(tmp_path):
    up = tmp_path / "upstream"
    up.mkdir()
    sh(up, "git", "init", "-q", "-b", "master")
    # Enough history that a clone takes a little while: a wide race window.
    for i in range(40):
        head = commit(up, {f"module/f{i % 7}.c": f"{i}\n" * 200}, f"c{i}")
    results = _race(tmp_path, 4, WORKER, up.as_uri())
    assert all("error" not in r for r in results), results
    assert {r["commit"] for r in results} == {head}
    left = [p.name for p in (tmp_path / "cache" / "git").iterdir()]
    assert sorted(left) == ["objects.git", "objects.lock"], f"temporary clones left: {left}"


HOLDER = r"""
import sys, time
from pathlib import Path
from suite.locks import file_lock
with file_lock(Path(sys.argv[1]), "test lock"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_lock_wait_has_a_deadline_and_names_the_holder(tmp_path):
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "30"],
                              env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t = time.monotonic()
        try:
            with file_lock(lock, "the test lock", timeout=1.0, poll=0.05):
                raise AssertionError("got a lock another process holds")
        except LockTimeout as e:
            assert f"pid {holder.pid}" in e.what and "the test lock" in e.what
        assert time.monotonic() - t < 10
    finally:
        holder.kill()
        holder.wait()
    with file_lock(lock, "the test lock", timeout=5):   # free again once the holder died
        pass
