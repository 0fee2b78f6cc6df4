"""``python -m suite merge``: N shards' results, one verdict.

Each shard runner (``--shard i/N``) leaves a results folder with its ``junit.xml``
and its cases' folders. The merge copies each into ``<out>/shards/<name>/`` (without
guest disks and engine plans), so the merged artifact carries every file its report
links to, then writes one ``junit.xml``, one ``summary.md`` (verdict first, for the
step summary), one self-contained ``report.html`` (``suite/report/page``) and
``verdict.json``, and decides:

- **inconclusive** when a shard is missing, left no JUnit, or ran no case: the
  part of the selection it held was never tested, so it cannot be green;
- **fail** when a case failed with a finding (a guest judge fails at teardown);
- **pass** otherwise.

Exit codes: 0 pass, 1 fail, 2 inconclusive.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from suite.report import page as report_page
from suite.report.page.kinds import SHARDS_DIR, merged

NOT_COPIED = shutil.ignore_patterns("vms", "engine", "*.img", "report.html")


def copy_shards(sources: list[Path], out: Path) -> list[Path]:
    """Each shard's folder under ``<out>/shards/`` (a name taken twice gets a suffix);
    a shard that never arrived keeps its name, with no folder."""
    dests: list[Path] = []
    for src in sources:
        dest = out / SHARDS_DIR / src.name
        n = 2
        while dest in dests:
            dest, n = out / SHARDS_DIR / f"{src.name}-{n}", n + 1
        if src.is_dir() and src.resolve() != dest.resolve():
            shutil.copytree(src, dest, ignore=NOT_COPIED, dirs_exist_ok=True)
        dests.append(dest)
    return dests


OUTCOMES = ("passed", "failed", "error", "skipped")


def shard_record(page: report_page.Page, shard: Path) -> dict:
    """A shard's line of ``verdict.json``: its problem (as the page's shards table
    says it) and its cases' outcomes."""
    table = next(s.grids[0] for s in page.sections if s.key == "shards")
    note = next((str(r[-1]) for r in table.rows if r[0] == shard.name), "")
    mine = [c for c in page.cases if c.group == shard.name]
    return {"name": shard.name, "folder": str(shard), "problem": note,
            "counts": {o: sum(c.label == o for c in mine) for o in OUTCOMES}}


def merge(sources: list[Path], out: Path, expected: int = 0) -> int:
    out.mkdir(parents=True, exist_ok=True)
    shards = copy_shards(sources, out)
    page = merged(out, shards, expected or len(sources))
    files = report_page.write(page, out)
    (out / "verdict.json").write_text(json.dumps(
        {"verdict": page.verdict.status, "why": page.verdict.reasons,
         "expected": expected or len(sources),
         "shards": [shard_record(page, s) for s in shards]}, indent=1) + "\n")
    print(f"{report_page.verdict_line(page)}\nreports: {' '.join(map(str, files))}")
    return page.verdict.exit_code
