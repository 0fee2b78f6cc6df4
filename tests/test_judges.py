"""The after-case judges (suite/judges): each rule fires on what it is for and
stays quiet otherwise, on the kernel's and OpenZFS's own output formats."""
from __future__ import annotations

from pathlib import Path

import pytest

from suite.judges import kstats, ondisk, pools, taint
from suite.judges.expect import Leaves
from suite.judges.judge import judge
from suite.judges.snapshot import Snapshot, after_script, before_script, sections

ABD_HEAD = "27 1 0x01 23 6256 4849302928 6033826166\nname                            type data\n"
# What 64 MiB of 1 MiB O_DIRECT writes left on a stock build before a22b3f6700 (#21).
ABD_WRAPPED = ABD_HEAD + ("struct_size                     4    8192\n"
                          "scatter_cnt                     4    18446744073709551602\n"
                          "scatter_data_size               4    18446744073643685376\n"
                          "linear_cnt                      4    0\n")
ABD_OK = ABD_HEAD + ("struct_size                     4    8192\n"
                     "scatter_cnt                     4    14\n"
                     "scatter_data_size               4    65536\n")
ARC = ("13 1 0x01 147 39984 4849302928 6033826166\nname                            type data\n"
       "size                            4    {size}\nc                               4    {c}\n"
       "c_max                           4    1000000\n"
       "memory_available_bytes          3    -123456\n")
STATUS_CLEAN = """\
  pool: tank
 state: ONLINE
config:

\tNAME            STATE     READ WRITE CKSUM
\ttank            ONLINE       0     0     0
\t  /dev/nvme0n1  ONLINE       0     0     0
\t  /dev/nvme1n1  ONLINE       0     0     0

errors: No known data errors
"""
STATUS_HEALED = """\
  pool: tank
 state: ONLINE
status: One or more devices has experienced an unrecoverable error.  An
\tattempt was made to correct the error.  Applications are unaffected.
config:

\tNAME              STATE     READ WRITE CKSUM
\ttank              ONLINE       0     0     0
\t  mirror-0        ONLINE       0     0     0
\t    /dev/nvme0n1  ONLINE       0     0    37
\t    /dev/nvme1n1  ONLINE       0     0     0

errors: No known data errors
"""
STATUS_LOST = """\
  pool: tank
 state: DEGRADED
config:

\tNAME            STATE     READ WRITE CKSUM
\ttank            DEGRADED     0     0     0
\t  /dev/nvme0n1  FAULTED      3     0     0

errors: Permanent errors have been detected in the following files:

        /tmp/zfs/tank/case/f.bin
"""
EVENTS = """\
TIME                           CLASS
Dec  1 2026 17:01:02.123456789 sysevent.fs.zfs.pool_create
        version = 0x0
        class = "sysevent.fs.zfs.pool_create"
        pool = "tank"

Dec  1 2026 17:01:09.000000001 ereport.fs.zfs.checksum
        class = "ereport.fs.zfs.checksum"
        detector = (embedded nvlist)
                version = 0x0
                pool = 0x2719453daf7e0027
        (end detector)
        pool = "tank"
        vdev_path = "/dev/nvme0n1"
        zio_objset = 0x36
        zio_object = 0x2

Dec  1 2026 17:01:09.000000002 ereport.fs.zfs.checksum
        class = "ereport.fs.zfs.checksum"
        pool = "tank"
        vdev_path = "/dev/nvme0n1"
"""
RULES = kstats.load_rules()


def snap(taint_mask=4097 | 8192, abd=ABD_OK, status=STATUS_CLEAN, events="", arc=None):
    text = f"=== tainted\n{taint_mask}\n=== kstat abdstats\n{abd}"
    if arc:
        text += f"=== kstat arcstats\n{arc}"
    if status is not None:
        text += f"=== status\n{status}=== events\n{events}"
    return Snapshot.parse(text)


def kinds(j):
    return [f.kind for f in j.findings]


def test_a_clean_case_leaves_no_findings_and_says_what_it_checked():
    j = judge(snap(), snap(arc=ARC.format(size=900000, c=900000)), Leaves(), RULES)
    assert j.findings == []
    assert any(c.startswith("taint") for c in j.checked)
    assert any(c.startswith("pool health") for c in j.checked)
    assert any(c.startswith("ereports") for c in j.checked)


