"""Power cuts in explore: the guest op's model and its recovery judge (run here, on a
file of this machine: the power is never cut, the file is judged as the op left it or
as a crash could have), the generator's draw, and the session's recovery hand-over."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.ioengine.explore.held import iovec_of, submitter_of
from suite.explore.conditions import GuestZfs
from suite.explore.gen import Choices, generate, sequence_seed
from suite.explore.ops import Op, Sequence
from suite.explore.session import Fresh, RunOutput, Settings, explore
from suite.explore.budget import parse_budget
from suite.ioengine.content import pattern
from suite.ioengine.explore.durable import Durable
from tests.test_explore import REPO, ddir, run_engine  # noqa: F401  (ddir: a fixture)

MIB = 1 << 20
FAKE_ZFS = ["--zfs-dataset", "nopool/ds", "--zfs-cmd", "/bin/false", "--zpool-cmd", "/bin/false"]


def test_durable_state_survives_the_trip_to_another_guest():
    d = Durable.of(b"a" * 5000)
    d.changed(b"a" * 4096 + b"b" * 904 + b"c" * 3000, 4096, 3904)
    back = Durable.from_state(json.loads(json.dumps(d.to_state())))
    assert (back.data, back.size, back.pending, back.sizes) == (d.data, d.size, d.pending, d.sizes)


def cut_sequence(barrier: str, iface: str = "libaio") -> dict[str, Any]:
    return {"seed": 5, "init_size": 3 * 4096, "file_size_max": MIB, "ops": [
        {"op": "pwrite", "iface": "sync", "direct": True, "off": 0, "len": 8192, "data": 1},
        {"op": "fsync"},
        {"op": "pwrite", "iface": "sync", "direct": False, "off": 8192, "len": 4096, "data": 2},
        {"op": "power_cut", "iface": iface, "off": 16384, "len": 8192, "segs": 2, "data": 9,
         "barrier": barrier}]}


def recover(d: Path, line: dict[str, Any], path: Path) -> tuple[int, list[dict]]:
    state = d / "cut.json"
    state.write_text(json.dumps(line))
    p = subprocess.run([sys.executable, "-m", "suite.ioengine", "explore-recover", str(state),
                        "--file", str(path), "--ops", "4", "--keep"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]


def test_power_cut_without_a_host_that_cuts_is_unsupported_and_does_nothing(ddir: Path):
    rc, lines = run_engine(ddir, cut_sequence("fsync"), "nocut", *FAKE_ZFS)
    op = [ln for ln in lines if ln.get("op") == "power_cut" and ln["event"] == "op"][0]
    assert rc == 0 and op["outcome"] == "unsupported" and "--power-cut-wait" in op["why"]
    assert not any(ln["event"] == "power-cut" for ln in lines)


@pytest.mark.parametrize("barrier", ["fsync", ""])
def test_power_cut_says_what_must_survive_and_recovery_judges_it(ddir: Path, barrier: str):
    rc, lines = run_engine(ddir, cut_sequence(barrier), f"cut{barrier}", *FAKE_ZFS,
                           "--power-cut-wait", "0.5", "--keep")
    cut = next(ln for ln in lines if ln["event"] == "power-cut")
    op = next(ln for ln in lines if ln["event"] == "op" and ln["op"] == "power_cut")
    assert rc == 1 and op["kind"] == "no-result" and "did not cut the power" in op["why"]
    assert cut["i"] == 3 and cut["submitted"] == 2 and cut["barrier"] == barrier
    path = ddir / f"cut{barrier}.bin"
    w1, w9 = pattern("5:w1", 0, 8192), pattern("5:w9", 16384, 8192)
    got = path.read_bytes()
    assert got[:8192] == w1 and got[16384:24576] == w9      # the writes landed here
    rc, out = recover(ddir, cut, path)                       # as the op left the file: right
    assert rc == 0 and out[-1]["ok"], out
    # The file as a crash may leave it: an unsynced block old, the in-flight writes not
    # landed (allowed only without a barrier), the size before them.
    crashed = bytearray(got[:12288])
    crashed[8192:12288] = pattern("5:init", 8192, 4096)
    path.write_bytes(bytes(crashed))
    rc, out = recover(ddir, cut, path)
    if barrier:
        assert rc == 1 and out[0]["kind"] in ("crash-lost", "crash-size"), out
    else:
        assert rc == 0 and out[-1]["ok"], out
    # A block fsync made durable lost: never allowed.
    lost = bytearray(got)
    lost[0:4096] = pattern("5:init", 0, 4096)
    path.write_bytes(bytes(lost))
    rc, out = recover(ddir, cut, path)
    assert rc == 1 and out[0]["kind"] == "crash-lost" and out[0]["first_wrong_byte"] == 0
    # Torn inside an aligned block of one in-flight write: never allowed.
    torn = bytearray(got)
    torn[16384 + 2048:16384 + 4096] = bytes(2048)
    path.write_bytes(bytes(torn))
    rc, out = recover(ddir, cut, path)
    assert rc == 1 and out[0]["kind"] in ("crash-torn", "crash-lost") and \
        out[0]["first_wrong_byte"] == 16384
    path.unlink()
    rc, out = recover(ddir, cut, path)
    assert rc == 1 and "is gone" in out[0]["why"]


def test_the_generator_ends_some_file_sequences_in_a_power_cut():
    ch = Choices(zfs_ops=True)
    seqs = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, ch) for k in range(100)]
    cuts = [s.ops[-1] for s in seqs if s.ops[-1].op == "power_cut"]
    assert 3 <= len(cuts) <= 25
    assert all(not s.caller for s in seqs if s.ops[-1].op == "power_cut")
    assert {c.barrier for c in cuts} >= {"fsync", ""}
    for c in cuts:
        assert c.off % 4096 == 0 and c.off + c.len * c.segs <= 3 * MIB and 1 <= c.segs <= 4
        assert Op.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert "barrier=" in cuts[0].render()
    vol = [generate(sequence_seed(1, k), 40, "zvol", 3 * MIB, ch) for k in range(100)]
    vcuts = [s.ops[-1] for s in vol if s.ops[-1].op == "power_cut"]
    assert vcuts and all(c.off + c.len * c.segs <= 3 * MIB for c in vcuts)
    assert not any(o.op == "power_cut" for s in vol for o in s.ops[:-1])
    loops = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, ch) for k in range(100)]
    assert not any(s.ops[-1].op == "power_cut" for s in loops if s.caller)


class CutRunner:
    """Every run reports a power cut at its last op."""
    def __init__(self) -> None:
        self.extra: list[list[str]] = []

    def run_sequence(self, seq_file: Path, target: str, timeout_s: float, extra=()) -> RunOutput:
        self.extra.append(list(extra))
        seq = Sequence.from_json(seq_file.read_text())
        i = len(seq.ops) - 1
        lines = [{"event": "begin", "i": k, "op": o.op} for k, o in enumerate(seq.ops)]
        lines = [ln for k in range(i) for ln in (lines[k], {"event": "op", "i": k, "op":
                                                          seq.ops[k].op, "ok": True,
                                                          "outcome": "ok"})]
        cut = {"event": "power-cut", "i": i, "path": target, "state": {}}
        return RunOutput(lines + [{"event": "begin", "i": i, "op": "power_cut"}, cut], None,
                         cut=cut)


class FakePower:
    def __init__(self, kind: str | None) -> None:
        self.kind, self.calls = kind, []

    def recover(self, line, n_ops, name, seq_dir):
        self.calls.append((line["i"], n_ops, name))
        ok = self.kind is None
        i = line["i"]
        return Fresh(CutRunner(), lambda seq: None, None), [
            {"event": "op", "i": i, "op": "power_cut", "ok": ok,
             "outcome": "ok" if ok else "failed", "kind": self.kind, "why": "lost"},
            {"event": "explore-done", "ok": ok, "failed_at": None if ok else i,
             "kind": self.kind, "why": "lost", "ops": n_ops}]


def only_cuts(seq_file_seed: int) -> Sequence:
    return Sequence(seed=seq_file_seed, ops=(Op("pwrite", off=0, len=4096, data=1),
                                             Op("power_cut", iface="libaio", off=0, len=4096,
                                                segs=1, data=2, barrier="fsync")))


@pytest.mark.parametrize("kind", [None, "crash-lost"])
def test_session_recovers_on_the_guest_after_the_cut_and_judges_there(tmp_path: Path, kind,
                                                                     monkeypatch):
    import suite.explore.session as session
    monkeypatch.setattr(session, "generate", lambda seed, *a, **k: only_cuts(seed))
    power, runner = FakePower(kind), CutRunner()
    s = Settings(workdir="/x", seq_dir=tmp_path / "e", out_dir=tmp_path / "o",
                 shrink_tries=0, shrink_s=0.0)
    r = explore(runner, s, 1, parse_budget("2x"), Choices(zfs_ops=False), power=power)
    assert power.calls and power.calls[0][:2] == (1, 2)
    assert any("--power-cut-wait" in e for e in runner.extra)
    if kind is None:
        assert [run["state"] for run in r.runs] == ["ok", "ok"]
        assert [run["power_cuts"] for run in r.runs] == [1, 1]
    else:
        assert r.runs[0]["state"] == "failed" and r.runs[0]["kind"] == "crash-lost"
        assert r.findings and r.findings[0].kind == "crash-lost"


def test_no_power_cut_is_drawn_where_the_session_cannot_cut(tmp_path: Path):
    from suite.explore.session import Explorer
    e = Explorer(CutRunner(), Settings(workdir="/x", seq_dir=tmp_path / "e",
                                       out_dir=tmp_path / "o"), Choices(zfs_ops=False))
    assert "power_cut" not in e.choices.ops
    e = Explorer(CutRunner(), Settings(workdir="/x", seq_dir=tmp_path / "e",
                                       out_dir=tmp_path / "o"), Choices(zfs_ops=False),
                 power=FakePower(None))
    assert "power_cut" in e.choices.ops


def test_rwf_dsync_writes_that_completed_must_survive_without_a_barrier(ddir: Path):
    seq = cut_sequence("dsync")
    rc, lines = run_engine(ddir, seq, "dsync", *FAKE_ZFS, "--power-cut-wait", "0.5", "--keep")
    cut = next(ln for ln in lines if ln["event"] == "power-cut")
    path = ddir / "dsync.bin"
    got = path.read_bytes()
    done = cut["complete_before_barrier"]
    undone = bytearray(got)
    undone[16384:24576] = bytes(8192)           # the first in-flight write never landed
    path.write_bytes(bytes(undone))
    rc, out = recover(ddir, cut, path)
    if 0 in done:                               # it had completed: RWF_DSYNC made it durable
        assert rc == 1 and out[0]["kind"] in ("crash-lost", "crash-torn"), out
    else:
        assert rc == 0, out
    # Without RWF_DSYNC and without a barrier the same file is allowed.
    rc, lines = run_engine(ddir, cut_sequence(""), "nodsync", *FAKE_ZFS, "--power-cut-wait",
                           "0.5", "--keep")
    cut = next(ln for ln in lines if ln["event"] == "power-cut")
    rc, out = recover(ddir, cut, path)
    assert rc == 0, out


class Executes:
    """A runner whose every run executes what the sequence drew, ok."""
    def __init__(self) -> None:
        self.seqs: list[Sequence] = []

    def run_sequence(self, seq_file: Path, target: str, timeout_s: float, extra=()) -> RunOutput:
        seq = Sequence.from_json(seq_file.read_text())
        self.seqs.append(seq)
        lines = []
        for i, o in enumerate(seq.ops):
            ln = {"event": "op", "i": i, "op": o.op, "ok": True, "outcome": "ok"}
            if o.op in ("pread", "preadv", "pwrite", "pwritev"):
                ln["buf"] = o.buf
            if o.op == "append_batch":       # the engine's line: its iface, its limit
                ln.update(iface=o.iface, **({"rlimit_fsize": 1} if o.limit else {}))
            elif o.limit:
                ln["limit"] = o.limit
            if o.flags:
                ln["flags"] = o.flags
            if o.op in ("held_read", "held_write"):
                ln.update(held=True, then=o.then, submitter=submitter_of(o.iface, o.keep),
                          iovec=iovec_of(o.segs))
            if o.op == "actors":
                ln["actors"] = max(2, min(4, o.segs or 2))
            if o.op in ("crash", "power_cut"):
                ln["outcome"] = "ok"
            if o.op == "power_cut":
                lines.append({"event": "power-cut", "i": i, "slow_ms": o.slow_ms})
            lines.append(ln)
        return RunOutput(lines + [{"event": "explore-done", "ok": True, "ops": len(seq.ops)}], 0)


def test_cover_runs_only_sequences_that_reach_a_cell_not_executed_yet(tmp_path: Path):
    from suite.explore import reach
    runner = Executes()
    s = Settings(workdir="/x", seq_dir=tmp_path / "e", out_dir=tmp_path / "o", cover=True)
    ch = Choices(params=("zfs_dio_strict", "zfs_dio_enabled"), zfs_ops=True)
    r = explore(runner, s, 1, parse_budget("200x"), ch, power=FakePower(None),
                zfs=GuestZfs("tank/x", "zfs", "zpool"))
    assert r.cover["missing"] == [] and len(r.runs) < 80, r.cover
    done = reach.from_runs(r.runs, "executed")
    assert not done.missing(("zfs_dio_strict", "zfs_dio_enabled"),
                            ("crash:freeze", "crash:power", "crash:power-slow"))
    # every sequence it ran added a cell the ones before had not executed
    seen = reach.Reach()
    for run in r.runs:
        new = (set(run["executed"]) | set(run["tunables"])) - set(seen.cells) - set(seen.tunables)
        assert new, run["k"]
        seen.add(run["executed"], run["tunables"])


def test_a_zvol_power_cut_carries_the_window_and_the_zvol_name(ddir: Path):
    """A file stands in for the zvol (explore-run cannot ask a regular file which zvol
    it is): the model is the whole window, the line names the zvol to find again."""
    dev = ddir / "vol.img"
    dev.write_bytes(bytes(MIB))
    seq = {"seed": 5, "target": "zvol", "init_size": MIB, "file_size_max": MIB, "ops": [
        {"op": "pwrite", "iface": "sync", "direct": True, "off": 0, "len": 8192, "data": 1},
        {"op": "fsync"},
        {"op": "power_cut", "iface": "libaio", "off": 65536, "len": 4096, "segs": 2,
         "data": 9, "barrier": "fsync"}]}
    f = ddir / "vol.seq.json"
    f.write_text(json.dumps(seq))
    p = subprocess.run([sys.executable, "-m", "suite.ioengine", "explore-run", str(f), "--file",
                        str(dev), "--blockdev", "--scratch", str(ddir / "vol"), "--zvol",
                        "tank/case/vol", "--power-cut-wait", "0.5", "--keep"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]
    cut = next(ln for ln in lines if ln["event"] == "power-cut")
    assert cut["zvol"] == "tank/case/vol" and cut["submitted"] == 2
    d = Durable.from_state(cut["state"])
    assert d.size == MIB and bytes(d.data[:8192]) == pattern("5:w1", 0, 8192)


def test_a_write_of_nothing_past_eof_leaves_the_model_as_it_was():
    """A copy_file_range refused with EXDEV (ext4 on a loop device, the source on the
    dataset) moved nothing: the model grew to its offset all the same, and the actors
    op after it mapped a file shorter than the model said (found by explore at the
    async-dio head, 2026-12-05: actor-died, 'mmap length is greater than file size')."""
    from suite.ioengine.explore.model import Model
    m = Model(b"abc")
    m.write(2920448, b"")
    assert m.size == 3 and bytes(m.data) == b"abc"
    m.write(5, b"x")
    assert bytes(m.data) == b"abc\0\0x"


def test_slow_disks_hold_the_writes_in_flight_through_zinject_then_cleared(ddir: Path,
                                                                       tmp_path: Path):
    """``slow_ms``: each disk ``zpool list -vHP`` names gets ``zinject -D ms:1`` before the
    writes; the op's line says so; with no cut the injection is cleared."""
    tools = tmp_path / "sbin"
    tools.mkdir()
    calls = tmp_path / "zinject.calls"
    (tools / "zpool").write_text("#!/bin/sh\nprintf 'nopool\\t-\\n\\t/dev/fake0\\t-\\n"
                                 "\\t/dev/fake1\\t-\\n'\n")
    (tools / "zinject").write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\n")
    for t in ("zpool", "zinject"):
        (tools / t).chmod(0o755)
    seq = cut_sequence("fsync")
    seq["ops"][-1]["slow_ms"] = 250
    rc, lines = run_engine(ddir, seq, "slow", "--zfs-dataset", "nopool/ds", "--zfs-cmd",
                           "/bin/false", "--zpool-cmd", str(tools / "zpool"),
                           "--power-cut-wait", "0.5")
    cut = next(ln for ln in lines if ln["event"] == "power-cut")
    assert cut["slow_ms"] == 250
    assert calls.read_text().splitlines() == ["-d /dev/fake0 -D 250:1 nopool",
                                              "-d /dev/fake1 -D 250:1 nopool", "-c all"]
    # the op round-trips through the host's sequence with the field, and without it at 0
    op = Op.from_dict(seq["ops"][-1])
    assert op.to_dict()["slow_ms"] == 250 and "slow_ms=250" in op.render()
    assert "slow_ms" not in Op.from_dict(cut_sequence("fsync")["ops"][-1]).to_dict()


