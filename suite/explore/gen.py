"""The seeded generator: the same seed gives the same sequence on any machine.

Only ``random.Random(seed)`` decides (no ``hash()`` of a string, no set order).
Shapes sit around the boundaries Direct I/O cares about: 4 KiB pages, the
dataset's recordsize (and 128 KiB), EOF tails that are not page-aligned; a
share of O_DIRECT requests is misaligned on purpose (offset, length, buffer or
several). A small share of reads and writes use a racing buffer (another thread
changes it while the request is in flight), or one with a page that cannot be
touched (``holed``: Direct I/O's pin fails part way). Snapshots, rollbacks and ``zpool
sync`` come only where the guest engine has the ZFS commands (``zfs_ops``).
Each sequence also picks dataset properties and, among the module parameters
the build has, their values.

A block device (target ``"blockdev"``, or ``"zvol"``: a zvol the session makes
per run) is a fixed window the size of ``file_size_max``, written over: only
the ops that keep a device's size and need no file (:data:`BLOCK_OPS`). A zvol
sequence picks the zvol's properties (``volblocksize`` instead of
``recordsize``) and ``zvol_dio_enabled``; it draws every property and parameter
of its tables whatever the build has and then drops those the build lacks, so
one seed gives the same ops on every build (a gate's base and series sides).
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import replace

from suite.explore.reshape import (batch_appends, crash_point, flag_requests, hold_requests, limit_writes,
                                   records_covering, synced_rewrites,
                                   outward, power_cut)
from suite.explore.eligible import quota_writes_grow
from suite.explore.ops import (OUTWARD, READS, TARGETS, WRITES,  # noqa: F401 (re-exported)
                               ZFS_OPS, Op, Sequence, recordsize, size_of)

# The generator's tables, re-exported: explore's modules import them from here.
from suite.explore.choices import (  # noqa: F401
    PAGE, REC_128K, ATIME_CHOICES, PROP_CHOICES, PARAM_CHOICES, TUNABLE_CHOICES,
    ZVOL_TUNABLE_CHOICES, OP_WEIGHTS, BLOCKDEV_SKIP, BLOCK_TARGETS, BLOCK_OPS, ZVOL_PROP_CHOICES,
    ZVOL_PARAM_CHOICES, BLK_MQ_PARAM, ZVOL_QUEUE_CHOICES, SEGS, BUF_OFFSETS,
    ODD_LENGTHS, ODD_DELTAS, Choices)


# Page origins backed by a file of the dataset (not shmem, not hugetlbfs).
FILE_BACKED = ("shared_file", "map_private_zfs", "map_shared_zfs")


def sequence_seed(master: int, k: int) -> int:
    """The seed of sequence ``k`` of a run with master seed ``master`` (48 bits)."""
    return int.from_bytes(hashlib.sha256(f"explore:{master}:{k}".encode()).digest()[:6], "big")


class _Gen:
    """One sequence's choices, with the size the file will have if every op lands."""

    def __init__(self, rng: random.Random, limit: int, rec: int, ch: Choices,
                 seed: int = 0) -> None:
        self.rng, self.limit, self.rec, self.ch = rng, limit, rec, ch
        self.rewrite_rng = random.Random(f"rewrite:{seed}")
        self.holed_rng = random.Random(f"holed:{seed}")
        self.origin_rng = random.Random(f"origin:{seed}")
        self.record_rng = random.Random(f"record:{seed}")
        self.always = False             # the dataset is direct=always
        self.writes: list[tuple[int, int, int]] = []     # (off, len, data) of each write
        self.size = 0
        self.token = 0
        self.recent: list[int] = [0]    # where the last ops began and ended: overlap
        self.snaps: list[tuple[int, int]] = []     # (data token, size) of each snapshot

    def touched(self, off: int, n: int) -> None:
        self.recent = (self.recent + [off, off + n])[-6:]

    def offset(self, aligned: bool) -> int:
        r = self.rng
        anchor = r.choice((0, self.size, self.size - self.size % PAGE, self.rec, REC_128K,
                           2 * self.rec, r.randrange(max(1, self.limit)), r.choice(self.recent),
                           r.choice(self.recent)))
        if aligned:
            off = anchor - anchor % PAGE + PAGE * r.choice((-1, 0, 0, 1, 2))
        else:
            off = anchor + r.choice(ODD_DELTAS)
        off = min(max(0, off), self.limit - 1)
        return off - off % PAGE if aligned else off

    def length(self, aligned: bool, room: int) -> int:
        r = self.rng
        if aligned:
            n = PAGE * r.choice((1, 1, 2, 3, 4, 8, 16, 32, self.rec // PAGE, self.rec // PAGE + 1))
        else:
            n = r.choice(ODD_LENGTHS + (self.rec - 1, self.rec + 1, self.rec + PAGE + 100))
        n = min(n, room)
        return n - n % PAGE if aligned and n >= PAGE else max(1, n)

    def shape(self, aligned: bool) -> tuple[int, int]:
        off = self.offset(aligned)
        if aligned and self.limit - off < PAGE:
            off = max(0, (self.limit - PAGE) // PAGE * PAGE)
        return off, self.length(aligned, self.limit - off)

    def io(self, kind: str) -> Op:
        r, ch = self.rng, self.ch
        direct = r.random() < ch.direct_share
        aligned = r.random() >= ch.misaligned_share
        # Which dimensions a misaligned request gets wrong: at least one.
        bad = set() if aligned else {d for d in ("off", "len", "buf") if r.random() < 0.5}
        if not aligned and not bad:
            bad = {r.choice(("off", "len", "buf"))}
        off = self.offset("off" not in bad)
        if kind in READS and r.random() < 0.3 and self.size:    # across EOF
            off = max(0, self.size - r.choice((1, 100, PAGE - 1, PAGE, PAGE + 1)))
            off = off - off % PAGE if "off" not in bad else off
        if "off" not in bad and self.limit - off < PAGE:
            off = max(0, (self.limit - PAGE) // PAGE * PAGE)
        n = self.length("len" not in bad, self.limit - off)
        if not bad and (direct or self.always) and \
                self.record_rng.random() < ch.whole_record_share:
            off, n = self.whole_records(off, n)
        plain = tuple(b for b in ch.bufs if b not in ("anon_offset", "racing", "holed")) \
            or ch.bufs
        buf, buf_off = r.choice(plain), 0
        if "racing" in ch.bufs and r.random() < ch.racing_share:
            buf = "racing"
        elif "holed" in ch.bufs and self.holed_rng.random() < ch.holed_share:
            buf = "holed"
        elif ch.origins and self.origin_rng.random() < ch.origin_share:
            buf = self.origin_rng.choice(ch.origins)
        if "buf" in bad:
            buf = "anon_offset" if "anon_offset" in ch.bufs and r.random() < 0.7 else buf
            buf_off = r.choice(BUF_OFFSETS)
        segs = 0
        if kind in ("preadv", "pwritev"):
            most = n // PAGE if n % PAGE == 0 and n >= PAGE else n
            segs = min(r.choice(SEGS), max(1, most))
        data = 0
        if kind in WRITES:
            data = self.next_token()
            again = self.rewrite()
            if again is not None:
                off, n, data = again
                if segs:
                    most = n // PAGE if n % PAGE == 0 and n >= PAGE else n
                    segs = min(segs, max(1, most))
            self.writes.append((off, n, data))
            self.size = max(self.size, off + n)
        self.touched(off, n)
        return Op(kind, iface=r.choice(ch.ifaces), direct=direct, off=off, len=n, buf=buf,
                  buf_off=buf_off, segs=segs, data=data)

    def whole_records(self, off: int, n: int) -> tuple[int, int]:
        """``off``/``n`` moved onto record boundaries: the request Direct I/O serves."""
        rec = self.rec
        if rec > self.limit:
            return off, n
        off = min(off - off % rec, (self.limit - rec) // rec * rec)
        n = max(rec, n - n % rec)
        return off, min(n, (self.limit - off) // rec * rec)

    def rewrite(self) -> tuple[int, int, int] | None:
        """An earlier write's (off, len, data) to lay down again, identical bytes
        (``Choices.rewrite_share`` of writes, once there is one), or None."""
        if not self.writes or self.rewrite_rng.random() >= self.ch.rewrite_share:
            return None
        return self.rewrite_rng.choice(self.writes)

    def next_token(self) -> int:
        self.token += 1
        return self.token

    def other(self, kind: str) -> Op:
        r = self.rng
        if kind in ("mmap_read", "mmap_write"):
            aligned = r.random() < 0.5
            off = min(self.offset(aligned), max(0, self.size - 1))
            n = max(1, min(self.length(aligned, self.limit - off), self.size - off))
            self.touched(off, n)
            return Op(kind, off=off, len=n, data=self.next_token() if kind == "mmap_write" else 0)
        if kind == "truncate":
            s = r.choice((self.size + 1, max(0, self.size - 1), self.size + PAGE + 100,
                          max(0, self.size - PAGE - 100), 40000, 12000, 4196, self.rec + 1,
                          r.randrange(self.limit)))
            self.size = min(max(0, s), self.limit)
            return Op(kind, size=self.size)
        if kind in ("punch_hole", "zero_range"):
            off, n = self.shape(r.random() < 0.5)
            self.touched(off, n)
            if kind == "zero_range":
                self.size = max(self.size, off + n)
            return Op(kind, off=off, len=n)
        if kind == "copy_range":
            whole = r.random() < 0.4        # recordsize-aligned: where block cloning applies
            unit = self.rec if whole and self.rec <= self.limit // 2 else 1
            src = r.randrange(max(1, self.limit // unit)) * unit
            off, n = self.shape(False)
            if unit > 1:
                off, n = off - off % unit, unit
            n = max(1, min(n, self.limit - src, self.limit - off))
            self.size = max(self.size, off + n)
            return Op(kind, off=off, len=n, src_off=src)
        if kind == "clone_range":
            return self.clone()
        if kind in ("sendfile", "splice"):
            return self.transfer(kind)
        if kind in ("snapshot", "rollback"):
            return self.snapshot_or_rollback(kind)
        return Op(kind)

    def actors(self, r: random.Random, token: int) -> Op:
        """Several actors on one page-aligned window (their programs are drawn in the
        guest from the seed and ``token``): 2-4 of them, 3-8 requests each."""
        n = PAGE * r.choice((4, 8, 16, 32))
        n = min(n, self.limit - self.limit % PAGE)
        off = r.randrange(max(1, (self.limit - n) // PAGE + 1)) * PAGE
        self.size = max(self.size, off + n)
        self.touched(off, n)
        return Op("actors", off=off, len=n, segs=r.choice((2, 3, 4)), size=r.choice((3, 5, 8)),
                  data=token)

    def snapshot_or_rollback(self, kind: str) -> Op:
        """A snapshot (its own data token), or a rollback, mostly to the latest
        snapshot, now and then past it (``-r``); with none taken yet, a snapshot."""
        r = self.rng
        if kind == "rollback" and self.snaps:
            at = len(self.snaps) - 1 if r.random() < 0.75 else r.randrange(len(self.snaps))
            token, self.size = self.snaps[at]
            del self.snaps[at + 1:]
            return Op("rollback", data=token)
        token = self.next_token()
        self.snaps.append((token, self.size))
        return Op("snapshot", data=token)

    def clone(self) -> Op:
        """FICLONERANGE: whole records where they fit (what OpenZFS can clone),
        now and then whole pages of a larger record (declined with EINVAL)."""
        r = self.rng
        unit = self.rec if self.rec <= self.limit // 2 and r.random() < 0.8 else PAGE
        slots = self.limit // unit
        count = min(r.choice((1, 1, 2, 3)), slots)
        src = r.randrange(slots - count + 1) * unit
        off = min(self.offset(True) // unit, slots - count) * unit
        n = count * unit
        self.touched(off, n)
        self.size = max(self.size, off + n)
        return Op("clone_range", off=off, len=n, src_off=src)

    def transfer(self, kind: str) -> Op:
        """sendfile/splice of the source into the target: into the O_DIRECT
        descriptor (page-aligned, so the kernel's pages can be mapped) or the
        buffered one (any shape)."""
        r = self.rng
        direct = r.random() < self.ch.direct_share
        aligned = direct or r.random() < 0.5
        off, n = self.shape(aligned)
        src = r.randrange(self.limit // PAGE) * PAGE if aligned else r.randrange(self.limit)
        n = max(1, min(n, self.limit - src))
        if aligned and n >= PAGE:
            n -= n % PAGE
        self.touched(off, n)
        self.size = max(self.size, off + n)
        return Op(kind, direct=direct, off=off, len=n, src_off=src)


def _pick(rng: random.Random, pairs: dict[str, tuple], names: tuple[str, ...] | None = None) -> dict:
    """One value for each name (sorted: the order of a dict never decides)."""
    return {k: rng.choice(pairs[k]) for k in sorted(pairs) if names is None or k in names}


def _zvol_conditions(rng: random.Random, ch: Choices,
                     seed: int) -> tuple[dict[str, str], dict[str, int]]:
    """A zvol sequence's properties and parameters: every one of the tables
    drawn (the draws never depend on the build), then those the build lacks left out."""
    props = _pick(rng, {k: tuple(v) for k, v in ch.vol_props.items()})
    params = _pick(rng, ch.vol_params)
    params[BLK_MQ_PARAM] = int(random.Random(f"blk-mq:{seed}").random() < ch.blk_mq_share)
    params.update(_pick(random.Random(f"tunables:{seed}"), ZVOL_TUNABLE_CHOICES))
    if zvol_dio_shaped(seed, ch):
        params.update(zvol_dio_enabled=1, zfs_vdev_direct_write_verify=1)
        if random.Random(f"nopwrite:{seed}").random() < 0.5:
            props.update(checksum="sha256", compression="lz4")
    keep = set(ch.vol_props if ch.vol_have is None else ch.vol_have) | {"volblocksize"}
    return ({k: v for k, v in props.items() if k in keep},
            {k: v for k, v in params.items() if k in ch.params})


def generate(seed: int, n_ops: int, target: str, file_size_max: int,
             choices: Choices | None = None) -> Sequence:
    """Sequence ``seed``: ``n_ops`` ops (the last a whole-file verify) on a
    ``target`` ("file", "blockdev" or "zvol") of at most ``file_size_max`` bytes."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, not {target!r}")
    if file_size_max < 2 * PAGE:
        raise ValueError(f"file_size_max {file_size_max} leaves no room: give at least {2 * PAGE}")
    ch = choices or Choices()
    rng = random.Random(seed)
    shaped = async_shaped(seed, target, ch)
    caller = {} if shaped else draw_caller(seed, target, ch)
    if caller.get("kind") == "loop":    # a loop device: a block device's window and ops
        target_ops = "blockdev"
    else:
        target_ops = target
    zfs_ops = ch.zfs_ops and not caller     # a snapshot under a mounted file system: no
    if target == "zvol":
        props, params = _zvol_conditions(rng, ch, seed)
    else:
        props = _pick(rng, {k: tuple(v) for k, v in ch.props.items()})
        props.update(_pick(random.Random(f"atime:{seed}"), ch.atime))
        if target == "blockdev":
            props = {k: v for k, v in props.items() if k not in ("recordsize", "direct")}
        params = _pick(rng, ch.param_values, tuple(ch.params))
        params.update(_pick(random.Random(f"tunables:{seed}"), ch.tunable_values,
                            tuple(ch.params)))
        if shaped:
            props, params = async_conditions(props, params, ch)
    if caller.get("kind") == "loopfs" and caller.get("dio") and caller.get("lbs") == 512 and \
            params.get("zfs_dio_strict") == 1 and props.get("direct") != "disabled":
        # ext4 reads its superblock with a 512-byte direct read through the loop, which a
        # strict dataset refuses by design (EINVAL; mount: can't read superblock): no file
        # system can be made there, so its sectors are 4 KiB (seen 2026-12-05, stock 6.1)
        caller = {**caller, "lbs": 4096}
    g = _Gen(rng, file_size_max, recordsize(props), ch, seed)
    g.always = props.get("direct") == "always"
    if target_ops in BLOCK_TARGETS:
        g.size = file_size_max
    else:
        g.size = min(file_size_max, rng.choice((0, 4196, 12000, 40000, 3 * PAGE, g.rec + 1000,
                                                file_size_max // 2)))
    init = g.size
    kinds = [k for k in ch.ops if k in OP_WEIGHTS and (target_ops == "file" or k in BLOCK_OPS)
             and (zfs_ops or k not in ZFS_OPS)]
    if not kinds:
        raise ValueError(f"choices.ops {ch.ops} leaves no op for a {target}: "
                         f"pick from {', '.join(OP_WEIGHTS)}")
    weights = [OP_WEIGHTS[k] for k in kinds]
    ops: list[Op] = []
    syncs = random.Random(f"txg_sync:{seed}") if target == "zvol" and ch.zfs_ops \
        and "txg_sync" in ch.ops else None
    crowd = random.Random(f"actors:{seed}")
    drawn = crowds = 0
    while drawn + crowds < n_ops - 1:       # an actors op takes the place of the last one
        drawn += 1
        kind = rng.choices(kinds, weights)[0]
        ops.append(g.io(kind) if kind in READS + WRITES else g.other(kind))
        if syncs is not None and syncs.random() < ch.zvol_sync_share:
            ops.append(Op("txg_sync"))
        if "actors" in ch.ops and crowd.random() < ch.actors_share and \
                drawn + crowds < n_ops - 1:
            crowds += 1
            ops.append(g.actors(crowd, crowds))
    if any(k in ch.ops for k in OUTWARD):
        ops = outward(ops, random.Random(f"outward:{seed}"), ch, block=target_ops != "file")
    if target_ops == "file" and not caller and ch.limit_share:
        ops = limit_writes(ops, random.Random(f"limit:{seed}"), ch.limit_share_async
                           if async_dio(props, params) else ch.limit_share, bool(zfs_ops))
    if ch.flags_share and target_ops == "file":
        ops = flag_requests(ops, random.Random(f"flags:{seed}"), ch.flags_share)
    if zfs_ops and target == "file" and ch.held_share and \
            {"held_read", "held_write"} <= set(ch.ops):
        ops = hold_requests(ops, random.Random(f"held:{seed}"), ch.held_share, props,
                            stream=random.Random(f"held-stream:{seed}"),
                            keep=random.Random(f"held-keep:{seed}"), rec=recordsize(props),
                            vector=random.Random(f"held-segs:{seed}"))
    # after the holds: a batch takes the place of a write no other draw wanted
    if target == "file" and not caller and ch.batch_share and "append_batch" in ch.ops:
        share = ch.batch_share_async if params.get("zfs_async_dio_enabled") == 1 \
            else ch.batch_share
        ops = batch_appends(ops, random.Random(f"batch:{seed}"), share, g.rec)
    if zfs_ops and target == "file" and "freeze" in ch.ops:
        ops = crash_point(ops, random.Random(f"crash:{seed}"), ch.crash_share)
    # A power cut: on a file with the ZFS commands, or on a zvol (the session can cut).
    cut = power_cut(random.Random(f"power:{seed}"), ch, file_size_max, n_ops,
                    slow=target == "file", shaped=async_dio(props, params)) \
        if "power_cut" in ch.ops and (zfs_ops and target == "file" or target == "zvol") \
        else None
    ops.append(cut or Op("verify"))
    # io_uring refuses to register file-backed memory (a ZFS file's pages) as a fixed
    # buffer: such a draw never ran (unsupported). The same request, unregistered.
    ops = [replace(o, iface="io_uring") if o.iface == "io_uring_fixed" and o.buf in
           FILE_BACKED else o for o in ops]
    if params.get("zfs_vdev_direct_write_verify") == 0:
        # Without write verify a Direct I/O write whose buffer changes in flight may
        # store a block whose checksum is not its data's (OpenZFS says so): a later read
        # fails its checksum, an mmap read of it is SIGBUS. No racing write there.
        ops = [replace(o, buf="anon") if o.buf == "racing" and o.op in WRITES else o
               for o in ops]
    if target == "zvol" and zvol_dio_shaped(seed, ch) and "racing" in ch.bufs:
        ops = racing_writes(ops, random.Random(f"zvol-racing:{seed}"), ch.zvol_racing_share,
                            recordsize(props))
    if syncs is not None and ch.synced_rewrite_share:    # whatever the build has: a gate's
        # base (ARC nopwrite) and head draw the same ops
        ops = synced_rewrites(ops, random.Random(f"synced-rewrite:{seed}"),
                              ch.synced_rewrite_share, recordsize(props))
    seq = Sequence(seed=seed, props=props, params=params, ops=tuple(ops), target=target,
                   init_size=init, file_size_max=file_size_max, caller=caller, evict="drop")
    return quota_writes_grow(seq)       # a sequence with no quota write comes back as it is


def zvol_dio_shaped(seed: int, ch: Choices) -> bool:
    """``Choices.zvol_dio_shape_share`` of the zvol sequences run under zvol Direct
    I/O's conditions (:func:`_zvol_conditions`; a parameter the build lacks is left
    out there). Drawn from the seed alone, whatever the build has: a gate's base and
    head run the same ops."""
    return ch.zvol_dio_shape_share > 0 and \
        random.Random(f"zvol-dio-shape:{seed}").random() < ch.zvol_dio_shape_share


def racing_writes(ops: list[Op], r: random.Random, share: float, rec: int = 0) -> list[Op]:
    """``share`` of the aligned O_DIRECT writes given a racing buffer (one another
    thread changes while the write is in flight): under zvol Direct I/O with write
    verify on, the write must be retried through the ARC, not fail (zvol-dio
    17b61d93af's EIO). With ``rec`` (the volblocksize), the write covers the whole
    blocks of its range: a zvol serves only those by Direct I/O (a part of a block goes
    through the ARC, where nothing is verified: 2026-12-07 at 17b61d93af, a racing
    4 KiB write to a 16K-block zvol). The generator advances on writes alone."""
    def draw(o: Op) -> Op:
        roll = r.random()
        ok = o.op in WRITES and o.direct and o.buf not in ("racing", "holed") and \
            not o.limit and not o.flags and o.off % PAGE == 0 and o.len % PAGE == 0
        if not ok or roll >= share:
            return o
        off, n = records_covering(o.off, o.len, rec) if rec else (o.off, o.len)
        return replace(o, buf="racing", buf_off=0, off=off, len=n)
    return [draw(o) if o.op in WRITES else o for o in ops]


def async_shaped(seed: int, target: str, ch: Choices) -> bool:
    """``Choices.async_shape_share`` of the file sequences of a build with the async
    O_DIRECT path run under that path's conditions (:func:`async_conditions`)."""
    return target == "file" and ch.async_shape_share > 0 and \
        "zfs_async_dio_enabled" in ch.params and \
        random.Random(f"async-shape:{seed}").random() < ch.async_shape_share


def async_conditions(props: dict[str, str], params: dict[str, int],
                     ch: Choices) -> tuple[dict[str, str], dict[str, int]]:
    """The async O_DIRECT path's conditions over a sequence's draws: the path on, Direct
    I/O on, its in-flight budget the largest drawn, data not cached (a request can be
    held in flight); the other draws kept."""
    props = dict(props)
    if "primarycache" in props:
        props["primarycache"] = "metadata"
    if props.get("direct") == "disabled":
        props["direct"] = "standard"
    forced = {"zfs_async_dio_enabled": 1, "zfs_dio_enabled": 1,
              "zfs_async_dio_max_inflight": max(ch.tunable_values.get(
                  "zfs_async_dio_max_inflight", (0,)))}
    return props, {**params, **{k: v for k, v in forced.items() if k in params}}


def async_dio(props: dict[str, str], params: dict[str, int]) -> bool:
    """The sequence's O_DIRECT requests may take the async path: it on, and Direct I/O
    on (a power cut's durability shape is that path's, and judged only there)."""
    return params.get("zfs_async_dio_enabled") == 1 and \
        params.get("zfs_dio_enabled", 1) != 0 and props.get("direct") != "disabled"


def draw_caller(seed: int, target: str, ch: Choices) -> dict[str, int | str]:
    """A file sequence's in-kernel caller (``Choices.loop_share`` of them a loop
    device; of the others ``Choices.fs_share`` a file system between: ext4 on a loop
    device, or overlayfs; of the rest ``Choices.nfs_share`` an NFS mount of the kernel's
    NFS server), or {}."""
    if target != "file":
        return {}
    r = random.Random(f"caller:{seed}")
    if ch.loop_share > 0 and r.random() < ch.loop_share:
        return {"kind": "loop", "dio": r.choice((0, 1)), "lbs": r.choice((512, 4096))}
    f = random.Random(f"caller-fs:{seed}")
    if f.random() >= ch.fs_share:
        # of the rest, an NFS client through the kernel's own server (its own generator:
        # a sequence that does not draw it is the one it always was)
        n = random.Random(f"caller-nfs:{seed}")
        return {"kind": "nfs"} if ch.nfs_share > 0 and n.random() < ch.nfs_share else {}
    if f.random() < 0.5:
        return {"kind": "overlay"}
    return {"kind": "loopfs", "dio": f.choice((0, 1)), "lbs": f.choice((512, 4096))}
