"""The hand-written reproducers of patches/upstream/repro/<id>/: safe to hand a
maintainer (no blob, no default disk, a pool of their own, cleaned up), valid bash,
C that compiles; and how ``findings verify --plain`` runs one."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from suite.errors import SuiteError
from suite.campaign import plainrepro

ROOT = Path(__file__).resolve().parent.parent
REPRO = ROOT / "patches" / "upstream" / "repro"
KINDS = {f["id"]: f["kinds"] for f in tomllib.loads(
    (ROOT / "patches" / "upstream" / "findings.toml").read_text())["findings"]}
FINDINGS = list(KINDS)
FOLDERS = sorted(p for p in REPRO.iterdir() if p.is_dir())
C_FILES = sorted(REPRO.glob("*/*.c"))


def test_every_finding_has_a_plain_reproducer():
    assert sorted(p.name for p in FOLDERS) == sorted(FINDINGS)


SCRIPTS = sorted(sh for d in FOLDERS for sh in d.glob("*.sh"))


def test_every_folder_has_its_repro_sh():
    assert [d.name for d in FOLDERS if not (d / "repro.sh").exists()] == []


@pytest.fixture(params=SCRIPTS, ids=[f"{p.parent.name}/{p.name}" for p in SCRIPTS])
def script(request) -> tuple[Path, str]:
    """Every script of a reproducer folder (repro.sh, and any other a finding's real
    caller needs, e.g. an NFS client's nfs.sh) is held to the same rules."""
    return request.param, request.param.read_text()


def test_is_valid_bash(script):
    sh, _ = script
    r = subprocess.run(["bash", "-n", str(sh)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_carries_no_blob_and_nothing_of_the_suite(script):
    _, text = script
    assert not re.search(r"[A-Za-z0-9+/=]{200,}", text), "a base64 blob"
    assert "base64" not in text
    assert not re.search(r"\bsuite\b|PYTHONPATH|ozfs", text), "refers to the suite"


def test_no_default_disk(script):
    """A real disk only when given (--disk / REPRO_DISK); otherwise file vdevs in a
    fresh temporary directory."""
    _, text = script
    assert "/dev/nvme" not in text and "/dev/sd" not in text
    assert 'DISK="${REPRO_DISK:-}"' in text
    assert re.search(r'DIR="\$\(mktemp -d ', text)
    assert 'truncate -s 1G "$VDEV"' in text
    assert "zpool create -f" not in text, "a disk in use is the user's to free, not ours"


def test_a_pool_of_its_own_refused_when_it_exists(script):
    _, text = script
    assert 'POOL="repro-$$"' in text
    check = text.find('zpool list "$POOL" >/dev/null 2>&1 && untested')
    assert check != -1, "does not refuse an existing pool name"
    assert check < text.find("zpool create"), "checks after creating"


def test_cleans_up_only_what_it_created(script):
    """trap cleanup EXIT; the only zpool destroy is in cleanup(), behind CREATED
    (set right after zpool create succeeded); the temporary directory removed."""
    _, text = script
    assert "trap cleanup EXIT" in text
    body = re.search(r"^cleanup\(\) \{\n(.*?)^\}", text, re.S | re.M)
    assert body, "no cleanup() function"
    assert text.count("zpool destroy") == body.group(1).count("zpool destroy") == 1
    assert "$CREATED" in body.group(1) and 'rm -rf "$DIR"' in body.group(1)
    create = text.find("zpool create")
    assert re.match(r'.*?\n\s*CREATED=1\n', text[create:], re.S)
    assert "zpool destroy -f tank" not in text


def test_says_its_verdict_by_exit_code(script):
    _, text = script
    assert "REPRODUCED:" in text and "NOT REPRODUCED" in text and "NOT TESTED" in text
    assert re.search(r"exit 1\b", text) and re.search(r"exit 0\b", text)
    assert re.search(r"untested\(\) \{[^}]*exit 2", text)
    assert "Exit: 1 REPRODUCED, 0 NOT REPRODUCED, 2 could not test." in text


def test_debug_needs_are_said(script):
    """A finding whose symptom needs lockdep or an --enable-debug build says so in
    its header (and refuses a kernel without lockdep)."""
    sh, text = script
    header = text.split("\nset -u", 1)[0]
    if "kernel:lockdep" in KINDS[sh.parent.name]:
        assert "NEEDS A KERNEL WITH LOCKDEP" in header
        assert "/proc/lockdep_stats" in text
    if "VERIFY" in header:
        assert "--enable-debug" in header and "reboot" in text


def test_refuses_to_run_as_a_user(script, tmp_path):
    """Not root: exit 2 before it touches anything (an ``id`` that says 1000)."""
    sh, _ = script
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text("#!/bin/sh\necho 1000\n")
    (fake / "id").chmod(0o755)
    for tool in ("zpool", "zfs", "truncate"):           # would leave a mark if called
        (fake / tool).write_text(f"#!/bin/sh\ntouch {tmp_path}/called-{tool}\n")
        (fake / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", str(sh)], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 2 and "NOT TESTED" in r.stdout, r.stdout + r.stderr
    assert not list(tmp_path.glob("called-*"))


def _missing_header(src: str) -> str | None:
    cc = shutil.which("cc")
    if cc is None:
        return "no cc"
    for h in re.findall(r"#include <([^>]+)>", src):
        r = subprocess.run([cc, "-fsyntax-only", "-x", "c", "-"], input=f"#include <{h}>\n",
                           capture_output=True, text=True)
        if r.returncode != 0:
            return f"no <{h}>"
    return None


@pytest.mark.parametrize("c", C_FILES, ids=[p.parent.name for p in C_FILES])
def test_c_compiles(c):
    why = _missing_header(c.read_text())
    if why:
        pytest.skip(f"{why}: cannot check {c.name}")
    r = subprocess.run(["cc", "-fsyntax-only", "-Wall", "-Werror", str(c)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("c", C_FILES, ids=[p.parent.name for p in C_FILES])
def test_the_script_compiles_its_c_into_the_temporary_directory(c):
    text = (c.parent / "repro.sh").read_text()
    assert re.search(r'cc .*-o "\$DIR/repro" "\$HERE/repro\.c"', text), \
        "repro.sh must build repro.c into its mktemp directory (the folder may be read-only)"


def test_verify_runs_it_without_the_suite():
    cmd = plainrepro.command("/tmp/plain-repro/x.1", ["/b/src"], ["/b/src/.libs"], "--rounds 5")
    assert cmd.startswith("cd /tmp/plain-repro/x.1 && env -u PYTHONPATH ")
    assert "PATH=/b/src/.libs:/b/src:" in cmd and "LD_LIBRARY_PATH=/b/src/.libs" in cmd
    assert cmd.endswith("bash ./repro.sh --rounds 5")


def test_verify_copies_only_the_folder_files(tmp_path, monkeypatch):
    d = tmp_path / "upstream" / "repro" / "some-finding"
    (d / "sub").mkdir(parents=True)
    (d / "repro.sh").write_text("#!/bin/bash\n")
    (d / "repro.c").write_text("int main(void){return 0;}\n")
    (d / "sub" / "x").write_text("")
    monkeypatch.setenv("OZFS_VMCI_PATCHES", str(tmp_path))
    assert plainrepro.folder("some-finding") == d
    assert [p.name for p in plainrepro.files(d)] == ["repro.c", "repro.sh"]
    with pytest.raises(SuiteError, match="no-such-finding"):
        plainrepro.folder("no-such-finding")


def test_a_lost_guest_is_judged_by_the_finding_signature(tmp_path):
    vm = tmp_path / "vms" / "g1"
    vm.mkdir(parents=True)
    (vm / "console.log").write_text(
        "[   47.1] VERIFY0(len) failed (-1048576)\n[   47.2] PANIC at zfs_uio.c:200:zfs_uio_pin_user_pages()\n")
    assert plainrepro.console_verdict(r"VERIFY0\(len\) failed", tmp_path)[0] == 1
    assert plainrepro.console_verdict(r"zil_parse", tmp_path)[0] == 2
    assert plainrepro.console_verdict("", tmp_path)[0] == 2


def test_the_seen_on_table_runs_each_line_and_says_what_each_answered(tmp_path, monkeypatch):
    """--lines: one run per ref, in the order given; the table names each ref's verdict,
    is kept under results, and the exit is 1 when any line reproduced it."""
    from suite.campaign import plainrepro
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    answers = {"master": 0, "zfs-2.4.4": 1, "zfs-2.3.9": 2}
    asked = []

    def fake(fid, opts, accel="auto", args=""):
        asked.append(opts)
        return answers[opts]
    rc, seen = plainrepro.run_lines("x", lambda ref: ref, list(answers), run=fake)
    assert asked == ["master", "zfs-2.4.4", "zfs-2.3.9"] and rc == 1
    table = plainrepro.seen_table("x", seen)
    assert "| master | NOT REPRODUCED |" in table and "| zfs-2.4.4 | REPRODUCED |" in table
    assert "| zfs-2.3.9 | NOT TESTED |" in table
    assert plainrepro.run_lines("x", lambda r: r, ["master"], run=lambda *a, **k: 0)[0] == 0
    assert plainrepro.run_lines("x", lambda r: r, ["master", "zfs-2.3.9"],
                                run=lambda f, o, **k: 0 if o == "master" else 2)[0] == 2


KERNEL_REPORTS = ("BUG: KASAN: slab-out-of-bounds in __get_user_pages+0x3/0x9",
                  "BUG: KFENCE: memory corruption in spl_kmem_free_impl+0x47/0x60 [spl]",
                  "VERIFY0(len) failed (-1048576)", "BUG: unable to handle page fault",
                  "general protection fault, probably for non-canonical address")


def test_a_script_that_reads_dmesg_knows_every_kernel_report(script):
    """A reproducer that looks for a kernel report in dmesg sees KASAN's and KFENCE's
    too (their title is "BUG: KASAN: ...": a pattern of "BUG " with a space missed the
    KFENCE report a production build gave on 2026-12-06)."""
    _, text = script
    for pattern in re.findall(r'grep -E "([^"]*PANIC at[^"]*)"', text):
        for line in KERNEL_REPORTS:
            assert re.search(pattern.replace("\\$", "$"), line), (pattern, line)
