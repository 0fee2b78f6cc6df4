"""How many vCPUs a guest gets: the guests running at once never ask for more
vCPUs than the host has cores.

Measured on a 2-core host under TCG (``bench/vm_boot.py --guests``; one vCPU is one
qemu thread): two guests of 2 vCPUs each took 90 s to boot and 0.5-0.65 s a shell
command; two guests of 1 vCPU each took 37 s and 0.3 s; one guest of 2 vCPUs 30 s
and 0.26 s. Four vCPU threads time-sliced on two cores are slower than two guests
of one vCPU each by 2.5x in everything a case does, and slower in sum than one guest
alone. So by default each guest gets ``WANT`` vCPUs, fewer when the guests that run
at once (pytest-xdist workers) would otherwise overcommit the host.

A case that needs more than one CPU in its guest (a race that wants two CPUs
really at once) says so with ``@pytest.mark.guest(cpus=2)``, and gets them;
``--guest-cpus N`` (or ``OZFS_VMCI_GUEST_CPUS``) sets every other guest's count.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from suite.errors import SuiteError

WANT = 2            # what a guest gets when the host has the cores for it
ENV = "OZFS_VMCI_GUEST_CPUS"


@dataclass(frozen=True)
class GuestCpus:
    count: int
    reason: str

    def line(self) -> str:
        return f"guests get {self.count} vCPU{'s' if self.count != 1 else ''} each: {self.reason}"


def host_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit included)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def choose(option: str | None, guests_at_once: int, cores: int | None = None) -> GuestCpus:
    """vCPUs per guest for ``--guest-cpus`` (``auto``, empty or a number)."""
    option = (option or os.environ.get(ENV) or "auto").strip()
    if option != "auto":
        if not option.isdigit() or int(option) < 1:
            raise SuiteError(f"--guest-cpus {option!r} is not a number of vCPUs",
                             fix="give a whole number >= 1, or auto")
        return GuestCpus(int(option), f"--guest-cpus {option}")
    cores = cores or host_cores()
    guests_at_once = max(1, guests_at_once)
    count = max(1, min(WANT, cores // guests_at_once))
    why = (f"{cores} host core(s), {guests_at_once} guest(s) at once")
    if count < WANT:
        why += (f" (more vCPUs than cores slow every guest down under time-slicing; "
                f"--guest-cpus {WANT} to override)")
    return GuestCpus(count, why)


def xdist_workers() -> int:
    """How many workers this pytest run has (1 without xdist)."""
    try:
        return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1
