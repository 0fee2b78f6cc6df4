"""Cases grouped by guest shape: one run per shape in a single process, each
non-default shape on one xdist worker, node ids unchanged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.guest.lifecycle import POISON, GuestShape
from suite.plugin.grouping import order_by_shape, run_shape, scope_of, shape_key

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent


def test_shape_keys_name_only_what_differs_from_the_default():
    assert shape_key(GuestShape()) is None
    assert shape_key(GuestShape(lbs=512)) == "lbs=512"
    assert shape_key(GuestShape(nvme=3, append=("init_on_free=1",))) == \
        "nvme=3,append=('init_on_free=1',)"


class _Item:
    """What run_shape reads of a pytest item: its guest marker and --poison."""

    def __init__(self, poison: bool, poisoned: bool = False, explore_poison: str = "on",
                 **guest) -> None:
        opts = {"poison": poison, "explore_poison": explore_poison}
        self.config = type("C", (), {"getoption": lambda _s, name, default=None:
                                     opts.get(name, default)})()
        self.markers = {"guest": pytest.mark.guest(**guest).mark if guest else None,
                        "poisoned": pytest.mark.poisoned.mark if poisoned else None}

    def get_closest_marker(self, name: str):
        return self.markers.get(name)


def test_poison_gives_every_guest_of_the_run_the_poisoned_command_line():
    assert run_shape(_Item(False)) == GuestShape()
    assert run_shape(_Item(True)) == GuestShape(append=POISON)
    # a case that asks for poisoning already, or more, keeps each word once
    asked = run_shape(_Item(True, nvme=3, append=("slub_debug=FZP", "nokaslr")))
    assert asked.nvme == 3 and asked.append == ("slub_debug=FZP", "nokaslr", *POISON[:2])
    assert sorted(asked.append) == sorted(set(asked.append))


def test_explore_is_poisoned_unless_told_off():
    """test_explore is marked poisoned: its guests boot poisoned by default (a counter
    a constructor forgets reads 0x6b6b..., as the fsync hang at 317cbaa578 needed),
    plain with --explore-poison off; --poison alone still poisons."""
    assert run_shape(_Item(False, poisoned=True)) == GuestShape(append=POISON)
    assert run_shape(_Item(False, poisoned=True, explore_poison="off")) == GuestShape()
    assert run_shape(_Item(True, poisoned=True, explore_poison="off")) == GuestShape(append=POISON)


def test_the_explore_case_asks_for_poisoned_guests():
    text = (Path(__file__).parent.parent / "cases" / "test_explore.py").read_text()
    assert "@pytest.mark.poisoned\ndef test_explore(" in text


def test_order_puts_each_shape_together_first_then_the_default_cases():
    items = ["a", "P1", "b", "L1", "P2", "c", "L2"]
    key = {"P": "poison", "L": "lbs=512"}
    ordered = order_by_shape(items, lambda i: key.get(i[0]))
    assert ordered == ["P1", "P2", "L1", "L2", "a", "b", "c"]        # no times: as collected


def test_order_deals_the_longest_first_by_recorded_time():
    items = ["a", "P1", "b", "L1", "P2", "c", "L2"]
    key = {"P": "poison", "L": "lbs=512"}
    cost = {"a": 5, "b": 90, "c": 20, "P1": 10, "P2": 10, "L1": 30, "L2": 1}.get
    ordered = order_by_shape(items, lambda i: key.get(i[0]), cost)
    # lbs=512 (31 s) before poison (20 s); each shape kept together in its order
    assert ordered == ["L1", "L2", "P1", "P2", "b", "c", "a"]


def test_scope_is_the_shape_group_or_the_case_alone():
    shapes = {"t.py::p1": "lbs=512", "t.py::p2": "lbs=512"}
    assert scope_of("t.py::p1", shapes) == scope_of("t.py::p2", shapes) == "shape[lbs=512]"
    assert scope_of("t.py::d", shapes) == "t.py::d"


def cases_source(default: int, poison: int, small: int) -> str:
    """A test module of default-shape, poisoned and 512-byte-LBA cases that log
    which worker ran them in what order."""
    return f'''
import os, pytest

def _ran(name):
    with open(os.environ["RAN"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + " " + name + "\\n")

@pytest.mark.parametrize("i", range({default}))
def test_default(i):
    _ran(f"default{{i}}")

@pytest.mark.guest(append=("init_on_free=1",))
@pytest.mark.parametrize("i", range({poison}))
def test_poison(i):
    _ran(f"poison{{i}}")

@pytest.mark.guest(lbs=512)
@pytest.mark.parametrize("i", range({small}))
def test_small(i):
    _ran(f"small{{i}}")
'''


CASES = cases_source(6, 3, 3)


def _run(pytester: pytest.Pytester, tmp_path: Path, *args: str) -> list[tuple[str, str]]:
    ran = tmp_path / "ran.txt"
    pytester.makepyfile(test_cases=CASES)
    r = pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                      "--rootdir", str(pytester.path),
                                      "--results", str(tmp_path / "results"), *args,
                                      timeout=120)
    r.assert_outcomes(passed=12)
    return [tuple(line.split()) for line in ran.read_text().splitlines()]


@pytest.fixture
def env(monkeypatch, tmp_path: Path, pytester):
    # An ini of its own (and --rootdir, in _run) pins the inner session's rootdir:
    # without one each xdist worker looks upward for it, and a file another test left
    # in a shared parent folder once gave one worker another rootdir ("Different tests
    # were collected"); with the ini alone it happened again under load (2026-12-07).
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RAN", str(tmp_path / "ran.txt"))


def test_one_process_switches_shape_once_per_shape(pytester, env, tmp_path: Path):
    names = [n for _, n in _run(pytester, tmp_path)]
    shapes = [n.rstrip("0123456789") for n in names]
    switches = sum(a != b for a, b in zip(shapes, shapes[1:]))
    assert shapes[-1] == "default" and switches == 2, names


def test_xdist_puts_each_shape_on_one_worker(pytester, env, tmp_path: Path):
    ran = _run(pytester, tmp_path, "-n", "2")
    workers = {}
    for w, n in ran:
        workers.setdefault(n.rstrip("0123456789"), set()).add(w)
    assert len(workers["poison"]) == 1 and len(workers["small"]) == 1, ran
    assert {w for w, _ in ran} == {"gw0", "gw1"}            # the default cases are shared
    run = next((tmp_path / "results").iterdir())
    shapes = json.loads((run / "shapes.json").read_text())
    assert sorted(shapes) == sorted(f"test_cases.py::test_{s}[{i}]"
                                    for s in ("poison", "small") for i in range(3))
    # The controller collects nothing under xdist: the report's counts are the workers'.
    sel = json.loads((run / "selection.json").read_text())
    assert sel["collected"] == 12 and sel["deselected"] == 0, sel


UNEVEN = cases_source(4, 3, 1)


def test_xdist_deals_in_the_order_of_the_recorded_times(pytester, env, tmp_path: Path):
    """xdist's own order puts the 3-case poison group before the 1-case small one;
    by the recorded times small (300 s) goes first, and the default cases longest
    first: the worker runs them in exactly that order, from the controller's
    snapshot of the times (a worker that read none would crash or keep xdist's)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    times = {"test_cases.py::test_small[0]": 300.0,
             **{f"test_cases.py::test_poison[{i}]": 1.0 for i in range(3)},
             **{f"test_cases.py::test_default[{i}]": t for i, t in enumerate([5, 50, 1, 20])}}
    (cache / "durations.json").write_text(json.dumps(times))
    pytester.makepyfile(test_cases=UNEVEN)
    r = pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                      "--rootdir", str(pytester.path),
                                      "--results", str(tmp_path / "results"), "-n", "1",
                                      timeout=120)
    r.assert_outcomes(passed=8)
    names = [line.split()[1] for line in (tmp_path / "ran.txt").read_text().splitlines()]
    assert names == ["small0", "poison0", "poison1", "poison2",
                     "default1", "default3", "default0", "default2"], names


PARTS = '''
import os, pytest

def _ran(name):
    with open(os.environ["RAN"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + " " + name + "\\n")

@pytest.mark.guest(nvme=4)
@pytest.mark.parametrize("i", [pytest.param(i, marks=pytest.mark.guest_unit(i // 2))
                               for i in range(4)])
def test_part(i):
    _ran(f"part{i // 2}")
'''


def test_a_guest_unit_of_a_shape_goes_to_a_worker_of_its_own(pytester, env, tmp_path: Path):
    """The parts of an --xfstests-split share a shape, yet must run at once."""
    pytester.makepyfile(test_cases=PARTS)
    r = pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                      "--rootdir", str(pytester.path),
                                      "--results", str(tmp_path / "results"), "-n", "2",
                                      timeout=120)
    r.assert_outcomes(passed=4)
    ran = [tuple(line.split()) for line in (tmp_path / "ran.txt").read_text().splitlines()]
    by_part: dict[str, set[str]] = {}
    for w, n in ran:
        by_part.setdefault(n, set()).add(w)
    assert by_part["part0"] != by_part["part1"] and all(len(w) == 1 for w in by_part.values()), ran
