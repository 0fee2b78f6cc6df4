"""Self-tests of the incremental build's pieces (no compiler): which files
force a fresh configure, paths moved to the new build folder without touching
mtimes, and which finished builds may donate their tree."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from suite.build.incremental import BUILD_SYSTEM, _retarget, comparable


@pytest.mark.parametrize("path,build_system", [
    ("configure.ac", True), ("config/kernel-blk-queue.m4", True), ("module/Makefile.in", True),
    ("lib/libzfs/Makefile.am", True), ("META", True), ("module/Kbuild.in", True),
    ("module/zfs/zfs_vnops.c", False), ("include/sys/zfs_znode.h", False),
    ("tests/zfs-tests/tests/functional/x.ksh", False),
])
def test_build_system_files_force_a_configure(path, build_system):
    assert bool(BUILD_SYSTEM.match(path)) is build_system


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


def test_a_donor_shares_everything_but_the_tree_and_commits():
    a = {"recipe": 1, "kernel": {"release": "6.1"}, "source_tree": "t1",
         "series": [{"name": "zvol-dio", "commits": ["1"]}], "configure_flags": ["--enable-debug"],
         "targets": ["zfs"]}
    b = dict(a, source_tree="t2", series=[{"name": "zvol-dio", "commits": ["1", "2"]}])
    assert comparable(a) == comparable(b)
    assert comparable(a) != comparable(dict(b, configure_flags=[]))
    assert comparable(a) != comparable(dict(b, series=[{"name": "async-dio", "commits": ["1"]}]))
