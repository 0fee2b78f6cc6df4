"""Test impact selection: from what a pull request changes, the cases that reach it.

The pipeline, one module each:

- ``casemap``: which OpenZFS functions each case reached, from the per-case gcov
  counters a coverage run leaves (the debug kernel profile; ``coverage/cases/``);
- ``changed``: which functions a diff changes (by name, from the sources on both
  sides), and the functions that use a name it changes outside any function (a
  macro, a struct member, a tunable);
- ``choose``: the cases to run first (those whose map reaches a changed function,
  and every case the map does not know), and what was left out and why.

``python -m suite impact map|select|table``; the gate takes ``--impact-map``.
"""
