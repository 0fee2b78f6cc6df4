"""The canaries' own arithmetic: each marker sits at a record's start, or the
damage lands in the wrong place and the canary proves nothing."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _canaries():
    spec = importlib.util.spec_from_file_location("canaries", ROOT / "cases/test_canaries.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_record_of_the_marked_file_starts_with_its_marker(tmp_path: Path):
    c = _canaries()
    out = tmp_path / "f.bin"
    script = c._marked_file_script(str(out), 8).replace(" oflag=direct", "")
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path)
    data = out.read_bytes()
    assert len(data) == 8 * c.RECORD
    for i in range(8):
        rec = data[i * c.RECORD:(i + 1) * c.RECORD]
        assert rec.startswith(f"{c.MARK}{i:02d}".encode()), (i, rec[:16])
    assert data.count(f"{c.MARK}03".encode()) == 1
