"""``suite explore``: seeded, differential, shrinking exploration of Direct I/O.

After xfstests' fsx (a model of the file, every op checked, a log that replays)
and syzkaller (programs as data, minimised reproducers). The host side:
``ops`` (sequences as data, JSON, one line per op for people), ``gen`` (the
seeded generator), ``shrink`` (delta debugging), ``judge`` (the engine's lines
to a verdict), ``session`` (generate, run in the guest, shrink a failure, save
it), ``targets`` (each run's fresh file, or fresh zvol: ``--target zvol``),
``zvol`` (zvols made in the guest), ``lane`` (``python -m suite explore``: the
inner pytest session). The
guest side is ``suite/ioengine/explore/`` (``python -m suite.ioengine
explore-run``).
"""
