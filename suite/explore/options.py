"""The pytest options of ``-m explore`` (``suite/plugin/hooks.py`` adds them;
``python -m suite explore`` and ``suite bugs --explore`` pass them on)."""
from __future__ import annotations

from typing import Any, Callable

from suite.explore.budget import budget_arg


def add_explore_options(addoption: Callable[..., Any]) -> None:
    addoption("--explore-seed", type=int, default=1, metavar="N",
                help="-m explore: the master seed (sequence k's seed derives from it and k)")
    addoption("--explore-budget", type=budget_arg, default="5m", metavar="TIME|Nx",
                help="-m explore: how long to explore (90s, 15m, 1h) or how many "
                     "sequences (20x); shrinking a finding comes on top (default 5m)")
    addoption("--explore-shrink", type=float, default=None, metavar="SECONDS",
                help="-m explore: wall clock for shrinking one finding (default 1200)")
    addoption("--explore-findings", type=int, default=1, metavar="N",
                help="-m explore: distinct findings to collect before stopping (default 1); "
                     "past the first, a failure like one already found is counted, not shrunk")
    addoption("--explore-known", action="append", default=[], metavar="PATH",
                help="-m explore: findings already known (an explore summary.json, or a "
                     "results folder holding them, e.g. the base's run): a failure with "
                     "the signature of one is counted and named, not shrunk (repeatable)")
    addoption("--explore-avoid", action="append", default=[], metavar="OP[,OP]",
                help="-m explore: ops no sequence draws, as syzkaller disables a call that "
                     "hangs the kernel (e.g. splice: from a direct=always file it hangs on "
                     "Linux < 6.5, upstream); the same seed and the same avoid set give "
                     "the same sequences (repeatable)")
    addoption("--explore-cover", action="store_true", default=False,
                help="-m explore: run only sequences that reach a cell of the reach table "
                     "(origin x op, caller x actors, movers, tunables, crash points) no run "
                     "executed yet; stop once every cell was executed")
    addoption("--explore-power-share", type=float, default=None, metavar="F",
                help="-m explore: the share of sequences that end in a power cut (default "
                     "0.12: each costs a boot; raise it to hunt durability bugs)")
    addoption("--explore-replay", action="append", default=[], metavar="SEQ.json",
                help="-m explore: run these sequences (a minimal-<seed>.json explore wrote, "
                     "a corpus file) in turn instead of generated ones, power cuts "
                     "included: a finding's confirmation, or its control on another build")
    addoption("--explore-inject-warning", type=int, default=None, metavar="TOKEN",
                help="-m explore, a self-check of the trip path: the guest engine prints a "
                     "kernel WARNING once a write of data TOKEN lands; the sequence must stop "
                     "there as a trip naming that op, shrunk and confirmed on a fresh guest")
    addoption("--explore-poison", choices=("on", "off"), default="on",
                help="-m explore: boot explore's guests with the kernel's memory poisoning "
                     "(slub_debug=FZP, page_poison, init_on_free: suite/guest/lifecycle.py "
                     "POISON) so a field no one set reads 0x6b, not a zero the allocator "
                     "happened to give; a red zone overrun or a write after free is "
                     "reported by SLUB (default on; off: the plain kernel, faster)")
    addoption("--explore-target", choices=("file", "zvol"), default="file",
                help="-m explore: each sequence on a fresh file of the case's dataset "
                     "(default) or on a fresh zvol under it (suite/explore/targets.py)")