def test_the_abdstats_wrap_of_the_issue_is_found_with_its_values():
    j = judge(snap(), snap(abd=ABD_WRAPPED), Leaves(), RULES)
    wraps = [f for f in j.findings if f.kind == "kstat:wrap"]
    assert {w.detail.split()[1] for w in wraps} == {"scatter_cnt", "scatter_data_size"}
    assert "= -14 as signed" in next(w.detail for w in wraps if "scatter_cnt" in w.detail)


def test_a_wrap_read_again_is_kept_only_when_it_stays_below_zero():
    """A per-CPU sum read mid-update may come out below zero once: read again, it is
    back (no finding, said in what was checked); a real wrap stays in every read."""
    asked = []

    def settles(files):
        asked.append(files)
        return snap(abd=ABD_OK).kstats if len(asked) > 1 else snap(abd=ABD_WRAPPED).kstats

    j = judge(snap(), snap(abd=ABD_WRAPPED), Leaves(), RULES, settles)
    assert "kstat:wrap" not in kinds(j) and asked[0] == ("abdstats",)
    assert any("read again" in c and "scatter_cnt" in c for c in j.checked)
    stays = judge(snap(), snap(abd=ABD_WRAPPED), Leaves(), RULES,
                  lambda files: snap(abd=ABD_WRAPPED).kstats)
    assert kinds(stays).count("kstat:wrap") == 2
    unread = judge(snap(), snap(abd=ABD_WRAPPED), Leaves(), RULES, lambda files: {})
    assert kinds(unread).count("kstat:wrap") == 2, "nothing read again: the wrap stands"


def test_a_counter_already_wrapped_before_the_case_is_not_this_cases():
    assert judge(snap(abd=ABD_WRAPPED), snap(abd=ABD_WRAPPED), Leaves(), RULES).findings == []


def test_signed_kstats_may_be_negative():
    j = judge(snap(), snap(arc=ARC.format(size=1, c=1)), Leaves(), RULES)
    assert "kstat:wrap" not in kinds(j)     # memory_available_bytes is type 3


def test_arc_over_c_max_is_a_finding_and_a_missing_kstat_is_not_checked():
    j = judge(snap(), snap(arc=ARC.format(size=1200000, c=900000)), Leaves(), RULES)
    assert kinds(j) == ["kstat:limit"] and "c_max = 1000000" in j.findings[0].detail
    j = judge(snap(), snap(), Leaves(), RULES)          # no arcstats on this "build"
    assert j.findings == [] and any("arcstats" in u for u in j.unchecked)


def test_new_taint_bits_by_letter_and_the_module_bits_are_expected():
    assert taint.new_bits(0, 1 | 4096 | 8192) == []          # P, O, E: loading OpenZFS
    assert taint.new_bits(4097, 4097 | 512 | 32) == [taint.FLAGS[5], taint.FLAGS[9]]
    assert taint.letters(4097 | 512) == "PWO"
    j = judge(snap(taint_mask=12289), snap(taint_mask=12289 | 512), Leaves(), RULES)
    assert kinds(j) == ["taint:W"]


def test_undeclared_checksum_errors_and_ereports_are_findings():
    j = judge(snap(), snap(status=STATUS_HEALED, events=EVENTS), Leaves(), RULES)
    assert sorted(kinds(j)) == ["ereport:checksum", "pool:cksum"]
    assert "2 x ereport.fs.zfs.checksum" in next(f.detail for f in j.findings
                                                 if f.kind == "ereport:checksum")
    assert "/dev/nvme0n1 has 37 CKSUM" in next(f.detail for f in j.findings
                                               if f.kind == "pool:cksum")


def test_a_zinject_corruption_declares_checksum_errors_on_its_vdev_only():
    leaves = Leaves()
    leaves.from_zinject(("-d", "/dev/nvme0n1", "-e", "corrupt", "-T", "read", "-f", "100", "tank"))
    assert judge(snap(), snap(status=STATUS_HEALED, events=EVENTS), leaves, RULES).findings == []
    other = Leaves()
    other.from_zinject(("-d", "/dev/nvme1n1", "-e", "corrupt", "tank"))
    assert kinds(judge(snap(), snap(status=STATUS_HEALED), other, RULES)) == ["pool:cksum"]


