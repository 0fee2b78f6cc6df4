"""--shard i/N and `suite merge`: the shards cover the selection exactly once,
balanced by recorded times, and their real results folders merge into one verdict
that is never green when a shard is missing or ran nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.plugin.shards import deal, kept_deal, load_durations, parse_shard, record_durations
from suite.campaign.merge import merge

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent


def test_dealing_covers_every_case_once_and_balances_recorded_times():
    ids = [f"c{i}" for i in range(9)]
    times = {"c0": 600, "c1": 300, "c2": 300, "c3": 100, "c4": 100, "c5": 100}
    shards = deal(ids, 3, times)
    assert sorted(sum(shards, [])) == sorted(ids)
    loads = [sum(times.get(i, 200) for i in s) for s in shards]    # median of known = 200
    assert loads == [700, 700, 700]
    assert deal(ids, 3, times) == shards                           # every runner deals alike
    with pytest.raises(pytest.UsageError):
        parse_shard("4/3")
    assert parse_shard(" 2/4 ") == (2, 4)


def test_shards_run_one_after_another_still_cover_every_case_once(tmp_path: Path):
    """Seen here: stock master's shard 1/2 recorded its cases' times, shard 2/2 dealt
    from the new ones, and test_write_cut_by_rlimit_fsize[libaio-pwritev16] ran in
    both while other cases ran in neither."""
    ids = [f"c{i}" for i in range(12)]
    before = {f"c{i}": 10.0 * (i + 1) for i in range(12)}
    after = {**before, "c11": 1.0, "c0": 500.0}            # what shard 1 recorded
    assert deal(ids, 2, before)[1] != deal(ids, 2, after)[1]   # the trap, without a kept deal
    f = tmp_path / "shards" / "deal.json"
    first, kept = kept_deal(ids, 2, before, f)
    assert not kept and f.exists()
    second, kept = kept_deal(ids, 2, after, f)
    assert kept and second == first
    assert sorted(first[0] + second[1]) == sorted(ids)
    # Another selection, or another N, is dealt afresh.
    other, kept = kept_deal(ids[:-1], 2, after, f)
    assert not kept and sorted(sum(other, [])) == sorted(ids[:-1])


def test_case_times_are_kept_newest_first(tmp_path: Path):
    f = tmp_path / "durations.json"
    record_durations({"a": 10.04, "b": 20}, f)
    record_durations({"a": 30}, f)
    assert load_durations(f) == {"a": 30.0, "b": 20.0}


def test_a_session_can_keep_its_case_times_apart(tmp_path: Path, monkeypatch):
    """OZFS_VMCI_DURATIONS: the self-tests' inner sessions neither read the user's
    times (which reordered their cases) nor add theirs to them."""
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    record_durations({"cases/test_a.py::test_a": 50})
    mine = tmp_path / "inner" / "durations.json"
    mine.parent.mkdir()
    monkeypatch.setenv("OZFS_VMCI_DURATIONS", str(mine))
    assert load_durations() == {}
    record_durations({"test_hang.py::test_2": 40})
    assert load_durations() == {"test_hang.py::test_2": 40.0}
    monkeypatch.delenv("OZFS_VMCI_DURATIONS")
    assert load_durations() == {"cases/test_a.py::test_a": 50.0}


CASES = '''
import pytest


@pytest.mark.parametrize("v", range(5))
def test_case(v):
    assert v != 3
'''


def run_shard(pytester: pytest.Pytester, i: int, n: int, cache: Path) -> Path:
    out = pytester.path / f"shard{i}"
    pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                  "--shard", f"{i}/{n}", "--results", str(out),
                                  "--junitxml", str(out / "junit.xml"), timeout=120)
    return out


def test_real_shard_folders_merge_into_one_verdict(pytester, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    pytester.makepyfile(test_cases=CASES)
    dirs = [run_shard(pytester, i, 2, tmp_path) for i in (1, 2)]
    out = tmp_path / "merged"
    assert merge(dirs, out, expected=2) == 1                       # test_case[3] fails
    v = json.loads((out / "verdict.json").read_text())
    assert v["verdict"] == "fail" and any("test_case[3]" in w for w in v["why"])
    counted = sum(s["counts"]["passed"] + s["counts"]["failed"] for s in v["shards"])
    assert counted == 5 and all(s["counts"]["passed"] for s in v["shards"])
    merged = (out / "junit.xml").read_text()
    assert merged.count("<testcase") == 5 and "[shard1]" in merged and "[shard2]" in merged
    assert (out / "summary.md").read_text().startswith("## ozfs-vmci: FAIL")
    assert "test_case[3]" in (out / "report.html").read_text()
    # A shard that never reported: inconclusive, never green.
    assert merge([dirs[0], tmp_path / "shard-that-died"], tmp_path / "m2", expected=2) == 2
    assert merge([dirs[0]], tmp_path / "m3", expected=2) == 2
