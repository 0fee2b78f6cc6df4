"""A finding's plain reproducer, run in a fresh guest: ``suite findings verify ID --plain``.

``patches/upstream/repro/<id>/`` holds a reproducer written by hand for each finding a
maintainer may be asked to run: ``repro.sh`` (and a ``repro.c`` it compiles, where the
finding needs io_uring, libaio or a racing thread), safe by default (file-backed vdevs
in a ``mktemp -d`` directory, a pool of its own, nothing of the suite). Its exit code is
its verdict: 1 reproduced, 0 not, 2 could not test.

This module copies only that folder into a fresh guest with the build loaded, runs
``repro.sh`` there with the build's tools on PATH and nothing of the suite on
PYTHONPATH, and keeps what it printed (and the guest's console) under the results
folder. A guest that dies under it (a panic that takes the machine, a deadlock that
blocks the command for good) is judged by its console: reproduced when a console line
matches the finding's signature, else inconclusive.
"""
from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from suite import paths
from suite.errors import GuestError, SuiteError
from suite.report.findings import REPRO, plain

GUEST_DIR = "/tmp/plain-repro"          # the copy's parent in the guest (its own overlay)
VERDICTS = {1: "REPRODUCED", 0: "NOT REPRODUCED"}


def folder(fid: str) -> Path:
    """The finding's plain reproducer folder (a SuiteError when it has none)."""
    d = plain(fid)
    if d is None:
        d = paths.patches_dir() / REPRO / fid
        have = sorted(p.name for p in (paths.patches_dir() / REPRO).glob("*/repro.sh"))
        raise SuiteError(f"{fid} has no plain reproducer ({d / 'repro.sh'})",
                         fix=f"reproducers: {', '.join(have) or 'none'}")
    return d


def files(d: Path) -> list[Path]:
    """What is copied: the folder's files, nothing else (no subfolders)."""
    return sorted(p for p in d.iterdir() if p.is_file())


def command(guest_dir: str, tools: list[str], libs: list[str], args: str = "",
            script: str = "repro.sh") -> str:
    """``repro.sh`` run in its copy: the build's tools first on PATH (as a machine with
    ZFS installed has them), PYTHONPATH unset, nothing of the suite reachable."""
    path = ":".join(libs + tools)
    env = f"env -u PYTHONPATH PATH={shlex.quote(path)}:\"$PATH\""
    if libs:
        env += f" LD_LIBRARY_PATH={shlex.quote(':'.join(libs))}"
    return f"cd {shlex.quote(guest_dir)} && {env} bash ./{script} {args}".rstrip()


def console_verdict(signature: str, run_dir: Path) -> tuple[int, list[str]]:
    """The guest died: 1 when a console line matches the finding's signature, else 2;
    and the kernel's lines seen."""
    report = re.compile(r"VERIFY|PANIC at|BUG:|Oops|WARNING:|blocked for more|circular locking|"
                        r"recursive locking|bad unlock balance")
    lines = [ln.strip() for f in sorted(run_dir.glob("vms/*/console.log"))
             for ln in f.read_text(errors="replace").splitlines() if report.search(ln)]
    sig = re.compile(signature) if signature else None
    hit = bool(sig and any(sig.search(ln) for ln in lines))
    return (1 if hit else 2), lines


