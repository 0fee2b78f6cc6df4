"""From user options to a verified build: source -> series -> build.

Shared by ``python -m suite build`` and the pytest plugin so both mean the same
thing by ``--kernel --zfs-source --zfs-ref --series``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from suite.source import series as series_mod
from suite.build.recipe import DEFAULT_FLAGS, BuildRecord, BuildRequest, get_or_build
from suite.build.kernel import Kernel, resolve_kernel
from suite.progress import step
from suite.source.series import SourceTree
from suite.source.objects import ObjectCache


@dataclass
class BuildOptions:
    kernel: str | None = None
    kernel_headers: str | None = None
    zfs_source: str | None = None
    zfs_ref: str | None = None
    series: list[str] = field(default_factory=list)
    flags: tuple[str, ...] = DEFAULT_FLAGS
    zts: bool = False
    zdb: bool = False
    offline: bool = False
    force: bool = False
    jobs: int | None = None


@dataclass(frozen=True)
class Option:
    flag: str
    help: str
    kind: str = "value"          # value | append | flag

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


# The build options, declared once for `python -m suite ...` and `pytest cases ...`.
BUILD_OPTIONS = (
    Option("--kernel", "kernel profile (vmimages/NAME.toml) or a vmlinuz path "
                       "(default: debian-6.1)"),
    Option("--kernel-headers", "kernel build dir, with --kernel PATH"),
    Option("--zfs-source", "OpenZFS git URL or local checkout "
                           "(default https://github.com/openzfs/zfs)"),
    Option("--zfs-ref", "branch, tag or commit (default: the series' base, else master)"),
    Option("--series", "patch series: NAME, NAME@COMMIT, NAME@branch or a folder of *.patch "
                       "files; repeat or comma-separate to stack", "append"),
    Option("--zts", "also build the ZFS Test Suite", "flag"),
    Option("--with-zdb", "also build zdb (pytest's --thorough asks for it)", "flag"),
    Option("--offline", "never fetch; use the cache only", "flag"),
    Option("--production", "configure without --enable-debug: what a distribution ships "
                           "(ASSERTs compiled out; VERIFYs stay)", "flag"),
)


def add_build_options(add: Callable[..., Any]) -> None:
    """Declare the build options with ``add``: argparse's ``add_argument`` or a
    pytest option group's ``addoption`` (the same signature)."""
    for o in BUILD_OPTIONS:
        kw: dict[str, Any] = {"help": o.help, "dest": o.dest}
        if o.kind == "append":
            kw.update(action="append", default=[])
        elif o.kind == "flag":
            kw.update(action="store_true", default=False)
        add(o.flag, **kw)


def options_from(get: Callable[[str], Any], **extra: Any) -> BuildOptions:
    """BuildOptions from parsed values: ``get(dest)`` is ``getattr(args, dest)`` or
    pytest's ``config.getoption``."""
    return BuildOptions(kernel=get("kernel"), kernel_headers=get("kernel_headers"),
                        zfs_source=get("zfs_source"), zfs_ref=get("zfs_ref"),
                        series=list(get("series") or []), zts=bool(get("zts")),
                        zdb=bool(get("with_zdb")), offline=bool(get("offline")),
                        flags=configure_flags(bool(get("production"))), **extra)


def configure_flags(production: bool) -> tuple[str, ...]:
    """OpenZFS's configure flags: the debug build the cases are written for, or with
    ``--production`` the build a distribution ships (a finding's impact there)."""
    return () if production else DEFAULT_FLAGS


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
    with step("resolve source and series", interval=30):
        base = series_mod.choose_base(cache, selections, source=opts.zfs_source,
                                      ref=opts.zfs_ref, offline=opts.offline)
        tree = series_mod.resolve(cache, base, selections, offline=opts.offline)
    req = BuildRequest(kernel=kernel, tree=tree, flags=tuple(opts.flags), zts=opts.zts,
                       zdb=opts.zdb)
    return Prepared(kernel, tree, req)


def build(opts: BuildOptions, cache: ObjectCache | None = None) -> tuple[BuildRecord, bool]:
    cache = cache or ObjectCache()
    prep = prepare(opts, cache)
    return get_or_build(prep.request, cache, force=opts.force, jobs=opts.jobs)