def test_clearing_faults_declares_nothing_and_a_delay_declares_delay_ereports():
    leaves = Leaves()
    leaves.from_zinject(("-c", "all"))
    assert leaves.ereports == set() and leaves.why == []
    leaves.from_zinject(("-E", "30000", "-T", "read", "-t", "data", "/tmp/f"))
    assert leaves.ereports == {"delay", "deadman"} and not leaves.errors


def test_write_errors_on_a_leaf_are_a_finding_named_by_their_column():
    """WRITE has its own kind: a failed write the retry hid (a Direct I/O write that
    returned right while its leaf counted an error) must not read as a READ fault."""
    failed_write = STATUS_CLEAN.replace("/dev/nvme1n1  ONLINE       0     0     0",
                                        "/dev/nvme1n1  ONLINE       0     2     0")
    j = judge(snap(), snap(status=failed_write), Leaves(), RULES)
    assert kinds(j) == ["pool:write"]
    assert j.findings[0].detail == "tank: /dev/nvme1n1 has 2 WRITE error(s) the case did not declare"


def test_faulted_vdevs_and_permanent_errors_are_findings_unless_declared():
    j = judge(snap(), snap(status=STATUS_LOST), Leaves(), RULES)
    assert sorted(kinds(j)) == ["pool:data-errors", "pool:read", "pool:state", "pool:state"]
    assert "/tmp/zfs/tank/case/f.bin" in next(f.detail for f in j.findings
                                               if f.kind == "pool:data-errors")
    leaves = Leaves()
    leaves.from_zinject(("-t", "data", "-e", "io", "-T", "read", "/tmp/zfs/tank/case/f.bin"))
    assert "pool:data-errors" not in kinds(judge(snap(), snap(status=STATUS_LOST), leaves, RULES))


def test_a_case_marker_declares_what_zinject_cannot_know():
    leaves = Leaves()
    leaves.from_marker({"ereports": ["dio_verify_wr"]})
    ev = EVENTS.replace("ereport.fs.zfs.checksum", "ereport.fs.zfs.dio_verify_wr")
    assert judge(snap(), snap(events=ev), leaves, RULES).findings == []
    assert kinds(judge(snap(), snap(events=ev), Leaves(), RULES)) == ["ereport:dio_verify_wr"]


def test_status_and_events_parsers():
    [p] = pools.parse_status(STATUS_HEALED)
    assert p.name == "tank" and not p.data_errors
    assert [(v.name, v.cksum) for v in p.vdevs] == [("tank", 0), ("mirror-0", 0),
                                                    ("/dev/nvme0n1", 37), ("/dev/nvme1n1", 0)]
    evs = pools.parse_events(EVENTS)
    assert [e.ereport for e in evs] == ["", "checksum", "checksum"]
    assert evs[1].get("vdev_path") == "/dev/nvme0n1"
    assert evs[1].get("pool") == "tank"          # not the detector's guid


def test_one_guest_command_carries_every_section():
    for script in (before_script("zpool", RULES.collect), after_script("zpool", RULES.collect)):
        assert "/proc/sys/kernel/tainted" in script and "/proc/spl/kstat/zfs/abdstats" in script
    assert "events -c" in before_script("zpool", RULES.collect)
    assert "status -pvP" in after_script("zpool", RULES.collect)
    s = sections("=== tainted\n1\n=== kstat tank/iostats\na\nb\n=== status\nx\n")
    assert s == {"tainted": "1", "kstat tank/iostats": "a\nb", "status": "x"}


def test_a_missing_taint_read_is_not_checked_not_passed():
    j = judge(Snapshot(), snap(), Leaves(), RULES)
    assert any("taint" in u for u in j.unchecked)


def test_rules_need_reasons(tmp_path: Path):
    bad = tmp_path / "r.toml"
    bad.write_text('[[wrap]]\nfiles = "*"\n')
    with pytest.raises(Exception, match="no reason"):
        kstats.load_rules(bad)


