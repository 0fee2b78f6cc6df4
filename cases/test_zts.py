"""The ZTS lane: OpenZFS's own test runner, in the same kind of guest, on the same build.

Run with ``-m zts`` (it turns on ``--zts``: the build then also makes the ZFS Test
Suite). Each tag is one case here; every ZTS test in it is also reported under
its own id (``zts:functional/direct/dio_random``) in the JUnit XML and the tables,
so a maintainer can set what ZTS saw beside what this suite saw at one commit.

A tag passes when ZTS ran tests in it and none ended unexpectedly (zts-report's
own rule, its known-failure list included). A tag the build does not have
(``async`` before the series adds it) is skipped as absent; a tag that ran no
test is not a pass. ``--zts-test NAME`` (repeatable) narrows a tag to those
tests, each with its section's setup and cleanup: a failed ZTS test rerun alone.
"""
from __future__ import annotations

import pytest

from suite.guest import zts
from suite.report import zts as zts_report

# Per tag: the run's deadline, before accelerator scaling (accel.deadline). A
# loaded TCG host ran 10 direct tests in 33 min; the case's backstop is the
# budget plus room for the guest's boot and setup.
TAG_BUDGET = {"direct": 3600, "async": 1800}
TAGS = [pytest.param(t, marks=pytest.mark.deadline(b + 900), id=t) for t, b in TAG_BUDGET.items()]


@pytest.fixture
def zts_tag(tag, zfs_build):
    """The tag, once the build is known to have it: skips before a guest boots."""
    if not zts.has_zts(zfs_build):
        pytest.skip("the build has no ZFS Test Suite: run with --zts (or -m zts)")
    if tag not in zts.available_tags(zfs_build):
        pytest.skip(f"ZTS tag {tag!r} is not in this build's runfiles "
                    f"({zfs_build.source['describe']})")
    return tag


@pytest.fixture
def zts_tests(zts_tag, zfs_build, request) -> list[str]:
    """``--zts-test`` narrowed to this tag: [] runs the whole tag."""
    wanted = request.config.getoption("zts_test")
    if not wanted:
        return []
    found = zts.tests_in_tag(zfs_build, zts_tag, wanted)
    if not found:
        pytest.skip(f"none of --zts-test {', '.join(wanted)} runs under tag {zts_tag!r}")
    return found


@pytest.mark.zts
@pytest.mark.guest(nvme=4, size_mib=4096, memory="4G")
@pytest.mark.parametrize("tag", TAGS)
def test_zts_tag(zts_tag, zts_tests, zfs_guest, zfs_build, guests, accel, case_dir, run_ctx,
                 request, symptom):
    tag = zts_tag
    g = guests.current
    for p in zfs_guest.pools():             # ZTS takes the disks: no suite pool on them
        zfs_guest.zpool("destroy", "-f", p, check=False, timeout=300)
    g.pool_spec = None
    g.fit = False           # a chroot, a test user, ZTS's leftovers: the next case boots afresh
    meta = {"tag": tag, "build": zfs_build.key, "describe": zfs_build.source["describe"],
            "only": zts_tests, "lbs": g.shape.lbs}
    try:
        run = zts.run_tags(zfs_guest, zfs_build, [tag], case_dir / "zts", accel.scale,
                           timeout=accel.deadline(TAG_BUDGET[tag]), tests=zts_tests)
    except BaseException:
        # Cut short (deadline, guest lost): keep what ZTS said so far, marked partial.
        partial = zts.salvage_console(zfs_guest.guest, case_dir / "zts")
        if partial:
            zts_report.save(zts_report.parse(partial), case_dir / zts_report.RESULTS_FILE,
                            {**meta, "partial": True})
        raise
    results = zts_report.parse(run.output)
    zts_report.save(results, case_dir / zts_report.RESULTS_FILE,
                    {**meta, "rc": run.rc, "disks": run.disks})
    md = zts_report.markdown(results, f"ZTS `{tag}` at {zfs_build.source['describe']}")
    (run_ctx.tables_dir() / f"zts-{tag}.md").write_text(md)
    (run_ctx.tables_dir() / f"zts-{tag}.txt").write_text(md)
    from suite.plugin.hooks import add_section
    add_section(request.node, f"ZTS {tag}", md + f"\nconsole: {run.out_dir / 'console.txt'}")
    if not results:
        symptom("no-result", f"zfs-tests.sh exited {run.rc} without a test result")
        pytest.fail(f"ZTS ran no test for tag {tag!r} (exit {run.rc}): see "
                    f"{run.out_dir / 'console.txt'}", pytrace=False)
    failed = [r for r in results if r.failed]
    if failed:
        for r in failed:
            symptom("zts-" + r.result.lower(), r.id)
        pytest.fail(f"ZTS {tag}: {len(failed)} of {len(results)} tests ended unexpectedly: " +
                    ", ".join(f"{r.test} {r.result}" for r in failed), pytrace=False)
    if run.rc not in (0, None) and not failed:
        pytest.fail(f"zfs-tests.sh exited {run.rc} though no test failed: see "
                    f"{run.out_dir / 'console.txt'}", pytrace=False)
