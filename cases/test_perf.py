"""Performance matrices (marked ``perf``: run with ``-m perf``, never by default).

- **zvol** (openzfs/zfs#18661): fio sequential read and write on the seed's zvol
  (``volblocksize=1M``, ``primarycache=metadata``, compression, dedup and
  checksum off; prefetch off, ``zfs_txg_timeout=1``), libaio, O_DIRECT, with
  ``zvol_dio_enabled`` 0 and 1 side by side in the same guest: bandwidth, IOPS,
  p99 latency, CPU seconds per GiB (every CPU of the guest: the zvol threads do
  the copying) and the share of ``cpu-clock`` samples in the kernel's copy
  functions, the seed's 37.8% ``__memcpy``. Stock OpenZFS runs the dio=0 side.
- **async-dio** (openzfs/zfs#18902): fio randread and randwrite O_DIRECT on a
  dataset (recordsize = bs), psync / libaio / io_uring, numjobs x iodepth x bs,
  ``zfs_async_dio_enabled`` 0 and 1, with the async/sync ratio per cell.

``--perf-matrix small`` (the default under TCG) or ``full`` (the default on KVM).
Tables go to ``<results>/perf/`` as JSON, markdown and PNG, and to the step summary.
"""
from __future__ import annotations

import itertools

import pytest

from suite.casekit.perf import FioJob, require_tools, run_cell
from suite.casekit.zvol import ZVOL_PARAM, create_zvol
from suite.report.perf import PerfTable

pytestmark = [pytest.mark.vm, pytest.mark.nvme, pytest.mark.perf, pytest.mark.deadline(3600)]

ASYNC_PARAM = "zfs_async_dio_enabled"
# zfs_flags=0: the suite builds with --enable-debug, whose default zfs_flags
# turn on ZFS_DEBUG_MODIFY: every ARC buffer is fletcher_2-summed and checked
# (7% of the samples of a dio=0 zvol read here), a cost only the ARC side pays.
SEED_PARAMS = {"zfs_flags": 0, "zfs_prefetch_disable": 1, "zfs_txg_timeout": 1,
               "zfs_vdev_async_read_max_active": 64, "zfs_vdev_sync_read_max_active": 64,
               "zfs_vdev_async_write_max_active": 64, "zfs_vdev_sync_write_max_active": 64}


def matrix_size(request, accel) -> str:
    want = request.config.getoption("perf_matrix")
    return want if want != "auto" else ("full" if accel.name == "kvm" else "small")


def zvol_jobs(size: str) -> list[FioJob]:
    bss = ["1m", "128k"] if size == "full" else ["1m"]
    runtime = 30 if size == "full" else 5
    return [FioJob(rw, bs, qd, 1, "libaio", runtime, "128m")
            for rw, bs, qd in itertools.product(("read", "write"), bss, (1, 32))]


def async_jobs(size: str) -> list[FioJob]:
    if size == "full":
        nj, qd, runtime = (1, 4, 16), (1, 8, 32), 20
    else:
        nj, qd, runtime = (1, 4), (1, 8), 3
    jobs = []
    for rw, bs, engine, n in itertools.product(("randread", "randwrite"), ("4k", "128k"),
                                               ("psync", "libaio", "io_uring"), nj):
        for d in ((1,) if engine == "psync" else qd):       # psync has no queue
            jobs.append(FioJob(rw, bs, d, n, engine, runtime, "32m"))
    return jobs


def _write(table: PerfTable, run_ctx, stem: str, request) -> None:
    files = table.write(run_ctx.run_dir / "perf", stem)
    from suite.plugin.hooks import add_section
    add_section(request.node, table.title, table.markdown() + "\n\nfiles: " +
                ", ".join(str(f) for f in files))


def test_perf_zvol_dio(zdio, accel, run_ctx, request):
    z = zdio.zfs
    g = z.guest
    require_tools(g)
    size = matrix_size(request, accel)
    sides = [0, 1] if ZVOL_PARAM in zdio.have_params else [0]
    for k, v in SEED_PARAMS.items():
        z.set_param(k, v)
    zv = create_zvol(zdio.dataset, zdio.engine, "perf", 128 << 20, 1 << 20,
                     {"primarycache": "metadata", "secondarycache": "none",
                      "compression": "off", "dedup": "off", "checksum": "off"})
    # Fill it first: reads of a never-written zvol are holes, no I/O at all.
    g.run(f"fio --name=fill --filename={zv.dev} --rw=write --bs=1m --direct=1 "
          f"--ioengine=libaio --iodepth=8 --size=128m >/dev/null", timeout=accel.deadline(300))
    table = PerfTable(f"zvol fio, volblocksize 1M (seed settings), {size} matrix",
                      accel.name, ("dio=0", "dio=1") if len(sides) == 2 else ("stock", "-"),
                      side_key="side")
    if len(sides) == 1:
        table.notes.append(f"this build has no {ZVOL_PARAM}: the stock side only")
    for job in zvol_jobs(size):
        for side in sides:                      # alternated within each row
            if ZVOL_PARAM in zdio.have_params:
                z.set_param(ZVOL_PARAM, side)
            label = f"dio={side}" if len(sides) == 2 else "stock"
            cell = run_cell(g, job, zv.dev, {"side": label}, accel.scale)
            table.add(cell.to_dict())
    _write(table, run_ctx, "zvol", request)
    failed = [c for c in table.cells if c.get("error")]
    assert not failed, f"{len(failed)} cells failed: {failed[0]['error']}"


def test_perf_async_dio(dio, zfs_guest, accel, run_ctx, request):
    z = zfs_guest
    require_tools(z.guest)
    if ASYNC_PARAM not in dio.have_params:
        pytest.skip(f"the build has no {ASYNC_PARAM}: nothing to compare")
    size = matrix_size(request, accel)
    z.set_param("zfs_flags", 0)             # no debug-build ARC checks (see SEED_PARAMS)
    files = {}
    for bs in ("4k", "128k"):
        ds = dio.dataset.pool.dataset(f"perf{bs}", {"recordsize": bs.upper(),
                                                   "primarycache": "metadata"})
        files[bs] = ds.path("fio.dat")
    table = PerfTable(f"async O_DIRECT on a dataset (recordsize = bs), {size} matrix",
                      accel.name, ("async=0", "async=1"),
                      row_keys=("rw", "bs", "ioengine", "numjobs", "iodepth"))
    for job in async_jobs(size):
        for side in (0, 1):
            z.set_param(ASYNC_PARAM, side)
            cell = run_cell(z.guest, job, files[job.bs], {"side": f"async={side}"},
                            accel.scale, profile=False)
            table.add(cell.to_dict())
    _write(table, run_ctx, "async-dio", request)
    failed = [c for c in table.cells if c.get("error")]
    assert not failed, f"{len(failed)} cells failed: {failed[0]['error']}"