def test_scrub_and_zdb_findings():
    assert ondisk.scrub_findings("tank", STATUS_CLEAN) == []
    [f] = ondisk.scrub_findings("tank", STATUS_HEALED)
    assert f.kind == "ondisk:scrub" and "CKSUM+37" in f.detail
    # The case's own errors were there before the scrub (zvol-dio head, --thorough:
    # a zinject -e io case left READ counts): the scrub found nothing new.
    assert ondisk.scrub_findings("tank", STATUS_HEALED, before=STATUS_HEALED) == []
    more = STATUS_HEALED.replace("0    37", "0    40")
    [g] = ondisk.scrub_findings("tank", more, before=STATUS_HEALED)
    assert "CKSUM+3" in g.detail
    declared = Leaves()
    declared.add("zinject -d /dev/nvme0n1 -e corrupt", errors={"cksum"}, vdevs={"/dev/nvme0n1"})
    assert ondisk.scrub_findings("tank", more, before=STATUS_HEALED, leaves=declared) == []
    assert ondisk.zdb_findings("tank", 0, "Traversing all blocks...\n\tbp count: 12\n") == []
    leak = "leaked space: vdev 0, offset 0x4000, size 4096\nblock traversal size 1 != alloc 2"
    [z] = ondisk.zdb_findings("tank", 3, leak)
    assert z.kind == "ondisk:zdb" and "leaked space" in z.detail


def test_where_the_time_went_sums_each_cases_phases(tmp_path: Path):
    import json

    from suite.report import phases
    for i, ph in enumerate(({"boot": 40.0, "begin": 2.0, "fixtures": 12.0, "call": 30.0,
                             "end": 8.0},
                            {"acquire": 1.0, "begin": 2.0, "fixtures": 3.0, "call": 20.0,
                             "end": 6.0})):
        d = tmp_path / "cases" / f"c{i}"
        d.mkdir(parents=True)
        (d / "phases.json").write_text(json.dumps(ph))
    text = phases.summarize(phases.collect(tmp_path))
    assert text.startswith("2 cases, 124 s in guests' phases (62.0 s a case)")
    assert "call         2 x   25.0 s =      50 s    40%" in text
    assert "boot         1 x   40.0 s" in text
    assert phases.summarize([]) == ""


class _FakeGuestRun:
    def __init__(self, stdout: str) -> None:
        self.stdout, self.rc = stdout, 0


class _FakeZfs:
    """What ondisk.leak_findings asks of a guest: the imported pools, one command.
    ``after_drop``: what the kstats read once the caches were dropped."""
    def __init__(self, pools: list[str], kstat_text: str, after_drop: str | None = None) -> None:
        self._pools, self.text, self.ran, self.after_drop = pools, kstat_text, [], after_drop
        self.guest = self

    def pools(self) -> list[str]:
        return self._pools

    def run(self, cmd: str, **kw) -> _FakeGuestRun:
        self.ran.append(cmd)
        if "drop_caches" in cmd and self.after_drop is not None:
            self.text = self.after_drop
        return _FakeGuestRun(self.text)


class _Clock:
    """A clock that a fake sleep moves on."""
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _settle() -> dict:
    c = _Clock()
    return {"sleep": c.sleep, "clock": c, "seconds": 8.0}


def _abd(scatter_cnt: int, struct: int = 8192) -> str:
    return ABD_HEAD + (f"struct_size                     4    {struct}\n"
                       f"scatter_cnt                     4    {scatter_cnt}\n")


def test_a_gauge_that_stays_up_with_every_pool_exported_is_a_leak(tmp_path: Path):
    rules = kstats.Rules((), (), returns=(
        kstats.ReturnRule("abdstats", ("struct_size", "scatter_cnt"), "why", slack=2),
        kstats.ReturnRule("dbufstats", ("cache_count",), "why")))
    baseline = {"abdstats": kstats.parse(_abd(3))}
    notes: list[str] = []
    z = _FakeZfs([], "=== kstat abdstats\n" + _abd(9))
    [f] = ondisk.leak_findings(z, rules, baseline, notes, **_settle())
    assert f.kind == "kstat:leak" and "scatter_cnt = 9 with every pool exported, 3 before" in f.detail
    assert "/proc/spl/kstat/zfs/abdstats" in z.ran[0]
    assert sum("drop_caches" in c for c in z.ran) == 1 and len(z.ran) > 3   # polled, shrunk once
    assert "dbufstats cache_count: not in this build's kstats, not checked" in notes[-1]
    within = ondisk.leak_findings(_FakeZfs([], "=== kstat abdstats\n" + _abd(5)), rules,
                                  baseline, [])
    assert within == []                                   # 5 <= 3 + slack 2


