"""Line coverage of a series (suite/coverage/), with the real tools: gcc --coverage
builds a tiny "module" in a tree laid out like a build's, running it leaves real
.gcda, gcov-tool merges them, gcov reads them, git gives the series' diff and
genhtml renders the tracefile. Nothing here boots a guest: the guest's collect
script runs in a local bash against a folder laid out like debugfs's gcov tree."""
from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.build import gcov as flags
from suite.coverage import diffmap, gcovdata, merge, report
from suite.guest import gcov as collect
from tests.gitrepo import commit, sh

NEEDS = [t for t in ("gcc", "gcov", "gcov-tool", "git") if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(bool(NEEDS), reason=f"not installed: {', '.join(NEEDS)} "
                                "(apt-get install build-essential git)")

BASE = """#include <stdlib.h>

int dio_read(int n)
{
	int r = 0;
	if (n > 0)
		r = n * 2;
	return r;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0;
	return dio_read(n) == 12345;
}
"""

# The series: two new functions, dio_read changed to call them.
HEAD = """#include <stdlib.h>

static int dio_never(int n)
{
	return n + 1;
}

static int dio_async(int n)
{
	int r = n;
	if (n > 10)
		r = n * 3;
	return r;
}

int dio_read(int n)
{
	int r = 0;
	if (n > 0)
		r = dio_async(n);
	if (n < -5)
		r = dio_never(n);
	return r;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0;
	return dio_read(n) == 12345;
}
"""
FILE = "module/zfs/dio.c"
KEY = "0123456789abcdef"
DONOR = "fedcba9876543210"


@pytest.fixture
def series(tmp_path: Path) -> SimpleNamespace:
    """A repo with a base and a series commit; the head built with --coverage in a
    tree laid out like a build's (<cache>/builds/<key>/src)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    sh(repo, "git", "init", "-q")
    base = commit(repo, {FILE: BASE, "module/zfs/other.c": "int other(void)\n{\n\treturn 1;\n}\n",
                         "cmd/tool.c": "int x;\n"}, "base")
    head = commit(repo, {FILE: HEAD, "cmd/tool.c": "int x;\nint y;\n",
                         "module/os/freebsd/zfs/f.c": "int f;\n"}, "series")
    src = tmp_path / "cache" / "builds" / KEY / "src"
    src.mkdir(parents=True)
    sh(repo, "git", "worktree", "add", "-q", str(src / "wt"), head)
    shutil.copytree(src / "wt" / "module", src / "module")
    obj = src / "module" / "zfs" / "dio.o"
    subprocess.run(["gcc", "--coverage", "-O0", "-c", FILE, "-o", str(obj)], cwd=src, check=True)
    subprocess.run(["gcc", "--coverage", "-O0", "-c", "module/zfs/other.c", "-o",
                    str(src / "module" / "zfs" / "other.o")], cwd=src, check=True)
    exe = tmp_path / "dio"
    subprocess.run(["gcc", "--coverage", str(obj), str(src / "module/zfs/other.o"), "-o",
                    str(exe)], check=True)
    return SimpleNamespace(repo=repo, base=base, head=head, src=src, exe=exe, tmp=tmp_path)


def guest_run(s: SimpleNamespace, arg: str, name: str, tree: Path | None = None) -> Path:
    """Run the instrumented program once and keep its .gcda the way a guest's copy
    holds it: at the object's absolute path (``tree``: as if compiled in another
    build's tree, a seeded build's unchanged object)."""
    subprocess.run([str(s.exe), arg], check=False)
    gcda = s.src / "module" / "zfs" / "dio.gcda"
    assert gcda.is_file()
    where = Path(str(tree or s.src).lstrip("/")) / "module" / "zfs" / "dio.gcda"
    dest = s.tmp / "guests" / name / where
    dest.parent.mkdir(parents=True)
    shutil.move(gcda, dest)
    (s.src / "module" / "zfs" / "other.gcda").unlink(missing_ok=True)
    return s.tmp / "guests" / name


def test_diff_map_takes_the_added_and_changed_lines_of_module_only(series):
    ch = diffmap.changes(series.repo / ".git", series.base, series.head)
    assert set(ch.lines) == {FILE, "module/os/freebsd/zfs/f.c"}       # cmd/ is not module/
    lines = ch.lines[FILE]
    new = HEAD.splitlines()
    for text in ("\treturn n + 1;", "\t\tr = n * 3;", "\t\tr = dio_async(n);",
                 "\t\tr = dio_never(n);", "static int dio_async(int n)"):
        assert new.index(text) + 1 in lines, text
    for text in ("int dio_read(int n)", "\tint r = 0;", "int main(int argc, char **argv)",
                 "\treturn dio_read(n) == 12345;"):
        assert new.index(text) + 1 not in lines, text       # unchanged by the series
    only_del = diffmap.parse("--- a/module/x.c\n+++ b/module/x.c\n@@ -4,2 +3,0 @@\n-a\n-b\n")
    assert only_del.lines == {} and only_del.deletions == {"module/x.c": 1}


def test_the_table_counts_executed_and_never_reached_changed_lines(series):
    g = guest_run(series, "5", "ozfs-main-1")          # dio_async, but not its n > 10 branch
    merged = merge.merge([g], series.tmp / "merged", str(series.src))
    counts = gcovdata.read(series.src, merged.root)
    assert counts.objects == 2 and counts.with_data == 1
    ch = diffmap.changes(series.repo / ".git", series.base, series.head)
    dc = report.diff_coverage("t", ch, counts)
    new = HEAD.splitlines()
    ln = {t: new.index(t) + 1 for t in ("\treturn n + 1;", "\t\tr = n * 3;",
                                        "\t\tr = dio_async(n);", "\t\tr = dio_never(n);",
                                        "\tint r = n;", "\tif (n < -5)")}
    (f,) = dc.files
    assert f.path == FILE
    assert dc.not_built == ["module/os/freebsd/zfs/f.c"]   # changed, but no .gcno
    for executed in ("\t\tr = dio_async(n);", "\tint r = n;", "\tif (n < -5)"):
        assert ln[executed] in f.executed, executed
    for missed in ("\treturn n + 1;", "\t\tr = n * 3;", "\t\tr = dio_never(n);"):
        assert ln[missed] in f.changed and ln[missed] not in f.executed, missed
    # gcov's executable lines only: braces and blank lines the series added do not count
    assert new.index("static int dio_never(int n)") + 2 not in f.changed      # its "{"
    funcs = {fn.name: fn for fn in f.functions}
    assert not funcs["dio_never"].executed and funcs["dio_never"].changed
    assert funcs["dio_async"].missed == [ln["\t\tr = n * 3;"]]
    assert funcs["dio_read"].missed == [ln["\t\tr = dio_never(n);"]]
    assert "main" not in funcs                          # nothing of it changed
    assert dc.never_reached() == [f"{FILE}:dio_never"]
    assert dc.changed == len(f.changed) and dc.executed == len(f.executed)
    assert dc.changed - dc.executed == 4    # dio_never's open line, return, n*3, the call
    text = report.table(dc)
    assert f"the cases executed {dc.executed} of {dc.changed} changed lines" in text
    assert f"never reached: {FILE}:dio_never" in text


def test_merging_two_runs_adds_up(series):
    a = guest_run(series, "5", "ozfs-gw0-1")
    b = guest_run(series, "20", "ozfs-gw1-1", tree=series.tmp / "cache/builds" / DONOR / "src")
    one = gcovdata.read(series.src, merge.merge([a], series.tmp / "ma", str(series.src)).root)
    two = gcovdata.read(series.src, merge.merge([b], series.tmp / "mb", str(series.src)).root)
    both = merge.merge([a, b], series.tmp / "mab", str(series.src))
    assert both.inputs == 2 and both.files == 1
    sum_ = gcovdata.read(series.src, both.root)
    la, lb, lab = (c.files[FILE].lines for c in (one, two, sum_))
    assert set(lab) == set(la) == set(lb)
    assert all(lab[n] == la[n] + lb[n] for n in lab)
    assert any(la[n] and lb[n] for n in lab)            # something both ran: really summed
    fa, fab = one.files[FILE].functions, sum_.files[FILE].functions
    assert all(fab[k].count == fa[k].count + two.files[FILE].functions[k].count for k in fab)
    ch = diffmap.changes(series.repo / ".git", series.base, series.head)
    n3 = HEAD.splitlines().index("\t\tr = n * 3;") + 1
    alone, merged = (report.diff_coverage("t", ch, c) for c in (one, sum_))
    assert n3 not in alone.files[0].executed and n3 in merged.files[0].executed
    assert merged.executed == alone.executed + 1


def local_guest(root: Path) -> SimpleNamespace:
    """A stand-in for Guest.run: the same bash script, run here."""
    def run(cmd: str, timeout: float = 60, check: bool = True, stdin=None, log: bool = True):
        p = subprocess.run(["bash", "--norc", "-c", cmd], capture_output=True, text=True,
                           timeout=timeout)
        return SimpleNamespace(rc=p.returncode, stdout=p.stdout, stderr=p.stderr)
    return SimpleNamespace(run=run, root=root)


def test_the_guest_script_copies_every_module_gcda_and_nothing_else(series, tmp_path):
    subprocess.run([str(series.exe), "7"], check=False)
    real = series.src / "module" / "zfs" / "dio.gcda"
    root = tmp_path / "debugfs-gcov"                    # laid out as the kernel's
    at = root / str(series.src).lstrip("/") / "module" / "zfs"
    at.mkdir(parents=True)
    shutil.copy(real, at / "dio.gcda")
    os.symlink(series.src / "module" / "zfs" / "dio.gcno", at / "dio.gcno")
    (root / "kernel" / "sched").mkdir(parents=True)
    shutil.copy(real, root / "kernel" / "sched" / "core.gcda")     # not OpenZFS's
    dest = tmp_path / "run" / "coverage" / "gcda" / KEY / "ozfs-main-1"
    got = collect.from_guest(local_guest(root), dest, "ozfs-main-1", root=str(root))
    assert (got.files, got.bad, got.skipped) == (1, [], "")
    copied = dest / str(series.src).lstrip("/") / "module" / "zfs" / "dio.gcda"
    assert copied.read_bytes() == real.read_bytes()
    assert not list(dest.rglob("*.gcno")) and not list(dest.rglob("core.gcda"))
    assert json.loads((dest / "collected.json").read_text())["files"] == 1
    gone = collect.from_guest(local_guest(root), tmp_path / "none", "g2",
                              root=str(tmp_path / "no-such-gcov"))
    assert gone.files == 0 and "has no" in gone.skipped


def test_a_guest_without_python_copies_the_same_counters_with_cat(series, tmp_path):
    """python3 reads every file in one process (fast in a KASAN guest); without it the
    shell loop gives the very same files."""
    subprocess.run([str(series.exe), "5"], check=False)
    real = series.src / "module" / "zfs" / "dio.gcda"
    root = tmp_path / "gcov"
    at = root / str(series.src).lstrip("/") / "module" / "zfs"
    at.mkdir(parents=True)
    shutil.copy(real, at / "dio.gcda")
    bare = tmp_path / "bin"                 # the tools the loop needs, and no python3
    bare.mkdir()
    for tool in ("bash", "find", "mkdir", "cat", "tar", "gzip", "base64", "mktemp", "rm",
                 "mountpoint"):
        if path := shutil.which(tool):
            os.symlink(path, bare / tool)
    script = collect.guest_script(str(root))
    outs = []
    for env in (dict(os.environ), {"PATH": str(bare)}):
        p = subprocess.run([str(bare / "bash"), "-c", script], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        dest = tmp_path / f"out{len(outs)}"
        got = collect.unpack(p.stdout, dest, "g")
        outs.append((got.files, got.bad, sorted(str(f.relative_to(dest))
                                                for f in dest.rglob("*.gcda"))))
    assert outs[0] == outs[1] and outs[0][0] == 1
    assert (tmp_path / "out1" / str(series.src).lstrip("/") / "module" / "zfs" /
            "dio.gcda").read_bytes() == real.read_bytes()


def test_an_empty_gcda_is_refused_as_what_tar_of_debugfs_would_give(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("./a/module/x.gcda", b""), ("./a/module/y.gcda",
                                                        b"adcg" + b"\0" * 20), (".count", b"2\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    got = collect.unpack(base64.b64encode(buf.getvalue()).decode(), tmp_path, "g")
    assert got.files == 1 and len(got.bad) == 1 and "x.gcda: 0 bytes" in got.bad[0]
    assert not (tmp_path / "a/module/x.gcda").exists()


def test_a_retired_guest_leaves_its_counters_only_on_an_instrumented_build(series, tmp_path):
    from suite.guest.lifecycle import Guests
    subprocess.run([str(series.exe), "3"], check=False)
    root = tmp_path / "gcov"
    at = root / str(series.src).lstrip("/") / "module" / "zfs"
    at.mkdir(parents=True)
    shutil.move(series.src / "module" / "zfs" / "dio.gcda", at / "dio.gcda")
    marks: list[str] = []
    guest = local_guest(root)
    script = collect.guest_script(str(root))
    run = guest.run
    guest.run = lambda cmd, **kw: run(script if "debug/gcov" in cmd else cmd, **kw)
    guest.mark = marks.append
    g = SimpleNamespace(vm=SimpleNamespace(alive=True, spec=SimpleNamespace(name="ozfs-gw0-2"),
                                           kill=lambda: None),
                        zfs=SimpleNamespace(guest=guest))
    accel = SimpleNamespace(deadline=lambda s: s)
    for gcov, want in ((False, False), (True, True)):
        rec = SimpleNamespace(key=KEY, inputs={"kernel": {"zfs_gcov": "GCOV_PROFILE=y"}
                                               if gcov else {"release": "6.1"}})
        run_dir = tmp_path / f"run-{gcov}"
        gs = Guests.__new__(Guests)
        gs.run_dir, gs.record, gs.accel, gs.current, gs.kept = run_dir, rec, accel, g, []
        gs.recycle()
        assert gs.current is None
        found = list((run_dir / "coverage" / "gcda" / KEY / "ozfs-gw0-2").rglob("dio.gcda"))
        assert bool(found) is want
    assert marks and "1 files" in marks[-1]


def test_build_flags_only_when_the_profile_asks_and_the_key_changes(tmp_path):
    from suite.build.kernel import Kernel, load_profile
    from suite.build.recipe import BuildRequest
    from suite.errors import BuildError
    from suite.source.objects import Resolved
    from suite.source.series import SourceTree
    assert load_profile("debian-6.1-debug").zfs_gcov
    assert not load_profile("debian-6.1").zfs_gcov
    (tmp_path / ".config").write_text("CONFIG_X=y\nCONFIG_GCOV_KERNEL=y\n")
    plain = Kernel("p", "6.1.0", tmp_path / "vmlinuz", tmp_path, tmp_path, tmp_path)
    gcov = Kernel("p", "6.1.0", tmp_path / "vmlinuz", tmp_path, tmp_path, tmp_path,
                  zfs_gcov=True)
    assert flags.make_args(plain) == () and flags.make_args(gcov) == ("GCOV_PROFILE=y",)
    tree = SourceTree(Resolved("u", "r", "c" * 40), "c" * 40, "t" * 40, "zfs-2.4.99")
    assert BuildRequest(plain, tree).key != BuildRequest(gcov, tree).key
    assert flags.instrumented(BuildRequest(gcov, tree).inputs())
    assert not flags.instrumented(BuildRequest(plain, tree).inputs())
    (tmp_path / ".config").write_text("# CONFIG_GCOV_KERNEL is not set\n")
    with pytest.raises(BuildError, match="CONFIG_GCOV_KERNEL"):
        flags.make_args(gcov)


def test_gcov_profile_on_makes_command_line_reaches_a_kbuild_style_sub_make(tmp_path):
    """The way OpenZFS's module/Makefile calls kbuild (make -C <kernel> M=...), and
    kbuild's own rule (scripts/Makefile.lib: per-object, then per-directory)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    kernel = tmp_path / "kernel"
    mod = tmp_path / "module" / "zfs"
    kernel.mkdir()
    mod.mkdir(parents=True)
    (kernel / "Makefile").write_text(
        "CFLAGS_GCOV := -fprofile-arcs -ftest-coverage\n"
        "modules:\n\t$(MAKE) -f $(M)/Kbuild -C $(M) CFLAGS_GCOV='$(CFLAGS_GCOV)'\n")
    (mod / "Kbuild").write_text(
        "x.o: x.c\n\tgcc -c $(if $(patsubst n%,,$(GCOV_PROFILE_x.o)$(GCOV_PROFILE)),"
        "$(CFLAGS_GCOV)) x.c -o x.o\n")
    (mod / "x.c").write_text("int x(void) { return 1; }\n")
    (tmp_path / "module" / "Makefile").write_text(
        "modules:\n\t$(MAKE) -C ../kernel M=$$PWD/zfs modules\n")
    subprocess.run(["make", "-s", "-C", str(tmp_path / "module")], check=True,
                   capture_output=True)
    assert not (mod / "x.gcno").exists()
    with pytest.raises(Exception, match="without gcov"):
        flags.check_instrumented(tmp_path, tmp_path / "build.log")
    (mod / "x.o").unlink()
    subprocess.run(["make", "-s", *flags.MAKE_ARGS, "-C", str(tmp_path / "module")],
                   check=True, capture_output=True)
    assert (mod / "x.gcno").exists()
    assert flags.check_instrumented(tmp_path, tmp_path / "build.log") == 1


