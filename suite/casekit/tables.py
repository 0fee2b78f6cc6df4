"""Reports: condition x outcome tables, like the ones reviewers post.

Each table is written to the results folder as text, markdown and JSON, and
kept for the end-of-run console summary (see ``suite/plugin/hooks.py``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from suite.casekit.trials import COLUMNS


@dataclass
class Table:
    title: str
    rows: dict[str, dict[str, int]]
    columns: tuple[str, ...] = COLUMNS
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)   # rows/cells that fail the case

    def cells(self) -> list[list[str]]:
        head = ["condition", *self.columns]
        body = [[cond, *(str(r.get(c, 0)) for c in self.columns)]
                for cond, r in self.rows.items()]
        return [head, *body]

    def text(self) -> str:
        cells = self.cells()
        widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
        lines = [self.title]
        for n, row in enumerate(cells):
            lines.append("  " + "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                                          for i, (v, w) in enumerate(zip(row, widths))))
            if n == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  FAIL: {f}" for f in self.failures]
        return "\n".join(lines)

    def markdown(self) -> str:
        cells = self.cells()
        out = [f"**{self.title}**", "",
               "| " + " | ".join(cells[0]) + " |",
               "|" + "---|" * len(cells[0])]
        out += ["| " + " | ".join(r) + " |" for r in cells[1:]]
        out += [""] + [f"- {n}" for n in self.notes] + [f"- **FAIL** {f}" for f in self.failures]
        return "\n".join(out)

    def write(self, directory: Path, stem: str) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        files = [directory / f"{stem}.txt", directory / f"{stem}.md", directory / f"{stem}.json"]
        files[0].write_text(self.text() + "\n")
        files[1].write_text(self.markdown() + "\n")
        files[2].write_text(json.dumps({"title": self.title, "columns": list(self.columns),
                                        "rows": self.rows, "notes": self.notes,
                                        "failures": self.failures}, indent=2) + "\n")
        return files