def test_a_gauge_below_zero_after_export_is_named_a_miscount():
    """Stock 869d805997 (before openzfs/zfs#18390's fix), --thorough: after export
    abdstats scatter_cnt read 18446744073709551566. 'A leak of 2^64 ABDs' misleads;
    the finding says the count went below zero."""
    rules = kstats.Rules((), (), returns=(kstats.ReturnRule("abdstats", ("scatter_cnt",),
                                                            "why"),))
    baseline = {"abdstats": kstats.parse(_abd(1))}
    [b] = kstats.leaks(rules, baseline, {"abdstats": kstats.parse(_abd((1 << 64) - 50))})
    assert b.kind == "leak" and "scatter_cnt = -50 as signed" in b.detail
    assert "miscount" in b.detail and "1 before the guest's first pool" in b.detail


def test_gauges_that_come_back_once_the_arc_is_shrunk_are_no_leak():
    """Export flushes the ARC from a taskq, best effort (zvol-dio head, TCG: 9 ABDs
    and 36 KiB of metadata still counted right after export); the shrinker frees
    what nobody holds."""
    rules = kstats.Rules((), (), returns=(
        kstats.ReturnRule("abdstats", ("scatter_cnt",), "why"),))
    baseline = {"abdstats": kstats.parse(_abd(1))}
    z = _FakeZfs([], "=== kstat abdstats\n" + _abd(10), after_drop="=== kstat abdstats\n" + _abd(1))
    notes: list[str] = []
    assert ondisk.leak_findings(z, rules, baseline, notes, **_settle()) == []
    assert any("drop_caches" in c for c in z.ran) and "came back after" in notes[-1]


def _arc(metadata: int, evictable: int) -> str:
    return ("13 1 0x01 3 144 1 1\nname                            type data\n"
            f"metadata_size                   4    {metadata}\n"
            f"mru_evictable_metadata          4    {evictable}\n")


def test_buffers_the_arc_can_still_evict_are_no_leak_but_held_ones_are():
    """zvol-dio head, TCG, after export: 2 metadata buffers (8 KiB) left in the MRU/MFU,
    all evictable; drop_caches does not shrink the ARC below arc_c_min."""
    rules = kstats.load_rules()
    base = {"abdstats": kstats.parse(_abd(1, struct=224)), "arcstats": kstats.parse(_arc(0, 0))}
    cached = {"abdstats": kstats.parse(_abd(3, struct=672)),
              "arcstats": kstats.parse(_arc(8192, 8192))}
    assert [b for b in kstats.leaks(rules, base, cached) if b.kind == "leak"] == []
    held = {"abdstats": kstats.parse(_abd(3, struct=672)),
            "arcstats": kstats.parse(_arc(8192, 0))}
    found = {b.name for b in kstats.leaks(rules, base, held) if b.kind == "leak"}
    assert found == {"struct_size", "scatter_cnt", "metadata_size"}


def test_the_leak_check_says_when_it_cannot_judge():
    rules = kstats.load_rules()
    assert {r.file for r in rules.returns} >= {"abdstats", "arcstats"}
    notes: list[str] = []
    assert ondisk.leak_findings(_FakeZfs(["other"], ""), rules, {"abdstats": {}}, notes) == []
    assert "other pools imported (other)" in notes[-1]
    assert ondisk.leak_findings(_FakeZfs([], ""), rules, None, notes) == []
    assert "no load-time baseline" in notes[-1]


def test_a_fault_on_a_whole_disk_is_declared_for_its_partition():
    """zfs-2.3.9 names the vdev of a whole disk by its partition (nvme0n1p1); the
    zinject case named the disk (found by the release-line run)."""
    from suite.judges.expect import same_disk
    le = Leaves()
    le.from_zinject(("-d", "/dev/nvme0n1", "-e", "corrupt", "-T", "read", "-f", "100", "tank"))
    assert le.allows_errors("/dev/nvme0n1p1", "cksum") and le.allows_errors("nvme0n1", "cksum")
    assert not le.allows_errors("/dev/nvme1n1p1", "cksum")
    assert not le.allows_errors("/dev/nvme0n1p1", "read")
    assert same_disk("sda1", "sda") and not same_disk("sdab", "sda")
    assert not same_disk("nvme0n10", "nvme0n1p") and not same_disk("x", "")


