"""The page as markdown, for ``$GITHUB_STEP_SUMMARY`` and ``summary.md``/``gate.md``.

Most important first (verdict, builds, what ran, the failing cases with their
tables and files, every case, the findings, then the passing cases' tables), and
cut to stay under GitHub's 1 MiB step summary limit with a margin: what was cut,
and where the full report is, is said where the cut is.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from suite.report.page.model import Case, Cell, Grid, Link, Page, Section

LIMIT = 900 * 1024                       # bytes; GitHub refuses a step summary over 1 MiB
NOTE_RESERVE = 4 * 1024
CASE_TABLES_MAX = 32 * 1024              # one case's tables in the summary
ROWS_PER_BLOCK = 200
REASONS_SHOWN = 15


def rel(path: Path, out_dir: Path) -> str:
    return Path(os.path.relpath(path, out_dir)).as_posix()


def cell(c: Cell, out_dir: Path) -> str:
    if isinstance(c, Link):
        return f"`{rel(c.path, out_dir)}`"
    return " ".join(str(c).split()).replace("|", "\\|") or " "


def grid(g: Grid, out_dir: Path) -> str:
    lines = [f"**{g.title}**", ""] if g.title else []
    lines += ["| " + " | ".join(g.header) + " |", "|" + "---|" * len(g.header)]
    lines += ["| " + " | ".join(cell(c, out_dir) for c in row) + " |" for row in g.rows]
    return "\n".join(lines)


def fence(text: str) -> str:
    return "```text\n" + text.replace("```", "'''").rstrip() + "\n```"


def heading(page: Page) -> str:
    v = page.verdict
    return f"## ozfs-vmci: {v.word} — {page.subject}: **{v.headline}** (exit {v.exit_code})"


def verdict_block(page: Page) -> str:
    lines = [heading(page), ""]
    reasons = page.verdict.reasons
    lines += [f"- {r}" for r in reasons[:REASONS_SHOWN]]
    if len(reasons) > REASONS_SHOWN:
        lines.append(f"- ... and {len(reasons) - REASONS_SHOWN} more (see below)")
    return "\n".join(lines)


def builds_block(page: Page) -> str:
    out = ["### Builds", "", grid(page.builds_grid(), page.root)]
    caps = page.capabilities()
    if caps:
        out += ["", grid(caps, page.root)]
    return "\n".join(out)


def ran_block(page: Page) -> str:
    rows = [*page.selection, *((f"time: {s}", t) for s, t in page.times)]
    return "### What ran\n\n" + grid(Grid(("", ""), rows), page.root)


def case_tables_md(c: Case, multi: bool) -> str:
    parts, size = [], 0
    for t in c.tables:
        text = (f"*{t.side}*\n\n" if multi and t.side else "") + t.markdown
        if size + len(text) > CASE_TABLES_MAX:
            parts.append(f"*(more tables cut here: see `{t.source.name}` and the report)*")
            break
        parts.append(text)
        size += len(text)
    return "\n\n".join(parts)


def failing_block(c: Case, page: Page, out_dir: Path) -> str:
    lines = [f"### {c.label}: `{c.nodeid}`", "", c.why or "(no reason recorded)", ""]
    if page.sides:
        lines += [" · ".join(f"{s.side}: {s.result}" for s in c.sides), ""]
    lines += [f"- symptom: {s}" for s in c.extra_symptoms()[:10]]
    tables = case_tables_md(c, len(page.sides) > 1)
    if tables:
        lines += ["", tables]
    if c.evidence:
        lines += ["", "evidence:", fence(c.evidence)]
    elif c.output:
        lines += ["", fence(c.output[-3000:])]
    if c.links:
        lines += ["", files_line(c.links, out_dir)]
    return "\n".join(lines)


def files_line(links: list[Link], out_dir: Path) -> str:
    """``open in `<case folder>/`: `table-1.txt`, `commands.log` ...``, a folder once."""
    groups: dict[str, list[str]] = {}
    for x in links:
        name = x.label.rpartition(": ")[2]          # the path inside the case folder
        folder = x.path.parents[len(Path(name).parts) - 1]
        groups.setdefault(rel(folder, out_dir), []).append(f"`{name}`")
    return "open " + "; ".join(f"in `{d}/`: {', '.join(names)}" for d, names in groups.items())


def case_rows(page: Page) -> list[tuple[str, ...]]:
    return [(f"`{c.nodeid}`", c.label, *(next((s.result for s in c.sides if s.side == side),
                                              "") for side in page.sides),
             cell(c.why, page.root)) for c in page.ordered_cases()]


def case_list_blocks(page: Page) -> list[tuple[str, str]]:
    head = ("case", "class" if page.kind == "gate" else "outcome", *page.sides, "why")
    rows = case_rows(page)
    out = []
    for i in range(0, len(rows), ROWS_PER_BLOCK):
        top = [f"### Every case ({len(rows)})", ""] if i == 0 else []
        body = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        body += ["| " + " | ".join(r) + " |" for r in rows[i:i + ROWS_PER_BLOCK]]
        out.append(("rows of the case list", "\n".join(top + body)))
    return out


def section_block(s: Section, out_dir: Path) -> str:
    lines = [f"### {s.title}", ""]
    lines += [f"{p}  " for p in s.intro]
    for g in s.grids:
        lines += ["", grid(g, out_dir)]
    for md in s.markdown:
        lines += ["", md.strip()]
    for label, text in s.texts:
        lines += ["", f"*{label}*", fence(text)]
    if s.charts:
        lines += ["", "charts (in report.html): " + ", ".join(
            f"`{rel(c.png, out_dir)}`" for c in s.charts)]
    if s.links:
        lines += ["", "files: " + ", ".join(f"`{rel(x.path, out_dir)}`" for x in s.links)]
    return "\n".join(lines)


def passing_block(c: Case, page: Page) -> str:
    return (f"<details><summary>{c.label}: <code>{c.nodeid}</code></summary>\n\n"
            f"{case_tables_md(c, len(page.sides) > 1)}\n\n</details>")


def blocks(page: Page, out_dir: Path) -> list[tuple[str, str]]:
    """(what it is, markdown) in the order a maintainer needs them."""
    cases = page.ordered_cases()
    out = [("verdict", verdict_block(page))]
    out += [(f"section '{s.title}'", section_block(s, out_dir)) for s in page.lead_sections()]
    if page.builds:
        out.append(("builds", builds_block(page)))
    out.append(("what ran", ran_block(page)))
    out += [("failing cases' details", failing_block(c, page, out_dir))
            for c in cases if c.failing]
    out += case_list_blocks(page)
    out += [(f"section '{s.title}'", section_block(s, out_dir)) for s in page.other_sections()]
    out += [("passing cases' tables", passing_block(c, page))
            for c in cases if not c.failing and c.tables]
    return out


def fit(parts: list[tuple[str, str]], limit: int, where: str) -> str:
    """The parts in order while they fit under ``limit`` bytes; then a note."""
    kept, size = [], 0
    for i, (what, text) in enumerate(parts):
        n = len(text.encode()) + 2
        if size + n > limit - NOTE_RESERVE:
            cut = Counter(w for w, _ in parts[i:])
            kept.append("---\n\n**Cut here** to stay under GitHub's 1 MiB step summary limit: "
                        "left out " + ", ".join(f"{k} ({v})" for k, v in cut.items())
                        + f". The full report is {where}.")
            break
        kept.append(text)
        size += n
    return "\n\n".join(kept) + "\n"


def markdown(page: Page, out_dir: Path | None = None, limit: int = LIMIT,
             where: str = "") -> str:
    out_dir = out_dir or page.root
    where = where or f"`report.html` in the results folder `{out_dir.name}` (the run's artifact)"
    return fit(blocks(page, out_dir), limit, where)
