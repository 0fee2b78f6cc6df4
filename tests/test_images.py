"""The guests' NVMe images are removed when the session ends, unless kept."""
from __future__ import annotations

from pathlib import Path

import pytest

from suite.plugin.images import NOTE, drop_images

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent

CASE = '''
from pathlib import Path
from suite.plugin.hooks import RUN_DIR

def test_a_guest_left_its_disks(request):
    d = request.config.stash[RUN_DIR] / "vms" / "main-1"
    d.mkdir(parents=True)
    with open(d / "nvme0.img", "wb") as f:
        f.write(b"x" * 65536)
    (d / "console.log").write_text("kept\\n")
'''


def test_drop_images_removes_only_the_disks_and_says_so(tmp_path):
    g = tmp_path / "vms" / "gw0-1"
    g.mkdir(parents=True)
    for name in ("nvme0.img", "nvme1.img"):
        (g / name).write_bytes(b"\0" * 4096)
    (g / "console.log").write_text("boot\n")
    assert drop_images(tmp_path)[0] == 2
    assert sorted(p.name for p in g.iterdir()) == ["console.log"]
    assert "--keep-images" in (tmp_path / "vms" / NOTE).read_text()
    assert drop_images(tmp_path / "none") == (0, 0)


@pytest.mark.parametrize("keep", [False, True])
def test_the_session_removes_them_unless_kept(pytester, monkeypatch, tmp_path, keep):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OZFS_VMCI_CACHE", str(tmp_path / "cache"))
    pytester.makepyfile(test_disks=CASE)
    r = pytester.runpytest_subprocess("-p", "suite.plugin", "-p", "no:cacheprovider",
                                      "--results", str(tmp_path / "results"),
                                      *(["--keep-images"] if keep else []), timeout=120)
    r.assert_outcomes(passed=1)
    run = next((tmp_path / "results").iterdir())
    assert (run / "vms" / "main-1" / "console.log").exists()
    assert (run / "vms" / "main-1" / "nvme0.img").exists() == keep
