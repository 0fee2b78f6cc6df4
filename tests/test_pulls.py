"""A pull request as a series (suite/source/pulls.py), on throwaway repos: its head
by refs/pull/N/head, its base the merge-base with the target, any commit of it, and
its commits as a patch folder the gate applies on that base."""
from __future__ import annotations

import pytest
from gitrepo import sh

from suite.errors import SeriesError
from suite.source import pulls, series
from suite.source.objects import ObjectCache


@pytest.fixture
def pr(repos):
    """The fork's three commits published as pull request 7 of the upstream repo."""
    sh(repos.upstream, "git", "fetch", "-q", str(repos.fork), "feature")
    sh(repos.upstream, "git", "update-ref", "refs/pull/7/head", repos.series[-1])
    return repos


def test_a_pull_request_is_its_commits_on_their_merge_base(pr):
    cache = ObjectCache()
    url = pr.upstream.as_uri()
    p = pulls.pull_request(cache, "7", upstream=url)
    assert p.base == pr.base, "the merge-base with master, not master's newer tip"
    assert p.commits == tuple(pr.series) and p.label == "openzfs/zfs#7"
    assert "3 commit(s) on" in p.describe(cache)
    at = pulls.pull_request(cache, f"7@{pr.series[1][:9]}", upstream=url)
    assert at.commits == tuple(pr.series[:2]) and at.head == pr.series[1]
    with pytest.raises(SeriesError, match="is not a commit of"):
        pulls.pull_request(cache, f"7@{pr.upstream_next[:9]}", upstream=url)


def test_its_patches_apply_on_the_base_to_the_pull_requests_tree(pr, tmp_path):
    cache = ObjectCache()
    p = pulls.pull_request(cache, "#7", upstream=pr.upstream.as_uri())
    folder = pulls.export_patches(cache, p, tmp_path / "pulls")
    assert len(list(folder.glob("*.patch"))) == 3
    assert folder.name == f"zfs-7-{pr.series[-1][:12]}", "the gate's label names the PR"
    base = cache.resolve(pr.upstream.as_uri(), pr.base)
    tree = series.resolve(cache, base, series.parse_selection(str(folder)))
    assert tree.tree == cache.tree_of(pr.series[-1])


def test_a_forks_branch_is_gated_the_same_way(pr):
    cache = ObjectCache()
    url, ref, at = pulls.parse_head(f"{pr.fork.as_uri()}@feature")
    p = pulls.resolve_pull(cache, url, ref, at, upstream=pr.upstream.as_uri())
    assert p.commits == tuple(pr.series)


@pytest.mark.parametrize("bad", ["", "abc", "7@xyz", "7@12"])
def test_a_malformed_pr_says_what_to_give(bad):
    with pytest.raises(SeriesError, match="pull request number"):
        pulls.parse_pr(bad)


def test_gate_takes_one_of_series_pr_or_head():
    from suite.cli import main
    assert main(["gate"]) == 2
    assert main(["gate", "--series", "async-dio", "--pr", "7"]) == 2


def test_a_pull_request_merged_into_its_target_says_as_which_commit(pr):
    """OpenZFS squash-merges: the target's commit says ``Closes #N`` (or ``(#N)`` in
    its subject); a pull request gated after its merge says so, an open one does not."""
    cache = ObjectCache()
    url = pr.upstream.as_uri()
    assert pulls.pull_request(cache, "7", upstream=url).merged == ""
    sh(pr.upstream, "git", "checkout", "-q", "master")
    sh(pr.upstream, "git", "commit", "-q", "--allow-empty", "-m",
       "Squashed feature\n\nReviewed-by: x\nCloses #77")          # another pull request
    sh(pr.upstream, "git", "commit", "-q", "--allow-empty", "-m", "Squashed feature\n\nCloses #7")
    merged = sh(pr.upstream, "git", "rev-parse", "HEAD").strip()
    p = pulls.pull_request(ObjectCache(), "7", upstream=url)
    assert p.merged == merged, "#77 is not #7"
    assert f"merged into master as {merged[:11]} Squashed feature" in p.describe(cache)
