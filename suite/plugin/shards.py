"""``--shard i/N``: one of N runners' share of the selection, balanced by time.

Each case's time in earlier runs is kept in the cache (``durations.json``: node
id -> seconds, written at the end of every session from the cases' phases); the
selection (after ``-k``, ``-m`` and ``--tier``) is dealt out longest first to the
least loaded shard, so N runners finish together. Every runner deals the same
way (the durations come from the same restored cache; ties by node id), and each
keeps its own share. A case never timed counts as the median of those that were.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from pathlib import Path

import pytest

from suite import paths

DEFAULT_SECONDS = 120.0         # a case's time when nothing was ever recorded

# The recorded case times as the session read them, once, in pytest_configure; xdist
# workers get the controller's copy (workerinput), never their own read: two workers
# that read the file on either side of another session's write would order or deal
# their collections differently, and xdist aborts a run whose workers disagree.
CASE_TIMES = pytest.StashKey[dict[str, float]]()


def case_times(config: pytest.Config) -> dict[str, float]:
    """This session's snapshot of the recorded case times."""
    return config.stash.get(CASE_TIMES, {})


def take_case_times(config: pytest.Config) -> None:
    """Stash the session's snapshot: a worker's from its controller, else the file's."""
    workerinput = getattr(config, "workerinput", None)
    config.stash[CASE_TIMES] = (dict(workerinput["ozfs_case_times"])
                                if workerinput is not None else load_durations())


def hand_on_case_times(node) -> None:
    """xdist (controller): give a worker this session's snapshot."""
    node.workerinput["ozfs_case_times"] = dict(node.config.stash[CASE_TIMES])


def cost_of(times: dict[str, float]):
    """A node id's expected seconds: its recorded time, else the median of those
    recorded (else DEFAULT_SECONDS)."""
    default = statistics.median(times.values()) if times else DEFAULT_SECONDS
    return lambda nodeid: times.get(nodeid, default)


def parse_shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise pytest.UsageError(f"--shard {text!r}: give i/N with 1 <= i <= N, e.g. 2/4")
    return int(m[1]), int(m[2])


def durations_file() -> Path:
    """The cache's ``durations.json``; ``OZFS_VMCI_DURATIONS`` names another file,
    for sessions whose node ids are not the suite's cases (the self-tests' inner
    sessions: their times would reorder each other's cases and the user's)."""
    env = os.environ.get("OZFS_VMCI_DURATIONS")
    return Path(env) if env else paths.cache_root() / "durations.json"


def load_durations(path: Path | None = None) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads((path or durations_file()).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def record_durations(seen: dict[str, float], path: Path | None = None) -> None:
    """Merge this session's case times into the cache's (newest wins)."""
    if not seen:
        return
    path = path or durations_file()
    known = load_durations(path)
    known.update({k: round(v, 1) for k, v in seen.items()})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=0, sort_keys=True))
    tmp.replace(path)


def deal(nodeids: list[str], n: int, times: dict[str, float]) -> list[list[str]]:
    """``nodeids`` dealt to ``n`` shards, longest first onto the least loaded."""
    of = cost_of(times)
    cost = {i: of(i) for i in nodeids}
    shards: list[list[str]] = [[] for _ in range(n)]
    load = [0.0] * n
    for nid in sorted(nodeids, key=lambda i: (-cost[i], i)):
        k = min(range(n), key=lambda j: (load[j], j))
        shards[k].append(nid)
        load[k] += cost[nid]
    return shards


def split_xfstests(tests: list[str], n: int, times: dict[str, float], profile: str = "",
                   skip: frozenset[str] | set[str] = frozenset()) -> list[list[str]]:
    """``--xfstests-split N``: ``tests`` in ``n`` parts of about equal time, longest
    first onto the least loaded part, by each test's recorded seconds in this profile
    (``times``: ``xfstests:generic/133[direct]`` -> seconds, the session's snapshot of
    the cache's durations, the same in every xdist worker), else in any profile, else
    the median. A test in ``skip`` (excluded: it will not run) costs nothing. Each
    part sorted, as ./check would order it."""
    def recorded(t: str) -> float | None:
        own = times.get(f"xfstests:{t}[{profile}]")
        if own is not None:
            return own
        other = [v for k, v in times.items() if k.startswith(f"xfstests:{t}[")]
        return max(other) if other else times.get(f"xfstests:{t}")
    known = {t: v for t in tests if t not in skip and (v := recorded(t)) is not None}
    median = sorted(known.values())[len(known) // 2] if known else 1.0
    cost = {f"xfstests:{t}": 0.0 if t in skip else known.get(t, median) for t in tests}
    return [sorted(i.removeprefix("xfstests:") for i in part)
            for part in deal(list(cost), n, cost)]


def deal_file(nodeids: list[str], n: int) -> Path:
    """Where the deal of this selection into ``n`` shards is kept (the cache)."""
    key = hashlib.sha256("\n".join([str(n), *sorted(nodeids)]).encode()).hexdigest()[:16]
    return paths.cache_root() / "shards" / f"{key}.json"


def kept_deal(nodeids: list[str], n: int, times: dict[str, float],
              path: Path | None = None) -> tuple[list[list[str]], bool]:
    """The deal of ``nodeids`` into ``n`` shards, the same for every shard of it: the
    first session to deal a selection keeps its deal in the cache and the later ones
    take it. Shards run one after another on one machine would otherwise deal from
    different times (each session records its cases' times), and cover some cases
    twice and others never. (deal, True when it was the kept one)."""
    path = path or deal_file(nodeids, n)
    try:
        kept = json.loads(path.read_text())
        if (len(kept) == n and sorted(sum(kept, [])) == sorted(nodeids)):
            return [list(s) for s in kept], True
    except (OSError, ValueError, TypeError):
        pass
    shards = deal(nodeids, n, times)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(shards))
    tmp.replace(path)
    return shards, False


class ShardPlugin:
    """Registered by the plugin's ``pytest_configure`` when ``--shard`` is given."""

    def __init__(self, index: int, total: int) -> None:
        self.index, self.total = index, total

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        shards, _ = kept_deal([i.nodeid for i in items], self.total, case_times(config))
        mine = set(shards[self.index - 1])
        drop = [i for i in items if i.nodeid not in mine]
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = [i for i in items if i.nodeid in mine]

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [f"ozfs-vmci: shard {self.index}/{self.total} (balanced by "
                f"{len(case_times(config))} recorded case times; the same deal for every "
                "shard of this selection, kept in the cache's shards/)"]
