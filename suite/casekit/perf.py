"""Benchmarks in the guest: fio jobs, the CPU they cost, and where it went.

One *cell* is one fio job (the host's fio, run in the guest: virtme-ng shares
the root) under one set of module parameters. Around it the guest's
``/proc/stat`` gives the CPU seconds every CPU spent (the zvol and taskq threads
do the copying, not fio), and ``perf record -a -e cpu-clock`` (a hrtimer, so it
works without a PMU, under TCG too) gives the share of samples in the kernel's
copy functions: the seed's ``__memcpy`` share is the number Direct I/O must
bring down.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from suite.errors import GuestError

GIB = 1 << 30
# Symbols whose samples are bytes being copied between buffers: the kernel's
# memcpy and user-copy family, and OpenZFS's copy loops between a request's
# pages and an ABD. The seed's kernel called __memcpy from zfs_uiomove_bvec_rq;
# a build here inlines it into zfs_uiomove_bvec_impl as `rep movsq` (objdump of
# zfs_uio.o): 6.8% of the samples of a 1M qd32 zvol read with Direct I/O off,
# none with it on, while the kernel family alone read 0%.
COPY_SYMBOLS = re.compile(r"^(__memcpy|memcpy\w*|__memmove|memmove\w*|copy_user\w*|"
                          r"rep_movs\w*|copy_mc\w*|_copy_(to|from)_user|__copy_user\w*|"
                          r"copy_page\w*|zfs_uiomove\w*|zfs_uiocopy\w*|abd_copy\w*)$")
# The idle loop: cpu-clock samples every CPU, busy or not. Under TCG half the
# samples can be idle, so a share of all samples would shrink with idleness;
# the copy share is taken over the busy samples (a saturated host, like the
# seed's, has next to none idle and the two agree).
IDLE_SYMBOLS = re.compile(r"^(\w*native_safe_halt|default_idle\w*|cpu_idle_poll\w*|"
                          r"intel_idle\w*|acpi_idle\w*|mwait_idle\w*|poll_idle|"
                          r"arch_cpu_idle\w*|do_idle|cpuidle_enter\w*)$")
PERF_DATA = "/tmp/ozfs-perf.data"


@dataclass(frozen=True)
class FioJob:
    rw: str                      # read | write | randread | randwrite
    bs: str                      # 4k, 128k, 1m
    iodepth: int = 1
    numjobs: int = 1
    ioengine: str = "libaio"     # libaio | io_uring | psync
    runtime_s: int = 5
    size: str = "64m"
    direct: bool = True

    def args(self, filename: str, name: str = "cell") -> list[str]:
        return ["fio", f"--name={name}", f"--filename={filename}", f"--rw={self.rw}",
                f"--bs={self.bs}", f"--iodepth={self.iodepth}", f"--numjobs={self.numjobs}",
                f"--ioengine={self.ioengine}", f"--direct={int(self.direct)}",
                f"--size={self.size}", f"--runtime={self.runtime_s}", "--time_based",
                "--group_reporting", "--output-format=json", "--randrepeat=0",
                "--norandommap", "--exitall", "--lat_percentiles=1"]


@dataclass
class CellResult:
    labels: dict[str, Any]
    bw_mib_s: float = 0.0
    iops: float = 0.0
    p99_lat_us: float = 0.0
    gib: float = 0.0
    cpu_s: float = 0.0           # every CPU of the guest, busy time
    cpu_s_per_gib: float | None = None
    copy_share: float | None = None          # % of busy cpu-clock samples in copy functions
    top_symbols: list[tuple[str, float]] = field(default_factory=list)
    symbols: list[tuple[str, float]] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_fio(text: str) -> dict[str, float]:
    """bandwidth, IOPS, p99 latency and bytes of a --group_reporting run.

    The latency is submission to completion (``lat_ns``, from
    ``--lat_percentiles=1``), not fio's completion latency (``clat_ns``): a
    synchronous O_DIRECT read served inside ``io_submit`` has a near-zero clat
    and all its time in slat, so clat would flatter the sync side of an async
    comparison. Older output without ``lat_ns`` percentiles falls back to clat."""
    start = text.find("{")
    data = json.loads(text[start:])
    job = data["jobs"][0]
    out = {"bw_mib_s": 0.0, "iops": 0.0, "p99_lat_us": 0.0, "bytes": 0}
    for side in ("read", "write"):
        s = job.get(side) or {}
        if not s.get("io_bytes"):
            continue
        out["bw_mib_s"] += s.get("bw_bytes", 0) / (1 << 20)
        out["iops"] += s.get("iops", 0.0)
        out["bytes"] += s["io_bytes"]
        pct = ((s.get("lat_ns") or {}).get("percentile")
               or (s.get("clat_ns") or {}).get("percentile") or {})
        p99 = next((v for k, v in pct.items() if k.startswith("99.000")), 0)
        out["p99_lat_us"] = max(out["p99_lat_us"], p99 / 1000)
    return out


def busy_jiffies(stat_text: str) -> tuple[int, int]:
    """(busy, total) jiffies of the ``cpu`` line of /proc/stat."""
    for line in stat_text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            idle = v[3] + (v[4] if len(v) > 4 else 0)
            return sum(v) - idle, sum(v)
    raise ValueError("no cpu line in /proc/stat")


def parse_perf_report(text: str) -> list[tuple[str, float]]:
    """``perf report --stdio --sort symbol``: [(symbol, percent)], largest first."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[[kK.]\]\s+(\S+)", line)
        if m:
            out.append((m.group(2), float(m.group(1))))
    return sorted(out, key=lambda x: -x[1])


