"""The pytest plugin end to end, in real guests (inner pytest sessions).

1. The smoke case: a guest with 2 NVMe namespaces, the async-dio build loaded
   and its srcversion verified, a pool, an O_DIRECT write and read, teardown.
2. A guest hung on purpose (reads held in the ZFS pipeline, tasks in D state):
   that case fails with the D-state stacks attached, the guest is recycled, and
   the next case passes on a fresh guest.

Both skip with the reason only when the build's source did not answer (and say
which URL); any other build failure (a compile error, a series that no longer
applies, a missing kernel) fails them: CI is never green on a broken build.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from suite.plugin.fixtures import UNREACHABLE

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.vm

ROOT = Path(__file__).resolve().parent.parent
SERIES = "async-dio"

HANG = '''
import pytest

pytestmark = pytest.mark.vm


@pytest.mark.zinject
@pytest.mark.pool(props={"primarycache": "metadata"})
def test_1_guest_hangs(zfs_guest, pool, accel):
    p = pool.path("held.bin")   # random data: zero blocks become holes, whose reads do no I/O
    zfs_guest.guest.run(f"dd if=/dev/urandom of={p} bs=128k count=4 oflag=direct status=none; sync",
                        timeout=accel.deadline(30))
    zfs_guest.zinject("-E", "900000", "-T", "read", "-t", "data", p)
    zfs_guest.guest.background(f"dd if={p} of=/dev/null bs=128k count=1 iflag=direct")
    # Held for 15 minutes: this read cannot finish within its deadline.
    zfs_guest.guest.run(f"dd if={p} of=/dev/null bs=128k skip=1 count=1 iflag=direct",
                        timeout=accel.deadline(5))


def test_2_next_case_gets_a_fresh_guest(zfs_guest, guests):
    # 2, or 3 when a boot on a busy host ran out of time and was tried once more
    assert guests.boots >= 2, "the hung guest was reused (or this case ran first)"
    assert zfs_guest.guest.run("echo ok", timeout=60).stdout.strip() == "ok"
'''


REAL_HOME = os.environ.get("HOME", str(Path.home()))


@pytest.fixture(autouse=True)
def _inner_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner session runs in a temp dir: let it import this checkout's suite, and
    give it back the real HOME (pytester isolates it), where the user's git config
    (insteadOf mirrors), the build cache and virtme-ng's SSH key live. Its case
    times stay apart from the user's: recorded there, the hang file's times once put
    test_2 before test_1 (default cases run longest first), and it failed."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OZFS_VMCI_DURATIONS", str(pytester.path / "durations.json"))
    monkeypatch.setenv("HOME", REAL_HOME)


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    results = pytester.path / "results"
    res = pytester.runpytest_subprocess(
        "-p", "suite.plugin", "-p", "no:cacheprovider", "--series", SERIES,
        "--results", str(results), "-rA", *args, timeout=3000)
    skip_if_unreachable(res.stdout.str())
    return res


def skip_if_unreachable(text: str) -> None:
    """Skip, naming the URL, when the inner session's build source did not answer;
    any other reason for no build is the self-test's failure."""
    m = re.search(re.escape(UNREACHABLE) + r" (\S+):", text)
    if m:
        pytest.skip(f"the OpenZFS source did not answer: {m.group(1)}")


def test_guest_boots_loads_verified_build_and_does_odirect(pytester):
    res = run_inner(pytester, str(ROOT / "cases" / "test_smoke.py"))
    res.assert_outcomes(passed=1)
    run_dir = next((pytester.path / "results").iterdir())
    record = json.loads(next((run_dir / "build").glob("record-*.json")).read_text())
    seen = (next((run_dir / "cases").iterdir()) / "srcversion.txt").read_text()
    assert f"zfs {record['modules']['zfs']['srcversion']}" in seen
    assert f"spl {record['modules']['spl']['srcversion']}" in seen
    log = next((run_dir / "cases").iterdir()) / "commands.log"
    assert "insmod" in log.read_text() and "zpool" in log.read_text()


def test_hung_guest_fails_with_stacks_and_next_case_passes(pytester):
    pytester.makepyfile(test_hang=HANG)
    res = run_inner(pytester)
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "test_1_guest_hangs" in out and "FAILED" in out
    assert "tasks in D state" in out, out[-3000:]
    assert re.search(r"\[<0>\] \S+\+0x", out), "no kernel stack frames in the report"
    ev = list((pytester.path / "results").glob("*/cases/*test_1_guest_hangs*/evidence"))
    assert ev and (ev[0] / "summary.txt").exists()


