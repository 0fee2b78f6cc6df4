"""The report as a person meets it: drawn by headless Chromium at a desktop's width
(1200 px) and a phone's (420 px). A page that does not draw, or that makes its
reader scroll sideways, fails. Each page is drawn once per session (the CI machine
has two cores); the screenshots are kept under pytest's tmp dir and, with
``OZFS_VMCI_SCREENSHOTS=DIR``, copied there for a person to look at."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import browser
import pytest
from reportdirs import passing_run, session
from test_report_page import make_gate, shard

from suite.report import page
from suite.campaign.merge import merge
from suite.report.runreport import write_reports

WIDTHS = (1200, 420)
HEIGHT = 1400


def build(name: str, root: Path) -> Path:
    """The report.html of one kind of run, written where that run writes it."""
    if name == "plain-pass":
        s = passing_run(root)
        page.write(page.load(s), with_junit=False)
        return s / "report.html"
    if name == "gate-fail":
        write_reports(make_gate(root / "gate-20260101-100000"))
        return root / "gate-20260101-100000" / "report.html"
    if name == "merged-inconclusive":
        one = shard(root / "shards", "shard1", {
            "cases/test_dio_eof.py::test_eof_tail[a]": "passed",
            "cases/test_dio_preadv.py::test_preadv_aligned[libaio-segs16-strict1]": "failed"})
        merge([one, root / "shards" / "shard2"], root / "merged", expected=2)
        return root / "merged" / "report.html"
    s = session(root)                                   # "nothing-tested"
    page.write(page.load(s), with_junit=False)
    return s / "report.html"


PAGES = ("plain-pass", "gate-fail", "merged-inconclusive", "nothing-tested")


@dataclass
class Drawn:
    html: Path
    shots: dict[int, Path]
    widths: dict[int, browser.Widths]


@pytest.fixture(scope="session")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Drawn]:
    """Each page rendered, drawn and measured once per session, when first asked for."""
    browser.chromium()                                  # skips, naming the package
    done: dict[str, Drawn] = {}
    keep = os.environ.get("OZFS_VMCI_SCREENSHOTS")

    def get(name: str) -> Drawn:
        if name not in done:
            root = tmp_path_factory.mktemp(name)
            html = build(name, root)
            shots = {w: browser.screenshot(html, root / f"{name}-{w}.png", w, HEIGHT)
                     for w in WIDTHS}
            done[name] = Drawn(html, shots, {w: browser.widths(html, w) for w in WIDTHS})
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                for png in shots.values():
                    shutil.copy2(png, Path(keep) / png.name)
        return done[name]
    return get


def distinct_colours(png: Path) -> int:
    """How many colours a screenshot has (0 when Pillow is absent: not checked)."""
    try:
        from PIL import Image
    except ImportError:
        return 0
    with Image.open(png) as im:
        return len(im.convert("RGB").getcolors(1 << 20) or [])


@pytest.mark.parametrize("name", PAGES)
def test_the_report_draws_at_desktop_and_phone_widths(drawn, name: str):
    d = drawn(name)
    for width, png in d.shots.items():
        assert png.stat().st_size > 8000, f"{png.name}: a blank page?"
        colours = distinct_colours(png)
        assert colours == 0 or colours > 20, f"{png.name}: {colours} colours: nothing drawn"
        try:
            from PIL import Image
        except ImportError:
            continue
        with Image.open(png) as im:
            assert im.size == (width, HEIGHT)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", PAGES)
def test_the_report_never_scrolls_sideways(drawn, name: str, width: int):
    w = drawn(name).widths[width]
    assert w.inner == width
    assert not w.overflows, f"{name} at {width} px is {w.scroll} px wide: it scrolls sideways"


def test_the_sideways_check_sees_a_page_that_overflows(tmp_path: Path):
    """The measure itself: a page with a line that cannot wrap is caught."""
    browser.chromium()
    bad = tmp_path / "wide.html"
    bad.write_text("<!doctype html><html><body><p style='white-space:nowrap'>"
                   + "cases/test_zvol_shapes.py::test_zvol_shape " * 20 + "</p></body></html>")
    assert browser.widths(bad, 420).overflows
