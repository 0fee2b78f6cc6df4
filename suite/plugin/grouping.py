"""Cases grouped by the guest shape they ask for, so a worker boots each shape once.

A guest is reused while the next case asks for the same shape
(``@pytest.mark.guest``); a case with another shape (more disks, a 512-byte LBA,
the poisoning kernel command line) costs a boot, and so does the next default
case after it. In collection order those cases are scattered, and xdist's
``load`` scheduling deals them to whichever worker is free: a run of the quick
tier paid 12 boots for 36 cases, 41% of its guest time.

Three cuts, none of which changes a node id (reports, gates and ``suite repro``
name cases by node id):

- the selection is sorted, stably, into one run of cases per non-default shape
  (the longest run first), then the default-shape cases, so a single process
  (``-n 0``) boots each shape once;
- under xdist, when the distribution is pytest-xdist's default ``load``, the
  controller schedules each non-default shape as one unit on one worker
  (``ShapeScheduling``, xdist's own ``LoadScopeScheduling`` with the scope of a
  node id being its shape). Workers write ``shapes.json`` (node id -> shape key)
  in the run folder before they report their collection; the controller reads it
  when it deals. An explicit ``--dist`` other than ``load`` is left alone;
- a case marked ``guest_unit(name)`` is a unit of its own within its shape (the
  parts of an ``--xfstests-split``, meant to run at once on different workers);
- the units are dealt in that order, not in xdist's (which puts the units with
  the most cases first and left the one-case shapes, each a boot, to the end: a
  worker idled 96 s while the other booted two of them). Shapes go first because
  a worker's first guest boots anyway, and the default cases follow longest first
  by their recorded times (``durations.json``, the session's snapshot), so the
  short ones fill the tail and the workers finish together.
"""
from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from suite import paths
from suite.guest.lifecycle import POISON, GuestShape
from suite.plugin.shards import case_times, cost_of

SHAPES_FILE = "shapes.json"


def shape_of(item: pytest.Item) -> GuestShape:
    """The guest shape a case asks for (``@pytest.mark.guest(...)``)."""
    m = item.get_closest_marker("guest")
    return GuestShape(**m.kwargs) if m else GuestShape()


def run_shape(item: pytest.Item) -> GuestShape:
    """The shape a case's guest boots with: its own, plus the kernel's memory
    poisoning on every guest of a ``--poison`` run (one shape for the run: the
    cases still spread over the workers as they would without it) and on a case
    marked ``poisoned`` (explore) unless ``--explore-poison off``."""
    shape = shape_of(item)
    poisoned = item.get_closest_marker("poisoned") is not None \
        and item.config.getoption("explore_poison", "on") != "off"
    if poisoned or item.config.getoption("poison", False):
        shape = replace(shape, append=tuple(dict.fromkeys((*shape.append, *POISON))))
    return shape


def shape_key(shape: GuestShape) -> str | None:
    """A stable name for a non-default shape; None for the default one."""
    if shape == GuestShape():
        return None
    d = asdict(shape)
    return ",".join(f"{k}={v}" for k, v in d.items() if v != asdict(GuestShape())[k])


def order_by_shape(items: list, key, cost=lambda item: 0.0) -> list:
    """Each non-default shape's items together, the groups longest first (by the
    sum of ``cost``; ties in the order they first appear), then the default-shape
    items longest first (ties in their order)."""
    groups: dict[str | None, list] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    shaped = sorted((g for k, g in groups.items() if k is not None),
                    key=lambda g: -sum(cost(i) for i in g))
    default = sorted(groups.get(None, []), key=lambda i: -cost(i))
    return [i for g in shaped for i in g] + default


def write_shapes(run_dir: Path, shapes: dict[str, str]) -> None:
    """Each worker writes the same map."""
    paths.write_json(run_dir / SHAPES_FILE, shapes)


def read_shapes(run_dir: Path) -> dict[str, str]:
    try:
        return json.loads((run_dir / SHAPES_FILE).read_text())
    except (OSError, ValueError):
        return {}


def scope_of(nodeid: str, shapes: dict[str, str]) -> str:
    """xdist's unit of scheduling: a shape group, or the case alone."""
    key = shapes.get(nodeid)
    return f"shape[{key}]" if key else nodeid


class GroupingPlugin:
    """Registered by the plugin's ``pytest_configure`` (controller and workers)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    @staticmethod
    def _key(item: pytest.Item) -> str | None:
        key = shape_key(shape_of(item)) if item.get_closest_marker("guest") else None
        unit = item.get_closest_marker("guest_unit")    # its own unit: another worker
        return f"{key or 'default'};{unit.args[0]}" if unit else key

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        of = cost_of(case_times(config))
        items[:] = order_by_shape(items, self._key, lambda i: of(i.nodeid))

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if getattr(session.config, "workerinput", None) is None:
            return
        shapes = {i.nodeid: k for i in session.items if (k := self._key(i))}
        if shapes:                  # none: no results folder for the scheduler to read
            write_shapes(self.run_dir, shapes)

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        if config.getvalue("dist") != "load":
            return None
        return make_scheduler(config, log, self.run_dir)


def make_scheduler(config: pytest.Config, log, run_dir: Path):
    from xdist.scheduler import LoadScopeScheduling

    class ShapeScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with a shape group as the scope."""
        _shapes: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._shapes is None:
                self._shapes = read_shapes(run_dir)
            return scope_of(nodeid, self._shapes)

    # Deal the units in the collection's order (order_by_shape), not by case count.
    config.option.loadscopereorder = False
    return ShapeScheduling(config, log)
