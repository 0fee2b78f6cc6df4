"""``python -m suite bugs SERIES``: its options and handler (the runs themselves:
``suite/campaign/bugs.py``, and the lanes beside the cases: ``zts``, ``explore``,
``xfstests`` in ``suite/campaign/lanes``)."""
from __future__ import annotations

import argparse
from pathlib import Path

from suite.errors import SuiteError
from suite.explore.budget import budget_arg as _budget
from suite.campaign.lanes import xfstests as xfstestsbugs
from suite.campaign.lanes.explore import ExplorePlan


def cmd_bugs(args: argparse.Namespace) -> int:
    from suite.campaign.bugs import run_bugs
    zts = "only" if args.zts_only else ("also" if args.zts else "")
    tags = tuple(t for t in (args.zts_tags or "").split(",") if t)
    extra = [*args.pytest_args, *(["--tier", args.tier] if args.tier else [])]
    return run_bugs(args.name, args.only, args.k, extra, roles=args.role or None,
                    zts=zts, zts_tags=tags, suite_from=[Path(d) for d in args.suite_from],
                    zts_from=[Path(d) for d in args.zts_from], explore=explore_plan(args),
                    xfstests=xfstestsbugs.plan(args))


def explore_plan(args: argparse.Namespace) -> ExplorePlan | None:
    """``bugs --explore BUDGET`` / ``--explore-from DIR``: the exerciser at each bad
    commit (None: not asked for). ``--explore-from`` alone reads it, the suite's
    cases left out, as ``--zts-from`` alone does."""
    if not (args.explore or args.explore_from):
        if args.explore_only:
            raise SuiteError("--explore-only runs nothing without a budget",
                             fix="give --explore 15m (or 20x), or --explore-from DIR to read "
                                 "earlier explore runs")
        return None
    return ExplorePlan(args.explore or "", args.explore_seed, args.explore_target,
                       findings=args.explore_findings, known=list(args.explore_known),
                       only=args.explore_only or not args.explore,
                       read_from=[Path(d) for d in args.explore_from])


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
    kb.add_argument("--zts", action="store_true",
                    help="also run OpenZFS's own tests (ZTS lane) at each bad commit and "
                         "print what ZTS saw beside what the suite saw")
    kb.add_argument("--zts-only", action="store_true",
                    help="run only the ZTS lane at each bad commit (no suite cases)")
    kb.add_argument("--zts-tags", default="", help="ZTS tags to run, comma-separated "
                    "(default: direct and async, where the build has it)")
    kb.add_argument("--suite-from", action="append", default=[], metavar="DIR",
                    help="judge the suite's side from an earlier `suite bugs` results folder "
                         "instead of running it (repeatable; the newest session per bug wins)")
    kb.add_argument("--zts-from", action="append", default=[], metavar="DIR",
                    help="read ZTS's side from an earlier `suite bugs --zts` results folder "
                         "instead of running it (repeatable; per commit the newest run, with "
                         "the narrowed --zts-test reruns back to the newest whole one)")
    kb.add_argument("--explore", type=_budget, default=None, metavar="BUDGET",
                    help="also run `suite explore` alone for BUDGET (15m, 20x) once at each "
                         "distinct bad commit and print what it found beside each bug")
    kb.add_argument("--explore-only", action="store_true",
                    help="run only the explore lane at each bad commit (no suite cases)")
    kb.add_argument("--explore-seed", type=int, default=1, help="--explore: master seed")
    kb.add_argument("--explore-target", choices=("file", "zvol"), default="file",
                    help="--explore: a fresh file per sequence, or a fresh zvol")
    kb.add_argument("--explore-findings", type=int, default=3, metavar="N",
                    help="--explore: distinct findings per bad commit before stopping "
                         "(default 3: an upstream finding met first does not end the run)")
    kb.add_argument("--explore-known", action="append", default=[], metavar="PATH",
                    help="--explore: findings already known (an explore run on the base or "
                         "master): counted and named at each bad commit, not shrunk")
    kb.add_argument("--explore-from", action="append", default=[], metavar="DIR",
                    help="read explore's side from earlier explore results folders (`suite "
                         "explore` or `bugs --explore`) instead of running it, each matched "
                         "to a bad commit by its build record (repeatable; the newest "
                         "finished run on --explore-target wins)")
    xfstestsbugs.add_options(kb)
    kb.set_defaults(func=cmd_bugs)
