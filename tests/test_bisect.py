"""Self-tests of the bisection's search (no VM, no build): it finds the first
failing commit with few steps, proves the head fails first, and stops rather
than guess when a step proves nothing."""
from __future__ import annotations

import pytest

from suite.campaign.bisect import search

COMMITS = [f"{i:040d}" for i in range(1, 16)]


@pytest.mark.parametrize("first_bad", [0, 1, 7, 13, 14])
def test_finds_the_first_bad_commit(first_bad):
    asked = []

    def test(c):
        asked.append(c)
        return "fail" if COMMITS.index(c) >= first_bad else "pass"

    got, problem = search(COMMITS, test)
    assert got == COMMITS[first_bad] and not problem
    assert asked[0] == COMMITS[-1]                    # the head is proven bad first
    assert len(asked) <= 1 + 4                        # log2(15) steps after it
    assert len(set(asked)) == len(asked)              # no commit run twice


def test_a_passing_head_is_nothing_to_bisect():
    got, problem = search(COMMITS, lambda c: "pass")
    assert got is None and "passes at the head" in problem


def test_an_inconclusive_step_stops_the_search():
    def test(c):
        i = COMMITS.index(c)
        return "fail" if i == 14 else "inconclusive"
    got, problem = search(COMMITS, test)
    assert got is None and "proved nothing" in problem
