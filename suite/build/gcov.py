"""Build flags: the OpenZFS modules instrumented with gcov, only for a kernel
profile that asks for it (``[zfs] gcov = true`` in ``vmimages/<profile>.toml``).

OpenZFS's ``module/Makefile`` runs kbuild as ``$(MAKE) -C <kernel> M=$PWD modules``,
and kbuild adds ``$(CFLAGS_GCOV)`` (``-fprofile-arcs -ftest-coverage``) to every
object of a directory whose ``GCOV_PROFILE`` is ``y`` when the kernel has
``CONFIG_GCOV_KERNEL`` (``scripts/Makefile.lib``). A variable given on make's
command line reaches every sub-make (``MAKEFLAGS``) and overrides a Makefile's own
assignment, so ``GCOV_PROFILE=y`` on the build's ``make`` lines is the whole
change: no OpenZFS file is touched. The kernel's identity carries the flag
(``Kernel.identity``), so an instrumented build has a key of its own.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from suite.errors import BuildError

if TYPE_CHECKING:
    from suite.build.kernel import Kernel

MAKE_ARGS = ("GCOV_PROFILE=y",)
KCONFIG = "CONFIG_GCOV_KERNEL"


def kernel_has_gcov(config: Path) -> bool:
    """Does the kernel's ``.config`` have gcov support (``CONFIG_GCOV_KERNEL=y``)?"""
    try:
        text = config.read_text(errors="replace")
    except OSError:
        return False
    return f"\n{KCONFIG}=y\n" in f"\n{text}\n"


def make_args(kernel: "Kernel") -> tuple[str, ...]:
    """What the OpenZFS ``make`` lines get for ``kernel``: ``GCOV_PROFILE=y`` when
    its profile asks for coverage, nothing otherwise. A profile that asks for it on
    a kernel without gcov support is a BuildError, not a silently plain build."""
    if not kernel.zfs_gcov:
        return ()
    config = kernel.headers / ".config"
    if not kernel_has_gcov(config):
        raise BuildError(f"kernel profile {kernel.profile} asks for OpenZFS built with gcov, "
                         f"but {config} has no {KCONFIG}=y",
                         fix=f"add {KCONFIG}=y to the profile's fragments (its 'gcov' "
                             f"fragment), or drop gcov from its [zfs] table")
    return MAKE_ARGS


def instrumented(inputs: dict) -> bool:
    """Was the build with these inputs (``BuildRecord.inputs``) made with gcov?"""
    return bool(inputs.get("kernel", {}).get("zfs_gcov"))


def notes_of(src: Path, under: str = "module") -> list[Path]:
    """The ``.gcno`` files gcc left beside the objects (one per instrumented .c)."""
    return sorted((src / under).rglob("*.gcno"))


def check_instrumented(src: Path, log: Path) -> int:
    """After an instrumented build: the modules' objects have their ``.gcno``
    (GCOV_PROFILE reached kbuild), or BuildError. Returns how many."""
    n = len(notes_of(src))
    if n == 0:
        raise BuildError("the OpenZFS modules were built without gcov: no .gcno beside "
                         f"any object under {src / 'module'}",
                         fix=f"GCOV_PROFILE=y did not reach kbuild; see the make lines in {log}")
    return n
