"""The xfstests lane: the kernel's file system suite on the build under test, by profile.

Run with ``-m xfstests`` (``python -m suite xfstests`` says the same). Each profile is
one case here (plain, ``direct=always``, the async taskq, ext4 on zvols); every
xfstests test in it is also reported under its own id (``xfstests:generic/091``) in
the JUnit XML and the tables, with its ``.out.bad``, ``.full`` and ``.dmesg`` in the
case's ``xfstests/results`` folder. A profile passes when ./check ran tests and none
failed; a kernel report in the guest fails it like any case (the after-case judges).
An excluded test is listed with its reason (``patches/xfstests/exclude.toml``, the
fork's ``exclude.zfs.txt``).
"""
from __future__ import annotations

import time

import pytest

from suite.build import xfstests as xfs_build
from suite.casekit.xfstests import check_args, shard
from suite.casekit.zvol import relocator
from suite.guest import xfstests as xfs_guest
from suite.plugin.fixtures import live
from suite.plugin.shards import case_times, split_xfstests
from suite.report import xfstests as xfs_report

BUDGET = 3600           # ./check's deadline before accelerator scaling
PROFILES = [pytest.param(p, id=p) for p in xfs_guest.PROFILES]


def pytest_generate_tests(metafunc):
    """``--xfstests-split N``: each profile's case as N parts (``part1of2-direct``)."""
    n = metafunc.config.getoption("xfstests_split") or 1
    if "xfstests_part" in metafunc.fixturenames and n > 1:
        metafunc.parametrize("xfstests_part", [          # a guest each: at once under -n
            pytest.param((i, n), id=f"part{i + 1}of{n}", marks=pytest.mark.guest_unit(i))
            for i in range(n)], indirect=True)


@pytest.fixture
def xfstests_part(request) -> tuple[int, int] | None:
    """(index, parts) of this case's share under ``--xfstests-split``; None: all of it."""
    return getattr(request, "param", None)


def share(selected: list[str], config, profile: str, part: tuple[int, int] | None,
          excluded) -> tuple[list[str], str]:
    """(this case's tests, "i/N" or "" for all): a runner's ``--xfstests-shard`` (the
    same deal on every runner), else this guest's part of ``--xfstests-split`` (dealt
    by each test's recorded time in the profile, the excluded weightless)."""
    spec = config.getoption("xfstests_shard")
    if spec:
        return shard(selected, spec), spec
    if part:
        i, n = part
        return split_xfstests(selected, n, case_times(config), profile,
                              skip=set(excluded))[i], f"{i + 1}/{n}"
    return selected, ""


@pytest.fixture(scope="session")
def xfstests_tree():
    return xfs_build.ensure()


@pytest.fixture
def xfstests_profile(profile, zfs_build, request):
    wanted = request.config.getoption("xfstests_profile")
    if wanted and profile not in wanted:
        pytest.skip(f"profile {profile!r} not asked for (--xfstests-profile {', '.join(wanted)})")
    p = xfs_guest.profile(profile)
    why = xfs_guest.not_for(zfs_build, p)
    if why:
        pytest.skip(why)
    return p


@pytest.mark.xfstests
@pytest.mark.deadline(BUDGET + 900)
@pytest.mark.guest(nvme=4, size_mib=4096, memory="4G")
@pytest.mark.parametrize("profile", PROFILES)
def test_xfstests(xfstests_profile, xfstests_part, xfstests_tree, zfs_guest, zfs_build, guests,
                  accel, case_dir, run_ctx, request, symptom, engine):
    p = xfstests_profile
    g = guests.current
    for pool in zfs_guest.pools():          # the lane takes the disks
        zfs_guest.zpool("destroy", "-f", pool, check=False, timeout=300)
    g.pool_spec = None
    g.fit = False           # users, wrappers, pools of its own: the next case boots afresh
    selection = check_args(request.config.getoption("xfstests"))
    out = case_dir / "xfstests"
    out.mkdir(parents=True, exist_ok=True)
    excl = xfs_report.exclusions(xfstests_tree.path, accel.name,
                                   str(zfs_build.kernel.get("release", "")),
                                   "ext4" if p.zvol else "zfs")
    exclude = xfs_report.exclude_file(excl, out / "exclude.txt")
    selected = xfs_report.expand(selection, xfstests_tree.path, "ext4" if p.zvol else "zfs")
    selected, spec = share(selected, request.config, p.name, xfstests_part, excl)
    if spec:                # named to ./check one by one (a test named outright runs:
        if not selected:    # the excluded are not named)
            pytest.skip(f"share {spec}: no test of {selection} falls to it")
        selection = [t for t in selected if t not in excl]
        if not selection:       # ./check with no test named would run them all
            pytest.skip(f"share {spec}: every test that falls to it is excluded")
    t0 = time.monotonic()
    budget = request.config.getoption("xfstests_budget") or accel.deadline(BUDGET)
    with live(request.config):          # each test's line as it finishes, not at the end
        run = xfs_guest.run(zfs_guest, xfstests_tree.archive(), p, selection, exclude, out,
                            timeout=budget, zvol_dev=lambda name: relocator(engine, name)())
    took = time.monotonic() - t0
    results = xfs_report.results(out, selected, excl, xfstests_tree.path)
    meta = {"profile": p.name, "selection": selection, "shard": spec, "build": zfs_build.key,
            "stopped": run.rc == 124,
            "describe": zfs_build.source["describe"], "rc": run.rc, "seconds": round(took),
            "xfstests": xfstests_tree.commit}
    xfs_report.save(results, case_dir / xfs_report.RESULTS_FILE, meta)
    part = f" part {spec}" if spec else ""
    md = xfs_report.markdown(results, f"xfstests `{p.name}`{part} at "
                                      f"{zfs_build.source['describe']}", took)
    name = f"xfstests-{p.name}" + (f"-{spec.replace('/', 'of')}" if spec else "")
    (run_ctx.tables_dir() / f"{name}.md").write_text(md)
    (run_ctx.tables_dir() / f"{name}.txt").write_text(md)
    from suite.plugin.hooks import add_section
    add_section(request.node, f"xfstests {p.name}", md + f"\nconsole: {out / 'console.txt'}")
    if run.rc == 124:       # timeout(1): the budget ended the run
        add_section(request.node, "xfstests stopped", f"./check stopped at the budget of "
                    f"{budget:.0f} s; tests after it are 'not run'")
    ran = [r for r in results if r.status in ("pass", "fail")]
    if not ran:
        said = next((ln.strip() for ln in run.console.splitlines() if ln.strip()), "")
        symptom("no-result", f"./check exited {run.rc} without a test result: {said[:160]}")
        pytest.fail(f"xfstests ran no test in profile {p.name!r} (exit {run.rc}; ./check "
                    f"said: {said[:160]!r}): see {out / 'console.txt'}", pytrace=False)
    failed = [r for r in results if r.failed]
    for r in failed:
        symptom("xfstests-fail", f"{r.id}: {r.reason}")
        for k in r.kinds:           # what its .out.bad says: EFAULT, error:EIO, ...
            symptom(k, f"{r.id}: its .out.bad")
    if failed:
        pytest.fail(f"xfstests {p.name}: {len(failed)} of {len(ran)} tests failed: " +
                    ", ".join(r.test for r in failed), pytrace=False)
