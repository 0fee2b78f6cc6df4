"""The lanes of ``suite bugs``: each a way to look at a series' known bugs at their
commits (the suite's own cases, OpenZFS's ZTS, the explore exerciser, xfstests)."""
