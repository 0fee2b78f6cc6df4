"""What explore's generator may pick from: the tables of properties, module
parameters, tunables and op weights, the shapes' constants, and :class:`Choices`
(what one exploration varies and how often). The generator itself is
:mod:`suite.explore.gen`."""
from __future__ import annotations

from dataclasses import dataclass, field

from suite.explore.ops import (CRASH_OPS, OUTWARD, BUF_SOURCES, IFACES, OP_KINDS, ORIGINS,
                               TARGETS, ZFS_OPS)

PAGE = 4096
REC_128K = 128 << 10
PROP_CHOICES: dict[str, tuple[str, ...]] = {
    "recordsize": ("4K", "16K", "128K", "1M"),
    "compression": ("off", "lz4"),
    "checksum": ("fletcher4", "sha256"),
    "direct": ("standard", "always", "disabled"),
    "sync": ("standard", "always"),
    "primarycache": ("all", "metadata"),
}
PARAM_CHOICES: dict[str, tuple[int, ...]] = {
    "zfs_dio_strict": (0, 1),
    "zfs_async_dio_enabled": (0, 1),
}
# Every other tunable that changes the Direct I/O path (where the build has it), drawn
# from a generator of its own so a sequence's other draws stay what they were:
# Direct I/O switched off (and so on, where a build ships it off), write verify off,
# the async path's in-flight budget cut to 1 MiB (past it requests go synchronous).
TUNABLE_CHOICES: dict[str, tuple[int, ...]] = {
    "zfs_dio_enabled": (1, 1, 0),
    "zfs_vdev_direct_write_verify": (1, 0),
    "zfs_async_dio_max_inflight": (64 << 20, 1 << 20),
}
ZVOL_TUNABLE_CHOICES: dict[str, tuple[int, ...]] = {
    "zfs_vdev_direct_write_verify": (1, 0),
}
OP_WEIGHTS: dict[str, int] = {
    "pread": 12, "preadv": 10, "pwrite": 12, "pwritev": 10, "mmap_read": 4,
    "mmap_write": 4, "punch_hole": 3, "zero_range": 2, "copy_range": 3, "clone_range": 2,
    "sendfile": 2, "splice": 2, "truncate": 4, "fsync": 2, "fdatasync": 2, "syncfs": 1,
    "snapshot": 2, "rollback": 2, "txg_sync": 1, "evict": 3, "verify": 4,
}
# What a block device cannot do: change its size, fallocate (PUNCH_HOLE wants
# WRITE_ZEROES, ZERO_RANGE 512-byte alignment), copy_file_range and FICLONERANGE
# (regular files only), snapshot and roll back the dataset of a file.
BLOCKDEV_SKIP = ("truncate", "punch_hole", "zero_range", "copy_range", "clone_range") + \
    ZFS_OPS + CRASH_OPS
BLOCK_TARGETS = tuple(t for t in TARGETS if t != "file")
BLOCK_OPS = tuple(k for k in OP_WEIGHTS if k not in BLOCKDEV_SKIP) + ("actors",) + \
    tuple(k for k in OUTWARD if k != "copy_out")    # copy_file_range: regular files only
# A zvol's own properties (``direct`` is a filesystem property in zvol-dio at
# f194e02b0: the session keeps only those a zvol of the build has) and the
# switch of the zvol Direct I/O path, on in two sequences of three.
ZVOL_PROP_CHOICES: dict[str, tuple[str, ...]] = {
    "volblocksize": ("4K", "16K", "128K", "1M"),
    "compression": ("off", "lz4"),
    "checksum": ("fletcher4", "sha256"),
    "direct": ("standard", "always", "disabled"),
    "sync": ("standard", "always"),
    "primarycache": ("all", "metadata"),
}
# How the dataset keeps access times, from a generator of its own (a sequence's other
# draws stay what they were): relatime (the default), strict (atime=on, relatime=off:
# every read updates the inode, in the read's completion on the async path, which is
# what async-dio 8e1187c520's rollback deadlock needed) or off.
ATIME_CHOICES: dict[str, tuple[str, ...]] = {"atime": ("on", "on", "off"),
                                             "relatime": ("on", "off")}
ZVOL_PARAM_CHOICES: dict[str, tuple[int, ...]] = {"zvol_dio_enabled": (0, 1, 1)}
# The zvol's queue: blk-mq (struct request, the series' rq_for_each_segment branch)
# in ``Choices.blk_mq_share`` of the sequences, drawn from a generator of its own so a
# seed's other draws are what they were before the queue was drawn at all.
BLK_MQ_PARAM = "zvol_use_blk_mq"
ZVOL_QUEUE_CHOICES: dict[str, tuple[int, ...]] = {BLK_MQ_PARAM: (0, 1)}
SEGS = (1, 2, 3, 4, 8, 9, 16)
BUF_OFFSETS = (512, 1024, 2048, 3072, 100, 4000)
ODD_LENGTHS = (1, 511, 512, 1000, 4095, 4097, 8191, 12000, 40000)
ODD_DELTAS = (-4095, -512, -1, 1, 100, 511, 512, 2048, 4095)


