"""Test impact selection (suite/impact/): the per-case map from real gcov counters
copied at each case's end, the functions a diff changes read from C sources in
OpenZFS's style, and the choice of cases with what was left out and why."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.impact import changed
from suite.impact.casemap import CaseMap, build_map, grown
from suite.impact.choose import BROAD, choose
from tests.gitrepo import commit, sh
from tests.test_coverage import KEY, NEEDS, local_guest, series  # noqa: F401  (a fixture)

SRC = """/* a header comment */
#define	ZFS_DIO_LIMIT	16
int zfs_dio_enabled = 1;

static int
dio_helper(int n,
    int m)
{
	return (n + m);
}

int
zfs_read(struct znode *zp, int n)
{
	int error = 0;
	if (n > ZFS_DIO_LIMIT)
		goto out;
	error = dio_helper(n, 1);
out:
	return (error);
}
EXPORT_SYMBOL(zfs_read);

static void
unrelated(void)
{
	(void) 0;
}
"""


def test_spans_follow_openzfs_style_labels_and_exports_included():
    sp = {s.name: (s.start, s.end) for s in changed.spans(SRC)}
    assert sp == {"dio_helper": (5, 10), "zfs_read": (12, 21), "unrelated": (24, 28)}, sp
    assert changed.span_at(changed.spans(SRC), 19).name == "zfs_read"      # the label line
    assert changed.span_at(changed.spans(SRC), 22) is None                 # EXPORT_SYMBOL


def test_a_diff_changes_functions_by_body_and_signature_and_names_outside(tmp_path: Path):
    repo = tmp_path / "r"
    repo.mkdir()
    sh(repo, "git", "init", "-q")
    base = commit(repo, {"module/zfs/zfs_vnops.c": SRC, "module/zfs/other.c":
                         "static int\nuser(int n)\n{\n\treturn (n > ZFS_DIO_LIMIT);\n}\n"
                         "static int\nbystander(int n)\n{\n\treturn (n);\n}\n"}, "base")
    new = (SRC.replace("#define\tZFS_DIO_LIMIT\t16", "#define\tZFS_DIO_LIMIT\t32")
           .replace("return (n + m);", "return (n + m + 1);")
           .replace("    int m)", "    int m, int k)"))
    head = commit(repo, {"module/zfs/zfs_vnops.c": new, "tests/a.ksh": "x\n",
                         "tests/zfs-tests/cmd/t.c": "int\nmain(void)\n{\n\treturn (1);\n}\n"},
                  "head")
    imp = changed.from_git(repo / ".git", base, head)
    assert imp.functions == {"module/zfs/zfs_vnops.c:dio_helper"}, imp.functions
    assert imp.names == {"ZFS_DIO_LIMIT"}
    assert imp.other == {"tests/a.ksh", "tests/zfs-tests/cmd/t.c"}, "a test program is no module's"
    assert imp.users["ZFS_DIO_LIMIT"] == {"module/zfs/zfs_vnops.c:zfs_read",
                                          "module/zfs/other.c:user"}
    assert "module/zfs/other.c:bystander" not in imp.all_functions()


def test_a_removed_line_is_placed_in_the_old_file():
    diff = ("diff --git a/m.c b/m.c\n--- a/m.c\n+++ b/m.c\n@@ -9 +8,0 @@\n-\treturn (n + m);\n")
    (fd,) = changed.parse(diff)
    imp = changed.Impact()
    changed.file_impact(fd, SRC, SRC.replace("\treturn (n + m);\n", ""), imp)
    assert imp.functions == {"m.c:dio_helper"}


def test_a_struct_member_is_used_through_an_access_and_a_forward_declaration_is_nothing():
    text = ("struct spa;\ntypedef struct zpl_aio {\n\tznode_t\t*zp;\n"
            "\tuint64_t\tspa_async_pool;\n} zpl_aio_t;\n")
    diff = ("diff --git a/m.h b/m.h\n--- a/m.h\n+++ b/m.h\n@@ -0,0 +1,5 @@\n"
            + "".join("+" + ln + "\n" for ln in text.splitlines()))
    (fd,) = changed.parse(diff)
    imp = changed.Impact()
    changed.file_impact(fd, "", text, imp)
    assert imp.names == {".zp", ".spa_async_pool", "zpl_aio", "zpl_aio_t"}, imp.names
    src = ("static int\nuses(spa_t *spa)\n{\n\treturn (spa->spa_async_pool != 0);\n}\n"
           "static int\nnamesake(int spa_async_pool)\n{\n\treturn (spa_async_pool);\n}\n")
    got = changed.users({"m.c": src}, imp.names)
    assert got[".spa_async_pool"] == {"m.c:uses"} and got[".zp"] == set(), got


def test_names_a_line_outside_functions_defines():
    assert changed.defined_names("#define UIO_DIO_DENY 0x0002") == {"UIO_DIO_DENY"}
    assert changed.defined_names("\tboolean_t\tzfd_dio_read_declined;") == {
        "zfd_dio_read_declined"}
    assert changed.defined_names("static uint_t zfs_vdev_direct_read_verify = 1;") == {
        "zfs_vdev_direct_read_verify"}
    assert changed.defined_names(" * a comment line") == set()
    # a prototype names its function, never its parameters (spa, zp, cr: everywhere)
    assert changed.defined_names("extern int zfs_read_impl(znode_t *zp, zfs_uio_t *uio, "
                                 "int ioflag, cred_t *cr);") == {"zfs_read_impl"}
    assert changed.defined_names("EXPORT_SYMBOL(zfs_read);") == set()


def _map() -> CaseMap:
    return CaseMap("k" * 16, "c" * 40, {
        "test_read[a]": {"m.c:zfs_read", "m.c:dio_helper"},
        "test_write[a]": {"m.c:zfs_write"}})


def test_choose_keeps_the_reaching_and_the_unknown_and_names_the_rest():
    imp = changed.Impact(functions={"m.c:dio_helper"})
    ch = choose(["c.py::test_read[a]", "c.py::test_write[a]", "c.py::test_new"], _map(), imp,
                slug=lambda c: c.split("::")[1])
    assert ch.kept == ["c.py::test_read[a]", "c.py::test_new"] and ch.left == [
        "c.py::test_write[a]"]
    assert "dio_helper" in ch.why["c.py::test_read[a]"]
    assert "not in the map" in ch.why["c.py::test_new"]


def test_a_table_row_judges_only_what_the_map_knows():
    from suite.impact.cli import table_row
    def slug(c: str) -> str:
        return c.split("::")[1]
    cases = ["c.py::test_read[a]", "c.py::test_write[a]", "c.py::test_new"]
    imp = changed.Impact(functions={"m.c:dio_helper", "m.c:zfs_async"})
    ch = choose(cases, _map(), imp, slug)
    row = table_row("bug", "ab" * 20, imp, ch, ["c.py::test_read[a]"], _map(), slug)
    assert "| 1 of 2 (+1 not in the map) |" in row and "yes: reaches dio_helper" in row
    missed = table_row("bug", "ab" * 20, imp, ch, ["c.py::test_write[a]"], _map(), slug)
    assert "**no** (1 mapped, none reached zfs_async)" in missed
    unknown = table_row("bug", "ab" * 20, imp, ch, ["c.py::test_new"], _map(), slug)
    assert "not judged: none of its 1 case(s) in the map" in unknown


def test_choose_keeps_everything_when_it_cannot_place_the_change():
    cases = ["c.py::test_read[a]", "c.py::test_write[a]"]
    nothing = changed.Impact(other={"tests/a.ksh"})
    assert choose(cases, _map(), nothing).left == []
    broad = changed.Impact(names={"B_TRUE2"}, users={"B_TRUE2": {f"m.c:f{i}"
                                                                  for i in range(BROAD + 1)}})
    ch = choose(cases, _map(), broad)
    assert ch.left == [] and "more than" in ch.notes[0]


def test_what_a_case_reached_is_what_grew_on_its_guest(tmp_path: Path):
    assert grown({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 1}) == {"b", "c"}
    copies = {"001-t1": {"a": 5, "b": 2}, "002-t2": {"a": 6, "b": 2}, "003-t3": {"a": 1}}
    for name in copies:
        (tmp_path / "k" / "gw0" / name).mkdir(parents=True)
    m = build_map([tmp_path / "k"], tmp_path, "k", "c",
                  read=lambda d, src: copies[d.name])
    assert m.cases == {"t1": {"a", "b"}, "t2": {"a"}, "t3": {"a"}}, \
        "a counter that went down is a new guest's: the case owns what it has"


def test_a_case_that_errored_in_its_setup_stays_out_of_the_map(tmp_path: Path):
    """The debug kernel under load (2026-12-06): the first case of each fresh guest
    errored at zpool create, and the map said it reached the module's load alone: a
    selection would have left it out of every change. It stays unknown (kept); the
    case after it still owns only what grew since."""
    import json
    from suite.impact.casemap import ran_body
    run = tmp_path / "run"
    copies = {"001-t1": {"a": 5}, "002-t2": {"a": 6, "b": 1}}
    for name in copies:
        (run / "coverage" / "cases" / "k" / "gw0" / name).mkdir(parents=True)
    for case, outcome in (("t1", "error"), ("t2", "passed")):
        (run / "cases" / case).mkdir(parents=True)
        (run / "cases" / case / "verdict.json").write_text(json.dumps({"outcome": outcome}))
    m = build_map([run / "coverage" / "cases" / "k"], tmp_path, "k", "c",
                  read=lambda d, src: copies[d.name],
                  ran=lambda bdir, case: ran_body(bdir.parent.parent.parent, case))
    assert m.cases == {"t2": {"a", "b"}}
    assert not ran_body(run, "t3"), "no verdict: not known to have run"


@pytest.mark.skipif(bool(NEEDS), reason=f"not installed: {', '.join(NEEDS)}")
def test_each_case_end_copies_counters_and_the_map_splits_them_by_case(series, tmp_path):  # noqa: F811
    """Two cases on one guest, the counters copied at each end by the harness's own
    code (the guest's copy script run here on a debugfs-like tree): the map says the
    first reached dio_async and the second dio_never, not each other's."""
    from suite.guest.lifecycle import Guests
    root = tmp_path / "gcov"
    at = root / str(series.src).lstrip("/") / "module" / "zfs"
    at.mkdir(parents=True)
    guest = local_guest(root)
    from suite.guest import gcov as collect
    script = collect.guest_script(str(root))
    run = guest.run
    guest.run = lambda cmd, **kw: run(script if "debug/gcov" in cmd else cmd, **kw)
    g = SimpleNamespace(vm=SimpleNamespace(alive=True, spec=SimpleNamespace(name="ozfs-gw0-1")),
                        zfs=SimpleNamespace(guest=guest))
    gs = Guests.__new__(Guests)
    gs.run_dir, gs.accel, gs.case_copies = tmp_path / "run", SimpleNamespace(
        deadline=lambda s: s), {}
    gs.record = SimpleNamespace(key=KEY, inputs={"kernel": {"zfs_gcov": "GCOV_PROFILE=y"}})
    gcda = series.src / "module" / "zfs" / "dio.gcda"
    for arg, case in (("11", "test_async"), ("-9", "test_never")):
        subprocess.run([str(series.exe), arg], check=False)     # counters accumulate
        shutil.copy(gcda, at / "dio.gcda")
        gs.copy_case_coverage(g, case)
    copies = sorted(p.name for p in (tmp_path / "run/coverage/cases" / KEY / "ozfs-gw0-1").iterdir())
    assert copies == ["001-test_async", "002-test_never"]
    m = build_map([tmp_path / "run/coverage/cases" / KEY], series.src, KEY, "c" * 40)
    fn = {c: {f.split(":")[1] for f in got} for c, got in m.cases.items()}
    assert "dio_async" in fn["test_async"] and "dio_never" not in fn["test_async"], fn
    assert "dio_never" in fn["test_never"] and "dio_async" not in fn["test_never"], fn
    assert CaseMap.load(_save(m, tmp_path)).cases == m.cases


def _save(m: CaseMap, tmp_path: Path) -> Path:
    p = tmp_path / "map.json"
    p.write_text(m.to_json())
    return p
