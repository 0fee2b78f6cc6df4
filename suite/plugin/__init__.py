"""The pytest plugin, split like labgrid's: options + hooks, and fixtures.

Loaded by the project's ``conftest.py`` (``pytest_plugins = ["suite.plugin"]``),
so ``pytest cases ...`` just works from a checkout.
"""
from .fixtures import (accel, case_dir, dio, engine, pool, run_ctx, vm_manager,  # noqa: F401
                       zfs_build, zfs_guest)
from .hooks import (pytest_addoption, pytest_configure,  # noqa: F401
                    pytest_configure_node, pytest_runtest_makereport,
                    pytest_terminal_summary)
