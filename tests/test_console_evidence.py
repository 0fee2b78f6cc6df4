"""Pure tests of suite.vm.console and suite.guest.evidence: pattern scanning, allow-list,
watcher, D-state parsing, evidence summary."""
from __future__ import annotations

from pathlib import Path

from suite.guest.evidence import DTask, Evidence, parse_dstate, parse_sysrq_blocked
from suite.vm import console
from suite.vm.console import ConsoleWatcher, Finding, scan

FIELD_STACK = """\
--- pid 263662 (zfs) state=D ---
[<0>] cv_wait_common+0x185/0x2f0 [spl]
[<0>] zfsvfs_teardown+0xdb/0x540 [zfs]
INFO: task zfs:263662 blocked for more than 122 seconds.
"""

OOPS = """\
[   12.000001] BUG: kernel NULL pointer dereference, address: 0000000000000008
[   12.000002] #PF: supervisor read access in kernel mode
[   12.000003] Oops: 0000 [#1] PREEMPT SMP NOPTI
[   12.000004] CPU: 1 PID: 812 Comm: zpool Tainted: P           OE      6.1.0-57-amd64 #1
[   12.000005] RIP: 0010:zio_done+0x1a/0x9c0 [zfs]
"""

SAMPLES = {
    "panic": "[   99.1] Kernel panic - not syncing: Fatal exception",
    "oops": "[    1.0] Oops: 0002 [#1] PREEMPT SMP NOPTI",
    "bug": "[    1.0] kernel BUG at fs/zfs/zio.c:1234!",
    "warning": "[    3.2] WARNING: CPU: 0 PID: 1 at mm/page_alloc.c:5525 __alloc_pages+0x2a1/0x330",
    "lockdep": "[    5.0] WARNING: possible circular locking dependency detected",
    "kasan": "[    7.0] BUG: KASAN: slab-out-of-bounds in zap_leaf_lookup+0x3c/0x1a0 [zfs]",
    "kfence": "[    8.0] BUG: KFENCE: use-after-free read in zfs_uioskip+0x5a/0x120 [zfs]",
    "atomic_sleep": "[    9.0] BUG: sleeping function called from invalid context at "
                    "kernel/locking/mutex.c:580",
    "hung_task": "[  245.9] INFO: task txg_sync:1234 blocked for more than 120 seconds.",
    "rcu_stall": "[  300.0] rcu: INFO: rcu_preempt self-detected stall on CPU",
    "lockup": "[  60.0] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [z_wr_iss:501]",
    "spl_panic": "[  10.0] PANIC at zfs_vnops_os.c:123:zfs_write()",
    # seen at async-dio@39991b06f under ZTS's async tag
    "user_trap": "[ 812.3] traps: fio[1016] general protection fault ip:55d0c2 sp:7ffd1e28 "
                 "error:0 in fio[55d0c2+9e000]",
    # a full run at async-dio@c7b7a98ba2 under TCG (2026-12-03, gw1-2's console)
    "device_timeout": "[  757.302214] nvme nvme1: I/O 576 (I/O Cmd) QID 1 timeout, aborting",
    "pool_suspended": "[  818.986901] WARNING: Pool 'tank' has encountered an uncorrectable I/O "
                      "failure and has been suspended.",
}


def test_a_disk_that_stops_answering_is_named_in_each_of_its_lines() -> None:
    lines = ["[  788.021290] nvme nvme1: I/O 576 QID 1 timeout, reset controller",
             "[  818.741714] nvme nvme1: I/O 896 QID 1 timeout, disable controller"]
    assert [f.kind for f in scan("\n".join(lines))] == ["device_timeout"] * 2
    # the controller coming back is not trouble, nor is a partition scan
    assert scan("[  788.081561] nvme nvme1: 1/0/0 default/read/poll queues\n"
                "[   40.732345]  nvme1n1: p1 p9") == []


