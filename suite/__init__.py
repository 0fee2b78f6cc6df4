"""ozfs-vmci: test OpenZFS patch series inside virtme-ng guests.

The packages follow the pipeline a run goes through:

    source  -> series  -> build  -> vm  -> guest  -> cases  -> report  -> campaign

- ``source/``: ``objects`` (the git object cache), ``series`` (manifests, applying a series)
- ``build/``: ``kernel`` (kernel profiles), ``recipe`` (the cached debug build and its
  record), ``pipeline`` (user options to a build; the options are declared there once)
- ``vm/``: ``accel`` (KVM probe, TCG fallback, deadline scaling), ``vng`` (the command
  line, keepalive, SSH keys), ``machine`` (the running guest), ``disks`` (emulated NVMe), ``ports`` (SSH port, process group),
  ``monitor`` (qemu HMP), ``console`` (kernel trouble on the console)
- ``guest/``: ``ssh`` (commands with deadlines and a heartbeat), ``channel`` (one
  command on one SSH channel), ``zfs`` (the build
  loaded and verified, parameters, pools), ``evidence`` (D-state stacks, sysrq, dmesg),
  ``aftercase`` (the guest judged after each case), ``lifecycle`` (get, judge, recycle)
- ``ioengine/``: the guest side of the I/O engine (standard library only)
- ``casekit/``: ``dio`` (Direct I/O plans and verdicts), ``engine`` (host side of the
  engine), ``faults`` (I/O held in flight), ``trials`` (counts, outcomes)
- ``report/``: renders results folders (``page``, JUnit, markdown, tables, reproducers'
  text) and runs nothing
- ``plugin/``: the pytest plugin (``hooks``, ``fixtures``); the cases are in ``cases/``
- ``campaign/``: the commands that run several sessions into one answer (``gate``,
  ``bisect``, ``bugs`` and its ``lanes``, ``lines``, ``merge``, ``reproduce``)
- around them: ``cli``, ``doctor``, ``shell``; ``errors``, ``paths``, ``progress``, ``locks``
"""
__version__ = "0.1.0"
