"""The page as one self-contained HTML file (``report.html``): no network, no script,
charts embedded as ``data:`` URIs, links relative to the folder it is written in.

Readable from a phone's width to a desktop's without scrolling the page sideways:
long ids wrap anywhere, wide tables scroll inside their own box, preformatted text
scrolls inside a box of bounded height. A passing case's tables are collapsed, a
failing case's open.
"""
from __future__ import annotations

import base64
import html
import os
import re
from pathlib import Path
from urllib.parse import quote

from suite.report.page.model import Case, Cell, Grid, Link, Page, Section

CHART_MAX = 4 << 20                      # bytes of one PNG embedded
SHORT = 30                               # characters of a cell kept on one line
NUMBER = re.compile(r"[-+]?[\d.,]+( s| min| h|%)?")

CSS = """
:root{--fail:#b42318;--failbg:#fef3f2;--inc:#b54708;--incbg:#fffaeb;--pass:#067647;
--passbg:#ecfdf3;--skip:#475467;--skipbg:#f2f4f7;--line:#d0d5dd;--muted:#667085}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:#f6f7f9;color:#101828;
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1200px;margin:0 auto;padding:14px}
h1{font-size:1.3em;margin:.1em 0 .2em;overflow-wrap:anywhere}
h2{font-size:1.12em;margin:1.6em 0 .6em;padding-bottom:.2em;border-bottom:1px solid var(--line)}
h3,h4{font-size:1em;margin:1em 0 .4em}
p,li{overflow-wrap:anywhere}
a{color:#175cd3}
code,.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,monospace;font-size:.9em;
overflow-wrap:anywhere;word-break:break-word}
.verdict{border-left:8px solid;border-radius:8px;padding:12px 16px;background:#fff}
.verdict .word{font-size:1.6em;font-weight:800;letter-spacing:.04em}
.verdict .headline{font-size:1.1em;font-weight:600;margin:.2em 0}
.verdict ul{margin:.4em 0 0;padding-left:1.2em}
.fail.verdict{border-color:var(--fail);background:var(--failbg)}.fail .word{color:var(--fail)}
.inconclusive.verdict{border-color:var(--inc);background:var(--incbg)}
.inconclusive .word{color:var(--inc)}
.pass.verdict{border-color:var(--pass);background:var(--passbg)}.pass .word{color:var(--pass)}
.meta{color:var(--muted);font-size:.9em;margin:.4em 0 0;overflow-wrap:anywhere}
nav{display:flex;flex-wrap:wrap;gap:.2em 1em;margin:.8em 0;font-size:.92em}
.scroll{overflow-x:auto;max-width:100%;margin:.4em 0}
table{border-collapse:collapse;background:#fff;font-size:.93em}
th,td{border:1px solid var(--line);padding:3px 7px;text-align:left;vertical-align:top}
td.nw,td.num{white-space:nowrap}td.long{min-width:12em;overflow-wrap:anywhere}
th{background:#f2f4f7;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.builds tr>:first-child{white-space:nowrap}.builds td{white-space:normal;overflow-wrap:anywhere}
table.cases td:nth-child(2){min-width:14em}
.kv th{white-space:nowrap}
.badge{display:inline-block;border-radius:4px;padding:0 6px;font-size:.85em;font-weight:700;
white-space:nowrap;color:#fff;background:var(--skip)}
.b-fail{background:var(--fail)}.b-inconclusive,.b-flaky{background:var(--inc)}
.b-pass{background:var(--pass)}.b-known{background:#6941c6}
tr.s-fail td,tr.s-inconclusive td,tr.s-flaky td{background:#fffbfa}
details{background:#fff;border:1px solid var(--line);border-radius:6px;margin:.45em 0;
padding:.35em .7em;min-width:0}
details.s-fail,details.s-inconclusive{border-left:5px solid var(--fail)}
details.s-flaky{border-left:5px solid var(--inc)}
summary{cursor:pointer;overflow-wrap:anywhere}
summary .why{color:var(--muted)}summary .where{font-weight:600}
@media (max-width:640px){
table.cases,table.cases tbody,table.cases tr,table.cases td{display:block;border:0}
table.cases tr:first-child{display:none}
table.cases tr{border:1px solid var(--line);border-radius:6px;margin:.4em 0;padding:.3em .5em;
background:#fff}
table.cases td{padding:1px 0;white-space:normal;text-align:left}
table.cases td:empty{display:none}
table.cases td[data-label]::before{content:attr(data-label) ": ";color:var(--muted)}
table.cases td:nth-child(2){min-width:0}}
pre{background:#f2f4f7;border:1px solid var(--line);border-radius:4px;padding:8px;
overflow:auto;max-height:26em;max-width:100%;font-size:12px;line-height:1.35;white-space:pre}
.links{font-size:.92em}.links a{margin-right:.6em;white-space:nowrap;display:inline-block;
max-width:100%;overflow:hidden;text-overflow:ellipsis;vertical-align:bottom}
figure{margin:.6em 0}img{max-width:100%;height:auto;border:1px solid var(--line)}
footer{color:var(--muted);font-size:.85em;margin:2em 0 1em}
"""


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def href(path: Path, out_dir: Path) -> str:
    return quote(Path(os.path.relpath(path, out_dir)).as_posix())


