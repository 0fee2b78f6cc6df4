"""--tier: the quick tier keeps each case function once, with the variant it names
as most telling, and still every known bug's targeted variant (suite/plugin/tiers.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent

CASES = '''
import pytest


@pytest.mark.parametrize("n", [1, 9], ids=["segs1", "segs9"])
def test_preadv_aligned(zfs_build, n):          # "preadv": a known bug's selection
    pass


@pytest.mark.parametrize("rw", ["rd", "wr"])
@pytest.mark.quick("wr")
def test_named(zfs_build, rw):
    pass


@pytest.mark.parametrize("v", ["x", "y", "z"])
def test_plain(zfs_build, v):
    pass


@pytest.mark.parametrize("a", [1, 0], ids=["libaio-async1", "libaio-async0"])
@pytest.mark.quick("libaio-async1")
def test_append(zfs_build, a):
    pass


def test_not_a_vm_case():
    pass
'''


@pytest.fixture(autouse=True)
def _inner_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))


def collected(pytester: pytest.Pytester, *args: str) -> tuple[list[str], str]:
    pytester.makepyfile(test_cases=CASES)
    res = pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                        "--collect-only", "-q", *args, timeout=120)
    out = res.stdout.str()
    return [ln.split("::", 1)[1] for ln in out.splitlines() if "::" in ln], out


def test_quick_keeps_one_telling_variant_per_function_and_every_bugs(pytester):
    ids, _ = collected(pytester, "--tier", "quick", "--series", "async-dio")
    assert ids == ["test_preadv_aligned[segs1]", "test_named[wr]", "test_plain[x]",
                   "test_append[libaio-async1]", "test_not_a_vm_case"]


def test_quick_on_a_stock_build_keeps_the_variant_it_can_run(pytester, monkeypatch):
    """A stock session (no --series) would only skip the async variant; a gate's
    base side keeps it, to run what its series side runs."""
    ids, _ = collected(pytester, "--tier", "quick")
    assert "test_append[libaio-async0]" in ids and "test_append[libaio-async1]" not in ids
    assert "test_named[wr]" in ids
    monkeypatch.setenv("OZFS_VMCI_INNER_SESSION", "1")
    assert "test_append[libaio-async1]" in collected(pytester, "--tier", "quick")[0]



def test_quick_in_a_gates_sides_keeps_the_series_variant_and_its_stock_sibling(
        pytester, monkeypatch):
    """A gate of an upstream pull request has two stock sides: the async variant alone
    would skip on both and the gate would compare nothing there; a series' gate still
    runs the async variant on its base (not applicable there, the feature is new)."""
    monkeypatch.setenv("OZFS_VMCI_INNER_SESSION", "gate")
    for args in ([], ["--series", "async-dio"]):
        ids = collected(pytester, "--tier", "quick", *args)[0]
        assert "test_append[libaio-async1]" in ids and "test_append[libaio-async0]" in ids
        assert "test_named[wr]" in ids and "test_named[rd]" not in ids
        assert len([i for i in ids if i.startswith("test_plain")]) == 1

def test_full_keeps_everything_and_quick_thins_after_k(pytester):
    assert len(collected(pytester, "--tier", "full")[0]) == 10
    ids, _ = collected(pytester, "--tier", "quick", "-k", "plain and not x")
    assert ids == ["test_plain[y]"]


def test_auto_under_tcg_is_quick_and_says_so_in_one_line(pytester):
    ids, _ = collected(pytester, "--tier", "auto", "--accel", "tcg")
    assert len(ids) == 5
    res = pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                        "--collect-only", "--tier", "auto", "--accel", "tcg",
                                        timeout=120)
    out = res.stdout.str()
    assert "5 deselected" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("ozfs-vmci: tier quick"))
    assert "TCG" in line and "--tier full" in line


SPLIT = '''
import pytest


@pytest.mark.xfstests
@pytest.mark.parametrize("part", ["part1of2", "part2of2"])
@pytest.mark.parametrize("profile", ["plain", "direct"])
def test_lane(zfs_build, profile, part):
    pass
'''


def test_quick_keeps_every_part_of_its_pick_and_the_variant_an_option_names(pytester):
    """A case split in parts (--xfstests-split) runs whole: the quick tier kept only
    its first part, half the tests. An option that names a variant (--xfstests-profile
    direct) is the pick: the case's first variant would only skip."""
    pytester.makepyfile(test_cases=SPLIT)

    def ids(*args: str) -> list[str]:
        res = pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                            "--collect-only", "-q", "-m", "xfstests",
                                            "--tier", "quick", *args, timeout=120)
        return [ln.split("::", 1)[1] for ln in res.stdout.str().splitlines() if "::" in ln]

    assert ids() == ["test_lane[plain-part1of2]", "test_lane[plain-part2of2]"]
    assert ids("--xfstests-profile", "direct") == \
        ["test_lane[direct-part1of2]", "test_lane[direct-part2of2]"]