def run_plain(fid: str, opts, accel: str = "auto", args: str = "",
              script: str = "repro.sh") -> int:
    """Run the finding's plain reproducer (``script`` of its folder: repro.sh, or
    another a real caller needs, e.g. nfs.sh) in a fresh guest on the build ``opts``
    names; 1 reproduced, 0 not, 2 could not test (or the guest died without the
    finding's signature on its console)."""
    from suite.build.pipeline import build
    from suite.guest.lifecycle import Guests, GuestShape
    from suite.report import upstream
    from suite.vm.accel import for_build
    src = folder(fid)
    if not (src / script).is_file():
        raise SuiteError(f"{fid}'s folder has no {script}",
                         fix=f"one of: {', '.join(p.name for p in src.glob('*.sh'))}")
    finding = {f.id: f for f in upstream.load()}.get(fid)
    record, _ = build(opts)
    a = for_build(accel, record.kernel)
    run_dir = paths.stamped(f"plain-repro-{fid}")
    (run_dir / "repro").mkdir(parents=True, exist_ok=True)
    for p in files(src):                    # what ran, kept beside its output
        (run_dir / "repro" / p.name).write_bytes(p.read_bytes())
    guests = Guests(run_dir, "plain-repro", a, record)
    t0 = time.monotonic()
    try:
        g = guests.acquire(GuestShape(nvme=0), run_dir / "commands.log")
        guest = g.zfs.guest
        gdir = guest.run(f"mkdir -p {GUEST_DIR} && mktemp -d {GUEST_DIR}/{fid}.XXXXXX",
                         timeout=a.deadline(30)).stdout.strip()
        for p in files(src):
            guest.put(p, f"{gdir}/{p.name}")
        tools = sorted({str(Path(p).parent) for p in record.commands.values()})
        libs = sorted({str(Path(p).parent / ".libs") for p in record.commands.values()})
        cmd = command(gdir, tools, libs, args, script)
        print(f"{record.summary()}\nrunning {src}/{script} as {gdir}/{script}", flush=True)
        t1 = time.monotonic()
        try:
            r = guest.run(cmd, timeout=a.deadline(900), check=False)
        except GuestError as e:             # the guest died, or the command never came back
            rc, lines = console_verdict(finding.signature if finding else "", run_dir)
            out = getattr(getattr(e, "result", None), "stdout", "") or ""
            (run_dir / "repro-output.txt").write_text(out + f"\n[guest lost: {e}]\n")
            print(out[-8000:])
            print(f"the guest did not come back from {script} ({str(e).splitlines()[0]})")
            for ln in lines[:8]:
                print(f"  console: {ln}")
            print(f"{VERDICTS.get(rc, 'INCONCLUSIVE')} (judged by the console); "
                  f"{time.monotonic() - t0:.0f}s; results {run_dir}")
            return rc
        (run_dir / "repro-output.txt").write_text(r.stdout + "\n" + r.stderr)
        print(r.stdout[-20000:])
        if r.stderr.strip():
            print(r.stderr[-3000:])
        rc = r.rc if r.rc in (0, 1) else 2
        print(f"exit {r.rc}: {VERDICTS.get(rc, 'could not test')}; {script} "
              f"{time.monotonic() - t1:.0f}s, with the guest {time.monotonic() - t0:.0f}s; "
              f"results {run_dir}")
        return rc
    finally:
        guests.close()


@dataclass(frozen=True)
class Seen:
    """One release line's answer to a finding's plain reproducer."""
    ref: str
    rc: int                             # 1 reproduced, 0 not, 2 could not test

    @property
    def verdict(self) -> str:
        return VERDICTS.get(self.rc, "NOT TESTED")


def seen_table(fid: str, seen: list[Seen]) -> str:
    """The "seen on" column of a finding, as its reproducer answered on each line."""
    rows = [f"| {s.ref} | {s.verdict} |" for s in seen]
    return "\n".join([f"{fid}: its plain reproducer on each release line", "",
                      "| ref | verdict |", "| --- | --- |", *rows])


def run_lines(fid: str, opts_for: Callable[[str], object], refs: list[str],
              run: Callable[..., int] | None = None, accel: str = "auto",
              args: str = "") -> tuple[int, list[Seen]]:
    """The plain reproducer on each of ``refs`` (master, the newest 2.4.x and 2.3.x:
    ``suite.source.lines.refs_to_test``), one fresh guest each; exit 1 when any line
    reproduced it, 2 when none did and one could not test, else 0."""
    run = run or run_plain
    seen = [Seen(ref, run(fid, opts_for(ref), accel=accel, args=args)) for ref in refs]
    table = seen_table(fid, seen)
    out = paths.stamped(f"seen-on-{fid}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "seen-on.md").write_text(table + "\n")
    print(f"\n{table}\n\n(also in {out / 'seen-on.md'})")
    rcs = {s.rc for s in seen}
    return (1 if 1 in rcs else 2 if 2 in rcs else 0), seen
