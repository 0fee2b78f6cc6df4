"""What a case leaves behind, judged after every case (issue #21).

A case whose own reads and writes came back right may still leave a guest that
is not: a kernel tainted by a warning, a pool with checksum errors a retry hid, a
counter that wrapped below zero, a block leaked on disk. These judges look at
what is left, on every build, the way ``suite/guest/aftercase.py`` looks for
D-state tasks and console lines:

- ``snapshot``: one guest command before and one after each case collects
  everything (taint, kstats, ``zpool status -p``, ``zpool events -v``);
- ``taint``: new bits of ``/proc/sys/kernel/tainted``, by letter;
- ``kstats``: accounting that must balance, by the rules in
  ``vmimages/kstat-rules.toml`` (each with its reason);
- ``pools``: vdev error counters, states, permanent errors, ereports;
- ``expect``: what a case declares it leaves (the faults it injected);
- ``ondisk``: a scrub and ``zdb`` block accounting (``--thorough``);
- ``judge``: all of it as findings with symptom names and evidence.

A check that cannot run on a build (a kstat it lacks) says so; it never passes
silently.
"""