def test_a_suspended_pool_trips_the_wait_like_a_dead_thread(tmp_path: Path) -> None:
    from suite.guest.lifecycle import tripwire
    con = tmp_path / "console.log"
    con.write_text("[ 1.0] boot\n")
    fired = tripwire(con)
    with con.open("a") as f:
        f.write(SAMPLES["device_timeout"] + "\n")
    assert fired() is None                  # a timeout alone may still recover
    with con.open("a") as f:
        f.write(SAMPLES["pool_suspended"] + "\n")
    why = fired()
    assert why is not None and why.startswith("pool_suspended: ") and "'tank'" in why


def test_user_traps_are_not_kernel_oopses() -> None:
    segv = "[ 9.1] aio_dio_readv[77]: segfault at 0 ip 0000000000401136 sp 00007ffe error 4"
    assert [f.kind for f in scan(segv)] == ["user_trap"]
    kernel_gpf = ("[ 9.2] general protection fault, probably for non-canonical address "
                  "0xdead000000000100: 0000 [#1] PREEMPT SMP NOPTI")
    assert [f.kind for f in scan(kernel_gpf)] == ["oops"]


def test_each_kind_is_recognised() -> None:
    for kind, line in SAMPLES.items():
        found = scan(line)
        assert [f.kind for f in found] == [kind], (kind, found)


def test_old_style_recursive_locking_and_rcu_variants() -> None:
    assert scan("INFO: possible recursive locking detected")[0].kind == "lockdep"
    assert scan("[ 1.0] rcu_sched self-detected stall on CPU")[0].kind == "rcu_stall"
    assert scan("[ 1.0] RCU stall warning")[0].kind == "rcu_stall"
    assert scan("[ 1.0] khungtaskd: hung_task: blocked tasks")[0].kind == "hung_task"


def test_panic_is_fatal_and_warning_is_a_warning() -> None:
    assert scan(SAMPLES["panic"])[0].severity == "fatal"
    assert scan(SAMPLES["warning"])[0].severity == "warning"
    assert console.worst(scan(SAMPLES["warning"] + "\n" + SAMPLES["panic"])) == "fatal"
    assert "panic" in console.PANIC_KINDS


def test_field_stack_hung_task() -> None:
    found = scan(FIELD_STACK)
    assert [f.kind for f in found] == ["hung_task"]
    assert found[0].lineno == 4
    assert "zfs:263662" in found[0].line


def test_field_stack_parsed_as_dstate_task() -> None:
    tasks = parse_dstate(FIELD_STACK)
    assert tasks == [DTask(263662, "zfs", "D", "", ("[<0>] cv_wait_common+0x185/0x2f0 [spl]",
                                                    "[<0>] zfsvfs_teardown+0xdb/0x540 [zfs]"))]
    assert tasks[0].format().splitlines()[0] == "--- pid 263662 (zfs) state=D ---"


def test_dstate_with_wchan_and_several_tasks() -> None:
    text = ("--- pid 5 (dd) state=D wchan=submit_bio_wait ---\n[<0>] submit_bio_wait+0x7b/0xc0\n"
            "--- pid 9 (txg_sync) state=D wchan=? ---\n[<0>] cv_wait_common+0x185/0x2f0 [spl]\n"
            "[<0>] txg_sync_thread+0x1a/0x40 [zfs]\n")
    tasks = parse_dstate(text)
    assert [(t.pid, t.comm, t.wchan, len(t.stack)) for t in tasks] == [
        (5, "dd", "submit_bio_wait", 1), (9, "txg_sync", "?", 2)]


def test_oops_block_gives_bug_then_oops_with_context() -> None:
    found = scan(OOPS)
    assert [f.kind for f in found] == ["bug", "oops"]
    assert any("zio_done" in c for c in found[1].context)


def test_allow_list() -> None:
    text = ('[ 245.9] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.\n'
            "[ 0.0] Kernel command line: console=ttyS0 lockdep debug: WARNING: BUG: off\n"
            "[ 3.0] WARNING: CPU: 0 PID: 1 at drivers/known/noisy.c:1 noisy_probe+0x1/0x2\n")
    assert [f.kind for f in scan(text)] == ["warning"]
    assert scan(text, allow=list(console.DEFAULT_ALLOW) + [r"noisy_probe"]) == []
    assert [f.kind for f in scan(text, allow=())] == ["bug", "warning"]


