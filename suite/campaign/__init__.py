"""Campaigns: the commands that run several pytest sessions and read them into one
answer.

A *campaign* is named for what it is: one question asked of several sessions, at
several commits (the gate's base and base+series, a bisection's steps, each known
bug's bad and fixed commits), on several release lines or shards, or in a fresh
guest (a reproducer verified). Each module here starts those sessions
(``suite.sessions.run_cases``), builds or guests, and leaves a results folder;
``suite/report/`` then reads that folder and renders it, and runs nothing itself
(as xfstests keeps ``check`` apart from its report formatters, and virtme-ng its
engine apart from its front end). "campaign" rather than "orchestrate": the
package holds the runs, not a scheduler.

- ``gate``: base against base+series, each case put in a class (regression, fixed, ...);
- ``bisect``: the first commit of a series at which a case fails;
- ``bugs``: each known bug at its bad and fixed commits, through any set of
  ``lanes`` (the suite's cases, ZTS, explore, xfstests), and one table of them;
- ``lines``: release lines' runs side by side; ``merge``: shards into one verdict;
- ``reproduce``: a failed case's reproducer run in a fresh guest (``suite repro``,
  ``suite findings verify``).
"""
