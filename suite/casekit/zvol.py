"""zvol Direct I/O (openzfs/zfs#18661): zvols, their eligibility rules, and
which path served each request.

With ``zvol_dio_enabled=1`` a zvol read goes around the ARC when every bio page
and the device offset are page-aligned; a write when its offset and length are
whole multiples of ``volblocksize`` (and its pages page-aligned). That holds for
page-cache I/O to ``/dev/zdN`` as well as O_DIRECT. Everything else goes
through the ARC. There are no zvol counters, so the path is told by kprobe hit
counts on each path's entry point: ``dmu_read_abd`` / ``dmu_write_abd``
(Direct I/O) against ``dmu_read_uio_dnode`` / ``dmu_write_uio_dnode`` (ARC).
A Direct I/O chunk that fails and is retried through the ARC hits both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from suite.casekit.dio import PAGE, Condition, Shape, cond, expect_correct, symptom_of
from suite.casekit.trials import served
from suite.errors import GuestError
from suite.symptoms import Symptom

if TYPE_CHECKING:
    from suite.casekit.engine import EngineRunner
    from suite.guest.probes import Kprobes
    from suite.guest.zfs import Dataset

ZVOL_PARAM = "zvol_dio_enabled"
# What the seed's rig used (seeds/zvol-zero-copy-request.txt), minus volblocksize.
ZVOL_PROPS = {"primarycache": "metadata", "compression": "off"}
PROBES = {"read": ("dmu_read_abd", "dmu_read_uio_dnode"),
          "write": ("dmu_write_abd", "dmu_write_uio_dnode")}
SIZES = {"4K": 4096, "16K": 16384, "128K": 131072, "1M": 1 << 20}


@dataclass(frozen=True)
class Zvol:
    name: str
    dev: str                  # /dev/zdN, found by asking each zd device its name
    volblocksize: int
    size: int
    queue: str = "bio"        # "bio" (submit_bio) or "blk-mq" (struct request)


# How a zvol takes its I/O: read from ``zvol_use_blk_mq`` when the zvol is made (and
# again when an import makes it anew), so the parameter stays set for the case; the
# after-case step puts every parameter back. A blk-mq zvol has ``/sys/block/zdN/mq``.
QUEUES = ("bio", "blk-mq")
BLK_MQ_PARAM = "zvol_use_blk_mq"


UDEV_RULE = "/etc/udev/rules.d/99-ozfs-zvol-nowatch.rules"


def quiet_udev(guest) -> None:
    """Keep udev's own reads off the zvols: its block rules watch ``zd*`` and
    re-probe a device (a page-cache read, a Direct I/O read with
    ``zvol_dio_enabled=1``) whenever a writer closes it. Under TCG that probe
    lands in a later trial's counters: a misaligned read "served by DIO+ARC".
    The guest's ``/etc`` is its own, so the rule stays in this guest."""
    guest.run(f"echo 'KERNEL==\"zd*\", OPTIONS+=\"nowatch\"' > {UDEV_RULE}; "
              f"command -v udevadm >/dev/null || exit 0; udevadm control --reload-rules; "
              f"udevadm settle -t 60 || true", timeout=120)


def settle(guest) -> None:
    """Wait for udev to finish probing new devices (their reads are not a trial's)."""
    guest.run("command -v udevadm >/dev/null || exit 0; udevadm settle -t 60 || true",
              timeout=120)