def test_clean_boot_has_no_findings() -> None:
    text = ("[    0.000000] Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org)\n"
            "[    0.1] MDS CPU bug present and SMT on, data leak possible.\n"
            "[    0.2] [Firmware Bug]: TSC_DEADLINE disabled due to Errata\n"
            "[    9.4] virtme-ng-init: udhcpc: started, v1.35.0\n"
            "[    0.3] sysrq: Show Blocked State\n"
            "[    0.4] task:dd              state:D stack:0     pid:691   ppid:1      flags:0x00004000\n")
    assert scan(text) == []


SYSRQ_W = """\
[   52.050000] sysrq: Show Blocked State
[   52.050001] task:dd              state:D stack:0     pid:691   ppid:1      flags:0x00004000
[   52.050002] Call Trace:
[   52.050003]  <TASK>
[   52.055545]  __schedule+0x34d/0xa00
[   52.055698]  schedule+0x5a/0xd0
[   52.055959]  io_schedule_timeout+0x4c/0x80
[   52.056196]  ? firmware_map_remove+0xa0/0xa0
[   52.056287]  submit_bio_wait+0x7b/0xc0
[   52.056300]  cv_wait_common+0x185/0x2f0 [spl]
[   52.057638] RIP: 0033:0x7f419f7a0350
[   52.058274]  </TASK>
[   52.058300] task:kworker/0:1     state:I stack:0     pid:11    ppid:2      flags:0x00004000
"""


def test_parse_sysrq_blocked() -> None:
    tasks = parse_sysrq_blocked(SYSRQ_W)
    dd = [t for t in tasks if t.pid == 691][0]
    assert dd.comm == "dd" and dd.state == "D"
    assert dd.stack == ("__schedule+0x34d/0xa00", "schedule+0x5a/0xd0", "io_schedule_timeout+0x4c/0x80",
                        "submit_bio_wait+0x7b/0xc0", "cv_wait_common+0x185/0x2f0 [spl]")


def test_console_watcher_sees_only_new_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_text(SAMPLES["panic"] + "\n")  # before the case: must not be reported
    w = ConsoleWatcher(log)
    assert w.poll() == []
    with open(log, "a") as f:
        f.write("[ 1.0] all fine\n" + SAMPLES["warning"] + "\n" + "[ 2.0] BUG: partial li")
    new = w.poll()
    assert [f.kind for f in new] == ["warning"] and new[0].lineno == 2
    with open(log, "a") as f:
        f.write("ne\n")
    assert [f.kind for f in w.poll()] == ["bug"]
    assert [f.kind for f in w.findings] == ["warning", "bug"]
    assert SAMPLES["panic"] not in w.text() and "all fine" in w.text()


def test_console_watcher_from_offset_zero_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_text(SAMPLES["oops"] + "\n")
    w = ConsoleWatcher(log, offset=0)
    assert [f.kind for f in w.poll()] == ["oops"]
    log.write_text("BUG: x\n")  # shorter file: replaced, start over
    assert [f.kind for f in w.poll()] == ["bug"]


def test_console_watcher_missing_file(tmp_path: Path) -> None:
    w = ConsoleWatcher(tmp_path / "nope.log")
    assert w.poll() == [] and w.text() == ""


def test_evidence_summary_mentions_stack_and_gaps(tmp_path: Path) -> None:
    ev = Evidence("case x overran 60s", tmp_path, ssh_alive=False, dstate=parse_dstate(FIELD_STACK),
                  dstate_source="console", findings=[Finding("hung_task", "error", "INFO: task zfs:1", 4)],
                  problems=["dmesg: guest command overran"])
    s = ev.summary()
    assert "DEAD" in s and "zfsvfs_teardown+0xdb/0x540 [zfs]" in s and "hung_task" in s
    assert "evidence gaps" in s
