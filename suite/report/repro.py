"""A standalone reproducer for every failed case, syzbot-style.

``repro/repro.sh`` in the case's folder replays what the case did in its
guest, read from its ``commands.log`` (between the case's begin and end
markers): the pool and dataset setup with their properties, the module
parameters, and the exact requests (the engine's plans, beside the script; the
engine itself, standard-library Python, rides inside the script as a zip). The
build's own ``zpool``/``zfs``/``zinject`` become the guest's, the NVMe devices
the script's arguments. Nothing of the suite is needed: run it as root in any
guest with ZFS loaded and spare disks. ``python -m suite repro <case dir>``
runs it in a fresh guest at any build (``suite/campaign/reproduce.py``).

It then says what was expected and what was observed, judged by the symptoms
the case recorded (``verdict.json``): a trial whose replay shows the recorded
kind again (EFAULT, wrong bytes, served by the ARC ...), a kernel report in
dmesg for ``kernel:*``, a command that overran its deadline for hangs. Exit 1:
the failure reproduced; 0: it did not; 2: the setup failed. Steps a case timed
from the host (a barrier issued while a write is held) are replayed in order,
without that choreography: such a reproducer says so.
"""
from __future__ import annotations

import base64
import io
import json
import re
import shlex
import zipfile
from pathlib import Path

from suite import paths
from suite.symptoms import CaseVerdict

CMD = re.compile(r"^\[[^\]]*\] \S+( background)? \$ (.*)$")
SKIP = re.compile(r"(/sys/module/\$m/srcversion|^modinfo |^insmod |^rmmod |^modprobe -a |"
                  r"ozfs-vmci: (begin|end)|sysrq-trigger|^mkdir -p /tmp/ozfs-engine$|"
                  r"^test -e /sys/module/zfs/parameters/|-m suite\.ioengine serve |cd /sys/module/zfs/parameters && grep)")
TOOL = re.compile(r"(?:LD_LIBRARY_PATH=\S+ )?\S*/(?:\.libs/)?(zpool|zfs|zinject|zdb)(?=\s|$)")
ENGINE = re.compile(r"PYTHONPATH=\S+ (?:\S+ -m suite\.ioengine|bash \S+/client\.sh \S+ \S+)(?= |$)")
PLAN = re.compile(r"/tmp/ozfs-engine/(\S+?\.(?:plan|seq)\.json)")   # seq: suite explore
DEVICE = re.compile(r"/dev/nvme(\d+)n1\b")
LIBDIR = re.compile(r" --zfs-libdir \S+")


def case_commands(log: str) -> list[tuple[str, bool]]:
    """(command, background) the case ran, between its begin and end markers."""
    out, inside = [], False
    for line in log.splitlines():
        m = CMD.match(line)
        if not m:
            continue
        cmd = m.group(2)
        if "ozfs-vmci: begin" in cmd:
            inside, out = True, []
            continue
        if "ozfs-vmci: end" in cmd:
            break
        if inside and "# ozfs-vmci: setup: " in cmd:    # state an earlier case left
            for part in cmd.split("# ozfs-vmci: setup: ", 1)[1].split(" ; "):
                out.append((part, False))
        elif inside and not cmd.startswith("# "):
            out.append((cmd, bool(m.group(1))))
    return out


RUN_NAME = re.compile(r"explore-\d+-\d{4}-[A-Za-z0-9]+")     # one run of suite explore


