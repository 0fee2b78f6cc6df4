"""Benchmark tables: numbers a maintainer puts side by side, with their ratio.

A table has one row per cell (``row`` labels) and one column per compared
condition (``side``: e.g. ``dio=0`` / ``dio=1``, or ``async=0`` / ``async=1``),
for each metric; the ratio column divides the second side by the first. Every
table names the accelerator: under TCG only ratios inside one run mean
anything. Written as JSON, markdown and (with matplotlib) a PNG bar chart.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRICS = {"bw_mib_s": "MiB/s", "iops": "IOPS", "p99_lat_us": "p99 µs",
           "cpu_s_per_gib": "CPU s/GiB", "copy_share": "copy % of busy"}
TCG_NOTE = ("accelerator TCG: the CPU is emulated, so absolute numbers say nothing about "
            "hardware; compare the sides of one row, inside this run only")


@dataclass
class PerfTable:
    title: str
    accel: str
    sides: tuple[str, str]                   # (baseline, compared)
    cells: list[dict[str, Any]] = field(default_factory=list)   # CellResult.to_dict()
    notes: list[str] = field(default_factory=list)
    row_keys: tuple[str, ...] = ("rw", "bs", "iodepth", "numjobs", "ioengine")
    side_key: str = "side"

    def add(self, cell: dict[str, Any]) -> None:
        self.cells.append(cell)

    def _row(self, labels: dict[str, Any]) -> str:
        return " ".join(f"{labels[k]}" if k in ("rw", "bs", "ioengine") else f"{k}={labels[k]}"
                        for k in self.row_keys if k in labels)

    def grid(self) -> dict[str, dict[str, dict[str, Any]]]:
        """row -> side -> cell."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for c in self.cells:
            lab = c["labels"]
            out.setdefault(self._row(lab), {})[str(lab.get(self.side_key))] = c
        return out

    @staticmethod
    def ratio(a: Any, b: Any) -> float | None:
        return round(b / a, 2) if isinstance(a, (int, float)) and isinstance(b, (int, float)) \
            and a else None

    def markdown(self) -> str:
        a, b = self.sides
        head = ["cell"]
        for m in METRICS.values():
            head += [f"{m} {a}", f"{m} {b}", f"{m} {b}/{a}"]
        lines = [f"**{self.title}** ({self.accel})", "", "| " + " | ".join(head) + " |",
                 "|" + "---|" * len(head)]
        for row, sides in self.grid().items():
            vals = [row]
            for key in METRICS:
                x = (sides.get(a) or {}).get(key)
                y = (sides.get(b) or {}).get(key)
                r = self.ratio(x, y)
                vals += [_fmt(x), _fmt(y), _fmt(r)]
            lines.append("| " + " | ".join(vals) + " |")
        errors = [f"{self._row(c['labels'])} {c['labels'].get(self.side_key)}: {c['error']}"
                  for c in self.cells if c.get("error")]
        notes = list(self.notes) + ([TCG_NOTE] if self.accel.lower() == "tcg" else [])
        lines += [""] + [f"- {n}" for n in notes] + [f"- **cell failed** {e}" for e in errors]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"title": self.title, "accel": self.accel, "sides": self.sides,
                           "notes": self.notes, "cells": self.cells}, indent=1, default=str)

    def chart(self, path: Path) -> Path | None:
        """Bars per row: MiB/s of each side, and CPU s/GiB beside it. None
        without matplotlib (the JSON and markdown are written anyway)."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        grid = self.grid()
        rows = list(grid)
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 0.6 * len(rows) + 4), 5))
        for ax, key, label in ((axes[0], "bw_mib_s", "MiB/s"),
                               (axes[1], "cpu_s_per_gib", "CPU s per GiB")):
            w = 0.4
            for i, side in enumerate(self.sides):
                ys = [(grid[r].get(side) or {}).get(key) or 0 for r in rows]
                ax.bar([x + i * w for x in range(len(rows))], ys, w, label=side)
            ax.set_xticks([x + w / 2 for x in range(len(rows))])
            ax.set_xticklabels(rows, rotation=60, ha="right", fontsize=7)
            ax.set_ylabel(label)
            ax.legend()
        fig.suptitle(f"{self.title} ({self.accel})", fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return path

    def write(self, directory: Path, stem: str) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        out = [directory / f"{stem}.json", directory / f"{stem}.md"]
        out[0].write_text(self.to_json() + "\n")
        out[1].write_text(self.markdown() + "\n")
        png = self.chart(directory / f"{stem}.png")
        if png:
            out.append(png)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a") as f:
                f.write(self.markdown() + "\n\n")
        return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)
