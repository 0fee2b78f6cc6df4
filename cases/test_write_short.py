"""Writes the kernel cuts short: a quota, RLIMIT_FSIZE (openzfs/zfs#18902).

A write that makes progress and then cannot go on must return the count it
wrote (0 < res < requested); the file must end exactly there, hold the written
prefix and nothing past it, and the guest must stay healthy. 917a434a1 split
zfs_write and from then until dc643dc20 a write that committed some records and
then hit EDQUOT returned the error although the file had grown; the page pinning
of a PWRITEV cut by RLIMIT_FSIZE pinned the untruncated segments into an array
sized for the cut count (a heap overflow that leaves the bytes right, shown here
by SLUB red zones on the kmalloc-2k cache the array lives in).

These shapes exist on stock OpenZFS too (the synchronous path): they run there.
"""
from __future__ import annotations

import pytest

from suite.casekit.dio import ASYNC_PARAM, DEFAULT_TRIALS, Shape, cond, judge, plan
from suite.casekit.writes import SLUB_DEBUG, WRITE_PROPS, expect_short, expect_short_or_whole
from suite.ioengine.plan import FileSpec, Plan

pytestmark = [pytest.mark.vm, pytest.mark.nvme]

MIB = 1 << 20
QUOTA_ROOM = 64 * 1024


def conditions(interface: str):
    return [
        cond(f"{interface} async=1", interface, **{ASYNC_PARAM: 1}),
        cond(f"{interface} async=0", interface, optional=(ASYNC_PARAM,), **{ASYNC_PARAM: 0}),
        cond("sync write", "sync", control=True),
    ]


@pytest.mark.pool(props=WRITE_PROPS)
@pytest.mark.parametrize("recordsize", ["4K", "128K"])
@pytest.mark.parametrize("interface", ["libaio", "io_uring"])
# 128K records: a 1 MiB write commits whole records before the quota stops it, the
# shape short-write-reported-as-error needs (at 4K the quota takes the write whole:
# the quick tier's first variant passed at the bad commit, 3 of 3 trials whole).
@pytest.mark.quick("libaio-128K")
def test_write_cut_by_quota(dio, zfs_guest, interface, recordsize):
    """1 MiB O_DIRECT write into a new file of a dataset with 64K of quota left."""
    conds, skipped = dio.split(conditions(interface))
    if not any(not c.control for c in conds):
        pytest.skip("nothing but the control left to run: " + "; ".join(skipped.values()))
    rounds = min(dio.trials or DEFAULT_TRIALS, 3)
    shape = Shape("pwrite-1m", nsegs=0, total=MIB)
    files, reqs = [], []
    for r in range(rounds):
        for c in conds:
            i = len(reqs)
            # 64K of room above what the empty filesystem already uses (with
            # ashift=12 that is more than 64K: "quota=64K" alone is refused)
            ds = dio.dataset.pool.dataset(f"{dio.dataset.name.split('/', 1)[1]}/q{i}",
                                          {"recordsize": recordsize})
            used = int(dio.zfs.zfs("get", "-Hp", "-o", "value", "used", ds.name).stdout)
            dio.zfs.zfs("set", f"quota={used + QUOTA_ROOM}", ds.name)
            f = FileSpec(ds.path("short.bin"), 0, seed=f"short{i}")
            one = plan(f, shape, [c], 1, dio.pool, dio.have_params, op="write")
            one.trials[0].id = f"{i:04d}"
            files.append(f)
            reqs.append(one.trials[0])
    p = Plan(files, reqs)
    results = dio.engine.run(p, timeout=120 + 10 * len(reqs), name="quota")
    v = judge(f"1 MiB O_DIRECT write with 64K of quota left, recordsize={recordsize}, "
              f"{interface}",
              p, conds, results, {c.label: expect_short_or_whole for c in conds}, skipped,
              ["pass: never an error once bytes were written; cut: 0 < res < 1 MiB, st_size "
               "== res, the prefix intact, nothing past it; whole (the quota is enforced per "
               "transaction, not per byte): every byte right",
               "each trial in its own dataset (quota = its used + 64K), so no trial finds "
               "the quota used by another"])
    dio.finish(v)
    assert v.ok, "\n" + v.table.text()


@pytest.mark.guest(append=SLUB_DEBUG)
@pytest.mark.pool(props=WRITE_PROPS)
@pytest.mark.parametrize("nsegs", [0, 16], ids=["pwrite", "pwritev16"])
@pytest.mark.parametrize("interface", ["libaio", "io_uring"])
def test_write_cut_by_rlimit_fsize(dio, zfs_guest, interface, nsegs):
    """2 MiB O_DIRECT write at offset 0 under RLIMIT_FSIZE=1 MiB (SIGXFSZ ignored):
    the kernel cuts it to 1 MiB before ZFS sees it."""
    shape = (Shape("pwritev-16x128k", nsegs=16, seg_len=128 * 1024) if nsegs
             else Shape("pwrite-2m", nsegs=0, total=2 * MIB))
    conds = conditions(interface)
    conds[-1] = cond("sync pwritev" if nsegs else "sync pwrite", "sync", control=True)
    file = FileSpec(dio.path("rlimit.bin"), 0, seed="rlimit")
    v = dio.run(f"{'PWRITEV 16 x 128 KiB' if nsegs else 'PWRITE 2 MiB'} under "
                f"RLIMIT_FSIZE=1 MiB, {interface}", file, shape, conds, expect_short,
                notes=["pass: res == 1 MiB, st_size == 1 MiB, the prefix intact; the guest "
                       "runs with SLUB red zones on kmalloc-2k (the pinned-page array)"],
                op="write", req_fields={"rlimit_fsize": MIB})
    assert v.ok, "\n" + v.table.text()
