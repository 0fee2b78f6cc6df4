"""Sequences as data: :class:`Op` and :class:`Sequence`, to and from JSON (the
format ``python -m suite.ioengine explore-run`` reads), and one line per op
for a person: ``pwrite libaio O_DIRECT off=8192 len=12288 buf=anon_offset``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

# One list of interfaces and buffer sources: the guest's, which parses them.
from suite.ioengine.explore.origins import ORIGINS
from suite.ioengine.explore.requests import SOURCES as BUF_SOURCES
from suite.ioengine.explore.step import CRASH_OPS, IFACES, POWER_OPS, ZFS_OPS, Step

__all__ = ["BATCH_OPS", "HELD_OPS", "OUTWARD", "CRASH_OPS", "POWER_OPS", "BUF_SOURCES", "ORIGINS", "FORMAT_VERSION", "IFACES", "IO_OPS", "OP_KINDS", "READS", "RANGE_OPS",
           "SYNC_OPS", "TARGETS", "TRANSFER_OPS", "WRITES", "ZFS_OPS", "Op", "Sequence", "recordsize",
           "size_of"]

READS = ("pread", "preadv")
WRITES = ("pwrite", "pwritev")
IO_OPS = READS + WRITES
RANGE_OPS = ("mmap_read", "mmap_write", "punch_hole", "zero_range", "copy_range")
# The source file's bytes moved by the kernel: a block clone, sendfile, splice.
TRANSFER_OPS = ("clone_range", "sendfile", "splice")
SYNC_OPS = ("fsync", "fdatasync", "syncfs")
# The kernel moving the target's bytes out (into tmpfs, a pipe), and user pages in
# through a pipe (suite/ioengine/explore/outward.py).
OUTWARD = ("sendfile_out", "splice_out", "copy_out", "vmsplice_in")
# Every op the generator may emit (the guest also has "tamper", a self-test hook);
# ZFS_OPS only when the guest engine is given the ZFS commands (Choices.zfs_ops).
HELD_OPS = ("held_read", "held_write")
# Several RWF_APPEND O_DIRECT writes in one submit (suite/ioengine/explore/batch.py).
BATCH_OPS = ("append_batch",)
OP_KINDS = IO_OPS + RANGE_OPS + TRANSFER_OPS + ("truncate",) + SYNC_OPS + ZFS_OPS + \
    ("evict", "verify", "actors") + CRASH_OPS + OUTWARD + POWER_OPS + HELD_OPS + BATCH_OPS

# Version 1 still: later ops and values only add to what a sequence may say.
FORMAT_VERSION = 1
# What a sequence runs on: a file, a block device, or a zvol the session makes per run.
TARGETS = ("file", "blockdev", "zvol")

# The fields each kind uses; the others stay at their defaults and out of the JSON.
_FIELDS: dict[str, tuple[str, ...]] = {
    **{k: ("iface", "direct", "off", "len", "buf", "buf_off", "flags") for k in READS},
    **{k: ("iface", "direct", "off", "len", "buf", "buf_off", "data", "limit", "flags")
       for k in WRITES},
    "mmap_read": ("off", "len"), "mmap_write": ("off", "len", "data"),
    "punch_hole": ("off", "len"), "zero_range": ("off", "len"),
    "copy_range": ("off", "len", "src_off"), "clone_range": ("off", "len", "src_off"),
    "sendfile": ("direct", "off", "len", "src_off"), "splice": ("direct", "off", "len", "src_off"),
    "truncate": ("size",), "tamper": ("off", "len"),
    **{k: ("direct", "off", "len") for k in ("sendfile_out", "splice_out", "copy_out")},
    "vmsplice_in": ("direct", "off", "len", "data"),
    # segs actors, size requests each, their programs drawn from the seed and data
    "actors": ("off", "len", "segs", "size", "data"),
    "snapshot": ("data",), "rollback": ("data",),     # rollback: to the snapshot of that data
    # segs O_DIRECT writes of len bytes from off, submitted and never reaped; a barrier;
    # slow_ms: the pool's disks slowed meanwhile, so the writes are still in flight
    "power_cut": ("iface", "off", "len", "segs", "data", "barrier", "slow_ms"),
    # one O_DIRECT request held slow_ms by zinject -E while ``then`` runs; keep: an
    # async one's submitting thread reaps it (else the thread exits once it submitted);
    # segs: vectored, that many segments (0: one buffer, not vectored)
    "held_read": ("iface", "off", "len", "then", "slow_ms", "keep", "segs"),
    "held_write": ("iface", "off", "len", "data", "then", "slow_ms", "keep", "segs"),
    # segs appends of len bytes in one submit, the file first padded to size (a record);
    # limit=fsize: RLIMIT_FSIZE leaves room for one
    "append_batch": ("iface", "len", "segs", "data", "size", "limit"),
}


@dataclass(frozen=True)
class Op(Step):
    """One operation on the target. ``data`` names the bytes a write lays down
    (``pattern("<seed>:w<data>")`` at its offset); ``segs`` is the iovec count
    of ``preadv``/``pwritev``; ``buf_off`` moves the buffer off its alignment.
    Its fields are the guest executor's ``Step`` (one definition of an op for
    both sides); the host adds what generating and showing a sequence needs."""

    def used_fields(self) -> tuple[str, ...]:
        extra = ("segs",) if self.op in ("preadv", "pwritev") else ()
        return _FIELDS.get(self.op, ()) + extra

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        optional = ("buf_off", "slow_ms", "flags") + self._said_when_set()
        return {"op": self.op, **{k: d[k] for k in self.used_fields()
                                  if k not in optional or d[k]}}

    def _said_when_set(self) -> tuple[str, ...]:
        """Fields left out of the JSON and the rendering while unset: a limit, a kept
        submitter, a held request's segments (0: one buffer)."""
        return ("limit", "keep") + (("segs",) if self.op in HELD_OPS else ())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Op":
        known = {f.name for f in fields(cls)}
        if "op" not in d or set(d) - known:
            raise ValueError(f"not an op: {d!r} (fields: {', '.join(sorted(known))})")
        return cls(**d)

    @property
    def aligned(self) -> bool:
        """Offset, length and buffer on 4 KiB (what O_DIRECT needs everywhere)."""
        return self.off % 4096 == 0 and self.len % 4096 == 0 and self.buf_off % 4096 == 0 \
            and self.buf != "anon_offset"

    def render(self) -> str:
        """``pwrite libaio O_DIRECT off=8192 len=12288 buf=anon_offset``; the
        other ops: their name, then each field they use (``truncate size=40000``,
        ``sendfile O_DIRECT off=0 len=8192 src_off=4096``)."""
        if self.op in IO_OPS:
            words = [self.op, self.iface, "O_DIRECT" if self.direct else "buffered",
                     f"off={self.off}", f"len={self.len}", f"buf={self.buf}"]
            if self.buf_off:
                words.append(f"buf_off={self.buf_off}")
            if self.op in ("preadv", "pwritev"):
                words.append(f"segs={max(1, self.segs)}")
            if self.limit:
                words.append(f"limit={self.limit}")
            if self.flags:
                words.append(f"flags={self.flags}")
            return " ".join(words)
        hide = self._said_when_set()
        return " ".join([self.op] + [("O_DIRECT" if self.direct else "buffered")
                                     if k == "direct" else f"{k}={getattr(self, k)}"
                                     for k in self.used_fields()
                                     if k not in hide or getattr(self, k)])