def create_zvol(ds: "Dataset", engine: "EngineRunner", name: str, size: int,
                volblocksize: int, props: dict[str, str] | None = None,
                queue: str = "bio") -> Zvol:
    """``zfs create -V`` under the case's dataset; waits for its ``/dev/zdN``.
    ``queue="blk-mq"``: the zvol takes requests through blk-mq (checked, not assumed)."""
    if queue not in QUEUES:
        raise ValueError(f"queue {queue!r}: one of {QUEUES}")
    if queue == "blk-mq":           # "bio" is the default the after-case step restores
        ds.pool.zfs.set_param(BLK_MQ_PARAM, 1)
    size = -(-size // volblocksize) * volblocksize
    full = f"{ds.name}/{name}"
    args = ["create", "-V", str(size), "-o", f"volblocksize={volblocksize}"]
    for k, v in {**ZVOL_PROPS, **(props or {})}.items():
        args += ["-o", f"{k}={v}"]
    zfs = ds.pool.zfs
    if zfs.zfs(*args, full, check=False).rc != 0:       # left over: start again
        zfs.zfs("destroy", "-f", full, check=False)
        zfs.zfs(*args, full)
    zv = Zvol(full, relocator(engine, full)(), volblocksize, size, queue)   # udev settled
    check_queue(zfs.guest, zv)
    return zv


def check_queue(guest, zv: Zvol) -> None:
    """The zvol takes its I/O the way it was made to, or the case would run its
    trials under a label they do not have."""
    dev = zv.dev.rsplit("/", 1)[-1]
    mq = guest.run(f"test -d /sys/block/{dev}/mq", timeout=20, check=False).rc == 0
    if mq != (zv.queue == "blk-mq"):
        raise GuestError(f"zvol {zv.name} ({zv.dev}) was made for the {zv.queue} queue but "
                         f"/sys/block/{dev}/mq {'exists' if mq else 'is missing'} "
                         f"({BLK_MQ_PARAM}={int(zv.queue == 'blk-mq')} when it was made)",
                         fix=f"the build ignores {BLK_MQ_PARAM}; check the series")


def relocator(engine: "EngineRunner", name: str):
    """After an export/import the zvol may come back as another /dev/zdN."""
    def find() -> str:
        found = engine.oneshot("zvol-dev", name, "--wait-s", "60", timeout=90)
        dev = next((ln.get("dev") for ln in found if ln.get("event") == "zvol"), None)
        if not dev:
            raise GuestError(f"zvol {name} did not come back after the import",
                             fix="see dmesg and zpool status in the case's commands.log")
        settle(engine.guest)
        return dev
    return find


def zvol_counters(probes: "Kprobes", op: str) -> dict[str, dict]:
    """Engine counter specs: kprobe hits on each path's entry point for ``op``."""
    dio, arc = PROBES[op]
    return {"dio_calls": probes.spec(dio), "arc_calls": probes.spec(arc)}


def direct_eligible(op: str, shape: Shape, volblocksize: int, buffered: bool = False) -> bool:
    """Would this request go around the ARC with Direct I/O on (the series' rule)?

    Page-cache I/O reaches the zvol as whole pages at page offsets: reads always
    qualify; writes when the pages they dirty cover whole blocks."""
    if op == "read":
        return buffered or (shape.aligned and shape.offset % PAGE == 0)
    if buffered:
        start = shape.offset // PAGE * PAGE
        end = -(-(shape.offset + shape.length) // PAGE) * PAGE
        return start % volblocksize == 0 and (end - start) % volblocksize == 0
    return (shape.aligned and shape.offset % volblocksize == 0
            and shape.length % volblocksize == 0 and shape.length >= volblocksize)


BIO_MAX = 256 * PAGE     # BIO_MAX_VECS bvecs of a page: one bio's most when no pages merge


def may_split(shape: Shape, volblocksize: int) -> bool:
    """An O_DIRECT request longer than BIO_MAX can reach the zvol as several bios
    (the block layer fills a bio with at most 256 bvecs; physically contiguous pages
    merge, so whether it splits depends on the buffer): its first, whole-block bio is
    then eligible on its own. Seen on Linux 6.12: 1 of 6 sync 1M+4K writes of a 1M
    zvol, dio_calls 1 and arc_calls 1, every byte right."""
    return (shape.aligned and shape.offset % volblocksize == 0 and shape.length > BIO_MAX
            and BIO_MAX % volblocksize == 0)


def zconditions(dio: bool = True, buffered: bool = True) -> list[Condition]:
    """Alternated per trial: libaio, io_uring and sync O_DIRECT (and page-cache
    I/O) with ``zvol_dio_enabled=1``, and libaio with it at 0, the row stock
    OpenZFS runs too (where the parameter does not exist)."""
    out = []
    if dio:
        out += [cond(f"{i} dio=1", i, via="", **{ZVOL_PARAM: 1})
                for i in ("libaio", "io_uring", "sync")]
        if buffered:
            out.append(cond("buffered dio=1", "sync", via="", buffered=True, **{ZVOL_PARAM: 1}))
    out.append(cond("libaio dio=0", "libaio", via="", optional=(ZVOL_PARAM,),
                    **{ZVOL_PARAM: 0}))
    return out


def dio_on(c: Condition) -> bool:
    return dict(c.params).get(ZVOL_PARAM) == 1


def expect_path(op: str, shape: Shape, volblocksize: int):
    """Per condition: the bytes right and the path the rule gives. A page-cache
    write is judged on its bytes only (writeback decides how pages become bios)."""
    def check(c: Condition, r: dict) -> Symptom | None:
        bad = symptom_of(c, r)
        if bad:
            return bad
        if c.buffered and op == "write":
            return None
        want = "DIO" if dio_on(c) and direct_eligible(op, shape, volblocksize,
                                                          c.buffered) else "ARC"
        s = served(r.get("counters") or {})
        if not s.known:
            return Symptom("unproven", "the kprobe hit counts are missing", c.label)
        if s.label == "none":
            return Symptom("unproven", f"neither path's probe fired ({r.get('counters')})",
                           c.label)
        if s.label == "DIO+ARC" and want == "ARC" and dio_on(c) and may_split(shape,
                                                                           volblocksize):
            return None                 # its first bio whole blocks, the rest through the ARC
        if s.label != want:
            kind = "served-by-ARC" if want == "DIO" else "served-by-DIO"
            if s.label == "DIO+ARC":
                kind = "dio-fallback" if want == "DIO" else "served-by-DIO"
            return Symptom(kind, f"expected {want}, probes say {s.label} "
                           f"({r.get('counters')})", c.label)
        return None
    return check


__all__ = ["ZVOL_PARAM", "ZVOL_PROPS", "SIZES", "Zvol", "create_zvol", "zvol_counters",
           "block_requests", "direct_eligible", "relocator", "zconditions", "expect_path",
           "expect_correct", "dio_on"]


def block_requests(zv: Zvol, op: str, c: Condition, counters: dict, tag: str,
                   write_seed: object = None, chunk: int = 0,
                   have: set[str] | None = None) -> list:
    """One request per ``chunk`` (default: one block) over the whole zvol, under
    condition ``c``; ``write_seed``: the bytes a write puts (the same seed as the
    zvol's contents rewrites them identically, the nopwrite shape). ``have``: the
    build's parameters; ``c``'s optional ones it lacks are left out (stock)."""
    from suite.ioengine.plan import Request, Segment
    step = chunk or zv.volblocksize
    params = {k: v for k, v in c.params
              if have is None or k in have or k not in c.optional}
    return [Request(id=f"{tag}-{off // step:04d}", file=zv.dev, segments=[Segment(step, 0)],
                    interface=c.interface, op=op, offset=off, o_direct=not c.buffered,
                    flush=c.buffered, condition=c.label, params=dict(params),
                    counters=counters, write_seed=write_seed)
            for off in range(0, zv.size, step)]
