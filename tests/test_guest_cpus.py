"""vCPUs per guest: the guests of a run never ask for more vCPUs than the host has
cores, a case's own ``guest(cpus=N)`` wins, and what a guest booted with is what its
reproducer boots again."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.errors import SuiteError
from suite.guest import lifecycle
from suite.guest.lifecycle import Guests, GuestShape
from suite.vm import cpus


@pytest.mark.parametrize("cores,guests,want", [
    (2, 2, 1),      # this machine: two workers on two cores
    (2, 1, 2),      # one guest (suite bugs, a gate's inner session)
    (4, 2, 2),      # a GitHub runner
    (16, 2, 2),     # never more than a guest wants
    (1, 2, 1),      # never fewer than one
    (3, 2, 1),
])
def test_auto_never_overcommits_the_host(cores, guests, want, monkeypatch):
    monkeypatch.delenv(cpus.ENV, raising=False)
    c = cpus.choose("auto", guests, cores=cores)
    assert c.count == want
    assert c.count * guests <= max(cores, guests)
    assert f"{cores} host core(s), {guests} guest(s) at once" in c.reason
    assert ("--guest-cpus 2 to override" in c.reason) == (want < cpus.WANT)


def test_an_explicit_count_or_the_environment_wins(monkeypatch):
    monkeypatch.delenv(cpus.ENV, raising=False)
    assert cpus.choose("3", 2, cores=2).count == 3
    monkeypatch.setenv(cpus.ENV, "2")
    assert cpus.choose(None, 2, cores=2).count == 2
    assert cpus.choose("1", 1, cores=8).count == 1          # the option before the env
    assert cpus.choose(None, 1).line().startswith("guests get 2 vCPUs each")


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_a_count_that_is_not_one_says_what_to_give(bad):
    with pytest.raises(SuiteError, match="not a number of vCPUs") as e:
        cpus.choose(bad, 1)
    assert "auto" in e.value.fix


def test_xdist_worker_count(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert cpus.xdist_workers() == 2
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert cpus.xdist_workers() == 1


class _FakeVM:
    specs: list = []

    def __init__(self, spec):
        self.spec = spec
        _FakeVM.specs.append(spec)

    def start(self):
        return self

    def wait_ready(self):
        return None

    def guest(self):
        return None

    nvme_devices = None


def _guests(tmp_path: Path, cpus_: int) -> Guests:
    g = Guests(tmp_path, "gw0", SimpleNamespace(name="tcg"),
               SimpleNamespace(kernel={"vmlinuz": "/boot/vmlinuz"}), cpus=cpus_)
    g.__dict__["profile_append"] = ()
    return g


def test_a_guest_boots_with_the_runs_count_unless_its_shape_says(tmp_path, monkeypatch):
    _FakeVM.specs = []
    monkeypatch.setattr(lifecycle, "VM", _FakeVM)
    monkeypatch.setattr(lifecycle, "Zfs", lambda *a, **k: None)
    g = _guests(tmp_path, 1)
    plain = g._boot_once(GuestShape())
    smp = g._boot_once(GuestShape(cpus=2))
    assert [s.cpus for s in _FakeVM.specs] == [1, 2]
    # The shape a case asked for is what reuse compares; what it booted with is recorded.
    assert plain.shape == GuestShape() and plain.booted_shape() == GuestShape(cpus=1)
    assert smp.booted_shape() == GuestShape(cpus=2)


def test_the_default_shape_is_still_the_default_for_grouping():
    from suite.plugin.grouping import shape_key
    assert shape_key(GuestShape()) is None
    assert shape_key(GuestShape(cpus=2)) == "cpus=2"
