"""``python -m suite bugs SERIES``: its options and handler (the runs themselves:
``suite/campaign/bugs.py``; the lanes beside the cases, each with its own options:
``suite/campaign/lanes/``)."""
from __future__ import annotations

import argparse
from pathlib import Path

from suite.campaign.lanes import explore, xfstests, zts

# The lanes beside the suite's cases, in the order their tables are printed. A new
# lane: its module in suite/campaign/lanes/ (a Lane, add_options, from_args), named here.
LANES = (zts, explore, xfstests)


def cmd_bugs(args: argparse.Namespace) -> int:
    from suite.campaign.bugs import run_bugs
    extra = [*args.pytest_args, *(["--tier", args.tier] if args.tier else [])]
    lanes = [lane for lane in (mod.from_args(args) for mod in LANES) if lane is not None]
    return run_bugs(args.name, args.only, args.k, extra, roles=args.role or None,
                    lanes=lanes, suite_from=[Path(d) for d in args.suite_from])


def add_parser(sub) -> None:
    """``bugs``' arguments under ``python -m suite``."""
    kb = sub.add_parser("bugs", help="run each known bug's cases at its bad and fixed "
                                     "commits: they must fail, then pass")
    kb.add_argument("name", help="series name, e.g. async-dio")
    kb.add_argument("--only", action="append", default=[], help="bug id (repeatable)")
    kb.add_argument("--role", action="append", choices=("bad", "fixed"),
                    help="run only at the bad or the fixed commit (default: both)")
    kb.add_argument("-k", default="", help="narrow the cases further (pytest -k expression)")
    kb.add_argument("--tier", choices=("quick", "full"), default="",
                    help="quick: each targeted case function once, with its most telling "
                         "variant (suite/plugin/tiers.py); default: every targeted variant")
    kb.add_argument("--lane", action="append", default=[], metavar="LANE",
                    choices=("cases", *(mod.__name__.rsplit(".", 1)[-1] for mod in LANES)),
                    help="a lane to run at each bad commit: cases (the suite's own, the "
                         "default), zts, explore (give --explore BUDGET), xfstests (dio "
                         "unless --xfstests SEL); repeatable; a lane named without cases "
                         "runs alone. --zts, --zts-only, --explore, --explore-only, "
                         "--xfstests, --xfstests-only say the same")
    kb.add_argument("--suite-from", action="append", default=[], metavar="DIR",
                    help="judge the suite's side from an earlier `suite bugs` results folder "
                         "instead of running it (repeatable; the newest session per bug wins)")
    for mod in LANES:
        mod.add_options(kb)
    kb.set_defaults(func=cmd_bugs)
