"""The parts of a report only some runs have, each read from the sessions of every
side: what the after-case checks found (``suite/judges``), what ``suite explore``
found and shrank, OpenZFS's own tests, where the time went, the perf charts, and a
diff-coverage table. A part with nothing to say is left out.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from suite.judges.ondisk import Done
from suite.report import phases as phase_report
from suite.report import zts
from suite.report.page.disk import minutes, read_json, tail, verdicts
from suite.report.page.model import Chart, Grid, Link, Section

Sides = list[tuple[str, list[Path]]]          # (side label, its session folders)

JUDGE_KINDS = ("taint:", "kstat:", "pool:", "ereport:", "ondisk:")
SKIP_DIRS = {"vms", "engine", ".git", "node_modules"}


def side_cell(sides: Sides, side: str) -> tuple[str, ...]:
    """A side column only where there is more than one side."""
    return (side,) if len(sides) > 1 else ()


def judges(sides: Sides) -> Section | None:
    """Every finding of the after-case checks, with the case's after-case.txt, and
    what was judged: a run whose judges found nothing says how many cases they read
    and what they could not check, so a quiet table is earned, not empty."""
    head = (*(("side",) if len(sides) > 1 else ()), "case", "finding", "detail", "checks")
    grid, folders = Grid(head), []
    for side, sessions in sides:
        for nodeid, (v, folder) in sorted(verdicts(sessions).items()):
            after = folder / "after-case.txt"
            folders.append(folder)
            for s in v.symptoms:
                if s.kind.startswith(JUDGE_KINDS):
                    link = Link("after-case.txt", after) if after.exists() else "-"
                    grid.rows.append((*side_cell(sides, side), nodeid, s.kind, s.detail, link))
    seen = judged(folders)
    if not grid.rows and not seen.cases:
        return None
    return Section("After-case checks", "judges", [
        f"{len(grid.rows)} finding(s) of what cases left behind (taint, kstat accounting, "
        f"pool errors, ereports, on-disk checks); {seen.cases} case(s) were judged.",
        *seen.lines()], [grid] if grid.rows else [])


@dataclass
class Judged:
    """What the after-case judges read across a run (``after-case.txt``, ``ondisk.txt``)."""
    cases: int = 0
    thorough: int = 0                  # cases with a scrub + export (+ zdb) after them
    zdb: int = 0                       # of those, cases whose pool zdb walked
    unchecked: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = []
        if self.thorough:
            out.append(f"--thorough: {self.thorough} case(s) scrubbed and exported, "
                       f"{self.zdb} walked by zdb -bcc.")
        out += [f"not checked in {n} case(s): {what}" for what, n in
                sorted(self.unchecked.items(), key=lambda kv: -kv[1])]
        return out


UNCHECKED = re.compile(r"^not checked: (.*)$|^(.*), not checked(?: \(.*\))?$")


def judged(folders: list[Path]) -> Judged:
    j = Judged()
    for folder in folders:
        after, ondisk = folder / "after-case.txt", folder / "ondisk.txt"
        lines = []
        if after.exists():
            j.cases += 1
            lines += after.read_text(errors="replace").split("\n--- before the case")[0].splitlines()
        done = Done.read(folder)
        if done is not None:
            j.thorough += done.exported > 0
            j.zdb += done.zdb > 0
        if ondisk.exists():
            lines += ondisk.read_text(errors="replace").splitlines()
        for what in {m.group(1) or m.group(2) for m in map(UNCHECKED.match, lines) if m}:
            j.unchecked[what] = j.unchecked.get(what, 0) + 1
    return j


def explore(sides: Sides) -> Section | None:
    """``suite explore``: what ran, each finding, and its shrunk sequence."""
    sec = Section("Explore findings", "explore")
    found = Grid(("seed", "symptom", "confirmed", "ops after shrinking", "replays", "sequence"))
    for side, sessions in sides:
        for s in sessions:
            for summ in sorted(s.glob("cases/*/explore/summary.json")):
                data = read_json(summ)
                if not isinstance(data, dict):
                    continue
                states: dict[str, int] = {}
                for r in data.get("runs") or []:
                    states[str(r.get("state"))] = states.get(str(r.get("state")), 0) + 1
                sec.intro.append(
                    f"{side + ': ' if len(sides) > 1 else ''}master seed "
                    f"{data.get('master_seed', '?')}, budget {data.get('budget', '?')}"
                    + (f", on a {data['target']}" if data.get("target", "file") != "file" else "")
                    + ": "
                    f"{data.get('sequences', 0)} sequence(s) ("
                    + ", ".join(f"{k} {n}" for k, n in sorted(states.items()))
                    + f"), {data.get('replays', 0)} replay(s) in "
                    f"{minutes(float(data.get('elapsed_s') or 0))}")
                for f in data.get("findings") or []:
                    txt = summ.parent / Path(str(f.get("txt", ""))).name
                    seq = Link(txt.name, txt) if txt.is_file() else "-"
                    found.rows.append((str(f.get("seed", "?")), str(f.get("kind", "?")),
                                       "yes" if f.get("confirmed") else "no",
                                       str(f.get("ops", "?")), str(f.get("tries", "?")), seq))
                    if txt.is_file():
                        sec.texts.append((f"sequence {f.get('seed')}: {f.get('kind')}, "
                                          f"shrunk to {f.get('ops')} ops", tail(txt)))
                if data.get("no_result"):
                    sec.intro.append(f"{len(data['no_result'])} sequence(s) came back with no "
                                     "result (inconclusive)")
    if not sec.intro:
        return None
    if found.rows:
        sec.grids.append(found)
    else:
        sec.intro.append("no finding: every sequence's reads matched the model")
    return sec


def ztsruns(sides: Sides) -> Section | None:
    """OpenZFS's own tests, per side, each under its own id."""
    sec = Section("OpenZFS test suite (ZTS)", "zts")
    for side, sessions in sides:
        for s in sessions:
            for f in sorted(s.glob(f"cases/*/{zts.RESULTS_FILE}")):
                try:
                    meta, res = zts.load(f)
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                where = f" on {side}" if len(sides) > 1 else ""
                sec.markdown.append(zts.markdown(res, f"ZTS `{meta.get('tag')}`{where} "
                                                      f"({meta.get('describe', '')})"))
    return sec if sec.markdown else None