def copy_share(symbols: list[tuple[str, float]]) -> float:
    """Percent of the busy (non-idle) samples spent in copy functions."""
    copy = sum(p for s, p in symbols if COPY_SYMBOLS.match(s))
    busy = 100.0 - sum(p for s, p in symbols if IDLE_SYMBOLS.match(s))
    return round(100.0 * copy / busy, 2) if busy > 0 else 0.0


def cell_command(fio_args: list[str], profile: bool) -> str:
    """The shell line of one cell. ``/proc/stat`` is read right around fio, inside
    the profiled command, so perf's own start-up stays out of the CPU seconds.

    That start-up is cut too: ``-B -N --no-bpf-event`` skip the build-id and BPF
    passes, and perf runs in a private mount namespace with an empty tmpfs over
    ``/lib/modules/$(uname -r)``. perf stats every file there to map module names
    to paths (6,700 stats over 9p: 130 s per cell under TCG, 5 s without);
    module symbols still come from ``/proc/kallsyms`` at report time (the build's
    zfs.ko is not under ``/lib/modules`` anyway)."""
    fio = " ".join(shlex.quote(a) for a in fio_args)
    window = (f"cat /proc/stat > /tmp/ozfs-stat.0; {fio} > /tmp/ozfs-fio.json "
              f"2>/tmp/ozfs-fio.err; rc=$?; cat /proc/stat > /tmp/ozfs-stat.1; exit $rc")
    if not profile:
        return window
    record = (f"exec perf record -q -a -e cpu-clock -B -N --no-bpf-event -o {PERF_DATA} -- "
              f"sh -c {shlex.quote(window)}")
    hide = 'mount -t tmpfs ozfs-nomods "/lib/modules/$(uname -r)" 2>/dev/null'
    return f"unshare -m sh -c {shlex.quote(hide + '; ' + record)}"


def run_cell(guest, job: FioJob, filename: str, labels: dict[str, Any], scale: float = 1.0,
             profile: bool = True) -> CellResult:
    """Run one fio job in the guest, measured."""
    res = CellResult(labels={**labels, **asdict(job)})
    r = guest.run(cell_command(job.args(filename), profile),
                  timeout=(job.runtime_s + 120) * scale, check=False)
    out = guest.run("cat /tmp/ozfs-fio.json; echo; echo '#STAT0'; cat /tmp/ozfs-stat.0; "
                    "echo '#STAT1'; cat /tmp/ozfs-stat.1; echo '#ERR'; cat /tmp/ozfs-fio.err",
                    timeout=60 * scale, check=False).stdout
    fio_text, _, rest = out.partition("#STAT0")
    s0, _, rest = rest.partition("#STAT1")
    s1, _, err = rest.partition("#ERR")
    if r.rc != 0:
        res.error = f"fio rc={r.rc}: {err.strip()[-500:]}"
        return res
    try:
        f = parse_fio(fio_text)
    except (ValueError, KeyError, IndexError) as e:
        res.error = f"unreadable fio output ({e}): {fio_text[:300]}"
        return res
    b0, _ = busy_jiffies(s0)
    b1, _ = busy_jiffies(s1)
    res.bw_mib_s, res.iops = round(f["bw_mib_s"], 1), round(f["iops"], 1)
    res.p99_lat_us = round(f["p99_lat_us"], 1)
    res.gib = f["bytes"] / GIB
    res.cpu_s = (b1 - b0) / 100.0                   # USER_HZ
    res.cpu_s_per_gib = round(res.cpu_s / res.gib, 2) if res.gib else None
    if profile:
        rep = guest.run(f"perf report -q -i {PERF_DATA} --stdio --sort symbol "
                        f"--percent-limit 0.5 2>/dev/null | head -60",
                        timeout=300 * scale, check=False).stdout
        syms = parse_perf_report(rep)
        res.top_symbols = syms[:8]
        res.symbols = syms                  # all above 0.5%: the share can be recounted
        res.copy_share = copy_share(syms) if syms else None
    return res


def require_tools(guest) -> None:
    r = guest.run("command -v fio && command -v perf", timeout=30, check=False)
    if r.rc != 0:
        raise GuestError("fio or perf is missing in the guest (it runs the host's)",
                         fix="apt-get install fio linux-perf (ci/apt-packages.txt)")
