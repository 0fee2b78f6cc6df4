"""An inner pytest session (a gate's or `suite bugs`' side) runs in a process group of
its own; a caller stopped by Ctrl-C or `kill` takes it with it (suite/sessions.py),
instead of leaving it to boot guests unseen (seen: a killed gate's base session ran on
for 50 minutes beside the next gate)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(pred, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def test_a_killed_caller_takes_its_inner_session_with_it(tmp_path: Path) -> None:
    fake = tmp_path / "fakepy"          # stands in for `python -m pytest ...`
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/pid.tmp\n"
                    f"mv {tmp_path}/pid.tmp {tmp_path}/pid\nexec sleep 120\n")
    fake.chmod(0o755)
    caller = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from suite import sessions
        sys.executable = {str(fake)!r}
        sessions.run_cases([], Path({str(tmp_path / 'r')!r}), targets=["x"])
        print("returned")
    """)
    p = subprocess.Popen([sys.executable, "-c", caller], cwd=ROOT, stdout=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert _wait((tmp_path / "pid").exists, 30), "the inner session never started"
        inner = int((tmp_path / "pid").read_text())
        assert _alive(inner)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
        assert p.returncode != 0 and b"returned" not in out
        assert _wait(lambda: not _alive(inner), 10), "the inner session outlived its caller"
    finally:
        p.kill()