def timings(sides: Sides) -> Section | None:
    """Per-phase timings (phases.json of every case): a table for one side, a row
    per side (seconds per phase) for several."""
    per = [(side, [r for s in sessions for r in phase_report.collect(s)])
           for side, sessions in sides]
    per = [(side, rows) for side, rows in per if rows]
    if not per:
        return None
    sec = Section("Where the time went", "phases")
    if len(per) == 1:
        rows = per[0][1]
        totals = phase_report.totals(rows)
        g = Grid(("phase", "cases", "mean", "total", "share"),
                 title=f"{len(rows)} case(s), {minutes(sum(t[3] for t in totals))} in "
                       f"guests' phases")
        g.rows = [(k, str(n), f"{mean:.1f} s", f"{s:.0f} s", f"{share:.0f}%")
                  for k, n, mean, s, share in totals]
        sec.grids.append(g)
        return sec
    g = Grid(("side", "cases", *phase_report.ORDER, "total"),
             title="seconds in each phase, summed over the side's cases")
    for side, rows in per:
        by = {k: s for k, _, _, s, _ in phase_report.totals(rows)}
        g.rows.append((side, str(len(rows)), *(f"{by[k]:.0f}" if k in by else "-"
                                               for k in phase_report.ORDER),
                       f"{sum(by.values()):.0f}"))
    sec.grids.append(g)
    return sec


def perf(sides: Sides) -> Section | None:
    """The benchmark tables and their charts (``<session>/perf/``)."""
    sec = Section("Performance", "perf")
    for _, sessions in sides:
        for s in sessions:
            for md in sorted(s.glob("perf/*.md")):
                sec.markdown.append(md.read_text(errors="replace").strip())
                sec.links.append(Link(md.name, md))
            sec.charts += [Chart(p.stem, p) for p in sorted(s.glob("perf/*.png"))]
    return sec if sec.markdown or sec.charts else None


def phrase(v: object, depth: int = 0) -> str:
    """Any JSON value as a short phrase: never braces and quotes."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"
    if isinstance(v, (int, str)):
        return str(v)
    if depth > 1:
        return f"{len(v)} item(s)" if isinstance(v, (list, dict)) else str(v)
    if isinstance(v, list):
        more = f" (+{len(v) - 8} more)" if len(v) > 8 else ""
        return ", ".join(phrase(x, depth + 1) for x in v[:8]) + more
    if isinstance(v, dict):
        items = list(v.items())
        more = f" (+{len(items) - 6} more)" if len(items) > 6 else ""
        return ", ".join(f"{k} {phrase(x, depth + 1)}" for k, x in items[:6]) + more
    return str(v)


def records_grid(title: str, records: list[dict], first: str = "") -> Grid:
    keys: list[str] = []
    for r in records:
        keys += [k for k in r if k not in keys]
    return Grid(tuple(([first] if first else []) + keys),
                [tuple(phrase(r.get(k)) for k in keys) for r in records], title)


def grids_of(data: object, title: str) -> list[Grid]:
    """Tables for any JSON document: records as rows, mappings as name/value."""
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        return [records_grid(title, data)]
    if not isinstance(data, dict):
        return [Grid(("value",), [(phrase(data),)], title)]
    plain, out = Grid(("item", "value"), title=title), []
    for k, v in data.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            out.append(records_grid(str(k), v))
        elif isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            g = records_grid(str(k), list(v.values()), first=str(k))
            g.header = ("name", *g.header[1:])
            g.rows = [(str(name), *row) for name, row in zip(v, g.rows)]
            out.append(g)
        else:
            plain.rows.append((str(k), phrase(v)))
    return ([plain] if plain.rows else []) + out


def find(root: Path, names: tuple[str, ...], depth: int = 4) -> list[Path]:
    """Files named ``names`` under ``root``, not below ``depth`` levels nor in guest
    disk and engine folders."""
    out: list[Path] = []
    if depth < 0 or not root.is_dir():
        return out
    for p in sorted(root.iterdir()):
        if p.is_file() and p.name in names:
            out.append(p)
        elif p.is_dir() and p.name not in SKIP_DIRS and not p.is_symlink():
            out += find(p, names, depth - 1)
    return out


def coverage(root: Path) -> Section | None:
    """A diff-coverage record (``coverage.json``), as tables, and the lcov pages."""
    sec = Section("Diff coverage", "coverage")
    for f in find(root, ("coverage.json",)):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            sec.intro.append(f"{f.name} does not read")
            continue
        if isinstance(data, dict) and isinstance(data.get("summary"), str):
            sec.intro.append(data["summary"])       # suite coverage's one-line total
        sec.grids += grids_of(data, str(f.relative_to(root)))
        sec.links.append(Link(f.name, f))
    sec.links += [Link(f"lcov view ({p.parent.name})", p)
                  for p in find(root, ("index.html",)) if "cov" in str(p.parent.relative_to(root))]
    return sec if sec.grids or sec.links else None


def all_sections(root: Path, sides: Sides) -> list[Section]:
    made = [judges(sides), explore(sides), ztsruns(sides), coverage(root), timings(sides),
            perf(sides)]
    return [s for s in made if s is not None]
