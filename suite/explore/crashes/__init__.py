"""A sequence that trips the kernel is explore's best finding (syzkaller's view of
a crash): ``trip`` (what tripped, named by its kernel lines and the op in flight,
and the signature that counts repeats), ``pace`` (a hang noticed in minutes: an op
without progress for several times the slowest op seen), ``stream`` (the guest
runner that watches each op's start and end as the engine prints them, and turns a
panic, a lost guest or a hang into a verdict instead of an exception), ``avoid``
(a hang that is a known finding of the kernel under test: its op avoided from then
on), ``fresh`` (a fresh guest, pool and dataset after one that tripped: shrinking
replays on fresh guests, exploring goes on).
"""
