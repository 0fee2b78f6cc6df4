"""Self-tests of the incremental build's pieces (no compiler): which files
force a fresh configure, paths moved to the new build folder without touching
mtimes, and which finished builds may donate their tree."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from suite.build.incremental import _relink, _retarget, blocks_seeding, comparable


@pytest.mark.parametrize("path,build_system", [
    ("configure.ac", True), ("config/kernel-blk-queue.m4", True), ("module/Makefile.in", True),
    ("lib/libzfs/Makefile.am", True), ("META", True), ("module/Kbuild.in", True),
    ("module/zfs/zfs_vnops.c", False), ("include/sys/zfs_znode.h", False),
    ("tests/zfs-tests/tests/functional/x.ksh", False),
    # make's own rebuild rules regenerate from a ZTS Makefile.am (a new helper program)
    ("tests/zfs-tests/cmd/Makefile.am", False), ("tests/zfs-tests/tests/Makefile.am", False),
    ("tests/zfs-tests/include/default.cfg.in", True),
])
def test_build_system_files_force_a_configure(path, build_system):
    assert blocks_seeding(path) is build_system


def test_paths_move_to_the_new_folder_and_mtimes_stay(tmp_path: Path):
    old, new = "/c/builds/aaaaaaaaaaaaaaaa", "/c/builds/bbbbbbbbbbbbbbbb"
    mk = tmp_path / "Makefile"
    mk.write_text(f"srcdir = {old}/src\nVPATH = {old}/src/module\n")
    obj = tmp_path / "x.o"
    obj.write_bytes(b"\0\1ELF" + old.encode())          # binary: left alone
    os.utime(mk, ns=(1_000_000_000, 1_000_000_000))
    assert _retarget(tmp_path, old, new) == 1
    assert mk.read_text() == f"srcdir = {new}/src\nVPATH = {new}/src/module\n"
    assert mk.stat().st_mtime_ns == 1_000_000_000
    assert old.encode() in obj.read_bytes()


def test_links_into_the_donor_tree_move_with_it(tmp_path: Path):
    """ZTS's tests/zfs-tests/bin links to the build's commands by absolute path:
    a seeded tree that kept them ran the donor's zpool and test helpers."""
    old, new = str(tmp_path / "aaaa"), str(tmp_path / "bbbb")
    bin_ = tmp_path / "bbbb" / "src" / "tests" / "zfs-tests" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "zpool").symlink_to(f"{old}/src/zpool")
    (bin_ / "awk").symlink_to("/usr/bin/awk")
    (bin_ / "near").symlink_to(f"{old}x/src/zpool")         # a sibling, not inside
    assert _relink(tmp_path / "bbbb", old, new) == 1
    assert os.readlink(bin_ / "zpool") == f"{new}/src/zpool"
    assert os.readlink(bin_ / "awk") == "/usr/bin/awk"
    assert os.readlink(bin_ / "near") == f"{old}x/src/zpool"


def test_a_donor_shares_everything_but_the_tree_and_its_series():
    a = {"recipe": 1, "kernel": {"release": "6.1"}, "source_tree": "t1",
         "series": [{"name": "zvol-dio", "commits": ["1"]}], "configure_flags": ["--enable-debug"],
         "targets": ["zfs"]}
    b = dict(a, source_tree="t2", series=[{"name": "zvol-dio", "commits": ["1", "2"]}])
    assert comparable(a) == comparable(b)
    assert comparable(a) != comparable(dict(b, configure_flags=[]))
    # a pull request's head (a series of its own) seeds from its base (no series)
    assert comparable(a) == comparable(dict(b, series=[]))
    assert comparable(a) != comparable(dict(b, kernel={"release": "6.12"}))


def test_a_seeded_tree_regenerates_only_when_a_zts_makefile_changed():
    from suite.build.incremental import Seeded
    assert Seeded("k", ["tests/zfs-tests/cmd/Makefile.am", "module/zfs/zil.c"]).regenerate
    assert not Seeded("k", ["module/zfs/zil.c", "tests/zfs-tests/tests/functional/a.ksh"]).regenerate


def test_only_the_makefiles_of_the_changed_zts_parts_are_regenerated(tmp_path: Path):
    from suite.build.incremental import Seeded
    (tmp_path / "tests/zfs-tests/tests").mkdir(parents=True)
    (tmp_path / "tests/zfs-tests/tests/Makefile.in").write_text("")   # a recursive Makefile
    s = Seeded("k", ["tests/zfs-tests/cmd/Makefile.am", "tests/zfs-tests/tests/Makefile.am",
                     "tests/zfs-tests/cmd/new.c"])
    assert s.makefiles(tmp_path) == ["Makefile", "tests/zfs-tests/tests/Makefile"]


def test_a_seeded_file_keeps_its_git_mode_and_a_symlink_stays_a_symlink(tmp_path: Path):
    """ZTS's runner skips a test group whose setup.ksh is not executable: the
    files a seeded tree takes from the new commit must keep git's mode."""
    import os
    import shutil
    from types import SimpleNamespace

    from gitrepo import commit, sh
    from suite.build.incremental import changed_paths, seed_tree
    from suite.source.objects import ObjectCache
    repo = tmp_path / "repo"
    repo.mkdir()
    sh(repo, "git", "init", "-q")
    commit(repo, {"t/setup.ksh": "old\n", "t/plain.txt": "a\n"}, "a")
    (repo / "t/setup.ksh").chmod(0o755)
    os.symlink("setup.ksh", repo / "t/link")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-q", "-m", "modes")
    a = sh(repo, "git", "rev-parse", "HEAD")
    donor_dir = tmp_path / "builds" / "d"
    shutil.copytree(repo, donor_dir / "src", symlinks=True, ignore=shutil.ignore_patterns(".git"))
    (repo / "t/setup.ksh").write_text("new\n")
    (repo / "t/new.ksh").write_text("x\n")
    (repo / "t/new.ksh").chmod(0o755)
    (repo / "t/link").unlink()
    os.symlink("new.ksh", repo / "t/link")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-q", "-m", "b")
    b = sh(repo, "git", "rev-parse", "HEAD")
    cache = ObjectCache(path=repo / ".git")
    diff = changed_paths(cache, a, b)
    donor = SimpleNamespace(key="d", src_dir=str(donor_dir / "src"), build_dir=str(donor_dir))
    seed_tree(donor, diff, cache, b, tmp_path / "builds" / "e")
    out = tmp_path / "builds" / "e" / "src" / "t"
    assert (out / "setup.ksh").read_text() == "new\n" and os.access(out / "setup.ksh", os.X_OK)
    assert os.access(out / "new.ksh", os.X_OK) and not os.access(out / "plain.txt", os.X_OK)
    assert (out / "link").is_symlink() and os.readlink(out / "link") == "new.ksh"
