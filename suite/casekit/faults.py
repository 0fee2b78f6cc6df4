"""Fault scaffolding: reads held in flight by zinject, and proof that they are.

A fault case is only worth something if the fault was armed: ``HeldRead`` holds
one O_DIRECT read of a file in the ZFS pipeline (``zinject -E`` ready-stage
delay), and ``hold()`` returns only after it has proven the read is still in
flight and its submitter is waiting. If it cannot prove that, it raises
``NotArmed`` (the case errors with the reason; it never passes).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pytest

from suite.casekit.engine import EngineRunner, parse_lines
from suite.errors import SuiteError
from suite.vm.ssh import Background
from suite.guest.zfs import Dataset, Zfs


class NotArmed(SuiteError):
    """The fault could not be put in place: the case proves nothing."""


# What a case says when its hold ended before its race ran (suite.vm.accel: holds).
RAISE_HOLD = ("the hold ended before the race ran: on a slow or busy host raise "
              "OZFS_VMCI_HOLD_SCALE (x2 under TCG by default; 6 is the deadlines' factor)")


@dataclass
class HeldRead:
    reader: str                 # "async" (libaio, async path) | "sync" (dd iflag=direct)
    path: str
    delay_s: float
    handle: Background
    pid: int | None
    proof: list[str] = field(default_factory=list)

    def wait(self, timeout: float) -> dict:
        """Wait for the read; return {'finished', 'ok', 'detail'}."""
        r = self.handle.wait(timeout)      # GuestError if still running at the deadline
        finished = r.rc is not None and r.rc >= 0
        if self.reader == "async":
            lines = parse_lines(r.stdout)
            done = next((ln for ln in lines if ln.get("event") in ("completed", "timeout")), None)
            if done is None:
                return {"finished": False, "ok": False, "detail": r.stdout[-800:] + r.stderr[-800:]}
            if done["event"] == "timeout":
                return {"finished": False, "ok": False, "detail": json.dumps(done)}
            reqs = done.get("requests", [])
            ok = all(q.get("correct") or (q.get("errname") in ("EIO", "ENXIO", "EBUSY", "ENOENT"))
                     for q in reqs)
            return {"finished": True, "ok": ok, "detail": json.dumps(reqs)[:800]}
        return {"finished": finished, "ok": r.rc == 0,
                "detail": f"dd rc={r.rc} {r.stderr.strip()[-300:]}"}


def task_state(zfs: Zfs, pid: int) -> str:
    r = zfs.guest.run(f"awk '{{print $3}}' /proc/{pid}/stat; cat /proc/{pid}/wchan; echo",
                      timeout=30, check=False)
    return " ".join(r.stdout.split()) or "gone"


NO_OBJECT_DELAY = "invalid option 'E'"   # zinject of zfs-2.3.x and older


def skip_without_object_delay(r, what: str) -> None:
    """A zinject that refused ``-E`` as an unknown option (zfs-2.3.x and older): the
    case truly cannot run on this build; skip it saying so."""
    if r.rc != 0 and NO_OBJECT_DELAY in r.stderr + r.stdout:
        pytest.skip(f"this build's zinject has no -E (a delay on one object's I/O came in "
                    f"zfs-2.4.0): no {what} can be held in flight on it")


def try_arm_delay(zfs: Zfs, path: str, delay_s: float) -> bool:
    """Delay every read of ``path``'s data by ``delay_s``: True when armed, False when
    this build's zinject has no ``-E`` (zfs-2.3.x); any other refusal is NotArmed."""
    r = zfs.zinject("-E", str(int(delay_s * 1000)), "-T", "read", "-t", "data", path,
                    check=False, timeout=60)
    if r.rc == 0:
        return True
    if NO_OBJECT_DELAY in r.stderr + r.stdout:
        return False
    raise NotArmed(f"zinject -E refused: {r.stderr.strip() or r.stdout.strip()}",
                   fix="is the file on the pool and zinject from the same build?")


def arm_delay(zfs: Zfs, path: str, delay_s: float) -> None:
    """try_arm_delay, and a case that needs the delay skips without ``-E``."""
    if not try_arm_delay(zfs, path, delay_s):
        pytest.skip("this build's zinject has no -E (a delay on one object's I/O came in "
                    "zfs-2.4.0): no read can be held in flight on it")


def probe_ms(delay_s: float, scale: float) -> int:
    """When a held I/O is looked at after its submission (ms): a quarter of the hold,
    at most 2 s of the host's pace, so the look lands well inside the hold."""
    return int(min(delay_s / 4, 2.0 * scale) * 1000)


def held_deadline_s(delay_s: float, scale: float) -> int:
    """The guest-side deadline of a process holding I/O for ``delay_s``."""
    return int(delay_s * 10 + 60 * scale)