@dataclass
class Choices:
    """What a generator may pick from. ``params`` are the module parameters the
    build has (one missing from it is simply not varied); ``props`` the dataset
    properties and their values (a property the build lacks: leave it out)."""
    ops: tuple[str, ...] = OP_KINDS
    ifaces: tuple[str, ...] = IFACES
    bufs: tuple[str, ...] = BUF_SOURCES
    props: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(PROP_CHOICES))
    atime: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(ATIME_CHOICES))
    params: tuple[str, ...] = ()
    param_values: dict[str, tuple[int, ...]] = field(default_factory=lambda: dict(PARAM_CHOICES))
    tunable_values: dict[str, tuple[int, ...]] = field(
        default_factory=lambda: dict(TUNABLE_CHOICES))
    direct_share: float = 0.6        # of reads and writes, O_DIRECT
    misaligned_share: float = 0.3    # of reads and writes, misaligned on purpose
    # of reads and writes, a racing buffer: rare, since its bytes are not checked
    # (a read) or become the model whatever they are (a write)
    racing_share: float = 0.08
    # of aligned O_DIRECT reads and writes (and all aligned ones on direct=always), whole
    # records: offset and length multiples of the recordsize (volblocksize), the shape
    # OpenZFS serves by Direct I/O. A page-aligned request inside a record is served
    # through the ARC (a write's partial block) and leaves the block cached for the
    # reads after it: before this, 1 request in 10 of a stock run took the Direct I/O
    # path (2026-12-06). Drawn from a generator of its own, like rewrites.
    whole_record_share: float = 0.6
    # of writes, a rewrite of an earlier write's range with its very bytes (same
    # offset, length and data token): what nopwrite and dedup act on. Drawn from a
    # generator of its own, so a sequence without rewrites is the one it always was.
    rewrite_share: float = 0.12
    # of reads and writes, a buffer with a PROT_NONE page in the middle (``holed``):
    # Direct I/O's pin of it fails part way. Drawn from a generator of its own, so a
    # sequence without such buffers is the one it always was.
    holed_share: float = 0.05
    # of a zvol's ops, a ``zpool sync`` after it (given the ZFS commands): a block then
    # rewritten is a rewrite of a synced one, which is what nopwrite, dedup and the
    # ZIL's indirect writes act on; a zvol has no other ZFS op (its snapshots would be
    # the file dataset's). Drawn from a generator of its own, like rewrites.
    zvol_sync_share: float = 0.08
    # of zvol sequences, those whose zvol takes its I/O through blk-mq
    blk_mq_share: float = 1 / 3
    # of reads and writes, a buffer from one of the page origins (memory never
    # written, mappings of other files and of the target, hugetlb, memfds, userfaultfd,
    # fork: suite/ioengine/explore/origins.py). Drawn from a generator of its own, so
    # a sequence without them is the one it always was.
    origins: tuple[str, ...] = ORIGINS
    origin_share: float = 0.3
    # of file sequences, those whose ops go through a loop device over the file (an
    # in-kernel caller: suite/ioengine/explore/callers.py), its direct-io and sector
    # size drawn with it. From a generator of its own: other sequences stay as they were.
    loop_share: float = 0.25
    # of the other file sequences, those whose file sits in a file system between the
    # engine and the dataset: ext4 on a loop device over a file of the dataset (fsck'd
    # at the end), or overlayfs with its upper layer on the dataset. File ops, no ZFS ops.
    fs_share: float = 0.25
    # of the file sequences with no caller after those, an NFS client: the kernel's NFS
    # server exports a folder of the dataset, mounted back (NFSv4.2; nfsd reads by
    # splice, copies by COPY, clones by CLONE). Its own generator.
    nfs_share: float = 0.08
    # after an op, several actors on one window at once (the ``actors`` op: 2-4
    # processes or threads, O_DIRECT against buffered and mmap writers, readers,
    # punch, copy and truncate: suite/ioengine/explore/actors.py). From a generator of
    # its own, so a sequence without them is the one it always was.
    actors_share: float = 0.03
    # of file sequences with the ZFS commands, those with a crash point: ``freeze`` (zpool
    # freeze) at a drawn op, ``crash`` (export + import, the ZIL replayed) a few ops
    # later, no txg-syncing op between; what survived is judged against the durability
    # model (suite/ioengine/explore/durable.py). From a generator of its own.
    crash_share: float = 0.3
    # of those, the ones that end in a real power cut instead of their verify: O_DIRECT
    # writes submitted and not reaped, a barrier or none, the guest's power cut, the pool
    # imported on a guest booted on the same disks (suite/ioengine/explore/powercut.py).
    # A boot each: rare. From a generator of its own.
    power_share: float = 0.12
    # of those run with the async O_DIRECT path on (zfs_async_dio_enabled=1), the ones
    # ending in the durability shape: async writes in flight on slowed disks and a
    # barrier (fsync/syncfs-ignores-queued-writes needed it; at 0.12 and every shape
    # drawn alike, 2.5% of sequences had it: a 15-minute run rarely met one).
    power_share_async: float = 0.35
    # of the file sequences of a build with the async O_DIRECT path (it has
    # zfs_async_dio_enabled), those run under the async path's own conditions: it on,
    # Direct I/O on (zfs_dio_enabled=1, ``direct`` not disabled), its in-flight budget
    # not cut, no caller between, ``primarycache=metadata`` (a request can be held). The
    # shapes judged only there (the durability shape's power cut, a held write with a
    # later write or a stream, batched appends) otherwise drew conditions that let
    # none of them be judged: the one durability shape of a 15-minute run at
    # 30582e2f4c ran with Direct I/O off. Its own generator: other sequences stay.
    async_shape_share: float = 0.4
    # of the zvol sequences of a build with zvol Direct I/O (it has zvol_dio_enabled),
    # those run under that path's own conditions: it on and write verify on (a write
    # whose buffer changes in flight fails verify and must be retried through the ARC),
    # and, in half of them, a checksum and compression nopwrite acts on (sha256, lz4:
    # a rewrite of a synced block's very bytes is then a nopwrite). Drawn from their
    # own generators; at 0 a zvol sequence is what it always was. At seed 1, 15% of
    # zvol sequences had a racing Direct I/O write with verify on and 5% a nopwrite
    # rewrite (zvol-dio 17b61d93af's EIO and 68a939265f's nopwrite VERIFY).
    zvol_dio_shape_share: float = 0.4
    # of their aligned O_DIRECT writes, from a racing buffer (their own generator): a
    # 15-minute run at 17b61d93af drew one such write in 14 sequences at 8% of requests
    zvol_racing_share: float = 0.25
    # of the O_DIRECT writes of whole blocks in zvol sequences with the ZFS commands, those
    # followed by a txg_sync and the same write again (a rewrite of blocks on disk with
    # their bytes: what nopwrite acts on). Its own generator.
    synced_rewrite_share: float = 0.3
    # of reads, those made by the kernel moving the target's bytes out (sendfile or
    # splice into tmpfs or a pipe, copy_file_range to another file system); of writes,
    # those whose bytes come in as user pages through a pipe (vmsplice, then splice).
    # Drawn from a generator of their own: other draws stay as they were.
    outward_share: float = 0.12
    # of writes to a file of the dataset (not through a caller), those cut by a limit
    # reached mid-request: RLIMIT_FSIZE, or the dataset's refquota (with the ZFS
    # commands): suite/ioengine/explore/limits.py. From a generator of its own.
    limit_share: float = 0.06
    # of those in sequences whose O_DIRECT writes may take the async path: a write the
    # taskq commits in part and then cuts is that path's own (async-dio 317cbaa578's
    # short write reported as EDQUOT, dc643dc204's pin overflow under RLIMIT_FSIZE).
    # The same generator: a write limited at 0.06 stays limited.
    limit_share_async: float = 0.15
    # of reads and writes, those given a per-call flag (RWF_APPEND, RWF_DSYNC,
    # RWF_NOWAIT, RWF_HIPRI: suite/ioengine/explore/flags.py). A generator of its own.
    flags_share: float = 0.08
    # of the async O_DIRECT reads and writes of a file with the ZFS commands, those held
    # in flight (zinject -E) while a rollback, a barrier or a later write runs
    # (suite/ioengine/explore/held.py). A generator of its own.
    held_share: float = 0.3         # (only under primarycache=metadata|none)
    # of the writes to a file of the dataset (not through a caller), an ``append_batch``:
    # 2-3 RWF_APPEND O_DIRECT writes in one libaio/io_uring submit, 70% under
    # RLIMIT_FSIZE with room for one (suite/ioengine/explore/batch.py); more with the
    # async O_DIRECT path on (zfs_async_dio_enabled=1), the shape its bug needed. A
    # generator of its own.
    batch_share: float = 0.05
    batch_share_async: float = 0.25
    # snapshot, rollback, txg_sync: they need the guest's ZFS commands. None: as
    # the session can (it has them under Conditions); generate() alone: not.
    zfs_ops: bool | None = None
    # target "zvol": the tables drawn from (every entry, always), and the zvol
    # properties the build has (None: all of them); its parameters are kept
    # where ``params`` (what the build has) names them
    vol_props: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(ZVOL_PROP_CHOICES))
    vol_params: dict[str, tuple[int, ...]] = field(
        default_factory=lambda: dict(ZVOL_PARAM_CHOICES))
    vol_have: tuple[str, ...] | None = None