def only_the_finding(steps: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """An explore case ran many sequences and every shrink candidate; once it
    confirmed a minimal failing one (``*-confirm.seq.json``), its reproducer runs
    just that one, after the property and parameter steps that led to it (and,
    on a zvol target, only that run's zvol: the others' are left out by name)."""
    confirm = [c for c, _ in steps if "explore-run" in c and "-confirm.seq.json" in c]
    if not confirm:
        return steps
    m = RUN_NAME.search(confirm[-1])
    mine = m.group(0) if m else None
    return [(c, bg) for c, bg in steps if ("explore-run" not in c or c == confirm[-1])
            and all(n == mine for n in RUN_NAME.findall(c))]


def translate(cmd: str) -> str | None:
    """The command as a guest without the suite runs it (None: the harness's own)."""
    if SKIP.search(cmd):
        return None
    cmd = TOOL.sub(lambda m: m.group(1), cmd)
    cmd = LIBDIR.sub("", cmd)               # the guest's own tools need no build libraries
    cmd = ENGINE.sub("engine", cmd)
    cmd = PLAN.sub(lambda m: f'"$HERE/{m.group(1)}"', cmd)
    return DEVICE.sub(lambda m: f'"$DEV{m.group(1)}"', cmd)


def engine_zip() -> str:
    """suite/ioengine as a base64 zip (it imports nothing but the standard library)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("suite/__init__.py", "")
        engine = paths.PROJECT_ROOT / "suite" / "ioengine"
        for p in sorted(engine.rglob("*.py")):
            z.write(p, f"suite/ioengine/{p.relative_to(engine).as_posix()}")
    return base64.b64encode(buf.getvalue()).decode()


JUDGE = r'''
import glob, json, os, re, sys
rec = json.load(open(os.path.join(os.environ["HERE"], "expected.json")))
results, explored, stuck = {}, [], []
for f in glob.glob(os.path.join(os.environ["OUT"], "*.jsonl")):
    for ln in open(f):
        if ln.startswith("{"):
            d = json.loads(ln)
            if d.get("event") == "trial":
                results[d["id"]] = d
            elif d.get("event") == "explore-done":
                explored.append(d)
            if d.get("stuck"):              # the engine saw its own tasks stuck (remap-cross)
                stuck.append(d)
def moved(c, *keys):
    return any((c or {}).get(k) for k in keys)
def shows(kind, r):
    c = r.get("counters") or {}
    err = r.get("errname")
    return {"EFAULT": err == "EFAULT", "EINVAL": err == "EINVAL",
            "wrong-bytes": bool(r.get("wrong_bytes")), "overrun": bool(r.get("overrun_bytes")),
            "short": err is None and isinstance(r.get("res"), int) and r["res"] < (r.get("expected_len") or 0),
            "no-EINVAL": err != "EINVAL" and r.get("res") is not None,
            "past-end": bool(r.get("beyond_bytes")),
            "served-by-ARC": moved(c, "arc_calls", "arc_read_count", "arc_write_count", "pinned_copies"),
            "served-by-DIO": moved(c, "dio_calls", "direct_read_count", "direct_write_count"),
            }.get(kind, err is not None and kind == "error:" + str(err))
seen = []
dmesg = open(os.path.join(os.environ["OUT"], "dmesg.txt"), errors="replace").read()
hung = os.path.exists(os.path.join(os.environ["OUT"], "timed-out"))
for s in rec["symptoms"]:
    kind, detail = s["kind"], s.get("detail", "")
    m = re.search(r"trial (\S+?):", detail)
    if kind.startswith("kernel:"):
        hit = re.search(r"VERIFY|PANIC|BUG:|WARNING:|Oops|hung_task|blocked for more|slub|"
                        r"Redzone|Poison", dmesg)
    elif kind in ("hang", "D-state", "no-result"):
        hit = hung or bool(stuck)
    elif detail.startswith("explore ") or (explored and not results):
        # a sequence of suite explore (or of its corpus: "NAME.json: failed at op N") failed
        hit = any(not e.get("ok") and e.get("kind") == kind for e in explored)
    elif m and m.group(1) in results:
        hit = shows(kind, results[m.group(1)])
    elif results:
        hit = any(shows(kind, r) for r in results.values())
    else:
        hit = False
    seen.append(bool(hit))
    print(f"  expected: no {kind} ({s.get('row') or 'any row'}); observed at the recorded "
          f"failure: {kind} {detail[:160]!r}; this run: {'SAME' if hit else 'not seen'}")
print("REPRODUCED" if any(seen) else "NOT REPRODUCED", f"({sum(seen)} of {len(seen)} symptoms)")
sys.exit(1 if any(seen) else 0)
'''


def script(nodeid: str, v: CaseVerdict, steps: list[tuple[str, bool]], ndev: int,
           timed: bool) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# Reproducer for {nodeid}",
        f"# Recorded: {v.outcome}: {v.reason[:200]}",
        *[f"#   {s}" for s in v.symptoms][:8],
        "# Usage (root, in a guest with ZFS loaded; the disks are destroyed):",
        f"#   bash repro.sh {' '.join(f'/dev/nvme{i}n1' for i in range(ndev))}",
        "# Exit: 1 reproduced, 0 not reproduced, 2 setup failed.",
        *(["# NOTE: the case timed some steps from the host (e.g. a barrier while a write",
           "# was held); they are replayed in order, without that timing."] if timed else []),
        "set -u",
        'HERE="$(cd "$(dirname "$0")" && pwd)"; export HERE',
        'OUT="$(mktemp -d /tmp/ozfs-repro.XXXXXX)"; export OUT',
        *[f'DEV{i}="${{{i + 1}:-/dev/nvme{i}n1}}"; export DEV{i}' for i in range(ndev)],
        'STEP_TIMEOUT="${STEP_TIMEOUT:-600}"',
        f"echo '{engine_zip()}' | base64 -d > \"$OUT/engine.zip\"",
        'engine() { PYTHONPATH="$OUT/engine.zip" python3 -m suite.ioengine "$@"; }',
        "export -f engine",
        'KREPORT="VERIFY|PANIC at|BUG:|Oops|general protection fault|hung_task|blocked for more"',
        'step() {  # one step with a deadline: overrunning is a hang; a kernel report ends it',
        '  echo "+ $1"',
        '  if [ -e "$OUT/kernel-report" ]; then echo "!! skipped: the kernel reported a failure"; return 0; fi',
        '  bash -c "$1" > "$OUT/step.out" 2>&1 & pid=$!; waited=0',
        '  while kill -0 $pid 2>/dev/null; do',
        '    if dmesg 2>/dev/null | grep -qE "$KREPORT"; then',
        '      echo "!! the kernel reported a failure during this step"; touch "$OUT/kernel-report"',
        '      kill -9 $pid 2>/dev/null; break; fi',
        '    if [ $waited -ge "$STEP_TIMEOUT" ]; then echo "!! step overran ${STEP_TIMEOUT}s"',
        '      touch "$OUT/timed-out"; kill -9 $pid 2>/dev/null; break; fi',
        '    sleep 1; waited=$((waited + 1))',
        '  done',
        '  [ -e "$OUT/kernel-report" ] || [ -e "$OUT/timed-out" ] || wait $pid 2>/dev/null',
        '  cat "$OUT/step.out"; grep -h "^{" "$OUT/step.out" >> "$OUT/results.jsonl" || true',
        "  return 0",
        "}",
        'for t in zpool zfs; do command -v $t > /dev/null || { echo "$t is not on PATH: load',
        '  ZFS and put its tools on PATH first"; exit 2; }; done',
        "must() {  # a setup step: if it fails, the reproducer cannot say anything",
        '  echo "+ $1"; bash -c "$1" || { echo "!! setup step failed: $1"; exit 2; }',
        "}",
        "dmesg -c > /dev/null 2>&1 || true",
    ]
    for cmd, bg in steps:
        t = translate(cmd)
        if t is None:
            continue
        if re.match(r"(zpool create|zfs create)\b", t):
            lines.append(f"must {shlex.quote(t)}")
        elif bg:
            lines.append(f"( timeout -k 10 \"$STEP_TIMEOUT\" bash -c {shlex.quote(t)} "
                         f"> \"$OUT/bg-$RANDOM.jsonl\" 2>&1 ) &")
        else:
            lines.append(f"step {shlex.quote(t)}")
    # Background steps stuck in the kernel never end: not waited for after a report.
    lines += ['[ -e "$OUT/kernel-report" ] || [ -e "$OUT/timed-out" ] || wait',
              'dmesg > "$OUT/dmesg.txt" 2>&1 || true',
              'echo "== expected versus observed (outputs in $OUT)"',
              f"python3 - <<'JUDGE'\n{JUDGE.strip()}\nJUDGE"]
    return "\n".join(lines) + "\n"


def write_reproducer(case_dir: Path, nodeid: str, v: CaseVerdict) -> Path | None:
    """``case_dir/repro/`` for a failed case: the script, its plans, what to expect."""
    log = case_dir / "commands.log"
    if not log.exists():
        return None
    steps = only_the_finding(case_commands(log.read_text(errors="replace")))
    if not steps:
        return None
    out = case_dir / "repro"
    out.mkdir(exist_ok=True)
    engine = case_dir / "engine"
    for plan in [*engine.glob("*.plan.json"), *engine.glob("*.seq.json")] if engine.exists() \
            else []:
        (out / plan.name).write_text(plan.read_text())
    ndev = max([int(m) + 1 for c, _ in steps for m in DEVICE.findall(c)] or [1])
    timed = any(bg for _, bg in steps)
    (out / "expected.json").write_text(json.dumps(
        {"nodeid": nodeid, "outcome": v.outcome, "reason": v.reason,
         "symptoms": [s.to_dict() for s in v.symptoms], "devices": ndev}, indent=1) + "\n")
    sh = out / "repro.sh"
    sh.write_text(script(nodeid, v, steps, ndev, timed))
    sh.chmod(0o755)
    return sh
