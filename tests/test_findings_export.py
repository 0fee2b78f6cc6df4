"""Findings ready to file (suite/report/findings.py): the newest case that failed by a
finding's symptoms gives the issue body its system table and lines, and its reproducer
goes beside it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.errors import SuiteError
from suite.report import findings
from suite.symptoms import CaseVerdict, Symptom

FINDINGS = '''
[[findings]]
id = "stale-read"
title = "An O_DIRECT read returns a freed record"
cases = ["test_corpus[stale]"]
kinds = ["wrong-bytes"]
seen = "stock abc on Linux 6.1"
'''


def case(run: Path, name: str, outcome: str, kind: str) -> Path:
    d = run / "cases" / name
    (d / "repro").mkdir(parents=True)
    (d / "repro" / "repro.sh").write_text("#!/bin/sh\nexit 1\n")
    (d / "repro" / "expected.json").write_text(json.dumps({"devices": 2}))
    (d / "verdict.json").write_text(CaseVerdict(f"cases/t.py::{name}", outcome,
                                                [Symptom(kind, "op 3: 4096 wrong bytes")],
                                                "r").to_json())
    (run / "build").mkdir(exist_ok=True)
    (run / "build" / "record-k.json").write_text(json.dumps(
        {"kernel": {"release": "6.1.0-57-amd64"},
         "source": {"describe": "zfs-2.4.99-1-gbe7657e3f2", "commit": "be7657e3f2788c4e"}}))
    return d


@pytest.fixture
def manifests(tmp_path, monkeypatch):
    (tmp_path / "patches" / "upstream").mkdir(parents=True)
    (tmp_path / "patches" / "upstream" / "findings.toml").write_text(FINDINGS)
    monkeypatch.setenv("OZFS_VMCI_PATCHES", str(tmp_path / "patches"))
    return tmp_path


def test_export_writes_the_issue_and_the_reproducer_of_a_failing_case(manifests):
    run = manifests / "results" / "r1"
    case(run, "test_corpus[stale]", "xfailed", "wrong-bytes")
    case(run, "test_other", "failed", "wrong-bytes")          # not the finding's case
    dest = findings.export("stale-read", [manifests / "results"], manifests / "out")
    issue = (dest / "issue.md").read_text()
    assert "Kernel Version | 6.1.0-57-amd64" in issue
    assert "OpenZFS Version | zfs-2.4.99-1-gbe7657e3f2 (be7657e3f27)" in issue
    assert "An O_DIRECT read returns a freed record" in issue and "stock abc" in issue
    assert "bash repro.sh /dev/sdX0 /dev/sdX1" in issue
    assert "wrong-bytes: op 3: 4096 wrong bytes" in issue
    assert (dest / "repro.sh").read_text().startswith("#!/bin/sh")
    assert "test_corpus[stale]" in (dest / "source.txt").read_text()


def test_a_finding_with_a_plain_reproducer_exports_it_as_repro_sh(manifests):
    """What a maintainer is asked to run is the hand-written, safe reproducer; the
    suite's replay (its engine embedded) stays beside it under another name."""
    plain = manifests / "patches" / "upstream" / "repro" / "stale-read"
    plain.mkdir(parents=True)
    (plain / "repro.sh").write_text("#!/bin/bash\n# plain\n")
    (plain / "repro.c").write_text("int main(void) { return 0; }\n")
    case(manifests / "results" / "r1", "test_corpus[stale]", "xfailed", "wrong-bytes")
    dest = findings.export("stale-read", [manifests / "results"], manifests / "out")
    issue = (dest / "issue.md").read_text()
    assert "bash repro.sh\n" in issue and "/dev/sdX" not in issue
    assert "file-backed vdevs" in issue and "suite-replay.sh" in issue
    assert (dest / "repro.sh").read_text() == "#!/bin/bash\n# plain\n"
    assert (dest / "repro.c").exists()
    assert (dest / "suite-replay.sh").read_text().startswith("#!/bin/sh")



def test_refresh_brings_a_report_exported_before_its_plain_reproducer_in_line(manifests):
    """A report exported while only the suite's replay existed (repro.sh asking for
    disks) gets the plain reproducer written later, byte for byte, its replay kept as
    suite-replay.sh, and its issue body's steps; a second refresh changes nothing."""
    case(manifests / "results" / "r1", "test_corpus[stale]", "xfailed", "wrong-bytes")
    dest = findings.export("stale-read", [manifests / "results"], manifests / "out")
    assert "/dev/sdX0 /dev/sdX1" in (dest / "issue.md").read_text()
    plain = manifests / "patches" / "upstream" / "repro" / "stale-read"
    plain.mkdir(parents=True)
    (plain / "repro.sh").write_text("#!/bin/bash\n# plain\n")
    assert findings.stale_reports(manifests / "out") == {"stale-read": ["repro.sh"]}
    assert findings.refresh(manifests / "out", []) == [
        "stale-read: suite-replay.sh, repro.sh, issue.md"]
    issue = (dest / "issue.md").read_text()
    assert "bash repro.sh\n" in issue and "/dev/sdX" not in issue
    assert issue.count("### Describe how to reproduce") == 1 and "op 3: 4096" in issue
    assert (dest / "suite-replay.sh").read_text() == "#!/bin/sh\nexit 1\n"
    assert findings.stale_reports(manifests / "out") == {}
    (plain / "repro.sh").write_text("#!/bin/bash\n# plain, mended\n")
    assert findings.refresh(manifests / "out", ["stale-read"]) == ["stale-read: repro.sh"]
    assert findings.refresh(manifests / "out", []) == []


