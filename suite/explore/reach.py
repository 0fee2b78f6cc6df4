"""Where explore's requests go: page origin x op (read or write), and tunable x value,
counted in sequences, as drawn (the generator's choices) and as executed (what the
engine said each op used: an origin the guest could not give falls back and says so).

``python -m suite explore --draws 40x`` prints the drawn table of a seed without a
guest; an exploration's summary records both per sequence, and the lane prints them.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from suite.explore.eligible import servable
from suite.explore.gen import PARAM_CHOICES, TUNABLE_CHOICES
from suite.ioengine.explore.batch import BATCH_IFACES
from suite.ioengine.explore.flags import READ_FLAGS, WRITE_FLAGS
from suite.ioengine.explore.held import iovec_of, submitter_of
from suite.ioengine.explore.limits import LIMITS
from suite.explore.reshape import synced_rewrite_at
from suite.ioengine.explore.served import asks_direct as served_asks
from suite.explore.ops import (BATCH_OPS, BUF_SOURCES, HELD_OPS, IO_OPS, ORIGINS, OUTWARD, READS, TRANSFER_OPS,
                               Sequence)

ROWS = BUF_SOURCES + ORIGINS
DIRECTIONS = ("read", "write")
TUNABLES = {**PARAM_CHOICES, **TUNABLE_CHOICES}
CALLER_CELLS = ["caller:self"] + [f"caller:loop dio={d} lbs={b}" for d in (0, 1)
                                  for b in (512, 4096)] + \
    [f"caller:loop direct={v}" for v in ("always", "disabled", "standard")] + \
    [f"caller:ext4 on loop dio={d}" for d in (0, 1)] + ["caller:overlay"] + \
    [f"caller:nfs direct={v}" for v in ("always", "disabled", "standard")]


# The kernel moving bytes: into the target from the source file, out of it, user pages in.
MOVERS = ("copy_range",) + TRANSFER_OPS + OUTWARD
ACTOR_COUNTS = (1, 2, 3, 4)
HELD_CELLS = ["held:held_read:rollback"] + [f"held:held_write:{t}"
                                            for t in ("fsync", "syncfs", "later_write",
                                                      "stream")] + \
    [f"held:submitter:{w}" for w in ("reaps", "exits")] + \
    [f"held:iovec:{w}" for w in ("stack", "heap")]      # where the kernel built its iovec

FLAG_CELLS = [f"flag:{f}:read" for f in READ_FLAGS] + [f"flag:{f}:write" for f in WRITE_FLAGS]
# Appends submitted together: by interface, alone or under RLIMIT_FSIZE with room for one.
BATCH_CELLS = [f"batch:{i}{c}" for i in BATCH_IFACES for c in ("", ":fsize")]
# A write repeated with its very bytes after a txg_sync (what nopwrite acts on).
REWRITE_CELL = "rewrite:synced"


def batch_cell(iface: str, fsize: bool) -> str:
    return f"batch:{iface}{':fsize' if fsize else ''}"
CALLER_KINDS = ("self", "loop dio=0", "loop dio=1", "ext4 on loop", "overlay", "nfs")


def caller_label(seq: Sequence) -> str:
    """Who issues a sequence's requests, as a row of the caller x actors table."""
    c = seq.caller
    if c.get("kind") == "loop":
        return f"loop dio={c.get('dio')}"
    if c.get("kind") == "loopfs":
        return "ext4 on loop"
    if c.get("kind") in ("overlay", "nfs"):
        return c["kind"]
    return "self" if seq.target == "file" else seq.target


def crowd_cells(seq: Sequence, counts: Iterable[int] | None = None) -> list[str]:
    """``actors:<caller>:<n>``: the caller with each number of actors the sequence ran
    at once (1: its ordinary ops); ``counts`` are what the engine said it ran, else
    what the sequence draws."""
    got = set(counts) if counts is not None else \
        {max(2, min(4, o.segs or 2)) for o in seq.ops if o.op == "actors"}
    return sorted(f"actors:{caller_label(seq)}:{n}" for n in got | {1})


def crash_points(lines: Iterable[dict[str, Any]], op: str = "crash") -> int:
    """The crash points a run went through: ``crash`` ops that recovered a frozen pool
    (``power_cut``: power cuts recovered on the guest booted after), whether what
    survived was right or a ``crash-*`` finding (the crash point was reached)."""
    return sum(1 for ln in lines if ln.get("event") == "op" and ln.get("op") == op
               and (ln.get("outcome") == "ok" or str(ln.get("kind") or "").startswith("crash-")))