def test_a_data_fault_may_count_as_a_read_error_of_the_vdev_that_read_it():
    le = Leaves()
    le.from_zinject(("-t", "data", "-e", "io", "-T", "read", "/tmp/zfs/tank/case/eio.bin"))
    assert le.allows_errors("/dev/nvme1n1p1", "read") and not le.allows_errors("x", "cksum")
    assert le.data_errors


class _Calls:
    """Records the order of a dataset's release: zfs calls and thorough steps."""
    def __init__(self, destroy_rc: int = 0) -> None:
        self.calls: list[str] = []
        self.rc = destroy_rc

    def zfs(self, *args, **kw) -> _FakeGuestRun:
        self.calls.append("zfs " + " ".join(args))
        r = _FakeGuestRun("")
        r.rc = self.rc
        return r

    def scrub(self) -> None:
        self.calls.append("scrub")

    def exported(self) -> None:
        self.calls.append("exported")


def test_thorough_scrubs_the_cases_data_before_destroying_it():
    """A block the case wrote wrong and never read is only reachable before its
    dataset is destroyed; zdb's accounting is most telling after the frees."""
    from suite.plugin.fixtures import release_dataset
    c = _Calls()
    assert release_dataset(c, "tank/case", c) is True
    assert c.calls == ["scrub", "zfs destroy -R -f tank/case", "exported"]
    c = _Calls(destroy_rc=1)
    assert release_dataset(c, "tank/case", c) is False
    assert c.calls == ["scrub", "zfs destroy -R -f tank/case"]       # no export of a pool in doubt
    c = _Calls()
    assert release_dataset(c, "tank/case", None) is True and c.calls == ["zfs destroy -R -f tank/case"]


def test_the_thorough_scrub_reads_status_around_it():
    class Z:
        leaves = None
        def __init__(self) -> None:
            self.calls: list[tuple] = []
        def zpool(self, *a, **kw) -> _FakeGuestRun:
            self.calls.append(a)
            return _FakeGuestRun(STATUS_HEALED if len(self.calls) > 1 else STATUS_CLEAN)
    z = Z()
    [f] = ondisk.scrub(z, "tank", timeout=60)
    assert z.calls == [("status", "-pvP", "tank"), ("scrub", "-w", "tank"),
                       ("status", "-pvP", "tank")]
    assert f.kind == "ondisk:scrub"


def test_a_canary_names_the_judges_that_stayed_silent():
    from suite.guest.lifecycle import CaseEnd
    from suite.plugin.fixtures import canary_missing
    from suite.symptoms import Symptom
    end = CaseEnd("after-case", [Symptom("ondisk:scrub", "tank: CKSUM+1"),
                                 Symptom("pool:data-errors", "1 data errors")])
    assert canary_missing(("ondisk:scrub",), end) == []
    assert canary_missing(("ondisk:scrub", "ondisk:zdb"), end) == ["ondisk:zdb"]
    assert canary_missing(("taint:U",), CaseEnd()) == ["taint:U"]


# -- kmemleak (kernels booted with kmemleak=on: the debian-6.1-debug profile) -------------

KMEMLEAK = """\
unreferenced object 0xffff88800a3c1e00 (size 512):
  comm "z_wr_iss", pid 1234, jiffies 4294901234 (age 12.340s)
  hex dump (first 32 bytes):
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  ................
  backtrace:
    [<ffffffff8143a1b2>] __kmem_cache_alloc_node+0x1b2/0x2e0
    [<ffffffff813b8c4e>] __kmalloc_node+0x4e/0x140
    [<ffffffffc03f12a0>] spl_kmem_alloc_impl+0xb0/0x110 [spl]
    [<ffffffffc06a77e1>] zfs_uio_get_dio_pages_alloc+0x61/0x2a0 [zfs]
    [<ffffffffc06a9c10>] zfs_write+0x3c0/0xf00 [zfs]
unreferenced object 0xffff88800b000000 (size 64):
  comm "swapper/0", pid 1, jiffies 4294892296 (age 80.176s)
  backtrace:
    [<ffffffff8143a1b2>] __kmem_cache_alloc_node+0x1b2/0x2e0
    [<ffffffff81c0ffee>] virtio_dev_probe+0x1e/0x300
unreferenced object 0xffff88800a3c2000 (size 512):
  comm "z_wr_iss", pid 1234, jiffies 4294901240 (age 12.300s)
  backtrace (crc 5a1b2c3d):
    [<ffffffffc03f12a0>] spl_kmem_alloc_impl+0xb0/0x110 [spl]
    [<ffffffffc06a77e1>] zfs_uio_get_dio_pages_alloc+0x61/0x2a0 [zfs]
"""


