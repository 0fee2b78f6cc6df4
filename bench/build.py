#!/usr/bin/env python3
"""Build benchmark: prints numbers, asserts nothing.

  python bench/build.py [--series async-dio] [--kernel PROFILE] [--cold] [--warm]
  python bench/build.py --kernels       # only the kernel builds' times (no OpenZFS build)

- decision: time to resolve inputs and return a cached build (median of 5);
- recorded: per cached build, the phase times and ccache hits it was built with;
- --cold: a forced rebuild with an empty, private ccache (what a first build costs);
- --warm: a forced rebuild with the shared ccache (what an unchanged rebuild costs);
- kernels: every kernel a profile built (``debian-6.1-debug``): its steps' times, objects
  compiled, -j and niceness, ccache, and for ``--kernel`` such a profile the time to find
  it cached again.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.build import kbuild  # noqa: E402
from suite.build.kernel import load_profile  # noqa: E402
from suite.build.pipeline import BuildOptions, build, prepare  # noqa: E402
from suite.build.recipe import get_or_build, list_builds  # noqa: E402
from suite.source.objects import ObjectCache  # noqa: E402


def timed_rebuild(opts: BuildOptions, ccache_dir: str | None) -> tuple[float, dict]:
    """Force a rebuild of the same inputs; ``ccache_dir`` None = the shared ccache."""
    if ccache_dir:
        os.environ["OZFS_VMCI_CCACHE_DIR"] = ccache_dir
    cache = ObjectCache()
    t = time.monotonic()
    try:
        rec, _ = get_or_build(prepare(opts, cache).request, cache, force=True)
    finally:
        os.environ.pop("OZFS_VMCI_CCACHE_DIR", None)
    return time.monotonic() - t, rec.ccache


def kernel_builds(profile: str | None) -> None:
    """The kernels built from source, and the cost of finding one cached again."""
    print("recorded kernel builds (seconds per step):")
    built = kbuild.list_built()
    if not built:
        print("  none")
    for b in built:
        total = sum(b.seconds.values())
        hits = sum(int(b.ccache.get(k, 0)) for k in ("direct_cache_hit", "preprocessed_cache_hit"))
        print(f"  {b.key}  {b.profile} {b.release}  total {total:6.0f}s ({total / 60:.0f} min)  "
              + " ".join(f"{k} {v:.0f}s" for k, v in b.seconds.items())
              + f"  {b.objects} objects -j{b.jobs} nice {b.nice}"
              + (f"  ccache {hits} hits / {b.ccache.get('cache_miss', 0)} misses" if b.ccache else ""))
    for d in sorted(kbuild.kernels_dir().glob("*/build.log")):
        if not (d.parent / "record.json").exists():
            print(f"  {d.parent.name}  building (or cut short): {d}")
    spec = load_profile(profile).build if profile and "/" not in profile else None
    if spec is not None:
        samples = []
        for _ in range(5):
            t = time.monotonic()
            kbuild.ensure(spec, allow_install=False)
            samples.append(time.monotonic() - t)
        print(f"cached-kernel decision ({profile}): median "
              f"{statistics.median(samples) * 1000:.0f} ms")
    print()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", action="append", default=[])
    ap.add_argument("--zfs-ref")
    ap.add_argument("--kernel", help="kernel profile (a profile that builds its kernel: "
                                     "built first if missing, hours)")
    ap.add_argument("--kernels", action="store_true", help="only the kernel builds' times")
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--warm", action="store_true")
    a = ap.parse_args()
    if a.kernels:
        kernel_builds(None)
        return 0
    opts = BuildOptions(series=a.series or ["async-dio"], zfs_ref=a.zfs_ref, kernel=a.kernel)
    rec, built = build(opts)
    kernel_builds(a.kernel)
    samples = []
    for _ in range(5):
        t = time.monotonic()
        build(opts)
        samples.append(time.monotonic() - t)
    print(f"cached-build decision: median {statistics.median(samples) * 1000:.0f} ms "
          f"(min {min(samples) * 1000:.0f}, max {max(samples) * 1000:.0f}) for key {rec.key}")
    print("\nrecorded builds (seconds per phase, ccache hits/misses during the build):")
    for r in list_builds():
        series = ",".join(f"{s['name']}@{s['commits'][-1][:9]}" for s in r.inputs["series"]) \
            or r.source["base_ref"]
        total = sum(v for k, v in r.seconds.items())
        hits = int(r.ccache.get("direct_cache_hit", 0)) + int(r.ccache.get("preprocessed_cache_hit", 0))
        miss = int(r.ccache.get("cache_miss", 0))
        rate = f"{100 * hits / (hits + miss):.0f}%" if hits + miss else "n/a"
        print(f"  {r.key}  {series:28s} total {total:6.0f}s  " +
              " ".join(f"{k} {v:.0f}s" for k, v in r.seconds.items()) +
              f"  ccache {hits} hits / {miss} misses ({rate})")
    if a.cold:
        with tempfile.TemporaryDirectory(prefix="ccache-cold.") as d:
            secs, cc = timed_rebuild(opts, d)
        print(f"\ncold build (empty ccache): {secs:.0f}s  ccache {cc}")
    if a.warm:
        secs, cc = timed_rebuild(opts, None)
        print(f"\nccache-warm rebuild (same inputs, forced): {secs:.0f}s  ccache {cc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
