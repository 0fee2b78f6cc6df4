"""The host's side of ``inflight`` (suite/casekit/writes.py ``run_inflight``), on a
scripted engine: no VM."""
from __future__ import annotations

import json
from pathlib import Path

from suite.casekit.writes import run_inflight


class ScriptedRun:
    """A background engine command whose output grows one line per poll."""

    def __init__(self, lines: list[dict]) -> None:
        self.lines = [json.dumps(x) + "\n" for x in lines]
        self.shown = 0

    @property
    def done(self) -> bool:
        return self.shown >= len(self.lines)

    def output_so_far(self) -> tuple[str, str]:
        self.shown = min(self.shown + 1, len(self.lines))
        return "".join(self.lines[:self.shown]), ""

    def wait(self, timeout: float):
        self.shown = len(self.lines)


class ScriptedGuest:
    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, cmd: str, **kw) -> None:
        self.commands.append(cmd)


class ScriptedEngine:
    scale = 1.0

    def __init__(self, outdir: Path, lines: list[dict]) -> None:
        self.outdir = outdir
        self.run = ScriptedRun(lines)
        self.guest = ScriptedGuest()
        self.args: tuple[str, ...] = ()

    def background(self, *args: str) -> ScriptedRun:
        self.args = args
        return self.run


EVENTS = [{"event": "submitted"}, {"event": "probe", "outstanding": [1]},
          {"event": "barrier-end", "t": 1.0}, {"event": "settled", "t": 1.1},
          {"event": "done", "writes": [{"tag": 1, "t_done": 0.9}]}]


def test_on_settled_fires_once_before_the_read_back_is_reported(tmp_path: Path):
    engine = ScriptedEngine(tmp_path, EVENTS)
    seen: list[int] = []
    run = run_inflight(engine, [], 5.0, on_settled=lambda: seen.append(engine.run.shown))
    assert seen == [4]              # the poll that first showed "settled", not "done"
    # the engine waits for the go-ahead file, which the host makes after on_settled
    go = engine.args[engine.args.index("--read-back-after") + 1]
    assert engine.guest.commands[0].endswith(f"rm -f {go}")
    assert engine.guest.commands[-1] == f"touch {go}"
    assert run.end is not None and run.end["event"] == "done"
    assert (tmp_path / "inflight.jsonl").read_text().count("\n") == len(EVENTS)


def test_on_settled_never_fires_when_the_writes_never_settle(tmp_path: Path):
    timeout = [{"event": "submitted"}, {"event": "timeout", "outstanding": [1]}]
    seen: list[bool] = []
    run = run_inflight(ScriptedEngine(tmp_path, timeout), [], 5.0,
                       on_settled=lambda: seen.append(True))
    assert seen == [] and run.end["event"] == "timeout"


def test_without_on_settled_the_engine_reads_back_at_once(tmp_path: Path):
    engine = ScriptedEngine(tmp_path, EVENTS)
    run_inflight(engine, [], 5.0)
    assert "--read-back-after" not in engine.args and engine.guest.commands == []