def test_kmemleak_leaks_with_an_openzfs_frame_are_findings_by_module():
    from suite.judges import kmemleak
    leaks = kmemleak.parse(KMEMLEAK)
    assert [(lk.size, lk.module) for lk in leaks] == [(512, "spl"), (64, None), (512, "spl")]
    assert leaks[0].comm == "z_wr_iss" and leaks[0].age == "12.340s"
    assert leaks[0].where().startswith("spl_kmem_alloc_impl+0xb0/0x110 [spl] <- "
                                       "zfs_uio_get_dio_pages_alloc")
    after = Snapshot.parse(f"=== tainted\n{4097 | 8192}\n=== kmemleak\n{KMEMLEAK}")
    j = judge(snap(), after, Leaves(), RULES)
    assert kinds(j) == ["kmemleak:spl"]
    assert "2 unreferenced object(s), 1024 bytes" in j.findings[0].detail
    assert "kmemleak (2 OpenZFS, 1 other)" in j.checked


def test_no_kmemleak_is_neither_a_check_nor_a_finding_and_an_empty_scan_is_clean():
    assert "kmemleak" not in judge(snap(), snap(), Leaves(), RULES).text()
    after = Snapshot.parse(f"=== tainted\n{4097 | 8192}\n=== kmemleak\n")
    j = judge(snap(), after, Leaves(), RULES)
    assert j.findings == [] and "kmemleak (0 OpenZFS, 0 other)" in j.checked


def test_the_kmemleak_steps_are_quiet_without_it_and_report_with_it(tmp_path, monkeypatch):
    import subprocess

    from suite.judges import kmemleak
    monkeypatch.setattr(kmemleak, "PATH", str(tmp_path / "kmemleak"))
    run = lambda c: subprocess.run(["bash", "-c", c], capture_output=True, text=True)
    for cmd in (kmemleak.before_command(), kmemleak.after_command("=== ")):
        r = run(cmd)
        assert r.returncode == 0 and r.stdout == ""      # a kernel without kmemleak
    (tmp_path / "kmemleak").write_text("")
    assert run(kmemleak.after_command("=== ")).stdout.startswith("=== kmemleak\n")
    assert "clear" in before_script("zpool", RULES.collect)
    assert "echo scan" in after_script("zpool", RULES.collect)


def test_the_thorough_export_names_what_each_step_cost():
    """--thorough costs a case 25-106 s under TCG; ondisk.txt says which step."""
    ticks = iter([0.0, 2.0, 2.0, 2.5, 2.5, 40.0, 40.0, 43.0])
    steps = ondisk.Steps(clock=lambda: next(ticks))
    for name in ("export", "gauges", "zdb", "import"):
        with steps(name):
            pass
    assert str(steps) == "export 2.0, gauges 0.5, zdb 37.5, import 3.0"
    with pytest.raises(RuntimeError):           # a step that fails is still timed
        with ondisk.Steps(clock=iter([0.0, 1.0]).__next__)("zdb"):
            raise RuntimeError("zdb died")


def test_a_case_thorough_cannot_judge_on_disk_says_why():
    """The whole-selection run of #21 had 4 cases with no ondisk.txt at all: a power
    cut, a panic, a case that left its pool; each now names its reason."""
    from types import SimpleNamespace

    from suite.plugin.fixtures import thorough_skipped
    from suite.report.page.sections import UNCHECKED
    ok = SimpleNamespace(replaced_by=None, pool_spec="stripe")
    assert thorough_skipped(ok, in_doubt=False) == ""
    assert "in doubt" in thorough_skipped(ok, in_doubt=True)
    cut = SimpleNamespace(replaced_by=ok, pool_spec="stripe")
    assert "power" in thorough_skipped(cut, in_doubt=False)
    gone = SimpleNamespace(replaced_by=None, pool_spec=None)
    why = thorough_skipped(gone, in_doubt=False)
    assert "exported or destroyed" in why
    m = UNCHECKED.match(f"on-disk checks not run: {why}, not checked")
    assert m and m.group(2) == f"on-disk checks not run: {why}"


