"""Where each run of a sequence goes: a fresh file on the case's dataset
(target ``file``), or a fresh zvol under it (target ``zvol``), made with the
sequence's properties (``volblocksize``, compression, checksum, ...) and run
as a block device: ``explore-run SEQ --file /dev/zdN --blockdev --scratch
<dataset>/<name> --zvol <pool>/<dataset>/<name>`` (the scratch files, the
source of sendfile/splice and the shared-file buffers, stay on the dataset).

A zvol's properties are set when it is made, so the session's conditions
(``Conditions``) set only the sequence's module parameters for a zvol. A run's
zvol is destroyed once the run passed, or before the next run when it failed
(the last failing one stays for a look); one whose run hung is never touched
again: a ``zfs destroy`` of it could hang too. How zvols are made in a guest is
:mod:`suite.explore.zvol`; this module only needs a :class:`ZvolMaker`.
"""
from __future__ import annotations

import shutil

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from suite.errors import SuiteError
from suite.explore.gen import (ATIME_CHOICES, BLK_MQ_PARAM, PARAM_CHOICES, PROP_CHOICES, TUNABLE_CHOICES,
                               ZVOL_PARAM_CHOICES, ZVOL_PROP_CHOICES, ZVOL_QUEUE_CHOICES,
                               ZVOL_TUNABLE_CHOICES, Choices, size_of)
from suite.explore.ops import OP_KINDS, Sequence

if TYPE_CHECKING:
    from suite.casekit.zvol import Zvol
    from suite.explore.judge import Verdict

SESSION_TARGETS = ("file", "zvol")
DEFAULT_VOLBLOCKSIZE = "16K"        # OpenZFS's, for a sequence that names none
GONE_WRONG = ("hang", "no-result")  # a run whose zvol is left alone afterwards


class NoZvols(SuiteError):
    """The build (or its guest) makes no usable zvol: a zvol target cannot run."""


@dataclass(frozen=True)
class RunTarget:
    """One run's target: explore-run's ``--file`` and its further arguments."""
    path: str
    args: tuple[str, ...] = ()
    zvol: str | None = None         # the zvol made for this run (its full name)


class ZvolMaker(Protocol):
    """Makes and destroys zvols under ``parent`` (``suite.explore.zvol.GuestZvols``
    in a guest; a stand-in in the self-tests)."""
    parent: str

    def properties(self) -> set[str]:
        """The properties a zvol of this build has (NoZvols: it makes none)."""

    def create(self, name: str, size: int, volblocksize: int, props: dict[str, str],
               queue: str = "bio") -> Zvol:
        """``zfs create -V`` of ``parent/name``, once its ``/dev/zdN`` is there, taking
        its I/O through ``queue`` ("bio" or "blk-mq": the sequence's ``zvol_use_blk_mq``)."""

    def destroy(self, name: str) -> str | None:
        """``zfs destroy`` of a zvol (its full name): None, or why it did not go."""


class FileTargets:
    """A fresh file per run: ``<workdir>/<name>.bin`` (the engine creates it)."""
    target = "file"

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir

    def choices(self, ch: Choices) -> Choices:
        return ch

    def conditions(self, seq: Sequence) -> Sequence:
        return seq

    def prepare(self, seq: Sequence, name: str) -> RunTarget:
        return RunTarget(f"{self.workdir}/{name}.bin")

    def release(self, run: RunTarget, verdict: Verdict) -> None:
        pass


class ZvolTargets:
    """A fresh zvol per run, under the maker's parent dataset. Asks the maker
    first which properties a zvol of this build has (NoZvols when it makes none)."""
    target = "zvol"

    def __init__(self, maker: ZvolMaker, workdir: str,
                 log: Callable[[str], None] = print) -> None:
        self.maker, self.workdir, self.log = maker, workdir, log
        self.have = maker.properties()
        self.previous: str | None = None    # a failed run's zvol, destroyed before the next
        self.left: list[str] = []           # zvols of runs that hung: never touched again

    def choices(self, ch: Choices) -> Choices:
        """Only the zvol properties this build has (the draws stay the same)."""
        want = ch.vol_props if ch.vol_have is None else ch.vol_have
        return replace(ch, vol_have=tuple(sorted(k for k in want if k in self.have)))

    def conditions(self, seq: Sequence) -> Sequence:
        """What the session's conditions put in place: the parameters only."""
        return replace(seq, props={})

    def prepare(self, seq: Sequence, name: str) -> RunTarget:
        self._destroy_previous()
        vbs = size_of(seq.props.get("volblocksize", DEFAULT_VOLBLOCKSIZE))
        props = {k: v for k, v in sorted(seq.props.items()) if k != "volblocksize"}
        queue = "blk-mq" if seq.params.get(BLK_MQ_PARAM) == 1 else "bio"
        zv = self.maker.create(name, seq.file_size_max, vbs, props, queue)
        if zv.size < seq.file_size_max:
            raise SuiteError(f"zvol {zv.name} holds {zv.size} bytes, the sequence's window "
                             f"{seq.file_size_max}", fix="the maker must round the size up")
        return RunTarget(zv.dev, ("--blockdev", "--scratch", f"{self.workdir}/{name}",
                                  "--zvol", zv.name), zv.name)

    def release(self, run: RunTarget, verdict: Verdict) -> None:
        """A passed run's zvol goes now, a failed one's before the next run; a
        hung one's stays (its I/O may still be stuck in the kernel)."""
        if run.zvol is None:
            return
        if (verdict.kind or "") in GONE_WRONG:
            self.left.append(run.zvol)
            self.log(f"explore: zvol {run.zvol} left as it is (its run: {verdict.kind})")
        elif verdict.state == "ok":
            self._destroy(run.zvol)
        else:
            self.previous = run.zvol

    def _destroy_previous(self) -> None:
        if self.previous is not None:
            self._destroy(self.previous)
            self.previous = None

    def _destroy(self, name: str) -> None:
        why = self.maker.destroy(name)
        if why:         # not a finding about the build: the dataset's teardown retries
            self.log(f"explore: zvol {name} could not be destroyed ({why}); going on")


