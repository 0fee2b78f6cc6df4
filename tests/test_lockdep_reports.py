"""What a lockdep report names (suite/judges/lockdep.py ``describe``), carried into
the case's symptom and matched by an upstream finding's ``signature``: no VM."""
from __future__ import annotations

from pathlib import Path

from suite.guest.aftercase import Observation
from suite.judges import lockdep
from suite.report import upstream
from suite.report.page.model import Case
from suite.vm.console import ConsoleWatcher

CIRCULAR = """\
[  812.100000] ======================================================
[  812.100001] WARNING: possible circular locking dependency detected
[  812.100002] 6.1.158 #1 Tainted: G           O
[  812.100003] ------------------------------------------------------
[  812.100004] z_wr_iss/214 is trying to acquire lock:
[  812.100005] ffff88810a2c8b30 (&ms->ms_lock){+.+.}-{3:3}, at: metaslab_check_free_impl+0x1a2/0x3c0 [zfs]
[  812.100006] 
[  812.100007] but task is already holding lock:
[  812.100008] ffff88811b0f2a58 (&dn->dn_dbufs_mtx){+.+.}-{3:3}, at: dbuf_free_range+0x1f4/0x9c0 [zfs]
[  812.100009] 
[  812.100010] which lock already depends on the new lock.
"""

RECURSIVE = """\
[  301.0] WARNING: possible recursive locking detected
[  301.1] 6.1.158 #1 Tainted: G           O
[  301.2] --------------------------------------------
[  301.3] ioengine/901 is trying to acquire lock:
[  301.4] ffff8881 (&sb->s_type->i_mutex_key#15){++++}-{3:3}, at: zpl_remap_lock_two+0x3e/0x90 [zfs]
[  301.5] 
[  301.6] but task is already holding lock:
[  301.7] ffff8882 (&sb->s_type->i_mutex_key#15){++++}-{3:3}, at: zpl_remap_lock_two+0x2a/0x90 [zfs]
"""

RELEASE = """\
[  95.0] WARNING: bad unlock balance detected!
[  95.1] 6.1.158 #1 Tainted: G           O
[  95.2] -------------------------------------
[  95.3] zvol_tq-0/771 is trying to release lock (&zv->zv_suspend_lock) at:
[  95.4] [<ffffffffc0a4c3e4>] zvol_read+0x894/0xa00 [zfs]
[  95.5] but there are no more locks to release!
"""


def _after(text: str) -> list[str]:
    return text.splitlines()[2:]


def test_a_circular_report_names_both_locks_their_functions_and_the_task():
    assert lockdep.describe(_after(CIRCULAR)) == (
        "z_wr_iss acquiring &ms->ms_lock at metaslab_check_free_impl "
        "while holding &dn->dn_dbufs_mtx at dbuf_free_range")


def test_recursive_and_unbalanced_reports_are_named_too():
    assert lockdep.describe(RECURSIVE.splitlines()[1:]) == (
        "ioengine acquiring &sb->s_type->i_mutex_key#15 at zpl_remap_lock_two "
        "while holding &sb->s_type->i_mutex_key#15 at zpl_remap_lock_two")
    assert lockdep.describe(RELEASE.splitlines()[1:]) == \
        "zvol_tq-0 releasing &zv->zv_suspend_lock at zvol_read"
    assert lockdep.describe(["[ 1.0] some other line", "[ 1.1] ---"]) == ""


def test_a_report_cut_by_a_poll_is_completed_by_the_next(tmp_path: Path):
    log = tmp_path / "console.log"
    log.write_text("")
    w = ConsoleWatcher(log)
    lines = CIRCULAR.splitlines(keepends=True)
    log.write_text("".join(lines[:3]))            # headline and one line after it
    assert [f.kind for f in w.poll()] == ["lockdep"]
    assert lockdep.describe(w.findings[0].context) == ""
    log.write_text(CIRCULAR)
    assert w.poll() == []
    assert "while holding &dn->dn_dbufs_mtx" in lockdep.describe(w.findings[0].context)


def _symptoms(text: str, tmp_path: Path) -> list[str]:
    log = tmp_path / "c.log"
    log.write_text("")
    w = ConsoleWatcher(log)
    log.write_text(text)
    w.poll()
    _, symptoms = Observation(True, findings=w.findings).verdict()
    return [f"{s.kind}: {s.detail}" for s in symptoms]


def test_the_symptom_carries_the_locks_and_only_the_findings_own_report_is_known(tmp_path):
    zvol = next(f for f in upstream.load() if f.id == "zvol-suspend-lock-released-by-taskq")
    dbufs = next(f for f in upstream.load() if f.id == "dbufs-mtx-ms-lock-lockdep-class")
    released = _symptoms(RELEASE, tmp_path)
    assert released[0].startswith("kernel:lockdep: ") and "zv_suspend_lock at zvol_read" in \
        released[0]
    other = _symptoms(RECURSIVE, tmp_path)
    circular = _symptoms(CIRCULAR, tmp_path)
    cases = [Case("cases/t.py::test_zvol_shape[a]", "fail", "fail", "w", symptoms=released),
             Case("cases/t.py::test_zvol_shape[a]", "fail", "fail", "w", symptoms=other),
             Case("cases/t.py::test_zvol_shape[a]", "fail", "fail", "w",
                  symptoms=released + circular),
             Case("cases/t.py::test_pwrite[b]", "fail", "fail", "w", symptoms=circular)]
    upstream.mark(cases, [zvol, dbufs])
    assert [c.known for c in cases] == [zvol.id, "", f"{zvol.id}+{dbufs.id}", dbufs.id]
