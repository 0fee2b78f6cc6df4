"""Run a reproducer in a fresh guest: ``python -m suite repro <case dir>`` and
``python -m suite findings verify ID``.

The reproducer itself (``repro/repro.sh``: the case's commands, the engine as a zip,
what to expect) is written by ``suite/report/repro.py`` for every failed case; this
boots a guest of the case's shape with a build loaded, runs it there and says what it
came to: exit 1 reproduced, 0 not, 2 setup failed or inconclusive.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from suite import paths
from suite.errors import GuestError

KERNEL_REPORT = re.compile(r"VERIFY|PANIC at|BUG:|Oops|general protection fault|Kernel panic")
DEATH_KINDS = ("no-result", "D-state", "hang")


def died(expected: Path, run_dir: Path, why: str) -> int:
    """The guest died running the reproducer: reproduced (1) when the console shows a
    kernel report and the recorded failure was the kernel's (a ``kernel:*`` kind, or a
    case that never came back), else inconclusive (2)."""
    kinds = [s.get("kind", "") for s in json.loads(expected.read_text()).get("symptoms", [])] \
        if expected.exists() else []
    lines = [ln for f in sorted(run_dir.glob("vms/*/console.log"))
             for ln in f.read_text(errors="replace").splitlines() if KERNEL_REPORT.search(ln)]
    print(f"the guest died running the reproducer ({why.splitlines()[0]})")
    for ln in lines[:8]:
        print(f"  console: {ln.strip()}")
    if lines and any(k.startswith("kernel:") or k in DEATH_KINDS for k in kinds):
        print(f"REPRODUCED: the kernel's report, as recorded ({', '.join(kinds)}); "
              f"results {run_dir}")
        return 1
    print(f"exit 2 (setup failed or inconclusive: no kernel report for {', '.join(kinds)}); "
          f"results {run_dir}")
    return 2


def run_repro(case_dir: Path, opts, accel: str = "auto") -> int:
    """Run ``case_dir/repro/repro.sh`` in a fresh guest of the case's shape with
    the build ``opts`` names loaded; its exit code (1 reproduced, 0 not, 2 setup)."""
    from suite.build.pipeline import build
    from suite.guest.lifecycle import Guests, GuestShape
    from suite.vm.accel import for_build
    sh = case_dir / "repro" / "repro.sh"
    if not sh.exists():
        from suite.errors import SuiteError
        raise SuiteError(f"no reproducer in {case_dir}",
                         fix="only failed cases leave one (repro/repro.sh in the case folder)")
    shape_file = case_dir / "guest-shape.json"
    shape = GuestShape()
    if shape_file.exists():
        d = json.loads(shape_file.read_text())
        shape = GuestShape(**{**d, "lbs": tuple(d["lbs"]) if isinstance(d.get("lbs"), list)
                              else d.get("lbs", 4096), "append": tuple(d.get("append", ()))})
    record, _ = build(opts)
    a = for_build(accel, record.kernel)
    run_dir = paths.stamped("repro")
    guests = Guests(run_dir, "repro", a, record)
    try:
        g = guests.acquire(shape, run_dir / "commands.log")
        devs = " ".join(g.zfs.nvme_devices())
        # The build's own tools first on PATH, as a guest with ZFS installed has them.
        tools = sorted({str(Path(p).parent) for p in record.commands.values()})
        libs = sorted({str(Path(p).parent / ".libs") for p in record.commands.values()})
        env = (f"PATH={':'.join(libs + tools)}:$PATH LD_LIBRARY_PATH={':'.join(libs)} "
               f"STEP_TIMEOUT={int(a.deadline(120))}")
        print(f"{record.summary()}\nguest {shape}; running {sh} {devs}", flush=True)
        try:
            r = g.zfs.guest.run(f"{env} bash {shlex.quote(str(sh))} {devs}",
                                timeout=a.deadline(3600), check=False)
        except GuestError as e:         # the guest died under it: its console says why
            return died(case_dir / "repro" / "expected.json", run_dir, str(e))
        print(r.stdout[-20000:])
        if r.stderr.strip():
            print(r.stderr[-3000:])
        (run_dir / "repro-output.txt").write_text(r.stdout + "\n" + r.stderr)
        print(f"exit {r.rc} ({ {1: 'reproduced', 0: 'not reproduced'}.get(r.rc, 'setup failed')})"
              f"; results {run_dir}")
        return r.rc if r.rc in (0, 1) else 2
    finally:
        guests.close()
