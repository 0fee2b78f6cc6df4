"""What a run says, read back from its results folder and rendered: the one page
(``page/``: HTML, the step summary, JUnit), tables, ZTS and xfstests results under
their own ids, the gate's and known bugs' records (``outcomes``), reproducers' text
(``repro``), findings as issue bodies. Nothing here starts a session, a build or a
guest: that is ``suite/campaign/``'s (``tests/test_layout.py`` holds it).
"""