def test_every_committed_report_carries_its_findings_plain_reproducer_as_it_is():
    """patches/upstream/reports/<id>/ is what a maintainer downloads: where the finding
    has a plain reproducer, the report's copy is that file now, not an older one
    (python -m suite findings refresh mends it)."""
    root = Path(__file__).resolve().parents[1] / "patches" / findings.REPORTS
    assert root.is_dir()
    assert findings.stale_reports(root) == {}

def test_no_case_failed_by_it_says_what_to_run(manifests):
    run = manifests / "results" / "r1"
    case(run, "test_corpus[stale]", "failed", "EIO")         # another symptom: not it
    with pytest.raises(SuiteError, match="no case under"):
        findings.export("stale-read", [manifests / "results"], manifests / "out")
    with pytest.raises(SuiteError, match="no upstream finding"):
        findings.get("nope")
    assert "stale-read" in findings.table()


def test_the_exported_text_names_no_path_of_the_machine_that_ran_it(tmp_path):
    detail = ("VERIFY0(len) failed while running: LD_LIBRARY_PATH=/root/.cache/ozfs-vmci/builds/"
              "0952858c5b969fbc/src/.libs /root/.cache/ozfs-vmci/builds/0952858c5b969fbc/src/"
              "cmd/zpool import tank; PYTHONPATH=/work/main bash /work/main/suite/ioengine/"
              "client.sh /tmp/ozfs-engine/srv /usr/bin/python3 (in flight)")
    got = findings.scrub(detail)
    assert got == "VERIFY0(len) failed while running: zpool import tank; the I/O engine (in flight)"
    (tmp_path / "issue.md").write_text(detail)
    (tmp_path / "repro.sh").write_text(f"# {detail}\nPAYLOAD='/root/.cache/ozfs-vmci/builds/x'\n")
    findings.scrub_folder(tmp_path)
    assert "/root" not in (tmp_path / "issue.md").read_text()
    sh = (tmp_path / "repro.sh").read_text().splitlines()
    assert "/root" not in sh[0] and sh[1] == "PAYLOAD='/root/.cache/ozfs-vmci/builds/x'"


def test_one_file_per_distinct_sequence_and_every_corpus_shape_of_the_finding(manifests,
                                                                             monkeypatch):
    """A corpus case replays its sequence three times: the export keeps one file and
    points the replay at it; the finding's other corpus shapes go beside it."""
    d = case(manifests / "results" / "r1", "test_corpus[stale]", "xfailed", "wrong-bytes")
    lines = []
    for i in range(3):
        name = f"explore-7-000{i}-corpus{i}.seq.json"
        (d / "repro" / name).write_text('{"seed": 7, "ops": []}')
        lines.append(f'step "$HERE/{name}"')
    (d / "repro" / "other.seq.json").write_text('{"seed": 8, "ops": []}')
    (d / "repro" / "repro.sh").write_text("#!/bin/sh\n" + "\n".join(lines) + "\n")
    corpus = manifests / "corpus"
    corpus.mkdir()
    (corpus / "stale.json").write_text("{}")
    (corpus / "stale-too.json").write_text("{}")
    monkeypatch.setattr(findings, "CORPUS", corpus)
    f = findings.get("stale-read")
    monkeypatch.setattr(findings, "get", lambda fid: type(f)(
        f.id, f.title, ("test_corpus[stale]", "test_explore_corpus[stale]",
                        "test_explore_corpus[stale-too]", "test_explore_corpus[gone]"),
        f.kinds, f.seen))
    monkeypatch.setattr(findings, "write_reproducer", lambda *a, **k: None)
    dest = findings.export("stale-read", [manifests / "results"], manifests / "out")
    seqs = sorted(p.name for p in dest.glob("*.seq.json"))
    assert seqs == ["explore-7-0000-corpus0.seq.json", "other.seq.json"]
    script = (dest / "repro.sh").read_text()
    assert script.count("explore-7-0000-corpus0.seq.json") == 3 and "corpus1" not in script
    assert sorted(p.name for p in (dest / "sequences").iterdir()) == ["stale-too.json",
                                                                     "stale.json"]


def test_a_memory_safety_finding_exports_a_private_report_and_no_public_body(manifests):
    """A private finding (a heap overflow a production build allows) is exported for
    OpenZFS's security advisory form, never as a public issue body; a fix one finding
    shares with another is attached to both."""
    (manifests / "patches" / "upstream" / "findings.toml").write_text(FINDINGS + '''
disclosure = "private"
production = "KASAN: slab-out-of-bounds write in pin_user_pages_unlocked"
fix = "shared-fix"
''')
    fix = manifests / "patches" / "upstream" / "fixes" / "shared-fix"
    fix.mkdir(parents=True)
    (fix / "0001-x.patch").write_text("diff\n")
    case(manifests / "results" / "r1", "test_corpus[stale]", "xfailed", "wrong-bytes")
    dest = findings.export("stale-read", [manifests / "results"], manifests / "out")
    assert not (dest / "issue.md").exists()
    report = (dest / "security-report.md").read_text()
    assert report.startswith("# Not for a public issue")
    assert "Report a vulnerability" in report and "slab-out-of-bounds" in report
    assert "### Description and impact" in report
    assert "patches/upstream/fixes/shared-fix/" in report and (dest / "0001-x.patch").exists()


def test_private_needs_the_production_behaviour_and_unknown_keys_are_refused(manifests):
    path = manifests / "patches" / "upstream" / "findings.toml"
    path.write_text(FINDINGS + 'disclosure = "private"\n')
    with pytest.raises(SuiteError, match="production"):
        findings.upstream.load(path)
    path.write_text(FINDINGS + 'seen_on = "x"\n')
    with pytest.raises(SuiteError, match="unknown key.*seen_on"):
        findings.upstream.load(path)
