"""What a loaded build can do, in one place (issue #25).

Cases ask for module parameters by name; a stable line lacks some of them (the 2.3
line has no ``zfs_dio_strict``, stock has no async switch). When a build is loaded
the suite records, once per run, what it has and how it behaves where a knob is
missing, so the report and every table can say which behaviour was tested. The
rules are data: a row per capability, the parameters that reveal it, and the
behaviour of a build without them where that behaviour is known.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from suite.guest.params import ASYNC_PARAM, COUNTER_PARAMS, STRICT_PARAM

KSTAT_DIR = "/proc/spl/kstat/zfs"
FILE = "capabilities.json"


@dataclass(frozen=True)
class Rule:
    """One capability: revealed by the first of ``params`` the build has."""
    name: str
    params: tuple[str, ...]
    present: str            # what the value means, ``{p}={v}`` are filled in
    absent: str             # the build's behaviour without any of the params


RULES: tuple[Rule, ...] = (
    Rule("Direct I/O", ("zfs_dio_enabled",),
         "{p}={v} (1: O_DIRECT bypasses the ARC where aligned)",
         "no Direct I/O: O_DIRECT is served through the ARC (before 2.3)"),
    Rule("misaligned O_DIRECT", (STRICT_PARAM,),
         "{p}={v} (0: falls back to the ARC, 1: refused with EINVAL)",
         "always refused with EINVAL (no zfs_dio_strict: the 2.3 line's fixed behaviour)"),
    Rule("Direct I/O write verify", ("zfs_vdev_direct_write_verify",), "{p}={v}",
         "no write verify of Direct I/O writes"),
    Rule("block cloning", ("zfs_bclone_enabled",), "{p}={v}",
         "no block cloning: copy_file_range copies"),
    Rule("async O_DIRECT (async-dio)", (ASYNC_PARAM,),
         "{p}={v} (0: synchronous, 1: libaio/io_uring through the per-pool taskq)",
         "no async path: libaio/io_uring O_DIRECT completes synchronously"),
    Rule("async taskq depth (async-dio)", ("zfs_async_dio_task_depth",), "{p}={v}",
         "no per-pool async taskq"),
    Rule("pinned-page counters (async-dio)", COUNTER_PARAMS, "{p} readable",
         "no pinned-copy counters: cases cannot prove zero copies"),
    Rule("zvol Direct I/O (zvol-dio)", ("zvol_dio_enabled",), "{p}={v}",
         "no zvol Direct I/O: zvol O_DIRECT goes through the ARC"),
    Rule("zvol blk-mq", ("zvol_use_blk_mq",), "{p}={v}", "no blk-mq zvol queue"),
)


@dataclass(frozen=True)
class Capability:
    name: str
    have: bool
    value: str              # the parameter and its value, or "" without
    behaviour: str          # what the build does here, in words


BASIC_TOOLS = ("zfs", "zpool", "zinject")


def capabilities(params: dict[str, str], kstats: list[str], tools: list[str] | None = None,
                 features: list[str] | None = None, zts: bool = False) -> list[Capability]:
    """The build's capabilities from its module parameters (name -> value), the
    kstats it exposes, the programs it built (zdb beside zfs/zpool/zinject), whether
    its ZFS Test Suite was built, and the features its series declare."""
    out = []
    for rule in RULES:
        p = next((p for p in rule.params if p in params), None)
        if p is None:
            out.append(Capability(rule.name, False, "", rule.absent))
        else:
            out.append(Capability(rule.name, True, f"{p}={params[p]}",
                                  rule.present.format(p=p, v=params[p])))
    ks = sorted(kstats)
    out.append(Capability("kstats", bool(ks), f"{len(ks)} files",
                          ", ".join(ks) if ks else f"none under {KSTAT_DIR}"))
    extra = sorted(set(tools or []) - set(BASIC_TOOLS)) + (["ZTS"] if zts else [])
    out.append(Capability("optional tools", bool(extra), ", ".join(extra),
                          "built: " + ", ".join(extra) if extra else
                          "zpool, zfs, zinject only (no ZTS, no zdb)"))
    feats = sorted(features or [])
    out.append(Capability("series features", bool(feats), ", ".join(feats),
                          ", ".join(feats) if feats else "none declared (stock or a patch "
                                                           "folder)"))
    return out


def kstat_command() -> str:
    return f"ls -1 {KSTAT_DIR} 2>/dev/null; true"


def write(run_dir: Path, caps: list[Capability]) -> Path:
    """``build/capabilities.json`` in the run's folder (atomic: xdist workers race)."""
    out = run_dir / "build" / FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{FILE}.{os.getpid()}")
    tmp.write_text(json.dumps([asdict(c) for c in caps], indent=1) + "\n")
    tmp.replace(out)
    return out


def load(path: Path) -> list[Capability]:
    return [Capability(**d) for d in json.loads(path.read_text())]


def lines(caps: list[Capability]) -> list[str]:
    """``name: behaviour`` for a terminal or a text table."""
    return [f"{c.name:34s} {c.behaviour}" for c in caps]
