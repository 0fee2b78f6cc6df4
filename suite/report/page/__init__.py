"""One report design for every run, rendered three ways.

``kinds`` reads any results folder (a plain pytest run, a gate, merged shards,
``suite bugs``) into a ``model.Page``: the verdict first, the builds, what ran and
how long it took, every case with its tables and files (failed first), and the
parts only some runs have (``sections``). ``render_html`` makes the self-contained
``report.html``, ``render_md`` the step summary (``summary.md``; ``gate.md`` for a
gate), ``render_junit`` the JUnit XML. ``suite gate``, ``suite merge``, the end of a
plain pytest run and ``python -m suite report`` all write through ``write``.
"""
from __future__ import annotations

import time
from pathlib import Path

from suite.report import zts
from suite.report.page.kinds import load, resolve
from suite.report.page.model import Page
from suite.report.page.render_html import page_html
from suite.report.page.render_junit import junit
from suite.report.page.render_md import markdown

__all__ = ["Page", "load", "resolve", "write", "markdown_name", "page_html", "markdown",
           "junit", "verdict_line"]


def markdown_name(page: Page) -> str:
    return "gate.md" if page.kind == "gate" else "summary.md"


def write(page: Page, out_dir: Path | None = None, with_junit: bool = True) -> list[Path]:
    """report.html, the markdown and (``with_junit``) junit.xml in ``out_dir``
    (default: the results folder itself, so every link stays inside it)."""
    out_dir = (out_dir or page.root).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path, md_path = out_dir / "report.html", out_dir / markdown_name(page)
    html_path.write_text(page_html(page, out_dir, time.strftime("%Y-%m-%d %H:%M:%S %Z")))
    md_path.write_text(markdown(page, out_dir))
    files = [html_path, md_path]
    if with_junit:
        xml = out_dir / "junit.xml"
        junit(page, out_dir).write(xml, encoding="unicode", xml_declaration=True)
        for side, sessions in page.sessions:        # each ZTS test under its own id
            zts.fold_into_junit(xml, [f for s in sessions
                                      for f in sorted(s.glob(f"cases/*/{zts.RESULTS_FILE}"))],
                                label=side if len(page.sessions) > 1 else "")
        files.append(xml)
    return files


def verdict_line(page: Page) -> str:
    v = page.verdict
    return f"{v.word}: {page.subject}: {v.headline} (exit {v.exit_code})"
