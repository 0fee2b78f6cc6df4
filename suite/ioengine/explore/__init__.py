"""The guest half of ``suite explore`` (``python -m suite.ioengine explore-run``):
a sequence of ops run against one target, every read checked against a byte
model (after xfstests' fsx). ``run`` (the command: load a sequence, set the
target up, run each op, say what came of it), ``step`` (an op as data, the op
groups, the registry of op functions), ``ops`` (reads, writes and transfers, and
the registry), ``file`` (the ops on the file itself: mmap, truncate, fallocate,
sync, evict), ``zfs`` (snapshot, rollback, txg sync), ``requests`` (buffers by
source and one request through each interface), ``race`` (a buffer changed in
flight), ``xfer`` (the kernel moving bytes: copy_file_range, clone, sendfile,
splice), ``model`` (what the target must hold and how an op is judged). The host
half is ``suite/explore``.
"""
