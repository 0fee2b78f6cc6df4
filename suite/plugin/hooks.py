"""Options, markers, results folder and report hooks."""
from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import pytest

from .. import paths

MARKERS = [
    "vm: needs a virtme-ng guest (boots or reuses one per xdist worker)",
    "nvme: needs emulated NVMe devices in the guest",
    "async_dio: needs the async O_DIRECT series (zfs_async_dio_enabled in the loaded build)",
    "zvol_dio: needs the zvol Direct I/O series (zvol_dio_enabled in the loaded build)",
    "zinject: needs zinject fault injection",
    "guest(nvme=2, lbs=4096, size_mib=1024, memory='4G', cpus=2): guest shape the case needs",
    "pool(layout='stripe', props=None, dataset=None): pool layout and dataset properties",
    "zfs_params(**params): module parameters set for the case and restored after",
    "bug(id): the known series bug (patches/*.toml [[bugs]]) this case targets",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("ozfs-vmci", "OpenZFS in virtme-ng guests")
    g.addoption("--kernel", help="kernel profile (vmimages/NAME.toml) or vmlinuz path "
                                 "(default debian-6.1)")
    g.addoption("--kernel-headers", help="kernel build dir, with --kernel PATH")
    g.addoption("--zfs-source", help="OpenZFS git URL or local checkout")
    g.addoption("--zfs-ref", help="OpenZFS branch/tag/commit (default: series base, else master)")
    g.addoption("--series", action="append", default=[],
                help="patch series NAME[@COMMIT|@branch] or a folder of *.patch; repeatable")
    g.addoption("--accel", default="auto", choices=["auto", "kvm", "tcg"],
                help="guest accelerator; auto probes KVM and falls back to TCG")
    g.addoption("--results", default=None, help="results folder (default ./results)")
    g.addoption("--keep-vm", action="store_true",
                help="leave a guest that failed running for inspection (prints how to reach it)")
    g.addoption("--offline", action="store_true", help="never fetch sources")
    g.addoption("--trials", type=int, default=None,
                help="trials per condition (default: enough to catch a 1-in-5 failure "
                     "with 95%% probability)")


def _run_label(config: pytest.Config) -> str:
    series = "+".join(config.getoption("series") or []) or (config.getoption("zfs_ref") or "stock")
    # Only characters qemu/vng take in paths (the VM workdirs live under it).
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", series.replace("@", "-at-"))[:60]


def pytest_configure(config: pytest.Config) -> None:
    for m in MARKERS:
        config.addinivalue_line("markers", m)
    # paramiko logs every refused connection while a guest boots: noise, not news.
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_dir = Path(workerinput["ozfs_run_dir"])
    else:
        root = Path(config.getoption("results") or paths.results_root())
        run_dir = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{_run_label(config)}"
    config.stash[RUN_DIR] = run_dir


RUN_DIR = pytest.StashKey[Path]()


def pytest_configure_node(node) -> None:  # xdist: the controller hands its run dir on
    node.workerinput["ozfs_run_dir"] = str(node.config.stash[RUN_DIR])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
    for title, text in getattr(item, "ozfs_sections", []):
        if rep.when == "teardown" or (rep.when == "call" and rep.failed):
            rep.sections.append((title, text))
    if rep.when == "teardown":
        # Evidence is gathered in teardown, after the call report was made: give it
        # to the failed call's report too, so the failure shows it.
        call = getattr(item, "rep_call", None)
        if call is not None and call.failed:
            for title, text in getattr(item, "ozfs_sections", []):
                if (title, text) not in call.sections:
                    call.sections.append((title, text))


def add_section(item: pytest.Item, title: str, text: str) -> None:
    """Attach text to a case's report (shown for failures, kept in JUnit)."""
    if not hasattr(item, "ozfs_sections"):
        item.ozfs_sections = []  # type: ignore[attr-defined]
    item.ozfs_sections.append((title, text))  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None:
        return
    run_dir = config.stash.get(RUN_DIR, None)
    if run_dir is None or not run_dir.exists():
        return
    tables = sorted((run_dir / "tables").glob("*.txt")) if (run_dir / "tables").exists() else []
    if tables:
        terminalreporter.section("ozfs-vmci tables")
        for t in tables:
            terminalreporter.write_line(t.read_text().rstrip())
            terminalreporter.write_line("")
    evidence = sorted(run_dir.glob("cases/*/evidence/summary.txt"))
    if evidence:
        terminalreporter.section("ozfs-vmci guest evidence")
        for ev in evidence:
            terminalreporter.write_line(f"[{ev.parent.parent.name}]")
            terminalreporter.write_line(ev.read_text().rstrip())
            terminalreporter.write_line("")
    terminalreporter.write_line(f"ozfs-vmci results: {run_dir}")
    if os.environ.get("GITHUB_STEP_SUMMARY") and tables:
        md = [p.with_suffix(".md").read_text() for p in tables if p.with_suffix(".md").exists()]
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as f:
            f.write("\n\n".join(md) + "\n")