def crash_rate(runs: list[dict[str, Any]]) -> str:
    """``N crash points in M min (X a minute)`` over an exploration's runs."""
    n = sum(int(r.get("crashes") or 0) for r in runs)
    cuts = sum(int(r.get("power_cuts") or 0) for r in runs)
    minutes = sum(float(r.get("seconds") or 0) for r in runs) / 60

    def rate(k: int) -> str:
        return f"{k / minutes:.2f} a minute" if minutes else "no time"
    return (f"{n} crash points (zpool freeze, then export + import) and {cuts} power cuts "
            f"(a fresh guest on the same disks) in {minutes:.1f} min ({rate(n)}; {rate(cuts)})")


def direction(op: str) -> str:
    return "read" if op in READS else "write"


# Buffers the Direct I/O path cannot serve by design, so no O_DIRECT cell of theirs:
# a buffer off its alignment (refused, or declined to the ARC), one with a page that
# cannot be pinned (the pin fails part way: EFAULT), a mapping of the very range the
# request moves (its pages are in the page cache: OpenZFS serves the ARC's way).
NOT_DIRECT = ("anon_offset", "holed", "map_target")


def asks_direct(seq: Sequence, o: Any) -> bool:
    """An op of the sequence's own reads and writes that asks for Direct I/O."""
    return served_asks(o.op, o.direct, seq.props)


