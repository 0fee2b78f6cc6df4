"""Build cache keys, cache validity, and the build's error paths (no real compiler)."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
from gitrepo import commit, sh

from suite.build import recipe as build_mod
from suite.build.kernel import Kernel
from suite.build.recipe import BuildRequest, cached, failing_lines, get_or_build
from suite.errors import BuildError
from suite.source.objects import ObjectCache, Resolved, resolve_source
from suite.source.series import AppliedSeries, SourceTree


def fake_kernel(tmp: Path, symvers: str = "0x1 sym vmlinux EXPORT_SYMBOL\n") -> Kernel:
    hdr = tmp / "headers"
    hdr.mkdir(exist_ok=True)
    (hdr / "Makefile").write_text("")
    (hdr / "Module.symvers").write_text(symvers)
    return Kernel("fake", "6.1.0-99-amd64", tmp / "vmlinuz", hdr, hdr, tmp / "mods")


def tree(commit_: str = "c" * 40, tree_: str = "t" * 40, series=()) -> SourceTree:
    return SourceTree(base=Resolved("u", "master", "b" * 40), commit=commit_, tree=tree_,
                      describe="zfs-2.4.99-1-gdeadbeef", series=tuple(series))


def test_key_is_stable_and_changes_with_every_input(tmp_path):
    k = fake_kernel(tmp_path)
    req = BuildRequest(k, tree())
    assert req.key == BuildRequest(k, tree()).key and len(req.key) == 16
    s1 = AppliedSeries("s", "s", "u", ("1" * 40,), ("x",))
    s2 = AppliedSeries("s", "s", "u", ("2" * 40,), ("x",))
    variants = [
        BuildRequest(k, tree(tree_="u" * 40)),                          # source tree
        BuildRequest(k, tree(series=[s1])),                              # series commits
        BuildRequest(k, tree(series=[s2])),
        BuildRequest(k, tree(), flags=("--enable-debug", "--enable-asan")),  # flags
        BuildRequest(k, tree(), zts=True),                               # targets
        BuildRequest(k, tree(), zdb=True),
        BuildRequest(fake_kernel(tmp_path / "k2" if (tmp_path / "k2").mkdir() is None else
                                 tmp_path, "0x2 other\n"), tree()),      # kernel ABI
        BuildRequest(dataclasses.replace(k, release="6.12.9-amd64"), tree()),
    ]
    keys = {v.key for v in variants}
    assert req.key not in keys and len(keys) == len(variants)


def test_same_commit_via_different_commit_is_a_different_key(tmp_path):
    """The record must say which commits made a tree, so they are part of the key."""
    k = fake_kernel(tmp_path)
    a = AppliedSeries("s@1", "s", "u", ("1" * 40,), ("x",))
    b = AppliedSeries("s@2", "s", "u", ("1" * 40, "2" * 40), ("x", "y"))
    assert BuildRequest(k, tree(series=[a])).key != BuildRequest(k, tree(series=[b])).key


def test_dir_without_record_is_not_a_build(tmp_path, monkeypatch):
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    d = build_mod.build_dir("0123456789abcdef")
    d.mkdir(parents=True)
    (d / "src").mkdir()
    assert cached("0123456789abcdef") is None
    (d / "record.json").write_text("{not json")
    assert cached("0123456789abcdef") is None


FAKE_AUTOGEN = "#!/bin/sh\necho autogen ok\n"
FAKE_MAKE = """all:
\techo "  CC       cmd/zfs.o"
zfs zpool zinject zdb:
\techo "  CCLD     $@"; printf '#!/bin/sh\\n' > $@; chmod +x $@
module-target:
"""


def fake_source(tmp: Path, configure: str, module_make: str = "") -> Path:
    repo = tmp / "fakezfs"
    repo.mkdir()
    sh(repo, "git", "init", "-q", "-b", "master")
    mm = module_make or "all:\n\ttouch spl.ko zfs.ko\n"
    commit(repo, {"autogen.sh": FAKE_AUTOGEN, "configure": configure, "Makefile": FAKE_MAKE,
                  "module/Makefile": mm, "include/.keep": "", "META": "Version: 2.4.99\n"},
           "fake")
    (repo / "configure").chmod(0o755)
    sh(repo, "git", "update-index", "--chmod=+x", "configure")
    sh(repo, "git", "commit", "-q", "-m", "x")
    return repo


def request_for(tmp: Path, repo: Path) -> tuple[BuildRequest, ObjectCache]:
    cache = ObjectCache()
    base = resolve_source(str(repo), None, cache)
    t = SourceTree(base=base, commit=base.commit, tree=cache.tree_of(base.commit),
                   describe=cache.describe(base.commit))
    return BuildRequest(fake_kernel(tmp), t), cache


def test_successful_build_writes_record_and_second_call_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build_mod, "_modinfo", lambda ko, f: f"{f}-of-{ko.name}")
    req, cache = request_for(tmp_path, fake_source(tmp_path, "#!/bin/sh\necho configured\n"))
    rec, built = get_or_build(req, cache)
    assert built and rec.key == req.key
    assert rec.modules["zfs"].srcversion == "srcversion-of-zfs.ko"
    assert Path(rec.commands["zinject"]).exists()
    src = Path(rec.src_dir)
    assert (src / ".nogitrelease").exists()
    assert "zfs_gitrev" not in rec.log and (src / "include/zfs_gitrev.h").read_text().startswith(
        "#define\tZFS_META_GITREV")
    on_disk = json.loads((Path(rec.build_dir) / "record.json").read_text())
    assert on_disk["inputs"]["source_tree"] == req.tree.tree
    calls = []
    monkeypatch.setattr(build_mod, "_build", lambda *a, **k: calls.append(a))
    rec2, built2 = get_or_build(req, cache)
    assert not built2 and rec2.key == rec.key and calls == []


def test_configure_failure_shows_the_error_lines_and_keeps_no_half_build(tmp_path, monkeypatch):
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    conf = "#!/bin/sh\necho checking things\necho 'configure: error: *** Unable to build an empty module.'\nexit 1\n"
    req, cache = request_for(tmp_path, fake_source(tmp_path, conf))
    with pytest.raises(BuildError) as e:
        get_or_build(req, cache)
    assert "configure failed" in e.value.what
    assert "Unable to build an empty module" in e.value.detail
    assert not build_mod.build_dir(req.key).exists()
    kept = list((tmp_path / "cache/builds/failed").glob(f"{req.key}-*.log"))
    assert kept and str(kept[0]) in e.value.fix


def test_disk_full_says_to_free_space(tmp_path, monkeypatch):
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    mm = "all:\n\t@echo 'zfs.o: No space left on device'; exit 1\n"
    req, cache = request_for(tmp_path, fake_source(tmp_path, "#!/bin/sh\n", mm))
    with pytest.raises(BuildError) as e:
        get_or_build(req, cache)
    assert "make modules failed" in e.value.what
    assert "free disk space" in e.value.fix and "No space left" in e.value.detail
    assert not build_mod.build_dir(req.key).exists()


def test_interrupted_build_leaves_no_valid_key(tmp_path, monkeypatch):
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    req, cache = request_for(tmp_path, fake_source(tmp_path, "#!/bin/sh\n"))
    real = build_mod._run_logged

    def interrupt_in_make(cmd, cwd, env, log, name):
        if name.startswith("make"):
            raise KeyboardInterrupt
        return real(cmd, cwd, env, log, name)

    monkeypatch.setattr(build_mod, "_run_logged", interrupt_in_make)
    with pytest.raises(KeyboardInterrupt):
        get_or_build(req, cache)
    assert cached(req.key) is None and not build_mod.build_dir(req.key).exists()
    # A crash that killed the process mid-build leaves a dir without a record:
    d = build_mod.build_dir(req.key)
    (d / "src").mkdir(parents=True)
    monkeypatch.setattr(build_mod, "_run_logged", real)
    monkeypatch.setattr(build_mod, "_modinfo", lambda ko, f: "x")
    rec, built = get_or_build(req, cache)        # wiped and rebuilt, not trusted
    assert built and cached(req.key) is not None


def test_failing_lines_picks_compiler_errors_not_the_wall():
    log = "\n".join([f"  CC  file{i}.o" for i in range(500)] + [
        "module/zfs/zpl_file.c: In function 'zpl_async_read_task':",
        "module/zfs/zpl_file.c:412:9: error: implicit declaration of function 'foo'",
        "make[4]: *** [scripts/Makefile.build:250: zpl_file.o] Error 1",
    ] + [f"  CC  more{i}.o" for i in range(100)])
    out = failing_lines(log)
    assert "error: implicit declaration" in out and "Error 1" in out
    assert out.count("  CC  ") <= 4


def test_a_build_step_past_its_deadline_is_killed(tmp_path):
    log = tmp_path / "build.log"
    t = time.monotonic()
    with pytest.raises(BuildError, match="past its 1s deadline") as e:
        build_mod._run_logged(["sh", "-c", "echo started; sleep 60 & sleep 60"], tmp_path,
                              dict(os.environ), log, "hung step", timeout=1)
    assert time.monotonic() - t < 15
    assert "started" in e.value.detail


def test_zdb_is_built_only_when_asked(tmp_path):
    """zdb needs libzpool, a third of a cold build here (#24): only --with-zdb
    (which --thorough sets) or the ZTS's `all` builds it."""
    k = fake_kernel(tmp_path)
    assert BuildRequest(k, tree()).targets == ("zfs", "zpool", "zinject")
    assert "zdb" not in BuildRequest(k, tree()).commands
    assert BuildRequest(k, tree(), zdb=True).targets[-1] == "zdb"
    assert "zdb" in BuildRequest(k, tree(), zts=True).commands


def test_a_build_with_zdb_serves_a_request_without_it(tmp_path, monkeypatch):
    """Same modules and tools plus zdb: an explore run after a --thorough one takes
    that build instead of paying a cold build for less; never the other way."""
    from dataclasses import replace
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build_mod, "_modinfo", lambda ko, f: f"{f}-of-{ko.name}")
    req, cache = request_for(tmp_path, fake_source(tmp_path, "#!/bin/sh\necho configured\n"))
    with_zdb = replace(req, zdb=True)
    rec, built = get_or_build(with_zdb, cache)
    assert built and "zdb" in rec.commands
    calls = []
    monkeypatch.setattr(build_mod, "_build", lambda *a, **k: calls.append(a) or rec)
    rec2, built2 = get_or_build(req, cache)
    assert not built2 and rec2.key == with_zdb.key and calls == []
    get_or_build(replace(req, zts=True), cache)           # zts asks for more: built
    assert len(calls) == 1


def test_production_configures_without_debug_and_is_a_build_of_its_own(tmp_path, monkeypatch):
    """`--production` is what a distribution ships: configure runs without
    --enable-debug (ASSERTs compiled out), under its own key, and says so."""
    import argparse
    from suite.build.pipeline import add_build_options, options_from
    parser = argparse.ArgumentParser()
    add_build_options(parser.add_argument)
    debug = options_from(lambda d: getattr(parser.parse_args([]), d, None))
    prod = options_from(lambda d: getattr(parser.parse_args(["--production"]), d, None))
    assert "--enable-debug" in debug.flags and "--enable-debug" not in prod.flags
    k = fake_kernel(tmp_path)
    assert BuildRequest(k, tree(), flags=prod.flags).key != BuildRequest(k, tree()).key
    assert BuildRequest(k, tree(), flags=prod.flags).inputs()["configure_flags"] == []
