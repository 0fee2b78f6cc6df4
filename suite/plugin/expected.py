"""Known upstream findings as pytest's expected failures.

A case that fails only by the symptoms of a known upstream finding
(``patches/upstream/findings.toml``: its cases, kinds, signature, and ``fixed_by``
against the build's source) is reported as **xfail**, with the finding's id and
title as the reason: in the terminal, in JUnit (a ``skipped`` testcase of type
``pytest.xfail``, which GitHub and JUnit viewers show as an expected failure), in
its ``verdict.json`` (outcome ``xfailed``) and so in summary.md, report.html and
the exit code. A case a finding names that passes is **XPASS** ("fixed upstream?
retire the finding"). ``--strict-known`` keeps them failures.

The symptoms are complete only after the case's teardown (the guest is judged
there), when pytest has made the call's report but not yet logged it: the
reports of a case are made with ``log=False``, re-labelled, then logged, as
pytest-rerunfailures does.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from _pytest.runner import runtestprotocol

from suite.report import upstream

BUILD_COMMIT = pytest.StashKey[str]()            # the source commit of the build under test
BUILD_SERIES = pytest.StashKey[bool]()           # a series is applied on top of upstream
_FINDINGS = pytest.StashKey[list]()
LOADED = pytest.StashKey[list]()             # findings.toml as read (and checked) at configure


def add_options(addoption) -> None:
    addoption("--strict-known", action="store_true",
              help="a case that fails only by a known upstream finding's symptoms stays a "
                   "failure (default: xfail, with the finding's id and title)")


@dataclass(frozen=True)
class Expected:
    outcome: str                    # xfailed | xpassed | passed (a false positive retired)
    reason: str
    ids: tuple[str, ...]


def findings(config: pytest.Config) -> list[upstream.UpstreamFinding]:
    """The findings that stand for this session's build (read once)."""
    if _FINDINGS not in config.stash:
        commit = config.stash.get(BUILD_COMMIT, "")
        lacks = upstream.git_lacks([commit]) if commit else None
        loaded = config.stash[LOADED] if LOADED in config.stash else upstream.load()
        config.stash[_FINDINGS] = upstream.applying(loaded, lacks)
    return config.stash[_FINDINGS]


def reason(found: list[upstream.UpstreamFinding], symptoms: list[str] = ()) -> str:
    """``known upstream finding ID (by /SIGNATURE/): TITLE``: which finding, and what
    the case's own symptoms were matched by: each kind's signature, or the kind alone
    where the finding needs none for it (without symptoms: every kind of it)."""
    def by(f: upstream.UpstreamFinding) -> str:
        kinds = [k for k in dict.fromkeys(upstream.symptom_kind(x) for x in symptoms)
                 if k in f.kinds] or list(f.kinds)
        sigs = list(dict.fromkeys(f"/{f.signature_of(k)}/" for k in kinds if f.signature_of(k)))
        bare = [k for k in kinds if not f.signature_of(k)]
        return ", ".join(sigs + ([f"kinds {', '.join(bare)}"] if bare else []))
    return "known upstream finding " + "; ".join(f"{f.id} (by {by(f)}): {f.title}"
                                                  for f in found)


def can_pass_unseen(f: upstream.UpstreamFinding) -> bool:
    """A finding whose only symptom is a lockdep report passes on every kernel
    without lockdep, and one that stands only with a module parameter set at load
    (``stands_with``: a pull request's switch) passes everywhere else: its case
    passing there says nothing about a fix."""
    return all(k == "kernel:lockdep" for k in f.kinds) or bool(f.stands_with)


def retired(nodeid: str, symptoms: list[str],
            standing: list[upstream.UpstreamFinding]) -> Expected | None:
    """A case whose call passed and whose after-case judges failed it only by the
    report of a finding upstream status calls a false positive (a lockdep report of
    two locks of different objects in one class): passed, the report named. Retired
    from the xfail list: it says nothing about the case, so it neither fails nor
    xfails it (the guest is still let go: lockdep is off for the rest of its boot)."""
    fps = [f for f in standing if f.status == "false-positive"]
    found = upstream.covering(nodeid, symptoms, fps) if fps else []
    if not found:
        return None
    return Expected("passed", "false positive retired: " + "; ".join(
        f"{f.id} ({f.status_why})" for f in found), tuple(f.id for f in found))


def expected(nodeid: str, failed: bool, symptoms: list[str],
             standing: list[upstream.UpstreamFinding], series: bool = False,
             call_failed: bool = True) -> Expected | None:
    """What a case of this outcome and these symptoms is, given the standing
    findings: xfailed (failed by their symptoms alone), xpassed (passed on a stock
    build, and a finding names it outright), passed (its call passed and only a false
    positive's report failed it: :func:`retired`), or None (an ordinary pass or
    failure). On a build with a series a named case that passes says nothing: the
    series may carry its own fix (async-dio fixes the rlimit pin overflow stock master
    has)."""
    if failed and not call_failed and (e := retired(nodeid, symptoms, standing)):
        return e
    standing = [f for f in standing if f.status != "false-positive"]
    if failed:
        found = upstream.covering(nodeid, symptoms, standing)
        return Expected("xfailed", reason(found, symptoms), tuple(f.id for f in found)) \
            if found else None
    if series:
        return None
    test = nodeid.rsplit("::", 1)[-1]
    named = [f for f in standing if test in f.cases and not can_pass_unseen(f)]
    if not named:
        return None
    return Expected("xpassed", "fixed upstream? retire the finding: " + reason(named),
                    tuple(f.id for f in named))


def judge(item: pytest.Item, failed: bool, symptoms: list[str],
          call_failed: bool = True) -> Expected | None:
    """The case's expected outcome (kept on the item for its reports), unless
    ``--strict-known``."""
    if item.config.getoption("strict_known", False):
        return None
    e = expected(item.nodeid, failed, symptoms, findings(item.config),
                 series=item.config.stash.get(BUILD_SERIES, False), call_failed=call_failed)
    item.ozfs_expected = e          # type: ignore[attr-defined]
    return e


def relabel(reports: list[pytest.TestReport], e: Expected) -> None:
    """The case's reports as pytest's xfail/XPASS: the call carries ``wasxfail``;
    an xfailed case's failing teardown (the guest judged after it) is the same
    failure, shown with the call's."""
    call = next((r for r in reports if r.when == "call"), None)
    if call is None:
        return
    if e.outcome == "passed":       # a false positive's report: the teardown passes
        for r in reports:
            if r.when == "teardown" and r.failed:
                call.sections.append(("teardown: " + e.reason[:200],
                                      getattr(r, "longreprtext", "")))
                r.outcome, r.longrepr = "passed", None
        return
    call.wasxfail = e.reason        # type: ignore[attr-defined]
    if e.outcome == "xpassed":
        return
    call.outcome = "skipped"
    for r in reports:
        if r.when == "teardown" and r.failed:
            call.sections.append(("teardown (part of the expected failure)",
                                  getattr(r, "longreprtext", "")))
            r.outcome, r.longrepr = "passed", None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    # Any item: one that is no case of the build's is logged as pytest would have.
    if item.config.getoption("strict_known", False):
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    e = getattr(item, "ozfs_expected", None)
    if e is not None:
        relabel(reports, e)
    for rep in reports:
        ihook.pytest_runtest_logreport(report=rep)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
