"""The report's after-case part says what the judges read, findings or not."""
from __future__ import annotations

from pathlib import Path

from suite.judges.ondisk import Done
from suite.plugin.fixtures import ondisk_record
from suite.report.page.sections import judged

AFTER = """checked: taint (POE), pool health (1 pool(s)), ereports (0), accounting (10 kstat files)
not checked: kstat dbufstats: not in this build's kstats
no findings

declared: nothing

--- before the case
=== kstat zil
not checked: a line of a snapshot is not a judge's
"""
ONDISK = """scrub (the case's dataset included) in 1.4s
export + gauges + zdb -bcc in 11.2s
gauges after export: 9 checked against the load-time baseline
seconds: export 0.7, gauges 0.7, zdb 7.4, import 2.4
"""
NO_ZDB = """scrub (the case's dataset included) in 1.4s
export + gauges + zdb -bcc in 4.0s
gauges after export: other pools imported (tank2), not checked
zdb block accounting: the build has no zdb, not checked
"""


def folder(root: Path, name: str, after: str | None, ondisk: str | None = None,
           zdb: bool = True) -> Path:
    d = root / name
    d.mkdir()
    if after is not None:
        (d / "after-case.txt").write_text(after)
    if ondisk is not None:
        (d / "ondisk.txt").write_text(ondisk)
        # what _Thorough records beside its prose, step by step
        ondisk_record(d, scrubbed=1, seconds={"scrub": 1.4})
        ondisk_record(d, exported=1, zdb=int(zdb), seconds={"export+zdb": 4.0})
    return d


def test_a_quiet_run_says_what_its_judges_read_and_what_they_could_not(tmp_path: Path):
    dirs = [folder(tmp_path, "a", AFTER, ONDISK), folder(tmp_path, "b", AFTER, NO_ZDB, zdb=False),
            folder(tmp_path, "c", None)]                    # a case that never got judged
    j = judged(dirs)
    assert (j.cases, j.thorough, j.zdb) == (2, 2, 1)
    lines = j.lines()
    assert lines[0] == "--thorough: 2 case(s) scrubbed and exported, 1 walked by zdb -bcc."
    assert "not checked in 2 case(s): kstat dbufstats: not in this build's kstats" in lines
    assert "not checked in 1 case(s): zdb block accounting: the build has no zdb" in lines
    assert "not checked in 1 case(s): gauges after export: other pools imported (tank2)" in lines
    assert not any("snapshot" in ln for ln in lines)       # the snapshots are not read


def test_a_run_without_thorough_names_no_on_disk_check(tmp_path: Path):
    j = judged([folder(tmp_path, "a", AFTER)])
    assert (j.cases, j.thorough) == (1, 0)
    assert not any(ln.startswith("--thorough") for ln in j.lines())


def test_the_counts_come_from_the_record_not_from_its_prose(tmp_path: Path):
    """ondisk.txt is for people: rewording a sentence must not change the counts."""
    d = folder(tmp_path, "a", AFTER, ONDISK.replace("export + gauges", "exported"))
    assert (judged([d]).thorough, judged([d]).zdb) == (1, 1)
    ondisk_record(d, exported=1, seconds={"export+zdb": 2.0})   # a second pool
    done = Done.read(d)
    assert (done.scrubbed, done.exported, done.zdb) == (1, 2, 1)
    assert done.seconds == {"scrub": 1.4, "export+zdb": 6.0}
    skipped = folder(tmp_path, "b", AFTER)
    ondisk_record(skipped, not_run="the case cut the guest's power")
    assert Done.read(skipped).not_run == "the case cut the guest's power"
    assert judged([skipped]).thorough == 0
    (skipped / "ondisk.json").write_text("{not json")             # a torn file
    assert Done.read(skipped) is None and judged([skipped]).cases == 1
    (skipped / "ondisk.json").write_text("[1, 2]")                # not a record
    assert Done.read(skipped) is None
