"""From user options to a verified build: source -> series -> build.

Shared by ``python -m suite build`` and the pytest plugin so both mean the same
thing by ``--kernel --zfs-source --zfs-ref --series``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import series as series_mod
from .build import BuildRecord, BuildRequest, get_or_build
from .kernel import Kernel, resolve_kernel
from .progress import step
from .series import SourceTree
from .source import ObjectCache, resolve_source


@dataclass
class BuildOptions:
    kernel: str | None = None
    kernel_headers: str | None = None
    zfs_source: str | None = None
    zfs_ref: str | None = None
    series: list[str] = field(default_factory=list)
    flags: tuple[str, ...] = ("--enable-debug",)
    zts: bool = False
    offline: bool = False
    force: bool = False
    jobs: int | None = None


@dataclass
class Prepared:
    kernel: Kernel
    tree: SourceTree
    request: BuildRequest


def prepare(opts: BuildOptions, cache: ObjectCache | None = None) -> Prepared:
    """Resolve kernel, source and series (fetching only what is missing)."""
    cache = cache or ObjectCache()
    kernel = resolve_kernel(opts.kernel, opts.kernel_headers)
    selections = series_mod.parse_selection(opts.series)
    named = any(s.name for s in selections)
    with step("resolve source and series", interval=30):
        base = None
        if opts.zfs_ref or opts.zfs_source or not named:
            base = resolve_source(opts.zfs_source, opts.zfs_ref, cache, offline=opts.offline)
        tree = series_mod.resolve(cache, base, selections, offline=opts.offline,
                                  base_explicit=bool(opts.zfs_ref or opts.zfs_source))
    req = BuildRequest(kernel=kernel, tree=tree, flags=tuple(opts.flags), zts=opts.zts)
    return Prepared(kernel, tree, req)


def build(opts: BuildOptions, cache: ObjectCache | None = None) -> tuple[BuildRecord, bool]:
    cache = cache or ObjectCache()
    prep = prepare(opts, cache)
    return get_or_build(prep.request, cache, force=opts.force, jobs=opts.jobs)