def record_json(s: SimpleNamespace, series_name: str) -> dict:
    return {"key": KEY, "build_dir": str(s.src.parent), "src_dir": str(s.src),
            "created": "2026-01-01T00:00:00", "inputs": {"kernel": {"zfs_gcov": "GCOV_PROFILE=y"}},
            "source": {"base_commit": s.base, "commit": s.head, "describe": "zfs-2.4.99-2-gabc",
                       "series": [{"name": series_name, "commits": [s.head]}]},
            "kernel": {"release": "6.1.0-ozfs-debug"}, "zfs_version": "2.4.99",
            "modules": {}, "commands": {}, "log": "/dev/null"}


def test_suite_coverage_writes_the_table_tracefile_html_and_the_reports_total(
        series, tmp_path, monkeypatch, capsys):
    from suite.cli import main
    from suite.report.page.sections import coverage as coverage_section
    cache = tmp_path / "ozfs-cache"
    subprocess.run(["git", "clone", "-q", "--bare", str(series.repo),
                    str(cache / "git" / "objects.git")], check=True)
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(cache))
    results = tmp_path / "results"
    for i, (sess, arg) in enumerate((("20260101-100000-async-dio", "5"),
                                     ("20260101-110000-async-dio", "20"))):
        g = guest_run(series, arg, f"g{i}")
        dest = results / sess / "coverage" / "gcda" / KEY / f"ozfs-gw{i}-1"
        shutil.copytree(g, dest)
        (results / sess / "build").mkdir(parents=True)
        (results / sess / "build" / f"record-{KEY}.json").write_text(
            json.dumps(record_json(series, "async-dio")))
    html = shutil.which("genhtml") is not None
    argv = ["coverage", "--series", "async-dio", "--results", str(results / "20260101-100000-async-dio"),
            "--results", str(results / "20260101-110000-async-dio"), *([] if html else ["--no-html"])]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 guest(s)" in out and f"never reached: {FILE}:dio_never" in out
    folder = results / "20260101-100000-async-dio" / "coverage" / KEY
    data = json.loads((folder / "coverage.json").read_text())
    assert data["summary"].startswith(f"the cases executed {data['executed']} of "
                                      f"{data['changed lines']} changed lines")
    info = (folder / "coverage.info").read_text()
    assert f"SF:{series.src / FILE}" in info and "FN:" in info and "end_of_record" in info
    n3 = HEAD.splitlines().index("\t\tr = n * 3;") + 1
    assert f"DA:{n3},1\n" in info                       # only the second session ran it
    if html:
        assert (folder / "html" / "index.html").is_file()
    sec = coverage_section(results / "20260101-100000-async-dio")
    assert sec is not None and sec.intro == [data["summary"]]
    assert main(["coverage", "--series", "zvol-dio", "--results", str(results)]) == 2
    assert "not zvol-dio" in capsys.readouterr().err


