"""``python -m suite.ioengine serve``: the engine kept resident in the guest.

Under TCG a guest reads the host's Python over 9p, and every module costs a
round trip into qemu: importing the engine takes 6-20 s before it issues its
first request (``python -c pass`` alone takes 1-3 s). The resident engine pays
that once per guest: it imports every command, then forks one child per request
(a fork server, as ``multiprocessing``'s): the child starts from the freshly
imported state, so no request sees what an earlier one changed.

The protocol is files in ``DIR`` (tmpfs in the guest), spoken by
``client.sh``:

- the client writes ``<id>.argv`` (NUL-separated arguments), ``<id>.env``
  (``env -0``) and ``<id>.cwd``, makes the FIFOs ``<id>.out`` and ``<id>.err``, and
  writes ``<id> <client pid>`` as one line to the FIFO ``DIR/ctl``;
- the server forks; the child writes ``<id>.pid``, runs the command with its
  stdout/stderr on the FIFOs and stdin on /dev/null, and writes ``<id>.rc``;
- the child ends itself if the client goes away (a deadline that killed the
  client's process group must end the command too, as it does without the
  server).

``DIR/ready`` holds the server's pid once it listens; a client that finds no
live server runs ``python -m suite.ioengine`` itself, so the server is never
needed for a verdict, only for speed.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

DEFAULT_DIR = "/tmp/ozfs-engine/srv"


def read_request(d: Path, rid: str) -> tuple[list[str], dict[str, str], str]:
    """The arguments, environment and working directory a client left for ``rid``."""
    argv = [a for a in (d / f"{rid}.argv").read_bytes().split(b"\0") if a]
    env: dict[str, str] = {}
    envf = d / f"{rid}.env"
    if envf.exists():
        for item in envf.read_bytes().split(b"\0"):
            k, sep, v = item.partition(b"=")
            if sep and k:
                env[k.decode(errors="surrogateescape")] = v.decode(errors="surrogateescape")
    cwdf = d / f"{rid}.cwd"
    cwd = cwdf.read_text().strip() if cwdf.exists() else "/"
    return [a.decode(errors="surrogateescape") for a in argv], env, cwd or "/"


def parse_line(line: str) -> tuple[str, int] | None:
    """``<id> <client pid>`` -> (id, pid); None for anything else (ids are
    file names: no slash, no dot-dot)."""
    parts = line.split()
    if len(parts) != 2 or not parts[1].isdigit():
        return None
    rid = parts[0]
    if "/" in rid or rid.startswith(".") or not rid.isprintable():
        return None
    return rid, int(parts[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(d: Path) -> int | None:
    """The pid of the live server of ``d``, or None."""
    try:
        pid = int((d / "ready").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def watch_client(pid: int, every_s: float = 0.5) -> None:
    """End this process when the client ``pid`` is gone (its deadline killed it)."""
    def loop() -> None:
        while _alive(pid):
            time.sleep(every_s)
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=loop, name="client-watch", daemon=True).start()


def run_child(d: Path, rid: str, client: int, main: Callable[[Sequence[str]], int]) -> int:
    """In the forked child: become the request's process and run it. Returns the rc."""
    for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    # Watched before the FIFOs open: opening one blocks until the client reads it,
    # and a client killed first would leave this child blocked for good.
    watch_client(client)
    argv, env, cwd = read_request(d, rid)
    _publish(d / f"{rid}.pid", f"{os.getpid()}\n")
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(d / f"{rid}.out", os.O_WRONLY)
    err = os.open(d / f"{rid}.err", os.O_WRONLY)
    for fd, to in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, to)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    rc = 1
    try:
        rc = int(main(argv) or 0)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException:
        import traceback
        traceback.print_exc()
        rc = 1
    finally:
        try:
            atexit._run_exitfuncs()
        finally:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except OSError:
                    pass
    _publish(d / f"{rid}.rc", f"{rc}\n")
    return rc


def _publish(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (a reader polls for it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _reap(*_: object) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(d: Path, main: Callable[[Sequence[str]], int]) -> int:
    """Listen on ``d/ctl`` until the guest goes; fork a child per request line."""
    d.mkdir(parents=True, exist_ok=True)
    other = running(d)
    if other is not None and other != os.getpid():
        print(f"a resident engine already serves {d} (pid {other})", file=sys.stderr)
        return 0
    ctl = d / "ctl"
    if not ctl.exists():
        os.mkfifo(ctl)
    signal.signal(signal.SIGCHLD, _reap)
    os.chdir("/")
    # Opened read-write so that the FIFO never reports end-of-file between clients.
    fd = os.open(ctl, os.O_RDWR)
    _publish(d / "ready", f"{os.getpid()}\n")
    buf = b""
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            try:
                chunk = f.read(4096)
            except InterruptedError:
                continue
            if not chunk:
                time.sleep(0.05)
                continue
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                req = parse_line(raw.decode(errors="replace"))
                if req is None:
                    continue
                rid, client = req
                if os.fork() == 0:
                    code = 1
                    try:
                        os.close(fd)
                        code = run_child(d, rid, client, main)
                    finally:
                        os._exit(code & 0xFF)