def test_slow_disks_are_drawn_for_files_only_and_reach_their_cell():
    from suite.explore import reach
    ch = Choices(zfs_ops=True, power_share=1.0)
    files = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, ch) for k in range(60)]
    zvols = [generate(sequence_seed(1, k), 40, "zvol", 3 * MIB, ch) for k in range(40)]
    slow = [o.slow_ms for q in files for o in q.ops if o.op == "power_cut"]
    assert set(slow) >= {0, 250, 1000}
    assert not any(o.slow_ms for q in zvols for o in q.ops)
    q = next(q for q in files if any(o.slow_ms for o in q.ops if o.op == "power_cut"))
    assert "crash:power-slow" in reach.seq_cells(q)


def test_given_sequences_are_run_in_turn_instead_of_generated_ones(tmp_path: Path):
    """--explore-replay: the session runs exactly the sequences given, once each, power
    cut included, whatever the budget; then stops."""
    runner = Executes()
    cut = Sequence(seed=77, init_size=8192, ops=(Op("power_cut", iface="libaio", off=0,
                                                    len=4096, segs=1, data=1, barrier="fsync",
                                                    slow_ms=250),))
    other = Sequence(seed=78, ops=(Op("verify"),))
    s = Settings(workdir="/x", seq_dir=tmp_path / "e", out_dir=tmp_path / "o",
                 sequences=(cut, other, cut))
    r = explore(runner, s, 1, parse_budget("15m"), Choices(zfs_ops=True),
                power=FakePower(None), zfs=GuestZfs("tank/x", "zfs", "zpool"))
    assert [q.seed for q in runner.seqs] == [77, 78, 77]
    assert runner.seqs[0].ops[0].slow_ms == 250 and len(r.runs) == 3
    assert "crash:power-slow" in r.runs[0]["executed"]