# -- lockdep (the debian-6.1-debug profile): off after its first report ----------------------
LOCKDEP_STATS = """ lock-classes:                         1862 [max: 8192]
 direct dependencies:                 9817 [max: 32768]
 debug_locks:                            {on}
"""


def test_lockdep_turned_off_is_not_checked_never_a_silent_pass():
    on = Snapshot.parse(f"=== tainted\n{4097}\n=== lockdep\n{LOCKDEP_STATS.format(on=1)}")
    j = judge(snap(), on, Leaves(), RULES)
    assert "lockdep (validating)" in j.checked and not j.findings
    assert not [u for u in j.unchecked if "lockdep" in u]
    off = Snapshot.parse(f"=== tainted\n{4097}\n=== lockdep\n{LOCKDEP_STATS.format(on=0)}")
    j = judge(snap(), off, Leaves(), RULES)
    assert not any("lockdep" in c for c in j.checked) and not j.findings
    assert [u for u in j.unchecked if u.startswith("lockdep: turned off")]
    assert "lockdep" not in judge(snap(), snap(), Leaves(), RULES).text()   # no lockdep


def test_the_lockdep_step_reads_debug_locks_only_where_it_exists(tmp_path, monkeypatch):
    import subprocess

    from suite.judges import lockdep
    run = lambda c: subprocess.run(["bash", "-c", c], capture_output=True, text=True)
    monkeypatch.setattr(lockdep, "PATH", str(tmp_path / "lockdep_stats"))
    assert run(lockdep.after_command("=== ")).stdout == ""
    (tmp_path / "lockdep_stats").write_text(LOCKDEP_STATS.format(on=0))
    out = run(lockdep.after_command("=== ")).stdout
    assert out.startswith("=== lockdep\n") and lockdep.watching(out) is False


# -- pinned pages (/proc/vmstat FOLL_PIN counters) ----------------------------------------------
def _pins(acquired: int, released: int) -> str:
    return f"nr_foll_pin_acquired {acquired}\nnr_foll_pin_released {released}\n"


def test_pages_pinned_during_a_case_and_not_unpinned_are_a_finding():
    before = Snapshot.parse(f"=== tainted\n4097\n=== pins\n{_pins(100, 100)}")
    clean = Snapshot.parse(f"=== tainted\n4097\n=== pins\n{_pins(612, 612)}")
    j = judge(before, clean, Leaves(), RULES)
    assert not j.findings and "pinned pages (0 held, 0 before)" in j.checked
    leak = Snapshot.parse(f"=== tainted\n4097\n=== pins\n{_pins(612, 607)}")
    j = judge(before, leak, Leaves(), RULES)
    assert kinds(j) == ["pins:leak"] and j.findings[0].detail.startswith("5 page(s) pinned")
    over = Snapshot.parse(f"=== tainted\n4097\n=== pins\n{_pins(612, 614)}")
    assert kinds(judge(before, over, Leaves(), RULES)) == ["pins:overrelease"]


def test_pins_held_before_the_case_are_not_the_cases_and_no_counters_is_not_checked():
    before = Snapshot.parse(f"=== tainted\n4097\n=== pins\n{_pins(100, 90)}")
    after = Snapshot.parse(f"=== tainted\n4097\n=== pins\n{_pins(300, 290)}")
    assert not judge(before, after, Leaves(), RULES).findings
    j = judge(snap(), snap(), Leaves(), RULES)
    assert [u for u in j.unchecked if u.startswith("pinned pages:")]


def test_the_pins_step_prints_the_counters_on_this_host():
    import subprocess

    from suite.judges import pins
    out = subprocess.run(["bash", "-c", pins.command("=== ")], capture_output=True,
                         text=True).stdout
    if "nr_foll_pin_acquired" not in out:
        pytest.skip("this kernel's /proc/vmstat has no FOLL_PIN counters (before 5.7)")
    assert out.startswith("=== pins\n") and pins.held(sections(out)["pins"]) is not None