def test_genhtml_is_present_for_the_html_view():
    """CI installs lcov (ci/apt-packages.txt); where it is missing the error names it."""
    if shutil.which("genhtml") is None:
        pytest.skip("genhtml is not installed: apt-get install -y --no-install-recommends lcov")
    assert "lcov" in Path("ci/apt-packages.txt").read_text().split()
    assert "lcov" in report.GENHTML_FIX


def test_a_session_that_left_counters_maps_them_for_its_report(series, tmp_path):
    from suite.coverage.lane import after_session
    run = tmp_path / "results" / "20260101-120000-async-dio"
    assert after_session(run) == []                     # no counters: nothing to say
    g = guest_run(series, "20", "g")
    shutil.copytree(g, run / "coverage" / "gcda" / KEY / "ozfs-main-1")
    (run / "build").mkdir(parents=True)
    rec = record_json(series, "async-dio")
    (run / "build" / f"record-{KEY}.json").write_text(json.dumps(rec))
    lines = after_session(run, git_dir=series.repo / ".git")
    assert lines[0].startswith("ozfs-vmci coverage (async-dio): the cases executed 7 of 10 "
                               "changed lines"), lines
    data = json.loads((run / "coverage" / KEY / "coverage.json").read_text())
    assert data["executed"] == 7 and data["build"] == KEY
    rec["source"]["series"] = []
    (run / "build" / f"record-{KEY}.json").write_text(json.dumps(rec))
    assert "nothing mapped (a build with no series)" in after_session(run)[0]
