"""``/proc/sys/kernel/tainted``: a bit per kind of trouble the kernel has seen.

A case that sets a new bit (a WARNING, a bad page, an oops) left the kernel worse
than it found it, even if no console line was caught. The bits a CDDL,
out-of-tree, unsigned module sets when it loads are expected.
"""
from __future__ import annotations

# bit -> (letter, meaning), as in the kernel's Documentation/admin-guide/tainted-kernels.rst
FLAGS: dict[int, tuple[str, str]] = {
    0: ("P", "proprietary module loaded"), 1: ("F", "module force-loaded"),
    2: ("S", "out-of-spec system"), 3: ("R", "module force-unloaded"),
    4: ("M", "machine check"), 5: ("B", "bad page referenced or unexpected page flags"),
    6: ("U", "taint requested by user space"), 7: ("D", "kernel died (oops or BUG)"),
    8: ("A", "ACPI table overridden"), 9: ("W", "kernel warning"),
    10: ("C", "staging driver loaded"), 11: ("I", "firmware workaround"),
    12: ("O", "out-of-tree module loaded"), 13: ("E", "unsigned module loaded"),
    14: ("L", "soft lockup"), 15: ("K", "kernel live-patched"),
    16: ("X", "auxiliary taint"), 17: ("T", "struct randomization plugin"),
    18: ("N", "in-kernel test run"),
}
# OpenZFS is CDDL (P), built out of tree (O), unsigned (E): set at insmod, expected.
EXPECTED = (1 << 0) | (1 << 12) | (1 << 13)


def letters(mask: int) -> str:
    return "".join(FLAGS.get(b, (f"?{b}", ""))[0] for b in range(32) if mask >> b & 1)


def new_bits(before: int, after: int, expected: int = EXPECTED) -> list[tuple[str, str]]:
    """(letter, meaning) of each bit set after the case that was not set before
    and is not expected."""
    fresh = after & ~before & ~expected
    return [FLAGS.get(b, (f"?{b}", f"bit {b}")) for b in range(32) if fresh >> b & 1]
