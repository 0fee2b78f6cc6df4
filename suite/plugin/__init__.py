"""The pytest plugin, split like labgrid's: options + hooks, and fixtures.

Loaded by the project's ``conftest.py`` (``pytest_plugins = ["suite.plugin"]``),
so ``pytest cases ...`` just works from a checkout.
"""
from suite.plugin.fixtures import (accel, case_dir, dio, engine, guests,  # noqa: F401
                                   ondisk_check, pool, run_ctx, symptom, zdio, zfs_build,
                                   zfs_guest)
from suite.plugin.expected import pytest_runtest_protocol  # noqa: F401
from suite.plugin.hooks import (pytest_addoption, pytest_collection_finish,  # noqa: F401
                                pytest_collection_modifyitems, pytest_configure,
                                pytest_configure_node, pytest_deselected, pytest_report_header,
                                pytest_runtest_call,
                                pytest_runtest_makereport)
from suite.plugin.summary import pytest_sessionstart, pytest_terminal_summary  # noqa: F401