class FailsKnownFirst(Executes):
    """Each sequence fails at its second op with a known finding's signature while
    that op is in it; without it, it runs to its end."""
    def __init__(self, kind: str = "error:EAGAIN") -> None:
        super().__init__()
        self.kind = kind

    def run_sequence(self, seq_file: Path, target: str, timeout_s: float, extra=()) -> RunOutput:
        out = super().run_sequence(seq_file, target, timeout_s, extra)
        seq = self.seqs[-1]
        if len(seq.ops) < 40:
            return out
        return RunOutput([{"event": "op", "i": 0, "op": seq.ops[0].op, "ok": True,
                           "outcome": "ok"},
                          {"event": "op", "i": 1, "op": seq.ops[1].op, "ok": False,
                           "outcome": "failed", "kind": self.kind, "why": "known"},
                          {"event": "explore-done", "ok": False, "failed_at": 1,
                           "kind": self.kind, "why": "known", "ops": len(seq.ops)}], 1)


def test_a_sequence_failing_as_a_known_finding_is_run_again_past_that_op(tmp_path: Path):
    """A failure of a known upstream finding on this kernel: its tail (here its power
    cut) is reached by the same sequence without the op that failed, counted once in the
    reach table; never shrunk. Past the kernel the finding is fixed on: a finding."""
    from types import SimpleNamespace
    from suite.explore import reach
    from suite.explore.ops import OP_KINDS
    ch = Choices(zfs_ops=True, power_share=1.0)
    seq0 = generate(sequence_seed(3, 0), 40, "file", 3 * MIB, ch)
    finding = SimpleNamespace(id="sendfile-from-direct-always-moves-nothing",
                              kinds=("error:EAGAIN",), explore_ops=OP_KINDS,
                              linux_before="6.5")

    def run(release: str, out: str):
        runner = FailsKnownFirst()
        s = Settings(workdir="/x", seq_dir=tmp_path / out / "e", out_dir=tmp_path / out / "o",
                     kernel_release=release, upstream=[finding], shrink_tries=2)
        return runner, explore(runner, s, 3, parse_budget("2x"), ch, power=FakePower(None),
                               zfs=GuestZfs("tank/x", "zfs", "zpool"), log=lambda _: None)

    runner, r = run("6.1.0-40-amd64", "old")
    # the budget counts sequences: 2x runs two, the first of them twice
    assert [len(q.ops) for q in runner.seqs][:2] == [40, 39] and len(runner.seqs) == 4
    assert runner.seqs[1].ops == seq0.ops[:1] + seq0.ops[2:]
    assert [run["resumed"] for run in r.runs] == [0, 1, 0, 1] and not r.findings
    assert r.runs[0]["known"] == finding.id and "crash:power" in r.runs[1]["executed"]
    assert reach.from_runs(r.runs).sequences == 2
    runner, r = run("6.12.57-amd64", "new")     # fixed there: a finding, not run past
    assert len(r.findings) == 1 and all(not run["resumed"] for run in r.runs)


