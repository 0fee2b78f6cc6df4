"""``python -m suite xfstests``: pytest's xfstests lane in the foreground, with the
build options given (the lane itself: cases/test_xfstests.py, docs/xfstests.md)."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from suite import paths
from suite.build import xfstests
from suite.explore.lane import build_argv


def run(args: argparse.Namespace) -> int:
    if args.table:
        from suite.report import xfstestsmatrix as mx
        cs = mx.cells([Path(d) for d in args.table])
        if not cs:
            print(f"no xfstests results under {' '.join(args.table)}", file=sys.stderr)
            return 2
        print(mx.markdown(cs) + "\nNot run:\n\n" + mx.not_run(cs), end="")
        return 0
    tree = xfstests.ensure(offline=args.offline)
    print(f"xfstests {tree.commit[:12]} built in {tree.path}")
    if args.build_only:
        return 0
    argv = [sys.executable, "-m", "pytest", str(paths.PROJECT_ROOT / "cases" / "test_xfstests.py"),
            "-m", "xfstests", *build_argv(lambda dest: getattr(args, dest, None)),
            *[x for s in args.select or [] for x in ("--xfstests", s)],
            *[x for p in args.profile or [] for x in ("--xfstests-profile", p)],
            *(["--xfstests-split", str(args.split), "-n", str(args.split)]
              if args.split > 1 else []),
            *args.pytest_args]
    print("+ " + " ".join(argv[1:]))
    return subprocess.run(argv, cwd=paths.PROJECT_ROOT).returncode


def add_parser(sub, add_build_options) -> None:
    """``xfstests``'s arguments under ``python -m suite``."""
    xf = sub.add_parser("xfstests", help="xfstests (the fork with ZFS support) on the build, "
                                         "by profile: what pytest -m xfstests runs")
    add_build_options(xf.add_argument)
    xf.add_argument("--select", action="append", default=[], metavar="SEL",
                    help="dio (default: the aio group and the O_DIRECT tests), quick, "
                         "g:GROUP, x:GROUP, e:TEST (leave out) or a test (generic/091); "
                         "repeatable")
    xf.add_argument("--profile", action="append", default=[],
                    help="plain, direct, async, zvol (repeatable; default every one the "
                         "build can run)")
    xf.add_argument("--split", type=int, default=1, metavar="N",
                    help="each profile's selection in N parts dealt by recorded time, a "
                         "guest each, run at once (pytest -n N --xfstests-split N)")
    xf.add_argument("--table", nargs="+", metavar="DIR",
                    help="run nothing: one table of builds x profiles from these results "
                         "folders (parts and shards of one build and profile joined)")
    xf.add_argument("--build-only", action="store_true",
                    help="fetch and build xfstests into the cache, run nothing")
    xf.set_defaults(func=run)
