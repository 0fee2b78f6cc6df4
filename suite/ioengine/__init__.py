"""ioengine: issue exactly the I/O request shape asked for, report what happened.

Runs INSIDE a virtme-ng guest with the host's Python (the guest sees the host
root fs read-only), standard library only, and runs many trials in one process
so that a trial costs milliseconds rather than an SSH round trip. The host
imports only ``suite.ioengine.plan`` (the host/guest data format) and
``suite.ioengine.content`` (the generator); nothing here runs at import time.

Modules: ``plan`` (requests and results), ``content`` (deterministic bytes, the
file model), ``counters`` (kstats, module parameters), ``queues`` (buffers; sync,
libaio, io_uring), ``trials`` (files and the ``run`` command), ``stress``
(``hold``, ``flood``), ``barriers`` (``inflight``: writes in flight around a
barrier; ``append``), the ``explore`` package
(``explore-run``: a sequence of ops on one file, every read checked against a
byte model), ``cli``. Run in the guest as ``python -m suite.ioengine``.

Request shapes
--------------
A request is a list of segments ``{len, page_offset}``: each segment has its
own page-aligned ``mmap`` allocation and its buffer starts ``page_offset``
bytes into it (0 = page aligned), so alignment is exactly what the plan says.
Which kernel path a request takes depends on how it is issued:

* non-vectored (``vectored: false``, exactly one segment): ``pread(2)``,
  ``IOCB_CMD_PREAD``, ``IORING_OP_READ`` (and the write twins). The kernel
  builds an ``ITER_UBUF`` iov_iter: one contiguous user buffer.
* vectored, 1 segment: ``preadv(2)`` / ``IOCB_CMD_PREADV`` /
  ``IORING_OP_READV`` with ``nr_segs == 1``. A distinct syscall/opcode path;
  since Linux 6.4 ``__import_iovec`` turns it into ``ITER_UBUF`` too.
* vectored, 2..8 segments: ``ITER_IOVEC`` whose iovec array is copied into the
  caller's on-stack ``inline_vecs[UIO_FASTIOV]`` (``UIO_FASTIOV == 8``).
* vectored, 9+ segments: ``ITER_IOVEC`` with a kmalloc'd iovec array.

Direct I/O eligibility checks that walk the iov_iter differ between these
shapes; the vectored PREADV eligibility bugs fixed in OpenZFS PR #18902
depended on exactly this, so every shape must be expressible here.

Interfaces: ``sync`` (``pread64`` through libc for the one-buffer shape, since
``os.pread`` allocates its own buffer; ``os.preadv``/``os.pwrite``/
``os.pwritev`` otherwise), ``libaio`` (raw ``io_setup``/``io_submit``/
``io_getevents``/``io_cancel``/``io_destroy`` syscalls) and ``io_uring`` (raw
``io_uring_setup``/``io_uring_enter`` with the SQ/CQ rings mmapped).

Expected content
----------------
Files are written by the engine (``write-file`` or a plan file with
``create``) from :func:`pattern`, where the byte at absolute offset ``o``
depends only on ``(seed, o)``. Writes in a plan lay down ``pattern`` of their
own ``write_seed`` (default ``"<file seed>@<trial id>"``), so a write that
silently did not land is caught; the engine keeps a model of which seed owns
which range. Expected content is never obtained by reading the file back.

Commands (JSON lines on stdout, each flushed)
--------------------------------------------
``run PLAN.json|-`` (exit 0 once the plan ran, 2 if it cannot be parsed):
one ``{"event": "write-file"|"file"}`` line per plan file, one
``{"event": "begin"}`` line as each trial starts (so a trial the kernel dies
under is still named) and one ``{"event": "trial"}`` line per trial (:class:`Result`; ``res`` is bytes or
-errno, ``None`` on timeout; ``stage`` says where an error came from:
plan|setup|open|submit|syscall|complete|timeout), then ``{"event": "summary"}``.
Counters are deltas (``None``: file or field missing). Trial ``params`` apply
to that trial only (see :class:`ParamManager`); missing ones are listed in
``params_unavailable`` and the trial still runs.

``write-file PATH --size N --seed S``: one ``write-file`` line.
``hold``: ``submitted`` (printed as soon as the submit returns), optional
``probe``, then ``completed`` (exit 0) or ``timeout`` (exit 3).
``inflight`` / ``append``: see :mod:`suite.ioengine.barriers`.
``flood``: one ``flood`` line with per-submitter counts and counter samples
(exit 3 if a submitter hung or left requests in flight).
A FIFO given as a file opens O_RDWR and its reads never complete: that is how
the self-tests exercise the timeout paths without a fault injector.
"""
