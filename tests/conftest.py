"""Fixtures for harness self-tests: throwaway git repos standing in for OpenZFS
upstream and a fork carrying a series, so nothing here needs the network."""
from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from gitrepo import commit, sh


@dataclass
class Repos:
    upstream: Path
    fork: Path
    base: str
    series: list[str]          # fork commits on top of base, oldest first
    upstream_next: str          # an upstream commit after base (a newer base)
    conflicting_next: str       # an upstream commit that conflicts with the series
    patches: Path               # manifests dir
    cache: Path


@pytest.fixture
def repos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repos:
    up = tmp_path / "upstream"
    up.mkdir()
    sh(up, "git", "init", "-q", "-b", "master")
    base = commit(up, {"module/zfs/read.c": "line1\nline2\nline3\n",
                       "META": "Version: 2.4.99\n",
                       "tests/data.txt": "x\n"}, "base")
    fork = tmp_path / "fork"
    sh(tmp_path, "git", "clone", "-q", str(up), str(fork))
    sh(fork, "git", "checkout", "-q", "-b", "feature")
    s1 = commit(fork, {"module/zfs/read.c": "line1\nline2 async\nline3\n"}, "add async")
    s2 = commit(fork, {"module/zfs/new.c": "new\n"}, "add new file")
    s3 = commit(fork, {"module/zfs/read.c": "line1\nline2 async fixed\nline3\n"}, "fix it")
    nxt = commit(up, {"lib/other.c": "other\n"}, "unrelated upstream change")
    sh(up, "git", "branch", "-q", "newer")
    conflicting = commit(up, {"module/zfs/read.c": "line1\nline2 CHANGED\nline3\n"},
                         "conflicting upstream change")
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "demo.toml").write_text(textwrap.dedent(f"""
        name = "demo"
        title = "demo series"
        url = "{fork.as_uri()}"
        branch = "feature"
        head = "{s3}"
        base = "{base}"
        base_url = "{up.as_uri()}"
        features = ["async_dio"]
        [[bugs]]
        id = "demo-bug"
        bad = "{s2}"
        fixed = "{s3}"
        cases = ["demo"]
        """))
    cache = tmp_path / "cache"
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(cache))
    monkeypatch.setenv("OZFS_VMCI_PATCHES", str(patches))
    return Repos(up, fork, base, [s1, s2, s3], nxt, conflicting, patches, cache)


@pytest.fixture(autouse=True)
def _results_elsewhere(tmp_path_factory: pytest.TempPathFactory,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A self-test that runs a command writing a results folder writes it under its own
    temporary folder, never into the checkout's results/ (a bugs run with only deferred
    bugs left an empty report there on every self-test run)."""
    if "OZFS_VMCI_RESULTS" not in os.environ:
        monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path_factory.mktemp("results")))


class VmSelfTests:
    """How many self-tests that boot a guest (``-m vm``) ran, and why the others
    skipped: said at the end of every run, so a green run that booted nothing says
    so. With ``OZFS_VMCI_REQUIRE_VM=1`` (the workflow's KVM job) a run in which
    none of them ran fails."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}          # nodeid -> passed | failed | skipped
        self.reasons: dict[str, int] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "vm" not in report.keywords:
            return
        if report.skipped:
            self.outcomes[report.nodeid] = "skipped"
            why = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            why = str(why).removeprefix("Skipped: ")
            self.reasons[why] = self.reasons.get(why, 0) + 1
        elif report.when == "call" or report.failed:
            if self.outcomes.get(report.nodeid) != "failed":
                self.outcomes[report.nodeid] = "failed" if report.failed else "passed"

    def line(self) -> str:
        n = {k: sum(1 for v in self.outcomes.values() if v == k)
             for k in ("passed", "failed", "skipped")}
        ran = n["passed"] + n["failed"]
        why = "; ".join(f"{r} ({c})" for r, c in sorted(self.reasons.items(), key=lambda x: -x[1]))
        return (f"VM self-tests: {ran} ran ({n['passed']} passed, {n['failed']} failed), "
                f"{n['skipped']} skipped" + (f": {why}" if why else ""))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.outcomes:
            terminalreporter.write_line(self.line())

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        required = os.environ.get("OZFS_VMCI_REQUIRE_VM") == "1"
        ran = sum(1 for v in self.outcomes.values() if v != "skipped")
        if required and not ran and exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write_line("OZFS_VMCI_REQUIRE_VM=1, and no VM self-test ran: "
                              + self.line(), red=True)


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None:    # the controller sees every report
        config.pluginmanager.register(VmSelfTests(), "ozfs-vmci-vm-selftests")
