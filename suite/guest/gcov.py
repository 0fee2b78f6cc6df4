"""Collect: copy a guest's gcov counters of the OpenZFS modules into the results.

A kernel with ``CONFIG_GCOV_KERNEL`` shows each loaded (and, with the default
``gcov_persist=1``, each unloaded) instrumented module's counters as
``/sys/kernel/debug/gcov/<absolute object path>.gcda``, beside a symlink to the
``.gcno``. Those files are seq_files: ``stat`` says 0 bytes, so ``tar`` of the
debugfs tree stores empty files. One guest command therefore reads each with
``cat`` into a temporary folder, and tars and base64-encodes that folder on
stdout; the host checks every file it unpacks (the gcda magic, more than a
header). Only paths with a ``/module/`` component are taken (the OpenZFS build
tree's; the kernel itself is not profiled).

Where a guest is let go (``Guests.recycle``: a case left it unfit, another shape
is needed, the session ends) its counters land in
``<run>/coverage/gcda/<build key>/<guest name>/`` with ``collected.json``.
A guest whose power was cut, or that died, takes its counters with it.
"""
from __future__ import annotations

import base64
import io
import json
import shlex
import shutil
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from suite.errors import GuestError

GCOV_ROOT = "/sys/kernel/debug/gcov"
NO_GCOV_RC = 3              # the guest's kernel has no gcov tree
PATH_FILTER = "*/module/*"  # find -path: the OpenZFS build tree's objects
GCDA_MAGIC = (b"gcda", b"adcg")     # big- and little-endian as written by gcc / the kernel
HEADER = 12                 # magic, version, stamp: a file of only that has no counters


class Runs(Protocol):
    """What collect needs of a guest (``suite.vm.ssh.Guest``)."""
    def run(self, cmd: str, timeout: float = ..., check: bool = ..., stdin: bytes | str | None = ...,
            log: bool = ...): ...


def gcda_dir(run_dir: Path, build_key: str) -> Path:
    return run_dir / "coverage" / "gcda" / build_key


def cases_dir(run_dir: Path, build_key: str) -> Path:
    """Where the copies taken at each case's end go (one folder per guest, then
    ``<NNN>-<case>``): suite/impact/casemap.py reads them."""
    return run_dir / "coverage" / "cases" / build_key


# One Python process reads every counter file: a cat and a mkdir per file (566
# processes for OpenZFS's 283) took ~5 min in a KASAN guest under TCG.
_PY_COPY = r"""
import base64, fnmatch, io, os, sys, tarfile
root, pattern = sys.argv[1], sys.argv[2]
buf, n = io.BytesIO(), 0
with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for d, _, names in os.walk(root):
        for name in sorted(names):
            rel = "./" + os.path.relpath(os.path.join(d, name), root)
            if not name.endswith(".gcda") or not fnmatch.fnmatch(rel, pattern):
                continue
            with open(os.path.join(d, name), "rb") as f:   # read to EOF: debugfs says 0 bytes
                data = f.read()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            n += 1
    count = f"{n}\n".encode()
    info = tarfile.TarInfo("./.count")
    info.size = len(count)
    tar.addfile(info, io.BytesIO(count))
sys.stdout.write(base64.b64encode(buf.getvalue()).decode())
"""


def guest_script(root: str = GCOV_ROOT, path_filter: str = PATH_FILTER) -> str:
    """The one guest command: every ``.gcda`` under ``root`` matching ``path_filter``
    read to its end (never tar straight from debugfs: its sizes read 0), as a gzip tar,
    base64 on stdout: by one ``python3`` where the guest has it, else with ``cat`` per
    file. Exit 3: there is no gcov tree."""
    return f"""set -o pipefail
r={root}
if [ ! -d "$r" ] && [ "$r" = {GCOV_ROOT} ] && ! mountpoint -q /sys/kernel/debug; then
  mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
fi
[ -d "$r" ] || exit {NO_GCOV_RC}
if command -v python3 >/dev/null; then
  exec python3 -c {shlex.quote(_PY_COPY)} "$r" '{path_filter}'
fi
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
cd "$r" || exit 1
n=0
while IFS= read -r -d '' f; do
  mkdir -p "$t/${{f%/*}}" && cat "$f" > "$t/$f" || exit 1
  n=$((n+1))
done < <(find . -path '{path_filter}' -name '*.gcda' -print0)
echo "$n" > "$t/.count"
tar -C "$t" -czf - . | base64 -w0
"""


@dataclass
class Collected:
    guest: str
    files: int = 0
    bytes: int = 0
    skipped: str = ""               # why nothing was taken
    bad: list[str] = field(default_factory=list)   # files that came out empty or not gcda

    def write(self, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "collected.json").write_text(json.dumps(asdict(self), indent=1) + "\n")


def is_gcda(data: bytes) -> bool:
    return len(data) > HEADER and data[:4] in GCDA_MAGIC


def unpack(payload: str, dest: Path, guest: str = "guest") -> Collected:
    """The guest command's stdout (base64 of a gzip tar) into ``dest``: each
    ``.gcda`` at its path below the gcov root; the count the guest wrote must match
    what arrived, and every file must be gcda with counters in it."""
    try:
        raw = base64.b64decode("".join(payload.split()), validate=True)
        tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz")
    except (ValueError, tarfile.TarError) as e:
        raise GuestError(f"the gcov counters of {guest} arrived garbled: {e}",
                         fix="the guest printed something besides the archive on stdout",
                         detail=payload[:300]) from e
    got = Collected(guest)
    expected = None
    with tar:
        for m in tar.getmembers():
            name = m.name.removeprefix("./")
            if name == ".count":
                f = tar.extractfile(m)
                expected = int(f.read().decode().strip()) if f else None
                continue
            if not m.isfile() or not name.endswith(".gcda"):
                continue
            if name.startswith("/") or ".." in Path(name).parts:
                got.bad.append(f"{name}: unsafe path")
                continue
            f = tar.extractfile(m)
            data = f.read() if f else b""
            if not is_gcda(data):
                got.bad.append(f"{name}: {len(data)} bytes, not gcda counters")
                continue
            out = dest / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            got.files += 1
            got.bytes += len(data)
    if expected is not None and expected != got.files + len(got.bad):
        got.bad.append(f"the guest read {expected} files, {got.files + len(got.bad)} arrived")
    return got


def from_guest(guest: Runs, dest: Path, name: str, timeout: float = 120.0,
               root: str = GCOV_ROOT) -> Collected:
    """Copy ``guest``'s OpenZFS counters into ``dest`` (replacing what is there);
    ``collected.json`` says what came. A kernel without gcov is a skip, not an
    error; a command that fails is a GuestError."""
    r = guest.run(guest_script(root), timeout=timeout, check=False, log=False)
    if r.rc == NO_GCOV_RC:
        got = Collected(name, skipped=f"the guest's kernel has no {root}")
        got.write(dest)
        return got
    if r.rc != 0:
        raise GuestError(f"copying the gcov counters out of {name} failed (exit {r.rc})",
                         fix="see the guest's console; the counters of this guest are lost",
                         detail=(r.stderr or "")[-1500:])
    if dest.exists():
        shutil.rmtree(dest)
    got = unpack(r.stdout, dest, name)
    if got.files == 0 and not got.bad:
        got.skipped = f"no OpenZFS counters under {root} (module not loaded, or not instrumented)"
    got.write(dest)
    return got
