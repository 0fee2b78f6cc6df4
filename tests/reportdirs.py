"""Results folders as the suite writes them, made here without a VM: sessions with a
build record, accelerator and capabilities, cases with their verdict, condition x
outcome tables, evidence, commands.log, after-case checks, reproducer and phases,
explore findings, perf charts and a coverage record. The report self-tests render
them (tests/test_report_page.py)."""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from suite.paths import case_slug
from suite.symptoms import CaseVerdict, Symptom
from suite.casekit.tables import Table

KVM_REASON = ("KVM unusable: qemu -accel kvm exited rc=-6 before the kernel ran: "
              "qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: "
              "Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed.")
COLUMNS = ("trials", "correct", "EFAULT", "EINVAL", "other error", "short", "wrong bytes",
           "overrun", "no result", "served by DIO", "served by ARC")


def png(path: Path, width: int = 60, height: int = 30) -> Path:
    """A small PNG with a red and a blue half (a stand-in for a perf chart)."""
    rows = b"".join(b"\0" + b"".join(b"\xc0\x20\x20" if x < width // 2 else b"\x20\x40\xc0"
                                     for x in range(width)) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(
        ">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b""))
    return path


@dataclass
class CaseSpec:
    nodeid: str
    outcome: str = "passed"
    symptoms: list[Symptom] = field(default_factory=list)
    reason: str = ""
    bad_rows: int = 0                    # table rows with failures (EFAULT on async=1)
    evidence: bool = False
    tables: int = 1


def session(parent: Path, name: str = "20260101-120000-async-dio", *, describe: str =
            "zfs-2.4.99-949-gc7b7a98ba2", srcversion: str = "625360E3CBE870A9A23187C",
            series: bool = True, capabilities: bool = True, seconds: float = 0) -> Path:
    """A session folder with its build record, accelerator and capabilities."""
    s = parent / name
    (s / "build").mkdir(parents=True, exist_ok=True)
    commits = [f"{i:x}" * 40 for i in range(1, 4)]
    (s / "build" / "record-6377b1f07484b164.json").write_text(json.dumps({
        "key": "6377b1f07484b164", "created": "2025-12-31T10:00:00+0000",
        "kernel": {"profile": "debian-6.1", "release": "6.1.0-57-amd64"},
        "source": {"describe": describe, "commit": "c7b7a98ba2b2f62a7d907754c6e936d8125a86a7",
                   "series": [{"name": "async-dio", "commits": commits}] if series else []},
        "modules": {"zfs": {"srcversion": srcversion}, "spl": {"srcversion": "F35"}},
        "seconds": {"configure": 380.0, "make": 800.0}, "incremental": {}}, indent=1))
    (s / "accel.json").write_text(json.dumps({"name": "tcg", "scale": 6.0,
                                              "reason": KVM_REASON}))
    if capabilities:
        (s / "build" / "capabilities.json").write_text(json.dumps([
            {"name": "Direct I/O", "have": True, "value": "zfs_dio_enabled=1",
             "behaviour": "zfs_dio_enabled=1 (1: O_DIRECT bypasses the ARC where aligned)"},
            {"name": "async O_DIRECT (async-dio)", "have": series,
             "value": "zfs_async_dio_enabled=0" if series else "",
             "behaviour": "no async path: libaio/io_uring O_DIRECT completes synchronously"},
            {"name": "kstats", "have": True, "value": "10 files",
             "behaviour": "abdstats, arcstats, dbufstats, dmu_tx"}], indent=1))
    if seconds:
        (s / "selection.json").write_text(json.dumps({
            "collected": 3, "deselected": 1, "k": "not zvol", "tier": "quick: guests run "
            "under TCG", "trials": "default (14)", "seconds": seconds}))
    return s


def table(spec: CaseSpec, n: int) -> Table:
    rows = {}
    for i, cond in enumerate(("libaio async=1 strict=1", "libaio async=0 strict=1",
                              "sync preadv strict=1")):
        bad = 13 if i < spec.bad_rows else 0
        rows[cond] = {"trials": 14, "correct": 14 - bad, "EFAULT": bad,
                      "served by DIO": 14 - bad, "served by ARC": bad}
    fails = [f"libaio async=1 strict=1: {13}/14 trials failed; first: EFAULT"] \
        if spec.bad_rows else []
    return Table(f"PREADV {4 * n} x 4 KiB page-aligned, libaio, zfs_dio_strict=1", rows,
                 COLUMNS, notes=["42 trials planned, 42 returned"], failures=fails)


def case(sess: Path, spec: CaseSpec) -> Path:
    """A case folder as the plugin leaves it."""
    d = sess / "cases" / case_slug(spec.nodeid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "verdict.json").write_text(CaseVerdict(spec.nodeid, spec.outcome, spec.symptoms,
                                                spec.reason).to_json() + "\n")
    for n in range(1, spec.tables + 1):
        table(spec, n).write(d, f"table-{n}")
    (d / "commands.log").write_text('[2026-01-01 12:00:00] ozfs-main-1 $ zpool create tank '
                                    '/dev/nvme0n1\n  | {"json": "engine output"}\n')
    (d / "phases.json").write_text(json.dumps({"nodeid": spec.nodeid, "boot": 90.0,
                                               "begin": 6.0, "fixtures": 14.0, "call": 48.0,
                                               "end": 12.0}))
    judged = [s for s in spec.symptoms if ":" in s.kind]
    (d / "after-case.txt").write_text(
        "checked: taint (POE), pool health (1 pool(s)), ereports (0), accounting (10 kstat "
        "files)\n" + "".join(f"FINDING {s.kind}: {s.detail}\n" for s in judged)
        + ("" if judged else "no findings\n"))
    if spec.evidence:
        ev = d / "evidence"
        ev.mkdir(exist_ok=True)
        (ev / "summary.txt").write_text(f"evidence: {spec.reason}\n  guest ssh: alive\n"
                                        "  no task in D state\n")
        (ev / "console-tail.txt").write_text("[  12.3] zfs: loaded\n" * 20)
        (ev / "dstate.txt").write_text("")            # empty: not linked
        (d / "repro").mkdir(exist_ok=True)
        (d / "repro" / "repro.sh").write_text("#!/bin/sh\necho replay\n")
    return d


def explore_finding(sess: Path) -> Path:
    """``suite explore``'s case folder with one shrunk finding."""
    d = case(sess, CaseSpec("cases/test_explore.py::test_explore", "failed",
                            [Symptom("paths-disagree", "explore seed 42 op 3 (verify): "
                                     "O_DIRECT: 4082 wrong bytes from 49152")],
                            "explore #1: sequence 42: failed at op 3", tables=0,
                            evidence=True))
    ex = d / "explore"
    ex.mkdir()
    (ex / "minimal-42.txt").write_text(
        "explore #1: sequence 42: failed at op 3: paths-disagree\nshrunk from 40 to 4 ops\n\n"
        "     0  truncate size=90113\n     1  mmap_write off=32768 len=20480\n"
        "     2  evict\n=>   3  verify\n")
    (ex / "minimal-42.json").write_text('{"version": 1, "seed": 42, "ops": []}\n')
    (ex / "summary.json").write_text(json.dumps({
        "master_seed": 1, "budget": "900s", "sequences": 2, "replays": 87, "elapsed_s": 1289.5,
        "runs": [{"k": 0, "seed": 7, "state": "ok"}, {"k": 1, "seed": 42, "state": "failed"}],
        "findings": [{"seed": 42, "kind": "paths-disagree", "confirmed": True, "ops": 4,
                      "tries": 84, "json": "/elsewhere/minimal-42.json",
                      "txt": "/elsewhere/minimal-42.txt"}], "no_result": []}))
    return d


def passing_run(parent: Path) -> Path:
    """A plain run that passed: three cases with tables, a perf chart, coverage."""
    s = session(parent, seconds=1234.5)
    for i in range(3):
        case(s, CaseSpec(f"cases/test_dio_preadv.py::test_preadv_aligned[libaio-segs{i}]"))
    png(s / "perf" / "dataset-dio.png")
    (s / "perf" / "dataset-dio.md").write_text(
        "**dataset async O_DIRECT** (tcg)\n\n| cell | MiB/s async=0 | MiB/s async=1 |\n"
        "|---|---|---|\n| randread 4k | 120 | 250 |\n")
    (s / "coverage.json").write_text(json.dumps({
        "base": "efc74710b8", "lines": 120, "covered": 90,
        "files": [{"file": "module/os/linux/zfs/zpl_file.c", "lines": 80, "covered": 70,
                   "missed": [101, 102, 140]},
                  {"file": "module/zfs/dmu_direct.c", "lines": 40, "covered": 20,
                   "missed": {"from": 10, "to": 30}}]}))
    return s