def test_cover_gives_up_the_cell_of_an_op_avoided_for_a_known_hang():
    """splice hangs Linux 6.1 (a known finding): explore stops drawing it, so --cover
    must not wait for a ``moved:splice`` run that can never come."""
    from suite.explore.cover import Cover
    c = Cover.of(Choices(zfs_ops=True), "file")
    assert "moved:splice" in c.missing([])
    c.give_up("moved:splice")
    assert "moved:splice" not in c.missing([]) and c.given_up == ["moved:splice"]
    c.give_up("moved:splice")
    assert c.given_up == ["moved:splice"]


def test_no_file_system_on_a_loop_a_strict_dataset_cannot_mount():
    """ext4 on a 512-byte-sector direct-io loop reads its superblock with a 512-byte
    O_DIRECT read: zfs_dio_strict=1 refuses it by design, the mount fails and the
    sequence brought no result (the stock 6.1 cover run, seed 131645252731149)."""
    from suite.explore.gen import PROP_CHOICES
    from suite.explore.targets import param_table
    ch = Choices(props=dict(PROP_CHOICES), params=tuple(sorted(param_table("file"))),
                 zfs_ops=True)
    seqs = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, ch) for k in range(400)]
    fs = [q for q in seqs if q.caller.get("kind") == "loopfs"]
    assert {q.caller["lbs"] for q in fs} == {512, 4096} and any(q.caller["dio"] for q in fs)
    assert not [q for q in fs if q.caller["dio"] and q.caller["lbs"] == 512 and
                q.params.get("zfs_dio_strict") == 1 and q.props.get("direct") != "disabled"]
    stock = Choices(props=dict(PROP_CHOICES), zfs_ops=True, params=(
        "zfs_dio_enabled", "zfs_dio_strict", "zfs_vdev_direct_write_verify"))
    q = generate(131645252731149, 40, "file", 3 * MIB, stock)
    assert q.params["zfs_dio_strict"] == 1 and q.props["direct"] == "standard"
    assert q.caller == {"kind": "loopfs", "dio": 1, "lbs": 4096}


