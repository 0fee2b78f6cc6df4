"""virtme-ng as the suite runs it: the tools, the guest's keepalive script, SSH keys.

The guest is ``vng --run KERNEL ... --ssh PORT --ssh-tcp --verbose -- <keepalive>``:
the script keeps the guest up without an interactive console, ``--verbose``
sends the kernel console (earlyprintk + loglevel 7) to vng's stderr, and SSH
over a slirp host forward on 127.0.0.1:PORT is how the host drives it.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from suite.errors import VMError
from suite.vm.ssh import virtme_key
from suite.locks import file_lock
from suite.vm.accel import QEMU, guest_qemu

VNG = "vng"
HOSTFWD_FAILED = "Could not set up host forwarding rule"    # qemu's slirp: the port is taken
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")
# The guest's main script: keep the guest up (its exit powers the guest off).
# Before that, repair the network if udev renamed eth0 (virtme-ng-init only
# configures "eth0"). That happens when the host root has /.dockerenv: the
# guest's udevd then thinks it runs in a container, reads net.ifnames from
# /proc/1/cmdline instead of /proc/cmdline and renames eth0 -> enp0sN in a race
# with virtme-ng-init; SSH never answers. slirp always leases 10.0.2.15.
#
# wait_ready() waits for READY_FILE, i.e. for this script, not just for sshd
# (which virtme-ng-init starts earlier, in parallel).
#
# Also make root's login shell /bin/sh in the guest (/etc is a guest-private
# overlay): sshd runs every command through the login shell, and bash run by
# sshd sources ~/.bashrc even for "bash -c" - on a host whose .bashrc runs
# e.g. "pyenv init" that costs 10 s per command under TCG.
KEEPALIVE_SCRIPT = r"""
sed -i -E 's#^(root:([^:]*:){5})[^:]*$#\1/bin/sh#' /etc/passwd
if ! ip -4 -o addr show dev eth0 2>/dev/null | grep -q inet; then
  for n in /sys/class/net/*; do
    n=${n##*/}; [ "$n" = lo ] && continue
    ip link set "$n" up; ip addr add 10.0.2.15/24 dev "$n"; ip route replace default via 10.0.2.2 dev "$n"
    echo "ozvm: no IPv4 on eth0 (renamed by udev?); configured $n as 10.0.2.15/24" > /dev/kmsg
    { ip -o -4 addr; ip -o link; ip route; } 2>&1 | sed 's/^/ozvm: /' > /dev/kmsg
    break
  done
fi
echo ready > /run/ozvm-ready
echo "ozvm: guest ready" > /dev/kmsg
exec sleep infinity
"""
READY_FILE = "/run/ozvm-ready"
# Every guest's kernel command line: SysRq for the D-state stacks; no_timer_check
# because under TCG on a busy host the IO-APIC timer check can miss its ticks
# and panic the boot ("IO-APIC + timer doesn't work!"), seen with three guests
# and a build on two cores.
BASE_APPEND = ("sysrq_always_enabled", "no_timer_check")
KEEPALIVE_CMD = ["bash", "-c", KEEPALIVE_SCRIPT.strip()]

QEMU_OPTS_ENV = "OZFS_VMCI_QEMU_OPTS"


def env_qemu_opts(workdir: Path) -> list[str]:
    """Extra qemu options for every guest from $OZFS_VMCI_QEMU_OPTS, to look into the
    device models while a case runs, e.g. ``-D {workdir}/qemu.log -trace dma_map_wait``
    (``{workdir}``: the guest's folder in the run, so the log stays with its console)."""
    raw = os.environ.get(QEMU_OPTS_ENV, "").strip()
    return [a.replace("{workdir}", str(workdir)) for a in shlex.split(raw)] if raw else []


def qemu_binary_args() -> list[str]:
    """``--qemu`` for vng when the guests run on another qemu ($OZFS_VMCI_QEMU)."""
    return [] if guest_qemu() == QEMU else ["--qemu", guest_qemu()]


def require_tools() -> None:
    """VMError naming what is missing to boot guests."""
    missing = [t for t in (VNG, guest_qemu()) if shutil.which(t) is None]
    if missing:
        raise VMError(f"missing {', '.join(missing)} in PATH",
                      fix="pip install virtme-ng; apt-get install qemu-system-x86")


def check_safe_path(path: Path, what: str) -> None:
    """vng hands --qemu-opts to a shell unquoted and qemu splits options on ','."""
    if not SAFE_PATH.match(str(path)):
        raise VMError(f"{what} {path} contains characters vng/qemu cannot pass through "
                      "(spaces, commas, quotes ...)",
                      fix="use a workdir whose path only has letters, digits and _ . / + -")


def ensure_vng_ssh_keys() -> None:
    """Create vng's SSH keys once, under a lock.

    vng creates them on every ``--ssh`` start if missing; two first starts at
    once race (the second ssh-keygen asks "Overwrite (y/n)?" and fails).
    """
    key = virtme_key()
    ssh_dir = key.parent
    ssh_dir.mkdir(parents=True, exist_ok=True)
    (ssh_dir / "etc" / "ssh").mkdir(parents=True, exist_ok=True)
    with file_lock(ssh_dir / ".ozvm-keygen.lock", "virtme-ng's SSH key generation", timeout=300):
        try:
            subprocess.run(["ssh-keygen", "-A", "-f", str(ssh_dir)], check=True,
                           capture_output=True, timeout=120)
            if not key.exists() or not key.with_suffix(".pub").exists():
                key.unlink(missing_ok=True)
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                               check=True, capture_output=True, timeout=60)
        except FileNotFoundError as exc:
            raise VMError("ssh-keygen not found", fix="apt-get install openssh-client openssh-server") from exc
        except subprocess.CalledProcessError as exc:
            raise VMError(f"ssh-keygen failed in {ssh_dir}", fix="check permissions of that directory",
                          detail=exc.stderr.decode(errors="replace")) from exc
