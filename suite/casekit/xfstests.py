"""What the xfstests lane runs: named selections and ``--xfstests`` as ./check's arguments.

``dio``, the Direct I/O selection, is the ``aio`` group (xfstests' asynchronous and
direct I/O tests) and the generic tests below, each of which issues O_DIRECT against
something a Direct I/O path gets wrong: fsx with O_DIRECT (091), O_DIRECT beside
buffered I/O and page cache invalidation (130, 133, 135, 418), reads and writes
across EOF and holes (214), mmap'ed buffers and page faults in the request (647, 708,
729), splice from O_DIRECT (591). The manual lists the same (docs/xfstests.md).
"""
from __future__ import annotations

import re

TEST_RE = re.compile(r"^[a-z0-9]+/\d{3,}$")     # generic/091, ext4/301

DIO_TESTS = ("generic/091", "generic/130", "generic/133", "generic/135", "generic/214",
             "generic/418", "generic/591", "generic/647", "generic/708", "generic/729")
SELECTIONS: dict[str, tuple[str, ...]] = {      # in the words --xfstests takes
    "dio": ("g:aio", *DIO_TESTS),
    "quick": ("g:quick",),
}


def check_args(wanted: list[str]) -> list[str]:
    """./check's selection arguments: ``dio`` (default), ``quick``, ``g:GROUP``,
    ``x:GROUP`` (leave a group out), ``e:TEST[,TEST]`` (leave tests out: ./check's
    ``-e``, e.g. a sweep over many commits without its long stress tests) or a test
    name (``generic/091``); one value may hold several, space-separated (``"dio
    x:stress"``, as the workflow's input is written). Options come before test names:
    ./check refuses an option after a test ("Arguments before tests, please!")."""
    opts: list[str] = []
    tests: list[str] = []
    names = [n for value in wanted for n in value.split()] or ["dio"]
    for w in (x for name in names for x in SELECTIONS.get(name, (name,))):
        if w.startswith(("g:", "x:", "e:")):
            opts += [f"-{w[0]}", w[2:]]
        elif TEST_RE.match(w):
            tests.append(w)
        else:
            raise ValueError(f"--xfstests {w!r}: use dio, quick, g:GROUP, x:GROUP, "
                             "e:TEST or a test such as generic/091")
    return opts + tests


def shard(tests: list[str], spec: str | None) -> list[str]:
    """This runner's share of ``tests`` for ``--xfstests-shard i/N``: the i-th of every
    N in sorted order (neighbours in a group, often alike in cost, go to different
    runners); all of them without a spec."""
    if not spec:
        return list(tests)
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--xfstests-shard {spec!r}: give i/N, e.g. 2/4") from None
    if not 1 <= i <= n:
        raise ValueError(f"--xfstests-shard {spec!r}: i must be 1..N")
    return sorted(tests)[i - 1::n]

