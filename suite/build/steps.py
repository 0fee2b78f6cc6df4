"""One build step run into its log: progress lines while it runs, its whole process
group killed past a deadline. The OpenZFS recipe and the kernel build use it; each
says what counts as an object compiled and raises its own error from the result."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from suite.errors import BuildError
from suite.progress import step

Label = Callable[[str], "str | None"]


@dataclass(frozen=True)
class StepResult:
    rc: int
    objects: int            # lines ``obj`` recognised (objects compiled)
    expired: bool           # killed at its deadline


def run_step(cmd: list[str], cwd: Path, env: dict, log: Path, name: str, timeout: float,
             obj: Label, note: Label = lambda line: None) -> StepResult:
    """Run ``cmd`` appending to ``log``; ``obj(line)``: the object a line compiled (or
    None), ``note(line)``: what else to show as progress (or None)."""
    with step(name) as s, open(log, "a") as lf:
        lf.write(f"\n### {name}: {' '.join(cmd)}\n")
        lf.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                start_new_session=True)
        assert proc.stdout is not None
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        objects, last = 0, ""
        try:
            for line in proc.stdout:
                lf.write(line)
                label = obj(line)
                if label is not None:
                    objects += 1
                    last = label
                elif (n := note(line)) is not None:
                    last = n
                s.tick(f"{objects} objects, {last}" if objects else last)
            rc = proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            timer.cancel()
    return StepResult(rc, objects, expired.is_set())


def discard(half: Path, log: Path, key: str, err: BaseException, failed: Path) -> None:
    """Keep the log of a failed or interrupted build in ``failed``, drop the half
    build; the error's fix then names the kept log."""
    failed.mkdir(parents=True, exist_ok=True)
    if log.exists():
        dest = failed / f"{key}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        shutil.copy(log, dest)
        if isinstance(err, BuildError):
            err.fix = err.fix.replace(str(log), str(dest))
    shutil.rmtree(half, ignore_errors=True)


def ccache_stats(env: dict) -> dict[str, str]:
    """ccache's hit and miss counts under ``env``'s ``CCACHE_DIR`` (none set: {}): read
    before and after a build, their difference says what ccache saved it."""
    if "CCACHE_DIR" not in env:
        return {}
    p = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True,
                       timeout=60)
    stats = dict(ln.split("\t", 1) for ln in p.stdout.splitlines() if "\t" in ln)
    keep = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")
    return {k: stats[k] for k in keep if k in stats}


def publish_record(folder: Path, text: str) -> None:
    """Write a finished build's ``record.json`` at once (through a temporary file): a
    build folder without one is a half build, removed by the next build of its key."""
    tmp = folder / "record.json.tmp"
    tmp.write_text(text)
    os.replace(tmp, folder / "record.json")