def inline(text: str) -> str:
    """Escape, then our markdown's inline marks: `code` and **bold**."""
    out = esc(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def split_row(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def td(text: str, content: str, label: str = "") -> str:
    """A cell: numbers right-aligned, short phrases kept on one line (the table scrolls
    in its box rather than break them), long ones wrapped in a column of some width;
    ``label`` names the column where a narrow screen shows rows as cards."""
    data = f" data-label='{esc(label)}'" if label else ""
    if NUMBER.fullmatch(text):
        return f"<td class=num{data}>{content}</td>"
    return f"<td class={'nw' if len(text) <= SHORT else 'long'}{data}>{content}</td>"


def md_table(lines: list[str]) -> str:
    rows = [split_row(ln) for ln in lines if not re.fullmatch(r"\|?[\s:|-]+\|?", ln.strip())]
    if not rows:
        return ""
    head = "".join(f"<th>{inline(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(td(c, inline(c)) for c in r) + "</tr>" for r in rows[1:])
    return f"<div class=scroll><table><tr>{head}</tr>{body}</table></div>"


def md_html(md: str) -> str:
    """Our own markdown (tables, bold titles, notes, ZTS blocks) as HTML."""
    out, table, items = [], [], []

    def flush() -> None:
        if table:
            out.append(md_table(table))
            table.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
            items.clear()
    for line in md.splitlines():
        s = line.strip()
        if s.startswith("|"):
            if items:
                flush()
            table.append(s)
            continue
        if s.startswith("- "):
            if table:
                flush()
            items.append(s[2:])
            continue
        flush()
        if not s:
            continue
        m = re.match(r"(#{1,6})\s+(.*)", s)
        out.append(f"<h4>{inline(m[2])}</h4>" if m else f"<p>{inline(s)}</p>")
    flush()
    return "".join(out)


def cell(c: Cell, out_dir: Path) -> str:
    if isinstance(c, Link):
        return f"<td class=nw><a href='{href(c.path, out_dir)}'>{esc(c.label)}</a></td>"
    return td(str(c), esc(c))


def grid(g: Grid, out_dir: Path, cls: str = "") -> str:
    title = f"<h4>{esc(g.title)}</h4>" if g.title else ""
    head = "".join(f"<th>{esc(h)}</th>" for h in g.header)
    rows = "".join("<tr>" + "".join(cell(c, out_dir) for c in r) + "</tr>" for r in g.rows)
    return (f"{title}<div class=scroll><table{f' class={cls}' if cls else ''}><tr>{head}</tr>"
            f"{rows}</table></div>")


def kv(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{esc(k)}</th>{td(v, esc(v))}</tr>" for k, v in rows)
    return f"<div class=scroll><table class=kv>{body}</table></div>"


def links(ls: list[Link], out_dir: Path) -> str:
    if not ls:
        return ""
    return ("<p class=links>open: " + " ".join(
        f"<a href='{href(x.path, out_dir)}'>{esc(x.label)}</a>" for x in ls) + "</p>")


def badge(status: str, label: str) -> str:
    return f"<span class='badge b-{esc(status)}'>{esc(label)}</span>"


def verdict(page: Page) -> str:
    v = page.verdict
    reasons = "".join(f"<li>{esc(r)}</li>" for r in v.reasons[:30])
    more = f"<li>... and {len(v.reasons) - 30} more below</li>" if len(v.reasons) > 30 else ""
    return (f"<header class='verdict {esc(v.status)}'><div class=word>{esc(v.word)}</div>"
            f"<h1>{esc(page.subject)}</h1><p class=headline>{esc(v.headline)}</p>"
            f"{f'<ul>{reasons}{more}</ul>' if reasons else ''}"
            f"<p class=meta>exit {v.exit_code} · {len(page.cases)} case(s) · results folder "
            f"<code>{esc(page.root.name)}</code></p></header>")


def builds(page: Page) -> str:
    if not page.builds:
        return "<p>No build record in this folder.</p>"
    caps = page.capabilities()
    return grid(page.builds_grid(), page.root, "builds") + (
        grid(caps, page.root, "builds") if caps else "")


def case_table(page: Page, out_dir: Path) -> str:
    head = ("", "case", "class" if page.kind == "gate" else "outcome", *page.sides, "why")
    rows = []
    for i, c in enumerate(page.ordered_cases()):
        results = [next((s.result for s in c.sides if s.side == side), "") for side in page.sides]
        rows.append(f"<tr class='s-{esc(c.status)}'><td>{badge(c.status, c.status)}</td>"
                    f"<td><a href='#case-{i}'><code>{esc(c.nodeid)}</code></a></td>"
                    + "".join(td(x, esc(x), h) for x, h in zip((c.label, *results, c.why),
                                                               head[2:])) + "</tr>")
    heads = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f"<div class=scroll><table class=cases><tr>{heads}</tr>{''.join(rows)}</table></div>"


def case_details(i: int, c: Case, page: Page, out_dir: Path) -> str:
    multi = len(page.sides) > 1
    parts = []
    if c.extra_symptoms():
        parts.append("<ul>" + "".join(f"<li>{esc(s)}</li>"
                                      for s in c.extra_symptoms()[:20]) + "</ul>")
    if c.evidence and c.failing:
        parts.append(f"<h4>evidence</h4><pre>{esc(c.evidence)}</pre>")
    if c.output and c.failing:
        parts.append(f"<pre>{esc(c.output)}</pre>")
    for t in c.tables:
        side = f"<p class=meta>{esc(t.side)}</p>" if multi and t.side else ""
        parts.append(side + md_html(t.markdown))
    parts.append(links(c.links, out_dir))
    where = " · ".join(f"{s.side}: {s.result}" if multi else s.result
                       for s in c.sides) if page.sides else ""
    where = f" <span class=where>{esc(where)}</span>" if where else ""
    why = f" <span class=why>{esc(c.why)}</span>" if c.why else ""
    return (f"<details id=case-{i} class='s-{esc(c.status)}'{' open' if c.failing else ''}>"
            f"<summary>{badge(c.status, c.label)} <code>{esc(c.nodeid)}</code>{where}{why}"
            f"</summary>{''.join(parts)}</details>")


def chart(png: Path) -> str:
    try:
        data = png.read_bytes()
    except OSError:
        return ""
    if len(data) > CHART_MAX:
        return f"<p>{esc(png.name)}: {len(data) >> 20} MiB, too large to embed</p>"
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    return f"<img alt='{esc(png.stem)}' src='{uri}'>"


def section(s: Section, out_dir: Path) -> str:
    parts = [f"<section id='{esc(s.key)}'><h2>{esc(s.title)}</h2>"]
    parts += [f"<p>{esc(p)}</p>" for p in s.intro]
    parts += [grid(g, out_dir) for g in s.grids]
    parts += [md_html(md) for md in s.markdown]
    parts += [f"<h4>{esc(label)}</h4><pre>{esc(text)}</pre>" for label, text in s.texts]
    parts += [f"<figure>{chart(c.png)}<figcaption>{esc(c.title)}</figcaption></figure>"
              for c in s.charts]
    parts.append(links(s.links, out_dir))
    return "".join(parts) + "</section>"


def page_html(page: Page, out_dir: Path | None = None, generated: str = "") -> str:
    out_dir = out_dir or page.root
    cases = page.ordered_cases()
    nav = [(s.key, s.title) for s in page.lead_sections()]
    nav += [("builds", "Builds"), ("ran", "What ran"), ("cases", f"Cases ({len(cases)})")]
    nav += [(s.key, s.title) for s in page.other_sections()]
    body = [verdict(page),
            "<nav>" + "".join(f"<a href='#{k}'>{esc(t)}</a>" for k, t in nav) + "</nav>",
            *(section(s, out_dir) for s in page.lead_sections()),
            f"<section id=builds><h2>Builds</h2>{builds(page)}</section>",
            "<section id=ran><h2>What ran</h2>" + kv(page.selection) +
            (grid(Grid(("side", "time"), list(page.times)), out_dir) if page.times else "")
            + "</section>",
            f"<section id=cases><h2>Cases ({len(cases)}), failed first</h2>"]
    if cases:
        body.append(case_table(page, out_dir))
        body += [case_details(i, c, page, out_dir) for i, c in enumerate(cases)]
    else:
        body.append("<p>No case ran.</p>")
    body.append("</section>")
    body += [section(s, out_dir) for s in page.other_sections()]
    body.append(f"<footer>python -m suite report {esc(page.root.name)}"
                f"{' · ' + esc(generated) if generated else ''}</footer>")
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width,initial-scale=1'>"
            f"<title>{esc(page.verdict.word)}: {esc(page.subject)}</title>"
            f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>\n")