def make_targets(target: str, workdir: str, zvols: ZvolMaker | None,
                 log: Callable[[str], None] = print) -> FileTargets | ZvolTargets:
    """The targets of a session exploring ``target``."""
    if target == "file":
        return FileTargets(workdir)
    if target == "zvol":
        if zvols is None:
            raise ValueError("target 'zvol' needs a zvol maker: pass zvols=GuestZvols("
                             "zfs_guest, dataset, engine) (suite/explore/zvol.py)")
        return ZvolTargets(zvols, workdir, log)
    raise ValueError(f"the session explores {' or '.join(SESSION_TARGETS)} targets (a fresh "
                     f"one per run), not {target!r}: run a blockdev sequence by hand with "
                     f"python -m suite.ioengine explore-run SEQ --file DEV --blockdev --scratch P")


def choices_for(target: str, have: set[str], has_param: Callable[[str], bool],
                avoid: Iterable[str] = ()) -> Choices:
    """What sequences for ``target`` may pick on this build: the properties of
    ``have`` (a dataset's, or a zvol's), the module parameters it has, and every
    op but those to ``avoid`` (op kinds, or comma-separated lists of them)."""
    ops = ops_without(avoid)
    if target == "zvol":
        return Choices(ops=ops,
                       params=tuple(p for p in sorted(param_table("zvol")) if has_param(p)),
                       vol_have=tuple(sorted(k for k in ZVOL_PROP_CHOICES if k in have)))
    return Choices(ops=ops, props={k: v for k, v in PROP_CHOICES.items() if k in have},
                   atime={k: v for k, v in ATIME_CHOICES.items() if k in have},
                   params=tuple(p for p in sorted(param_table("file")) if has_param(p)),
                   **({} if nfs_server() else {"nfs_share": 0.0}))


def nfs_server() -> bool:
    """The kernel NFS server's tools are there (a guest's root is this machine's:
    ``nfs-kernel-server``, ci/apt-packages.txt); without them no sequence draws NFS."""
    return all(shutil.which(t) for t in ("exportfs", "rpc.nfsd", "rpc.mountd", "mount.nfs"))


def settable(seq: Sequence, has_param: Callable[[str], bool]) -> Sequence:
    """``seq`` with only the module parameters a replay sets on this build (those its
    target varies and the build has); the corpus and ``--explore-replay`` run it so."""
    return replace(seq, params={k: v for k, v in seq.params.items()
                                if k in param_table(seq.target) and has_param(k)})


def ops_without(avoid: Iterable[str]) -> tuple[str, ...]:
    """Every op kind but those named in ``avoid`` (``--explore-avoid``)."""
    names = {n.strip() for a in avoid for n in a.split(",") if n.strip()}
    unknown = names - set(OP_KINDS)
    if unknown:
        raise SuiteError(f"--explore-avoid {', '.join(sorted(unknown))}: no such op",
                         fix=f"name op kinds: {', '.join(OP_KINDS)}")
    if "verify" in names:
        raise SuiteError("--explore-avoid verify: every sequence ends with a verify",
                         fix="avoid the ops that hang, not the final check")
    return tuple(k for k in OP_KINDS if k not in names)


def param_table(target: str) -> dict[str, tuple[int, ...]]:
    """The module parameters sequences for ``target`` vary (and a replay sets)."""
    return ({**ZVOL_PARAM_CHOICES, **ZVOL_QUEUE_CHOICES, **ZVOL_TUNABLE_CHOICES}
            if target == "zvol" else {**PARAM_CHOICES, **TUNABLE_CHOICES})