ASYNC_BUILD = ("zfs_async_dio_enabled", "zfs_dio_enabled", "zfs_dio_strict",
               "zfs_async_dio_max_inflight", "zfs_vdev_direct_write_verify")


def durable_shape(q: Sequence) -> bool:
    """The durability shape the async barriers must honour, with conditions that let
    it be judged: async writes on slowed disks, a barrier, Direct I/O on."""
    cut = [o for o in q.ops if o.op == "power_cut"]
    return bool(cut) and cut[0].slow_ms > 0 and cut[0].iface in ("libaio", "io_uring") and \
        cut[0].barrier != "" and q.params.get("zfs_async_dio_enabled") == 1 and \
        q.params.get("zfs_dio_enabled", 1) == 1 and q.props.get("direct") != "disabled"


def test_a_build_with_the_async_path_runs_sequences_under_its_conditions():
    """Async-shaped sequences: the async path on, Direct I/O on, nothing cached, no
    caller between; the durability shape is drawn in them (and only with Direct I/O
    on) often enough that a 15-minute run under TCG (about ten sequences) meets it: at
    seed 1 it was 2.5% of the sequences, and the one a run drew had Direct I/O off."""
    from suite.explore.gen import async_shaped
    ch = Choices(zfs_ops=True, params=ASYNC_BUILD)
    seqs = [generate(sequence_seed(1, k), 40, "file", 3 * MIB, ch) for k in range(200)]
    shaped = [q for q in seqs if async_shaped(q.seed, "file", ch)]
    assert 0.3 <= len(shaped) / len(seqs) <= 0.5
    assert all(q.params["zfs_async_dio_enabled"] == q.params["zfs_dio_enabled"] == 1 and
               q.props["direct"] != "disabled" and q.props["primarycache"] == "metadata" and
               not q.caller and q.params["zfs_async_dio_max_inflight"] == 64 << 20
               for q in shaped)
    durable = [q for q in seqs if durable_shape(q)]
    assert len(durable) / len(seqs) >= 0.10, len(durable)
    assert any(durable_shape(q) for q in seqs[:10])       # seed 1's first ten meet it
    # a power cut with Direct I/O off is never the durability shape's share
    off = [q for q in seqs if any(o.op == "power_cut" for o in q.ops)
           and q.params["zfs_dio_enabled"] == 0]
    assert len(off) <= 0.05 * len(seqs)
    # a build without the async path draws what it always drew: nothing forced
    plain = Choices(zfs_ops=True, params=("zfs_dio_strict",))
    assert [generate(sequence_seed(1, k), 40, "file", 3 * MIB, plain) for k in range(30)] == \
        [generate(sequence_seed(1, k), 40, "file", 3 * MIB,
                  Choices(zfs_ops=True, params=("zfs_dio_strict",), async_shape_share=0))
         for k in range(30)]
