"""Manifest parsing, series selection/resolution and application errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from suite.errors import SeriesError, SourceError
from suite.source import series
from suite.source.objects import ObjectCache, resolve_source


def test_shipped_manifests_parse_and_pin_full_commits():
    ms = series.available(Path(__file__).resolve().parent.parent / "patches")
    assert {"async-dio", "zvol-dio"} <= set(ms)
    a = ms["async-dio"]
    assert a.url == "https://github.com/tiehexue/zfs" and a.branch == "async_zpl_with_threads"
    assert len(a.head) == 40 and len(a.base) == 40
    assert "async_dio" in a.features
    bug_ids = {b.id for b in a.bugs}
    assert {"preadv-freed-iovec", "eof-tail-efault", "rollback-drain-deadlock"} <= bug_ids


def test_manifest_errors_name_the_problem(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text('name = "x"\nurl = "u"\nbranch = "b"\nhead = "abc"\nbase = "' + "a" * 40 + '"')
    with pytest.raises(SeriesError, match="full 40-hex"):
        series.load_manifest(bad)
    bad.write_text('name = "x"\n')
    with pytest.raises(SeriesError, match="lacks url, branch, head, base"):
        series.load_manifest(bad)
    bad.write_text('name = [')
    with pytest.raises(SeriesError, match="cannot read"):
        series.load_manifest(bad)


@pytest.mark.parametrize("spec,expect", [
    ("async-dio", [("async-dio", None)]),
    ("async-dio@8e1187c", [("async-dio", "8e1187c")]),
    ("async-dio,zvol-dio@branch", [("async-dio", None), ("zvol-dio", "branch")]),
    (["a", "b@" + "f" * 40], [("a", None), ("b", "f" * 40)]),
    ("none", []),
    (None, []),
])
def test_parse_selection(spec, expect):
    got = [(s.name, s.at) for s in series.parse_selection(spec)]
    assert got == expect


def test_parse_selection_rejects_bad_commit_and_missing_dir(tmp_path):
    with pytest.raises(SeriesError, match="commit id"):
        series.parse_selection("async-dio@not-a-commit")
    with pytest.raises(SeriesError, match="does not exist"):
        series.parse_selection(str(tmp_path / "nope") + "/")
    d = tmp_path / "p"
    d.mkdir()
    assert series.parse_selection(str(d))[0].patch_dir == d


def test_series_head_builds_exactly_the_fork_commit(repos):
    cache = ObjectCache()
    tree = series.resolve(cache, None, series.parse_selection("demo"))
    assert tree.commit == repos.series[-1]
    assert tree.base.commit == repos.base
    assert tree.series[0].commits == tuple(repos.series)
    assert tree.features == ("async_dio",)


def test_series_at_commit_is_the_series_up_to_it(repos):
    cache = ObjectCache()
    tree = series.resolve(cache, None, series.parse_selection(f"demo@{repos.series[1][:9]}"))
    assert tree.commit == repos.series[1]
    assert tree.series[0].commits == tuple(repos.series[:2])


def test_commit_not_in_series_lists_the_series(repos):
    cache = ObjectCache()
    with pytest.raises(SeriesError) as e:
        series.resolve(cache, None, series.parse_selection(f"demo@{repos.upstream_next[:10]}"))
    assert "is not a commit of series demo" in str(e.value)
    assert repos.series[0][:11] in e.value.detail and "add async" in e.value.detail


def test_unknown_series(repos):
    with pytest.raises(SeriesError, match="(?s)unknown series 'nope'.*known series: demo"):
        series.resolve(ObjectCache(), None, series.parse_selection("nope"))


def test_series_replayed_onto_a_newer_base(repos):
    cache = ObjectCache()
    base = resolve_source(repos.upstream.as_uri(), "newer", cache)
    tree = series.resolve(cache, base, series.parse_selection("demo"))
    assert tree.commit not in repos.series
    out = tmp_export(cache, tree.commit)
    assert (out / "lib/other.c").read_text() == "other\n"          # newer base kept
    assert (out / "module/zfs/read.c").read_text() == "line1\nline2 async fixed\nline3\n"
    assert (out / "module/zfs/new.c").exists()
    # Deterministic: the same inputs give the same commit (so the same build key).
    again = series.resolve(cache, base, series.parse_selection("demo"))
    assert again.commit == tree.commit


def tmp_export(cache: ObjectCache, commit: str) -> Path:
    import tempfile
    d = Path(tempfile.mkdtemp())
    assert cache.export(commit, d) == []
    return d


def test_conflict_names_patch_file_and_hunk_and_leaves_nothing(repos):
    cache = ObjectCache()
    base = resolve_source(repos.upstream.as_uri(), "master", cache)
    def own_refs() -> list[str]:   # refs other than the fetched sources
        return [r for r in cache.run("for-each-ref").stdout.splitlines() if "refs/ozfs/" not in r]
    refs_before = own_refs()
    with pytest.raises(SeriesError) as e:
        series.resolve(cache, base, series.parse_selection("demo"))
    msg = str(e.value)
    assert f"demo:{repos.series[0][:11]} (add async) does not apply at module/zfs/read.c:1" in msg
    assert "-line2\n+line2 async" in e.value.detail          # the hunk itself
    assert own_refs() == refs_before                           # nothing left behind


def test_local_patch_folder(repos, tmp_path):
    cache = ObjectCache()
    base = resolve_source(repos.upstream.as_uri(), "newer", cache)
    d = tmp_path / "mypatches"
    d.mkdir()
    (d / "0001-x.patch").write_text(
        "diff --git a/lib/other.c b/lib/other.c\n--- a/lib/other.c\n+++ b/lib/other.c\n"
        "@@ -1 +1 @@\n-other\n+patched\n")
    tree = series.resolve(cache, base, series.parse_selection(str(d)))
    assert (tmp_export(cache, tree.commit) / "lib/other.c").read_text() == "patched\n"
    (d / "0002-bad.patch").write_text(
        "diff --git a/lib/other.c b/lib/other.c\n--- a/lib/other.c\n+++ b/lib/other.c\n"
        "@@ -1 +1 @@\n-nothing-like-this\n+x\n")
    with pytest.raises(SeriesError, match="patch 0002-bad.patch does not apply at lib/other.c:1"):
        series.resolve(cache, base, series.parse_selection(str(d)))


def test_a_zero_context_fix_applies_and_a_wrong_one_is_refused(repos, tmp_path):
    """A fix of our own is a ``git diff -U0`` (patches/upstream/fixes/): applied
    without context, its removed lines still checked against the tree."""
    cache = ObjectCache()
    base = resolve_source(repos.upstream.as_uri(), "master", cache)
    d = tmp_path / "fix"
    d.mkdir()
    head = "From: us\nSubject: [PATCH] a fix\n---\n"
    (d / "0001-fix.patch").write_text(
        head + "diff --git a/module/zfs/read.c b/module/zfs/read.c\n"
        "--- a/module/zfs/read.c\n+++ b/module/zfs/read.c\n"
        "@@ -2 +2 @@ f()\n-line2 CHANGED\n+line2 mended\n")
    tree = series.resolve(cache, base, series.parse_selection(str(d)))
    assert (tmp_export(cache, tree.commit) / "module/zfs/read.c").read_text() == \
        "line1\nline2 mended\nline3\n"
    (d / "0001-fix.patch").write_text(
        head + "diff --git a/module/zfs/read.c b/module/zfs/read.c\n"
        "--- a/module/zfs/read.c\n+++ b/module/zfs/read.c\n"
        "@@ -2 +2 @@ f()\n-not this line\n+x\n")
    with pytest.raises(SeriesError, match="does not apply"):
        series.resolve(cache, base, series.parse_selection(str(d)))
    assert series.zero_context(b"@@ -2 +2 @@\n-a\n+b\n")
    assert not series.zero_context(b"@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n")


def test_stacking_series_then_patches(repos, tmp_path):
    cache = ObjectCache()
    d = tmp_path / "fix"
    d.mkdir()
    (d / "1.patch").write_text(
        "diff --git a/module/zfs/new.c b/module/zfs/new.c\n--- a/module/zfs/new.c\n"
        "+++ b/module/zfs/new.c\n@@ -1 +1 @@\n-new\n+newer\n")
    tree = series.resolve(cache, None, series.parse_selection(f"demo,{d}"))
    assert [s.name for s in tree.series] == ["demo", "fix"]
    assert (tmp_export(cache, tree.commit) / "module/zfs/new.c").read_text() == "newer\n"


def test_unreachable_source_names_url_and_what_to_set(repos, tmp_path):
    url = "https://example.invalid/openzfs/zfs"
    with pytest.raises(SourceError) as e:
        resolve_source(url, "master", ObjectCache())
    assert url in e.value.what and "insteadOf" in e.value.fix


def test_missing_ref_is_named(repos):
    cache = ObjectCache()
    resolve_source(repos.upstream.as_uri(), "master", cache)
    with pytest.raises(SourceError, match="ref 'no-such-branch' does not exist"):
        resolve_source(repos.upstream.as_uri(), "no-such-branch", cache)


def test_second_resolution_fetches_nothing(repos, monkeypatch):
    cache = ObjectCache()
    first = series.resolve(cache, None, series.parse_selection("demo"))
    # Make the sources unreachable: a pinned series must still resolve from the cache.
    import shutil
    shutil.rmtree(repos.fork)
    shutil.rmtree(repos.upstream)
    again = series.resolve(cache, None, series.parse_selection("demo"))
    assert again.commit == first.commit


def test_export_leaves_out_missing_blobs_unless_needed(repos):
    """Snapshots can lack a blob (seen: a ZTS data file): export the rest."""
    import tempfile
    cache = ObjectCache()
    tree = series.resolve(cache, None, series.parse_selection("demo"))
    absent = "1" * 40
    listing = cache.run("ls-tree", tree.commit).stdout
    sub = cache.run("mktree", "--missing", input=f"100644 blob {absent}\tdata.bin\n").stdout.strip()
    top = cache.run("mktree", "--missing", input=listing.replace(
        cache.run("rev-parse", f"{tree.commit}:tests").stdout.strip(), sub)).stdout.strip()
    commit = cache.run("commit-tree", top, "-m", "with a missing blob").stdout.strip()
    d = Path(tempfile.mkdtemp())
    assert cache.export(commit, d, needed=("module/",)) == ["tests/data.bin"]
    assert (d / "module/zfs/read.c").exists() and (d / "META").exists()
    with pytest.raises(SourceError, match="lacks files the build needs: tests/data.bin"):
        cache.export(commit, Path(tempfile.mkdtemp()), needed=("tests/",))


def test_a_commit_lists_every_bug_it_has_and_fixes():
    """`suite series` showed one bug per commit: 317cbaa57 names three (#25)."""
    from suite.source import series as s
    m = s.available()["async-dio"]
    tags = m.bug_tags("317cbaa578bea7a09873e5c709540981ba02f409")
    has = tags.split("[has ", 1)[1].split("]", 1)[0].split(", ")
    assert len(has) == 3 and "fsync-hang-uninit-counter" in has
    assert "[fixes fsync-ignores-queued-writes]" in tags
    barriers = m.bug_tags("30582e2f4cc8632d669a23cffb214c50def99abf")
    assert "[has fsync-ignores-queued-writes, syncfs-ignores-queued-writes, " \
        "short-write-reported-as-error, write-iovec-use-after-free]" in barriers
    assert m.bug_tags("0" * 40) == ""
