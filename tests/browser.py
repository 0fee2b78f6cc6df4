"""Headless Chromium for the report self-tests: a screenshot of a page at a width,
and whether the page scrolls sideways there (a report a maintainer must scroll
sideways to read fails its test).

Debian's ``chromium`` package (``ci/setup.sh`` installs it); without it the tests
that need it skip and name the package.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", "--disable-extensions", "--mute-audio",
         "--allow-file-access-from-files")   # the frame below reads the page it shows
TIMEOUT = 120
MIN_WINDOW = 500                 # headless Chromium draws no window narrower than this
# The page in a frame exactly as wide as the screen asked for: its own viewport (media
# queries, innerWidth) at any width, even below the window's minimum.
FRAME = """<!doctype html><html><head><meta charset=utf-8></head>
<body style="margin:0;background:#fff"><iframe id=page src="{src}" scrolling=no
style="border:0;display:block;width:{width}px;height:{height}px"></iframe>{script}</body></html>"""
MEASURE = """<script>
window.addEventListener('load', function () {
  var f = document.getElementById('page'), d = f.contentDocument.documentElement;
  var out = document.createElement('pre');
  out.id = 'ozfs-measure';
  out.textContent = 'scrollWidth=' + d.scrollWidth + ' innerWidth=' + f.contentWindow.innerWidth;
  document.body.appendChild(out);
});
</script>"""
MEASURED = re.compile(r"scrollWidth=(\d+) innerWidth=(\d+)")


def chromium() -> str:
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(n)), None)
    if exe is None:
        pytest.skip("headless Chromium is not installed: apt-get install -y "
                    "--no-install-recommends chromium (ci/setup.sh installs it)")
    return exe


def framed(page: Path, width: int, height: int, script: str = "") -> Path:
    """A page beside ``page`` that shows it in a ``width`` x ``height`` frame."""
    out = page.with_name(f".frame-{width}x{height}-{page.name}")
    out.write_text(FRAME.format(src=page.name, width=width, height=height, script=script))
    return out


def run(page: Path, width: int, height: int, *args: str) -> subprocess.CompletedProcess:
    window = f"--window-size={max(width, MIN_WINDOW)},{height}"
    return subprocess.run([chromium(), *FLAGS, window, *args, page.as_uri()],
                          capture_output=True, text=True, timeout=TIMEOUT)


def crop(png: Path, width: int) -> None:
    """Cut a screenshot of a window wider than the frame down to the frame."""
    try:
        from PIL import Image
    except ImportError:                 # the frame is there; the margin stays
        return
    with Image.open(png) as im:
        if im.width > width:
            im.crop((0, 0, width, im.height)).save(png)


def screenshot(page: Path, png: Path, width: int, height: int = 900) -> Path:
    """The page as Chromium draws it on a screen ``width`` x ``height``."""
    frame = framed(page, width, height)
    try:
        r = run(frame, width, height, f"--screenshot={png}")
    finally:
        frame.unlink(missing_ok=True)
    assert png.exists(), f"chromium drew no screenshot of {page}: {r.stderr[-2000:]}"
    crop(png, width)
    return png


@dataclass(frozen=True)
class Widths:
    scroll: int                      # the page's document.documentElement.scrollWidth
    inner: int                       # its window.innerWidth

    @property
    def overflows(self) -> bool:
        return self.scroll > self.inner


def widths(page: Path, width: int, height: int = 900) -> Widths:
    """How wide the page's content is on a screen ``width`` wide: a frame around it
    whose script writes both widths into the DOM, dumped once it loaded."""
    frame = framed(page, width, height, MEASURE)
    try:
        r = run(frame, width, height, "--virtual-time-budget=2000", "--dump-dom")
    finally:
        frame.unlink(missing_ok=True)
    m = MEASURED.search(r.stdout)
    assert m, f"the page did not report its widths at {width} px: {r.stderr[-2000:]}"
    return Widths(int(m[1]), int(m[2]))
