"""Remaps between two files in opposite directions at once: block cloning's locks.

Found on the debug kernel (``--kernel debian-6.1-debug``): the explore corpus's
FICLONERANGE sequence drew a lockdep "possible recursive locking" report from
``zpl_clone_file_range_impl``, which takes the source inode's lock shared and
then the destination's exclusively. On the series' base (efc74710b8) and every
commit of async-dio and zvol-dio on it, that order follows the direction of the
call, so a clone from A into B beside one from B into A can each hold one inode
and wait for the other: a deadlock of two ioctls, unkillable. Upstream
afb4010325 ("Implement FIDEDUPERANGE via block cloning", 2026-08-20) orders the
two by inode address; a series rebased past it is fixed.

Upstream's order is right, but its second lock carries no nesting notation, so
on a kernel with lockdep the first remap between two files still draws "possible
recursive locking detected ... May be due to missing lock nesting notation" (at
``zpl_remap_lock_two+0x3e``; stock be7657e3f2 on ``debian-6.1-debug``), and lockdep
then stops validating for the rest of the boot: every case after it in that guest
is blind to lock-order bugs. An upstream finding
(``remap-lock-two-no-lockdep-nesting``, patches/upstream/findings.toml). Checked
against a candidate fix, the second lock taken with ``inode_lock_nested()`` /
``inode_lock_shared_nested(.., I_MUTEX_NONDIR2)`` as ``lock_two_nondirectories()``
does (a ``--series`` folder on master, 2026-12-03): both rows and the clone corpus
sequence ran in one guest with lockdep still validating after each, the clone
sequence failing by its own wrong bytes alone.

Each run: two processes clone 128 KiB records for a few seconds, one A->B, one
B->A, each file's first half the source of one direction and its second half the
destination of the other; then every byte each destination holds is checked
against the other file's first half. A side still running at the deadline is a
``hang`` with its ``/proc/PID/stack``; a run where no clone succeeded tested
nothing (``unproven``, e.g. block cloning off).
"""
from __future__ import annotations

import pytest

from suite.ioengine.remap import MOVERS

pytestmark = [pytest.mark.vm, pytest.mark.nvme]

SECONDS = 5


def _stack_functions(stuck: dict) -> list[str]:
    """Function names on the stuck sides' kernel stacks, in order, once each."""
    out: list[str] = []
    for st in stuck.values():
        for line in st.get("stack", "").splitlines():
            fn = line.split("] ", 1)[-1].split("+", 1)[0].strip()
            if fn and fn not in out:
                out.append(fn)
    return out


@pytest.mark.quick("ficlonerange")
@pytest.mark.parametrize("mover", MOVERS)
def test_remaps_in_opposite_directions(mover, pool, engine, accel, symptom):
    deadline = accel.deadline(15)     # a clone takes ms: a side this late is stuck
    lines = engine.oneshot("remap-cross", "--dir", pool.mountpoint, "--mover", mover,
                           "--seconds", str(SECONDS), "--deadline-s", str(int(deadline)),
                           timeout=(SECONDS + deadline + 120) / accel.scale)
    out = next((ln for ln in lines if ln.get("event") == "remap-cross"), None)
    if out is None:
        symptom("no-result", f"remap-cross printed no report: {lines[-3:]}")
        pytest.fail(f"no report from remap-cross: {lines[-3:]}")
    if out["stuck"]:
        states = ", ".join(f"{pid} {st['state']} in {st['wchan']}" for pid, st in out["stuck"].items())
        funcs = _stack_functions(out["stuck"])
        symptom("hang", f"{mover} A->B beside B->A: still running {deadline:.0f}s past their "
                        f"{SECONDS}s: {states}; stack: {' < '.join(funcs[:8])}")
        pytest.fail(f"remaps in opposite directions deadlocked: {states}\n"
                    + "\n".join(st["stack"] for st in out["stuck"].values()))
    crashed = [s for s in out["sides"] if "crash" in s]
    assert not crashed, f"a side crashed: {crashed}"
    done = {s["name"]: s["done"] for s in out["sides"]}
    if not all(done.values()):
        errors = {s["name"]: s["errors"] for s in out["sides"]}
        symptom("unproven", f"no {mover} succeeded in some direction: {done}, errors {errors}")
        pytest.fail(f"the run tested nothing: clones done {done}, errors {errors}")
    wrong = out["wrong_bytes"]
    if any(wrong.values()):
        symptom("wrong-bytes", f"after {done} clones: wrong bytes {wrong}")
        pytest.fail(f"a destination does not hold the other file's first half: {wrong}")