@dataclass(frozen=True)
class Sequence:
    """A program for the guest: dataset properties and module parameters to run
    it under (the host sets them), the initial content, and the ops."""
    seed: int
    props: dict[str, str] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)
    ops: tuple[Op, ...] = ()
    target: str = "file"             # file | blockdev | zvol (a blockdev the session makes)
    init_size: int = 0
    file_size_max: int = 1 << 20
    # Who issues the requests: {} the engine itself; {"kind": "loop", "dio": 0|1,
    # "lbs": 512|4096} a loop device over the sequence's file (the ops go to it).
    caller: dict[str, Any] = field(default_factory=dict)
    # How ``evict`` evicts: "drop" (generated since 2026-12-06): posix_fadvise and, in a
    # guest, the kernel's caches, after each three-way read too; "" (a sequence kept
    # before): posix_fadvise alone, as it was found with (on OpenZFS before April 2026
    # it evicted nothing, and the corpus's findings need what stayed cached).
    evict: str = ""

    def with_ops(self, ops: list[Op] | tuple[Op, ...]) -> "Sequence":
        return replace(self, ops=tuple(ops))

    def to_dict(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "seed": self.seed, "target": self.target,
                "init_size": self.init_size, "file_size_max": self.file_size_max,
                "props": dict(sorted(self.props.items())),
                "params": dict(sorted(self.params.items())),
                **({"caller": dict(sorted(self.caller.items()))} if self.caller else {}),
                **({"evict": self.evict} if self.evict else {}),
                "ops": [o.to_dict() for o in self.ops]}

    def to_json(self) -> str:
        """One op a line: a person reads it, a diff shows what shrinking removed."""
        d = self.to_dict()
        ops = d.pop("ops")
        head = json.dumps(d)[:-1]
        body = ",\n".join("  " + json.dumps(o) for o in ops)
        return f"{head}, \"ops\": [\n{body}\n]}}\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sequence":
        if d.get("version", FORMAT_VERSION) != FORMAT_VERSION:
            raise ValueError(f"sequence format {d.get('version')} is not {FORMAT_VERSION}")
        if d.get("target", "file") not in TARGETS:
            raise ValueError(f"sequence target {d.get('target')!r} is not one of "
                             f"{', '.join(TARGETS)}")
        return cls(seed=int(d["seed"]), props=dict(d.get("props") or {}),
                   params={k: int(v) for k, v in (d.get("params") or {}).items()},
                   ops=tuple(Op.from_dict(o) for o in d.get("ops") or ()),
                   target=str(d.get("target", "file")), init_size=int(d.get("init_size", 0)),
                   file_size_max=int(d.get("file_size_max", 1 << 20)),
                   caller=dict(d.get("caller") or {}), evict=str(d.get("evict", "")))

    @classmethod
    def from_json(cls, text: str) -> "Sequence":
        return cls.from_dict(json.loads(text))

    def key(self) -> str:
        """The same text for the same sequence (what the shrinker caches by)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def render(self, mark: int | None = None) -> str:
        """The sequence for a person: its conditions, then one op a line
        (``mark``: the op that failed gets an arrow)."""
        lines = [f"seed {self.seed}, target {self.target}, initial size {self.init_size}"]
        c = self.caller
        if c.get("kind") == "overlay":
            lines.append("the file opened through overlayfs, its upper layer on the dataset")
        elif c.get("kind") == "nfs":
            lines.append("the file opened through an NFSv4.2 mount of the kernel's NFS server "
                         "exporting a folder of the dataset to 127.0.0.1")
        elif c:
            lines.append(f"the ops through a loop device over the file: losetup --direct-io="
                         f"{'on' if c.get('dio') else 'off'} --sector-size {c.get('lbs')}" +
                         (", ext4 made and mounted on it, the file in it (e2fsck -fn after)"
                          if c.get("kind") == "loopfs" else ""))
        if self.props and self.target == "zvol":    # a zvol's properties are set at its birth
            lines.append(f"zfs create -V {self.file_size_max} " + " ".join(
                f"-o {k}={v}" for k, v in sorted(self.props.items())) + " POOL/DATASET/VOL")
        elif self.props:
            lines.append("zfs set " + " ".join(f"{k}={v}" for k, v in sorted(self.props.items())))
        for k, v in sorted(self.params.items()):
            lines.append(f"echo {v} > /sys/module/zfs/parameters/{k}")
        for i, o in enumerate(self.ops):
            lines.append(f"{'=>' if i == mark else '  '} {i:3d}  {o.render()}")
        return "\n".join(lines)


def size_of(text: str) -> int:
    """``4K``, ``1M``, ``512`` as bytes."""
    unit = {"K": 10, "M": 20}.get(text[-1:].upper(), 0)
    return int(text[:-1] if unit else text) << unit


def recordsize(props: dict[str, str]) -> int:
    """A sequence's record (a zvol's ``volblocksize``, a file's ``recordsize``) in bytes."""
    return size_of(props.get("volblocksize") or props.get("recordsize") or "128K")