def hold(zfs: Zfs, engine: EngineRunner, path: str, seed: str, size: int, delay_s: float,
         reader: str, scale: float, length: int = 131072) -> HeldRead:
    """Hold one O_DIRECT read of ``path`` in flight and prove it."""
    arm_delay(zfs, path, delay_s)
    look_ms = probe_ms(delay_s, scale)
    if reader == "async":
        h = engine.background("hold", "--file", path, "--seed", seed, "--size", str(size),
                              "--interface", "libaio", "-k", "1", "--len", str(length),
                              "--probe-inflight", str(look_ms),
                              "--deadline-s", str(held_deadline_s(delay_s, scale)))
    else:
        h = zfs.guest.background(f"dd if={path} of=/dev/null bs={length} count=1 iflag=direct "
                                 f"status=none")
    held = HeldRead(reader, path, delay_s, h, h.pid)
    deadline = time.monotonic() + look_ms / 1000 + 30 * scale
    if reader == "async":
        while time.monotonic() < deadline:
            out, _ = h.output_so_far()
            lines = parse_lines(out)
            probe = next((ln for ln in lines if ln.get("event") == "probe"), None)
            if probe is not None:
                if probe.get("outstanding", 0) < 1:
                    raise NotArmed("the read completed before the teardown could start "
                                   f"({json.dumps(probe)})",
                                   fix=RAISE_HOLD)
                sub = next((ln for ln in lines if ln.get("event") == "submitted"), {})
                held.pid = sub.get("pid") or held.pid
                held.proof.append(f"in flight after {probe['after_ms']} ms: "
                                  f"{probe['outstanding']} outstanding, submit took "
                                  f"{sub.get('submit_us', '?')} us")
                break
            if h.done:
                raise NotArmed(f"the reader exited before proving the read in flight: {out[-500:]}")
            time.sleep(0.2)
        else:
            raise NotArmed("no in-flight probe from the reader in time")
    else:
        time.sleep(look_ms / 1000)
        if h.done:
            raise NotArmed("dd finished before the teardown could start")
        held.pid = h.pid
        held.proof.append(f"dd iflag=direct still running after {look_ms} ms")
    if held.pid:
        state = task_state(zfs, held.pid)
        held.proof.append(f"submitter pid {held.pid} state/wchan: {state}")
    return held


# -- teardown of a dataset with I/O held in flight ---------------------------------

TEARDOWNS = ["rollback", "unmount", "unmount-lazy", "export", "destroy-clone"]
# Linux refuses to unmount a filesystem with an open file: for these a clean
# "busy" refusal is a correct outcome (the I/O and the dataset must still be
# fine). rollback suspends the filesystem under open files and must succeed;
# unmount-lazy detaches at once and tears down when the held I/O lets go.
MAY_REFUSE_BUSY = {"unmount", "export", "destroy-clone"}


def teardown_cmd(z: Zfs, op: str, ds: str, clone: str) -> str:
    """The shell command for teardown ``op`` of dataset ``ds`` (or its ``clone``)."""
    zfs, zpool = z.cmd("zfs"), z.cmd("zpool")
    pool = ds.split("/")[0]
    return {"rollback": f"{zfs} rollback -r {ds}@before",
            "unmount": f"{zfs} unmount -f {ds}",
            "unmount-lazy": f"umount -l $({zfs} get -H -o value mountpoint {ds})",
            "export": f"{zpool} export -f {pool}",
            "destroy-clone": f"{zfs} destroy -r -f {clone}"}[op]


def teardown_refused(op: str, stderr: str) -> bool:
    """A clean "busy" refusal, which is a correct outcome for some teardowns."""
    return "busy" in stderr and op in MAY_REFUSE_BUSY


HELD_AT_START = "ozfs-held-io-alive-at-start"


def while_held(pid: int | None, cmd: str) -> str:
    """``cmd`` run after a guest-side look at ``pid`` (the held I/O's submitter): it
    prints HELD_AT_START when that process is still there, in the same shell, so
    the proof is what the guest saw the instant before the racer began."""
    if not pid:
        return cmd
    return f"if [ -d /proc/{int(pid)} ]; then echo {HELD_AT_START}; fi; {cmd}"


def raced_while_held(stdout: str | None) -> bool:
    """Whether a :func:`while_held` command began with the held I/O's submitter still
    running (so the I/O in flight, but for the moment between its completion and
    the submitter's exit)."""
    return bool(stdout) and HELD_AT_START in stdout.splitlines()


def require_raced_while_held(finished: bool, raced: bool, what: str) -> None:
    """NotArmed unless the teardown began with the held I/O in flight (``raced``, read
    once from its output by :func:`raced_while_held`). A teardown that never finished
    is judged by its own symptom, not by this proof."""
    if finished and not raced:
        raise NotArmed(f"the held {what} was not seen in flight when the teardown began "
                       "(it had completed, or its submitter's pid was never known): the "
                       "teardown raced nothing", fix=RAISE_HOLD)


def restore_after(z: Zfs, op: str, ds: str, pool: str) -> None:
    """Put the dataset back after teardown ``op`` (mount it, import the pool)."""
    if op in ("unmount", "unmount-lazy"):
        z.zfs("mount", ds, timeout=120, check=False)
    elif op == "export" and pool not in z.pools():     # not when it refused (busy)
        z.zpool("import", "-d", "/dev", pool, timeout=300)


@dataclass
class TeardownTarget:
    dataset: str                # the dataset torn down (the clone for destroy-clone)
    clone: str
    path: str                   # the file the held I/O goes to


def teardown_target(z: Zfs, engine: EngineRunner, ds: Dataset, op: str, size: int,
                    seed: str, clone_props: dict[str, str], sync_timeout: float
                    ) -> TeardownTarget:
    """Lay out a teardown case: the dataset (or, for destroy-clone, a clone of
    it with ``clone_props``), a ``size``-byte file of ``seed`` in it, synced,
    and a snapshot ``@before`` to roll back to."""
    target, clone = ds.name, f"{ds.name}-clone"
    if op == "destroy-clone":
        engine.oneshot("write-file", ds.path("seed.bin"), "--size", str(size), "--seed", "x")
        z.zfs("snapshot", f"{ds.name}@origin")
        opts = [a for k, v in clone_props.items() for a in ("-o", f"{k}={v}")]
        z.zfs("clone", *opts, f"{ds.name}@origin", clone)
        target = clone
    mnt = z.zfs("get", "-H", "-o", "value", "mountpoint", target).stdout.strip()
    path = f"{mnt}/held.bin"
    engine.oneshot("write-file", path, "--size", str(size), "--seed", seed)
    z.guest.run("sync", timeout=sync_timeout)
    z.zfs("snapshot", f"{target}@before")
    return TeardownTarget(target, clone, path)