LEFTOVERS = '''
import pytest

pytestmark = pytest.mark.vm


def _file(zfs_guest, pool):
    p = pool.path("f.bin")      # random data: zero blocks would be holes, read without I/O
    zfs_guest.guest.run(f"dd if=/dev/urandom of={p} bs=128k count=8 oflag=direct status=none;"
                        f" sync", timeout=300)
    return p


def _read(zfs_guest, p):
    zfs_guest.guest.run(f"dd if={p} of=/dev/null bs=128k iflag=direct status=none",
                        timeout=300, check=False)


def test_1_taints_the_kernel(zfs_guest, pool):
    zfs_guest.guest.run("echo 512 > /proc/sys/kernel/tainted")     # W, as a WARN_ON would


@pytest.mark.pool(props={"primarycache": "metadata"})
def test_2_corruption_nobody_declared(zfs_guest, pool):
    p = _file(zfs_guest, pool)
    zinject = zfs_guest.cmd("zinject")       # behind the harness's back: not declared
    zfs_guest.guest.run(f"{zinject} -t data -e checksum -T read {p}", timeout=60)
    _read(zfs_guest, p)
    zfs_guest.guest.run(f"{zinject} -c all", timeout=60, check=False)


@pytest.mark.pool(props={"primarycache": "metadata"})
def test_3_declared_corruption(zfs_guest, pool):
    p = _file(zfs_guest, pool)
    zfs_guest.zinject("-t", "data", "-e", "checksum", "-T", "read", p, timeout=60)
    _read(zfs_guest, p)
    zfs_guest.zinject("-c", "all", timeout=60, check=False)
'''


def test_what_a_case_leaves_behind_fails_it_with_the_checks_symptom(pytester):
    """The after-case judges in a real guest: a new taint bit and an undeclared
    checksum fault fail cases that did nothing wrong themselves, with their symptoms
    and evidence; the same fault declared through Zfs.zinject passes."""
    pytester.makepyfile(test_left=LEFTOVERS)
    res = run_inner(pytester)
    # The calls pass; the judges fail two of them after (an error at teardown).
    res.assert_outcomes(passed=3, errors=2)
    cases = pytester.path / "results"
    verdicts = {p.parent.name: json.loads(p.read_text())
                for p in cases.glob("*/cases/*/verdict.json")}

    def kinds(name: str) -> set[str]:
        v = next(v for k, v in verdicts.items() if name in k)
        return {s["kind"] for s in v["symptoms"]}
    assert kinds("test_1_taints") == {"taint:W"}
    assert {"ereport:checksum", "pool:cksum"} <= kinds("test_2_corruption") <= {
        "ereport:checksum", "ereport:data", "ereport:dio_verify_rd", "pool:cksum",
        "pool:data-errors"}
    assert kinds("test_3_declared") == set()
    after = next(cases.glob("*/cases/*test_3_declared*/after-case.txt")).read_text()
    assert "declared: zinject -t data -e checksum" in after and "no findings" in after


# A known finding of a panic, as patches/upstream/findings.toml writes one; the
# guest's kernel log is given its title by hand (/dev/kmsg), so the console judges
# read a real console line: the finding's own title, another one, or none at all.
SIGNED_FINDING = '''
[[findings]]
id = "pin-panic"
title = "a write cut short pins the uncut length"
cases = ["test_its_own_panic", "test_another_panic", "test_harness_no_result"]
kinds = ["kernel:spl_panic"]
signature = "VERIFY0\\\\(len\\\\) failed"
also = ["no-result", "D-state", "kernel:hung_task", "hang"]
'''

SIGNED_CASES = '''
import pytest

pytestmark = pytest.mark.vm


def _panic(zfs_guest, title):
    # The command outlives its report, so the console stream always stops it:
    # a panic seen while a case runs is judged in the call, never by chance.
    zfs_guest.guest.run(f"echo '<0>{title}' > /dev/kmsg; sleep 120", timeout=300)


def test_its_own_panic(zfs_guest, pool):
    _panic(zfs_guest, "VERIFY0(len) failed (-131072)")


def test_another_panic(zfs_guest, pool):
    _panic(zfs_guest, "VERIFY(zio->io_abd != NULL) failed")


def test_harness_no_result(zfs_guest, pool, symptom):
    out = zfs_guest.guest.run("echo '{}'", timeout=60).stdout
    symptom("no-result", f"the engine printed no result line: {out.strip()!r}")
    assert "rows" in out, "no result"
'''


@pytest.fixture
def signed_findings(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    patches = pytester.path / "patches"
    shutil.copytree(ROOT / "patches", patches)
    (patches / "upstream" / "findings.toml").write_text(SIGNED_FINDING)
    monkeypatch.setenv("OZFS_VMCI_PATCHES", str(patches))
    pytester.makepyfile(test_signed=SIGNED_CASES)


def test_in_a_guest_a_known_finding_is_matched_by_its_panics_title(pytester, signed_findings):
    """Its own title: XFAIL; another title in a case it lists: FAIL, exit 1 (the
    console stream stops each command on its report)."""
    res = run_inner(pytester, "-k", "panic")
    res.assert_outcomes(xfailed=1, failed=1)
    assert res.ret == 1
    v = {json.loads(p.read_text())["nodeid"].rsplit("::", 1)[1]: json.loads(p.read_text())
         for p in (pytester.path / "results").glob("*/cases/*/verdict.json")}
    assert v["test_its_own_panic"]["outcome"] == "xfailed"
    assert v["test_another_panic"]["outcome"] == "failed"
    assert any("zio->io_abd" in s["detail"] for s in v["test_another_panic"]["symptoms"])


def test_in_a_guest_a_harness_no_result_is_inconclusive_exit_2(pytester, signed_findings):
    res = run_inner(pytester, "-k", "no_result")
    res.assert_outcomes(failed=1)
    assert res.ret == 2, res.stdout.str()[-1500:]
    assert "INCONCLUSIVE" in res.stdout.str()