def served(lines: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many of a run's measured O_DIRECT requests each path served (``served`` of
    its op lines: dio, arc, memory, unmeasured)."""
    out: Counter = Counter(str(ln["served"]) for ln in lines
                           if ln.get("event") == "op" and ln.get("served"))
    return dict(out)


def dio_allowed(seq: Sequence) -> bool:
    """The sequence's conditions let Direct I/O serve a request: the build's switch
    on (``zfs_dio_enabled``), the dataset's ``direct`` not ``disabled``, and no loop
    device between the engine and the file that reads and writes it buffered
    (``dio=0``: its O_DIRECT is the loop device's, never the file's)."""
    buffered_loop = seq.caller.get("kind") in ("loop", "loopfs") and not seq.caller.get("dio")
    return seq.params.get("zfs_dio_enabled", 1) != 0 and \
        seq.props.get("direct") != "disabled" and not buffered_loop


def served_share(runs: Iterable[dict[str, Any]]) -> str:
    """``O_DIRECT requests served by Direct I/O: N of M (P%)``, over a summary's runs,
    then over those whose conditions allowed Direct I/O."""
    runs = list(runs)

    def share(rs: list[dict[str, Any]]) -> tuple[Counter, int]:
        total: Counter = Counter()
        for r in rs:
            total.update(r.get("served") or {})
        return total, sum(total.values())
    total, n = share(runs)
    if not n:
        return "O_DIRECT requests served by Direct I/O: none measured"
    rest = ", ".join(f"{k} {total[k]}" for k in ("arc", "memory", "unmeasured") if total[k])
    out = (f"O_DIRECT requests served by Direct I/O: {total['dio']} of {n} "
           f"({100 * total['dio'] / n:.0f}%)" + (f"; the others: {rest}" if rest else ""))
    allowed, m = share([r for r in runs if r.get("dio_allowed")])
    if m and m != n:
        out += (f"; where the sequence allowed Direct I/O (zfs_dio_enabled=1, direct not "
                f"disabled): {allowed['dio']} of {m} ({100 * allowed['dio'] / m:.0f}%)")
    return out


def seq_cells(seq: Sequence) -> list[str]:
    """The ``origin:direction`` cells a sequence's requests draw (sorted, once each);
    its O_DIRECT cells only where its conditions let Direct I/O serve them
    (:func:`dio_allowed`: a sequence with Direct I/O switched off is a control) and
    by requests it could serve where they stand (:func:`.eligible.servable`: by
    design, a read inside the file, a range not in the page cache)."""
    can = servable(seq, asks_direct) if dio_allowed(seq) else [False] * len(seq.ops)
    return sorted({f"{o.buf}:{direction(o.op)}" for o in seq.ops if o.op in IO_OPS} |
                  {f"dio:{o.buf}:{direction(o.op)}" for o, ok in zip(seq.ops, can)
                   if ok and o.buf not in NOT_DIRECT} |
                  set(crowd_cells(seq)) | {f"moved:{o.op}" for o in seq.ops if o.op in MOVERS} |
                  ({"crash:freeze"} if any(o.op == "freeze" for o in seq.ops) else set()) |
                  ({"crash:power"} if any(o.op == "power_cut" for o in seq.ops) else set()) |
                  ({"crash:power-slow"} if any(o.op == "power_cut" and o.slow_ms
                                               for o in seq.ops) else set()) |
                  {f"limit:{o.limit}" for o in seq.ops if getattr(o, "limit", "")
                   and o.op not in BATCH_OPS} |
                  {batch_cell(o.iface, bool(o.limit)) for o in seq.ops if o.op in BATCH_OPS} |
                  {f"flag:{o.flags}:{direction(o.op)}" for o in seq.ops
                   if o.op in IO_OPS and getattr(o, "flags", "")} |
                  {f"held:{o.op}:{o.then}" for o in seq.ops if o.op in HELD_OPS} |
                  {f"held:submitter:{submitter_of(o.iface, o.keep)}" for o in seq.ops
                   if o.op in HELD_OPS and o.iface != "sync"} |
                  {f"held:iovec:{iovec_of(o.segs)}" for o in seq.ops
                   if o.op in HELD_OPS and o.iface != "sync"} |
                  ({REWRITE_CELL} if synced_rewrite_at(seq.ops) else set()))


def run_reach(seq: Sequence, lines: list[dict[str, Any]]) -> dict[str, Any]:
    """What one run of ``seq`` drew and reached, for its summary entry: its cells drawn
    and executed, tunables, the paths that served its O_DIRECT requests, its crash
    points."""
    return {"cells": seq_cells(seq), "tunables": seq_tunables(seq),
            "executed": run_cells(lines, seq), "served": served(lines),
            "dio_allowed": dio_allowed(seq), "crashes": crash_points(lines),
            "power_cuts": crash_points(lines, "power_cut")}


def seq_tunables(seq: Sequence) -> list[str]:
    """The ``name=value`` a sequence runs under, of the tunables that change the path,
    and who issues its requests (``caller:...``: the engine itself, or a loop device
    with its direct-io and sector size, beside the dataset's ``direct``)."""
    out = [f"{k}={v}" for k, v in seq.params.items() if k in TUNABLES]
    if "atime" in seq.props:
        out.append(f"atime:{atime_mode(seq.props)}")
    c = seq.caller
    if c.get("kind") == "loop":
        out += [f"caller:loop dio={c.get('dio')} lbs={c.get('lbs')}",
                f"caller:loop direct={seq.props.get('direct', '-')}"]
    elif c.get("kind") == "loopfs":
        out.append(f"caller:ext4 on loop dio={c.get('dio')}")
    elif c.get("kind") == "overlay":
        out.append("caller:overlay")
    elif c.get("kind") == "nfs":
        out.append(f"caller:nfs direct={seq.props.get('direct', '-')}")
    elif seq.target == "file":
        out.append("caller:self")
    return sorted(out)


ATIME_MODES = ("strict", "relatime", "off")


def atime_mode(props: dict[str, str]) -> str:
    """How the dataset keeps access times: ``off``, ``relatime`` or ``strict`` (every
    read updates the inode: atime=on, relatime=off)."""
    if props.get("atime") == "off":
        return "off"
    return "strict" if props.get("relatime") == "off" else "relatime"


def run_cells(lines: Iterable[dict[str, Any]], seq: Sequence | None = None) -> list[str]:
    """The cells a run executed: its finished reads and writes, by the buffer each
    said it used; with ``seq``, its caller with the actors that ran at once."""
    lines = list(lines)
    cells = {f"{ln['buf']}:{direction(str(ln.get('op')))}" for ln in lines
             if ln.get("event") == "op" and ln.get("op") in IO_OPS and ln.get("buf")}
    # An O_DIRECT cell is executed only where the Direct I/O path served it.
    cells |= {f"dio:{ln['buf']}:{direction(str(ln.get('op')))}" for ln in lines
              if ln.get("event") == "op" and ln.get("served") == "dio" and ln.get("buf")}
    if crash_points(lines):
        cells.add("crash:freeze")
    if crash_points(lines, "power_cut"):
        cells.add("crash:power")
        if any(ln.get("event") == "power-cut" and ln.get("slow_ms") for ln in lines):
            cells.add("crash:power-slow")       # the writes in flight on slowed disks
    cells |= {f"moved:{ln['op']}" for ln in lines if ln.get("event") == "op"
              and ln.get("op") in MOVERS and ln.get("outcome") == "ok"}
    # A limit reached: the write ran under it (cut, refused whole, or a finding).
    cells |= {f"limit:{ln['limit']}" for ln in lines if ln.get("event") == "op"
              and ln.get("limit") in LIMITS and not ln.get("limit_unset")
              and ln.get("outcome") in ("ok", "failed")}
    # A batch executed: the kernel took the appends (each judged, a finding too).
    cells |= {batch_cell(str(ln.get("iface")), bool(ln.get("rlimit_fsize"))) for ln in lines
              if ln.get("event") == "op" and ln.get("op") in BATCH_OPS
              and ln.get("outcome") in ("ok", "failed")}
    # A hold executed: the request was still in flight when ``then`` began.
    held = [ln for ln in lines if ln.get("event") == "op" and ln.get("op") in HELD_OPS
            and ln.get("held") and ln.get("outcome") in ("ok", "failed", "refused")]
    cells |= {f"held:{ln['op']}:{ln.get('then')}" for ln in held}
    cells |= {f"held:submitter:{ln['submitter']}" for ln in held
              if ln.get("submitter") in ("reaps", "exits")}
    cells |= {f"held:iovec:{ln['iovec']}" for ln in held
              if ln.get("iovec") and ln.get("submitter") in ("reaps", "exits")}
    # A flag executed: the kernel took the request with it (a refusal is not).
    cells |= {f"flag:{ln['flags']}:{direction(str(ln.get('op')))}" for ln in lines
              if ln.get("event") == "op" and ln.get("op") in IO_OPS and ln.get("flags")
              and ln.get("outcome") in ("ok", "failed")}
    # A rewrite of blocks on disk executed: Direct I/O served it.
    if seq is not None and set(synced_rewrite_at(seq.ops)) & {
            ln.get("i") for ln in lines if ln.get("event") == "op" and ln.get("served") == "dio"}:
        cells.add(REWRITE_CELL)
    if seq is not None and any(ln.get("event") == "op" for ln in lines):
        cells |= set(crowd_cells(seq, [int(ln["actors"]) for ln in lines if ln.get("event") == "op"
                                       and ln.get("op") == "actors" and ln.get("ok") and ln.get("actors")]))
    return sorted(cells)


@dataclass
class Reach:
    """Cells counted in sequences (each sequence once per cell)."""
    sequences: int = 0
    cells: Counter = field(default_factory=Counter)
    tunables: Counter = field(default_factory=Counter)

    def add(self, cells: Iterable[str], tunables: Iterable[str]) -> None:
        self.sequences += 1
        self.cells.update(set(cells))
        self.tunables.update(set(tunables))

    def missing(self, params: Iterable[str] = tuple(TUNABLES),
                asked: Iterable[str] = ()) -> list[str]:
        """Cells no sequence reached: every origin x direction, every value of the
        ``params`` (those the build has), each caller with each number of actors, each
        mover, and the ``asked`` cells the session can draw (``crash:freeze``, ``crash:power``,
        ``crash:power-slow``; a zvol's ``rewrite:synced``)."""
        want = [f"{r}:{d}" for r in ROWS for d in DIRECTIONS]
        want += [f"{k}={v}" for k in params if k in TUNABLES for v in sorted(set(TUNABLES[k]))]
        want += CALLER_CELLS
        want += [f"actors:{c}:{n}" for c in CALLER_KINDS for n in ACTOR_COUNTS]
        want += [f"moved:{m}" for m in MOVERS]
        want += [f"limit:{k}" for k in LIMITS]
        want += FLAG_CELLS + HELD_CELLS + BATCH_CELLS
        want += list(asked)
        have = set(self.cells) | set(self.tunables)
        return [c for c in want if c not in have]


def drawn(seqs: Iterable[Sequence]) -> Reach:
    r = Reach()
    for s in seqs:
        r.add(seq_cells(s), seq_tunables(s))
    return r


def from_runs(runs: Iterable[dict[str, Any]], key: str = "cells") -> Reach:
    """An exploration's reach from its summary's runs (``cells``: drawn;
    ``executed``: what the engine used)."""
    # A sequence run again past a known finding (``resumed``) is the same sequence: its
    # cells join the run before it, each sequence counted once.
    merged: list[tuple[set[str], set[str]]] = []
    for run in runs:
        if key not in run:
            continue
        cells, tun = set(run.get(key) or ()), set(run.get("tunables") or ())
        if run.get("resumed") and merged:
            merged[-1][0].update(cells)
            merged[-1][1].update(tun)
        else:
            merged.append((cells, tun))
    r = Reach()
    for cells, tun in merged:
        r.add(cells, tun)
    return r


def dio_cells(drawn_: Reach, executed: Reach) -> tuple[int, int]:
    """(O_DIRECT cells drawn, of them executed on the Direct I/O path)."""
    drawn_cells = [c for c in drawn_.cells if c.startswith("dio:")
                   and c.split(":")[1] not in NOT_DIRECT]       # an older summary drew them
    return len(drawn_cells), sum(1 for c in drawn_cells if executed.cells.get(c))


def table(drawn_: Reach, executed: Reach | None = None) -> str:
    """The origin x op table (sequences that drew each cell; with ``executed``,
    ``drawn/executed``), then the tunables."""
    def cell(c: str) -> str:
        d = drawn_.cells.get(c, 0)
        return f"{d}/{executed.cells.get(c, 0)}" if executed is not None else str(d)
    head = "drawn/executed" if executed is not None else "drawn"
    lines = [f"page origin x op: sequences of {drawn_.sequences} ({head}; O_DIRECT: drawn by "
             f"requests Direct I/O could serve where they stand (page-aligned, writes of whole "
             f"records, not RWF_NOWAIT, reads inside the file, a range no mapping caches) "
             f"where the sequence's conditions allow it, executed only where its path "
             f"served it)",
             f"  {'origin':20s} {'read':>12s} {'write':>12s} {'O_DIRECT read':>14s} "
             f"{'O_DIRECT write':>14s}"]
    for row in ROWS:
        dio = ("n/a", "n/a") if row in NOT_DIRECT else \
            (cell(f"dio:{row}:read"), cell(f"dio:{row}:write"))
        lines.append(f"  {row:20s} {cell(row + ':read'):>12s} {cell(row + ':write'):>12s} "
                     f"{dio[0]:>14s} {dio[1]:>14s}")
    if executed is not None:
        d, e = dio_cells(drawn_, executed)
        lines.append(f"  O_DIRECT cells executed on the Direct I/O path: {e} of {d} drawn"
                     + (f" ({100 * e / d:.0f}%)" if d else "") +
                     f" (n/a: {', '.join(NOT_DIRECT)}, which it cannot serve by design)")
    lines.append(f"who issues the requests x actors at once: sequences ({head})")
    lines.append(f"  {'caller':20s} " + " ".join(f"{n:>12d}" for n in ACTOR_COUNTS))
    for c in CALLER_KINDS:
        lines.append(f"  {c:20s} " + " ".join(f"{cell(f'actors:{c}:{n}'):>12s}"
                                               for n in ACTOR_COUNTS))
    lines.append(f"  {'crash points (freeze)':20s} {cell('crash:freeze'):>12s}")
    lines.append(f"  {'power cuts':20s} {cell('crash:power'):>12s}")
    lines.append(f"  {'  on slowed disks':20s} {cell('crash:power-slow'):>12s}")
    lines.append(f"moved by the kernel: sequences ({head})")
    lines.append("  " + "  ".join(f"{m} {cell('moved:' + m)}" for m in MOVERS))
    lines.append(f"writes cut by a limit: sequences ({head})")
    lines.append("  " + "  ".join(f"{k} {cell('limit:' + k)}" for k in LIMITS))
    lines.append(f"per-call flags (RWF_*): sequences ({head})")
    lines.append("  " + "  ".join(f"{c.removeprefix('flag:')} {cell(c)}" for c in FLAG_CELLS))
    lines.append(f"requests held in flight (zinject -E) while: sequences ({head})")
    lines.append("  " + "  ".join(f"{c.removeprefix('held:')} {cell(c)}" for c in HELD_CELLS))
    lines.append(f"appends submitted together (RWF_APPEND): sequences ({head})")
    lines.append("  " + "  ".join(f"{c.removeprefix('batch:')} {cell(c)}" for c in BATCH_CELLS))
    lines.append(f"O_DIRECT rewrites of blocks on disk, their bytes (nopwrite's shape): "
                 f"sequences ({head}) {cell(REWRITE_CELL)}")
    lines.append("who issues the requests: sequences")
    for c in CALLER_CELLS:
        lines.append(f"  {c.removeprefix('caller:'):32s} {drawn_.tunables.get(c, 0)}")
    lines.append("dataset access times: sequences")
    lines.append("  " + "  ".join(f"{m} {drawn_.tunables.get('atime:' + m, 0)}"
                                  for m in ATIME_MODES))
    lines.append("tunable = value: sequences")
    for name in TUNABLES:
        vals = sorted(set(TUNABLES[name]))
        shown = ", ".join(f"{v}: {drawn_.tunables.get(f'{name}={v}', 0)}" for v in vals)
        lines.append(f"  {name:32s} {shown}")
    return "\n".join(lines)
