"""The resident engine (suite/ioengine/resident.py) and its client (client.sh), run
on the host as they run in a guest: same output, status and files as the engine run
directly; a client with no server runs the engine itself; a killed client ends its
request."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.ioengine.resident import parse_line, read_request, running
from suite.paths import PROJECT_ROOT

CLIENT = PROJECT_ROOT / "suite" / "ioengine" / "client.sh"
ENV = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}


def client(d: Path, *args: str, cwd: Path | None = None, env: dict | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLIENT), str(d), sys.executable, *args], cwd=cwd,
                          env=env or ENV, capture_output=True, text=True, timeout=timeout)


def direct(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.ioengine", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def server(tmp_path):
    d = tmp_path / "srv"
    p = subprocess.Popen([sys.executable, "-m", "suite.ioengine", "serve", "--dir", str(d)],
                         env=ENV, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while running(d) != p.pid:
        assert p.poll() is None, "the resident engine exited at start"
        assert time.monotonic() < deadline, "the resident engine never became ready"
        time.sleep(0.05)
    yield d, p
    for c in children(p.pid):         # a request a failed test left running
        os.kill(c, signal.SIGKILL)
    p.kill()
    p.wait()


def untimed(stdout: str) -> list[dict]:
    """The engine's JSON lines without their timings."""
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]
    assert rows, stdout
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows]


def served(d: Path) -> set[str]:
    """Request ids a child took (it leaves a pid file until its client cleans up)."""
    return {f.name.split(".")[0] for f in d.glob("*.pid")}


def test_request_lines_are_parsed_strictly():
    assert parse_line("r12-345 678") == ("r12-345", 678)
    for bad in ("", "r1", "r1 x", "../x 1", "a/b 1", ".hidden 1", "r1 2 3"):
        assert parse_line(bad) is None


def test_request_files_are_read_back(tmp_path):
    (tmp_path / "r1.argv").write_bytes(b"run\0a b\0--x\0")
    (tmp_path / "r1.env").write_bytes(b"A=1\0B=x=y\0")
    (tmp_path / "r1.cwd").write_text("/tmp\n")
    assert read_request(tmp_path, "r1") == (["run", "a b", "--x"], {"A": "1", "B": "x=y"}, "/tmp")


def test_served_command_matches_direct_output_status_and_files(server, tmp_path):
    d, _ = server
    work = tmp_path / "work"
    work.mkdir()
    r = client(d, "write-file", "rel.bin", "--size", "12345", "--seed", "7", "--no-direct",
               cwd=work)
    want = direct("write-file", "want.bin", "--size", "12345", "--seed", "7", "--no-direct",
                  cwd=work)
    assert r.returncode == want.returncode == 0, r.stderr
    assert (work / "rel.bin").read_bytes() == (work / "want.bin").read_bytes()
    assert untimed(r.stdout.replace("rel.bin", "X")) == untimed(want.stdout.replace("want.bin", "X"))
    bad, want_bad = client(d, "run", "--no-such-flag"), direct("run", "--no-such-flag")
    assert (bad.returncode, bad.stderr) == (want_bad.returncode, want_bad.stderr)
    assert bad.returncode == 2 and "error: the following arguments are required" in bad.stderr
    assert not list(d.glob("r*.*")), "the client leaves no request files behind"


ECHO = ("import os, sys; from pathlib import Path; from suite.ioengine.resident import serve\n"
        "def main(argv):\n"
        "    print(os.environ.get('OZFS_TEST_MARK'), os.getcwd(), *argv)\n"
        "    print('to stderr', file=sys.stderr)\n"
        "    return int(argv[0])\n"
        "serve(Path(sys.argv[1]), main)\n")


def test_the_child_gets_the_clients_arguments_environment_and_directory(tmp_path):
    d = tmp_path / "srv"
    p = subprocess.Popen([sys.executable, "-c", ECHO, str(d)], env=ENV)
    try:
        deadline = time.monotonic() + 60
        while running(d) != p.pid:
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.05)
        r = client(d, "3", "a b", cwd=tmp_path, env={**ENV, "OZFS_TEST_MARK": "yes"})
        assert (r.returncode, r.stdout, r.stderr) == (3, f"yes {tmp_path} 3 a b\n", "to stderr\n")
        assert client(d, "0", cwd=tmp_path).stdout == f"None {tmp_path} 0\n"
    finally:
        p.kill()
        p.wait()


def test_without_a_server_the_client_runs_the_engine_itself(tmp_path):
    r = client(tmp_path / "nobody", "write-file", str(tmp_path / "f"), "--size", "100",
               "--seed", "1", "--no-direct")
    assert r.returncode == 0 and (tmp_path / "f").stat().st_size == 100
    # a stale ready file (dead pid) and a FIFO with no reader: still direct
    d = tmp_path / "stale"
    d.mkdir()
    os.mkfifo(d / "ctl")
    (d / "ready").write_text("999999999\n")
    r = client(d, "write-file", str(tmp_path / "g"), "--size", "10", "--seed", "1",
               "--no-direct", timeout=30)
    assert r.returncode == 0 and (tmp_path / "g").stat().st_size == 10


def test_a_killed_client_ends_its_request(server, tmp_path):
    d, _ = server
    c = subprocess.Popen(["bash", str(CLIENT), str(d), sys.executable, "sample", "--sample",
                          "x=/proc/loadavg", "--stop-file", str(tmp_path / "never"),
                          "--deadline-s", "600"], env=ENV, stdout=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.monotonic() + 30
    while not served(d):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int((d / f"{next(iter(served(d)))}.pid").read_text())
    os.killpg(c.pid, signal.SIGKILL)     # what a guest command's deadline does
    c.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and b"Z" not in _state(pid):
        assert time.monotonic() < deadline, "the request outlived its client"
        time.sleep(0.1)


def _state(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return b"Z"


def test_a_second_server_leaves_the_first_serving(server):
    d, p = server
    r = subprocess.run([sys.executable, "-m", "suite.ioengine", "serve", "--dir", str(d)],
                       env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "already serves" in r.stderr
    assert running(d) == p.pid


def test_a_request_whose_client_is_gone_before_the_output_opens_ends(server, tmp_path):
    """A client killed between sending its request and opening its FIFOs: the
    child must not stay blocked opening them."""
    d, _ = server
    gone = subprocess.Popen(["sleep", "0.2"])
    gone.wait()
    rid = "rgone-1"
    (d / f"{rid}.argv").write_bytes(b"--help\0")
    for f in ("out", "err"):
        os.mkfifo(d / f"{rid}.{f}")
    with open(d / "ctl", "w") as ctl:
        ctl.write(f"{rid} {gone.pid}\n")
    time.sleep(3)                                  # the server has forked by now
    deadline = time.monotonic() + 20
    while children(server[1].pid):
        assert time.monotonic() < deadline, "the child stayed blocked on its client's FIFOs"
        time.sleep(0.1)
    assert not (d / f"{rid}.rc").exists()          # it never ran


def children(pid: int) -> list[int]:
    """Live (not zombie) children of ``pid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != b"Z":
            out.append(int(stat.parent.name))
    return out
