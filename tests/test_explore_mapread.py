"""A read through a mapping that faults is an error, not the engine's death
(suite/ioengine/explore/mapread.py): a page past the end of a file raises SIGBUS
when touched, as a page with a checksum error does on OpenZFS."""
from __future__ import annotations

import errno
import os
from pathlib import Path

from suite.ioengine.explore.mapread import read_mapped


def test_the_bytes_of_a_mapping_come_back_whole(tmp_path: Path):
    p = tmp_path / "f"
    data = os.urandom(3 * 4096 + 100)
    p.write_bytes(data)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert read_mapped(fd, len(data)) == data
        assert read_mapped(fd, 4096, 4096) == data[4096:8192]
        assert read_mapped(fd, 0) == b""
    finally:
        os.close(fd)


def test_a_fault_on_the_mapping_is_eio_and_the_reader_lives(tmp_path: Path, monkeypatch):
    """The child that reads the mapping dies of SIGBUS (as on a page the kernel cannot
    read): the caller gets EIO naming the signal and goes on; a mapping the kernel
    refuses (longer than the file) is an error too, never empty bytes."""
    import mmap
    import signal
    p = tmp_path / "f"
    p.write_bytes(b"x" * 8192)
    fd = os.open(p, os.O_RDONLY)
    try:
        short = read_mapped(fd, 3 * 4096)
        assert isinstance(short, OSError) and short.errno == errno.EINVAL
        real = mmap.mmap

        class Faults:
            def __init__(self, *a, **k):
                self.m = real(*a, **k)

            def __enter__(self):
                os.kill(os.getpid(), signal.SIGBUS)     # what touching a bad page does

            def __exit__(self, *exc):
                self.m.close()
        monkeypatch.setattr(mmap, "mmap", Faults)
        got = read_mapped(fd, 4096)
        assert isinstance(got, OSError) and got.errno == errno.EIO and "SIGBUS" in got.strerror
        monkeypatch.setattr(mmap, "mmap", real)
        assert read_mapped(fd, 4096) == b"x" * 4096, "the reader goes on"
    finally:
        os.close(fd)
