"""Trial counts, alternation, attribution and table rendering."""
from __future__ import annotations

import json

import pytest

from suite.casekit.trials import DEFAULT_TRIALS, alternate, classify, served, tally, trials_needed
from suite.casekit.tables import Table


def test_default_trials_catch_one_in_five_with_95_percent():
    n = DEFAULT_TRIALS
    assert 1 - 0.8 ** n >= 0.95 > 1 - 0.8 ** (n - 1)
    assert trials_needed(0.5, 0.99) == 7
    with pytest.raises(ValueError):
        trials_needed(0, 0.9)


def test_alternate_is_round_robin_not_blocks():
    assert alternate(["a", "b", "c"], 2) == ["a", "b", "c", "a", "b", "c"]


@pytest.mark.parametrize("counters,label", [
    ({"direct_read_count": 1, "arc_read_count": 0}, "DIO"),
    ({"direct_read_count": 0, "arc_read_count": 2}, "ARC"),
    ({"direct_read_count": 1, "arc_read_count": 1}, "DIO+ARC"),
    ({"direct_read_count": 1, "arc_read_count": 0, "pinned_copies": 1}, "DIO+ARC"),
    ({"direct_read_count": 0, "arc_read_count": 0}, "none"),
    ({"direct_read_count": None, "arc_read_count": None}, "unknown"),
])
def test_served_attribution(counters, label):
    assert served(counters).label == label


def test_classify_and_tally():
    ok = {"condition": "async=1", "res": 4096, "expected_len": 4096, "errno": 0,
          "wrong_bytes": 0, "correct": True,
          "counters": {"direct_read_count": 1, "arc_read_count": 0}}
    einval = {"condition": "async=1", "res": -22, "expected_len": 4096, "errno": 22,
              "errname": "EINVAL", "stage": "complete", "counters": {}}
    short = dict(ok, res=100, correct=False)
    wrong = dict(ok, wrong_bytes=3, first_wrong_byte=36864, correct=False,
                 counters={"direct_read_count": 0, "arc_read_count": 1})
    assert classify(ok) == {"trials", "correct", "served by DIO"}
    assert classify(einval) == {"trials", "EINVAL"}
    assert "short" in classify(short)
    assert "wrong bytes" in classify(dict(short, wrong_bytes=1))
    assert classify(wrong) == {"trials", "wrong bytes", "served by ARC"}
    t = tally([ok, einval, wrong, dict(ok, condition="async=0")])
    assert list(t) == ["async=1", "async=0"]
    assert t["async=1"]["trials"] == 3 and t["async=1"]["EINVAL"] == 1
    assert t["async=0"]["correct"] == 1


def test_table_renders_text_markdown_json(tmp_path):
    t = Table("PREADV 4 segs", {"async=1 strict=1": {"trials": 25, "correct": 11, "EINVAL": 14}},
              notes=["16 KiB file"], failures=["async=1 strict=1: 14 EINVAL"])
    txt = t.text()
    assert "condition" in txt and "EINVAL" in txt and "FAIL: async=1 strict=1" in txt
    assert "| async=1 strict=1 | 25 | 11 | 0 | 14 |" in t.markdown()
    files = t.write(tmp_path, "preadv")
    assert json.loads(files[2].read_text())["rows"]["async=1 strict=1"]["EINVAL"] == 14
