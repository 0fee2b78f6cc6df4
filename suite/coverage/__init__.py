"""Line coverage of a patch series: which lines the series adds or changes in
``module/`` and which of them the cases executed.

On a kernel profile that asks for it (``[zfs] gcov = true``, with the kernel's
``CONFIG_GCOV_KERNEL``), the OpenZFS modules are built with gcov (``flags``);
every guest's counters are copied out of ``/sys/kernel/debug/gcov`` before it is
let go (``collect``); the guests' ``.gcda`` of one build are merged with
``gcov-tool`` (``merge``) and read with ``gcov`` against the build's ``.gcno``
(``gcovdata``); the series' diff against its base gives the changed lines
(``diffmap``); ``report`` puts them together (table, ``coverage.json``, lcov
tracefile, genhtml pages) and ``lane`` is ``python -m suite coverage``.
"""
