"""The command line: ``python -m suite.ioengine run|write-file|hold|flood|zvol-dev|explore-run|explore-recover|remap-cross|unpinnable|refused|serve ...``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from .barriers import add_commands as add_write_commands
from .blockdev import add_commands as add_blockdev_commands
from .counters import to_int
from .explore.run import add_commands as add_explore_commands
from .explore.powercut import add_commands as add_recover_commands
from .plan import DEFAULT_PARAM_DIR, DIO_ALIGN
from .remap import add_commands as add_remap_commands
from .refused import add_commands as add_refused_commands
from .unpinnable import add_commands as add_unpinnable_commands
from .resident import DEFAULT_DIR as RESIDENT_DIR, serve
from .stress import cmd_flood, cmd_hold, cmd_sample, parse_sample
from .trials import cmd_run, cmd_write_file


def _seed(text: str) -> Any:
    v = to_int(text)
    return v if v is not None and not text.lower().startswith("0x") else text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m suite.ioengine", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run a plan of trials, one JSON line per trial")
    r.add_argument("plan", help="plan JSON file, or - for stdin")
    r.add_argument("--param-dir", default=DEFAULT_PARAM_DIR,
                   help=f"module parameter directory (default {DEFAULT_PARAM_DIR})")
    r.add_argument("--keep-params", action="store_true",
                   help="do not restore original parameter values at exit")
    r.set_defaults(func=cmd_run)

    w = sub.add_parser("write-file", help="create a pattern file of exact size")
    w.add_argument("path")
    w.add_argument("--size", type=int, required=True)
    w.add_argument("--seed", type=_seed, required=True)
    w.add_argument("--no-direct", action="store_true", help="never use O_DIRECT")
    w.add_argument("--chunk", type=int, default=1 << 20)
    w.set_defaults(func=cmd_write_file)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--file", required=True)
        sp.add_argument("--seed", type=_seed, required=True)
        sp.add_argument("--size", type=int, default=None,
                        help="file size the pattern was written with (default: fstat)")
        sp.add_argument("--interface", choices=("libaio", "io_uring"), default="libaio")
        sp.add_argument("--len", type=int, default=1 << 17, help="bytes per request")
        sp.add_argument("--no-direct", action="store_true", help="open without O_DIRECT")

    h = sub.add_parser("hold", help="submit K async reads, report when they complete")
    common(h)
    h.add_argument("-k", type=int, default=1, help="number of reads")
    h.add_argument("--offset", type=int, default=0)
    h.add_argument("--stride", type=int, default=0, help="offset step (default --len)")
    h.add_argument("--page-offset", type=int, default=0)
    h.add_argument("--deadline-s", type=float, default=60.0)
    h.add_argument("--probe-inflight", type=float, default=None, metavar="MS",
                   help="after MS ms, report how many reads are still outstanding")
    h.set_defaults(func=cmd_hold)

    f = sub.add_parser("flood", help="S submitters keep D reads in flight, all checked")
    common(f)
    f.add_argument("--submitters", type=int, default=2)
    f.add_argument("--depth", type=int, default=8)
    f.add_argument("--nsegs", type=int, default=1, help=">1: PREADV with that many segments")
    f.add_argument("--align", type=int, default=DIO_ALIGN, help="offset alignment")
    f.add_argument("--duration", type=float, default=0.0, help="seconds to keep submitting")
    f.add_argument("--requests", type=int, default=0, help="requests per submitter")
    f.add_argument("--drain-s", type=float, default=30.0, help="wait for in-flight at the end")
    f.add_argument("--sample", action="append", type=parse_sample, metavar="NAME=PATH[#FIELD]")
    f.add_argument("--sample-ms", type=float, default=50.0)
    f.set_defaults(func=cmd_flood)
    sm = sub.add_parser("sample", help="sample counters until a stop file appears")
    sm.add_argument("--sample", action="append", type=parse_sample, required=True,
                    metavar="NAME=PATH[#FIELD]")
    sm.add_argument("--every-ms", type=float, default=20.0)
    sm.add_argument("--stop-file", required=True)
    sm.add_argument("--deadline-s", type=float, default=600.0)
    sm.set_defaults(func=cmd_sample)
    add_write_commands(sub)
    add_blockdev_commands(sub)
    add_explore_commands(sub)
    add_recover_commands(sub)
    add_remap_commands(sub)
    add_unpinnable_commands(sub)
    add_refused_commands(sub)
    sv = sub.add_parser("serve", help="stay resident: run client.sh's requests, a fork each "
                        "(every command imported once; resident.py)")
    sv.add_argument("--dir", default=RESIDENT_DIR, help=f"request directory (default {RESIDENT_DIR})")
    sv.set_defaults(func=lambda a: serve(Path(a.dir), main))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd == "flood":
        if not args.duration and not args.requests:
            parser.error("flood needs --duration or --requests")
        if args.nsegs < 1 or args.len < args.nsegs or args.depth < 1 or args.align < 1:
            parser.error("flood needs --nsegs >= 1, --len >= --nsegs, --depth >= 1, --align >= 1")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
