"""Every fixture the plugin defines reaches the cases (a fixture missing from
``suite/plugin/__init__.py`` is 'not found' only when a guest case asks for it)."""
from __future__ import annotations

import inspect

import suite.plugin
from suite.plugin import fixtures


def _is_fixture(obj) -> bool:
    return (getattr(obj, "_pytestfixturefunction", None) is not None      # pytest < 8.4
            or type(obj).__name__ == "FixtureFunctionDefinition")          # pytest >= 8.4


def test_every_fixture_of_the_plugin_is_exported():
    defined = {name for name, obj in inspect.getmembers(fixtures) if _is_fixture(obj)
               and getattr(obj, "__module__", fixtures.__name__) == fixtures.__name__}
    assert "ondisk_check" in defined and "pool" in defined
    missing = sorted(n for n in defined if getattr(suite.plugin, n, None) is None)
    assert missing == [], f"add to suite/plugin/__init__.py: {missing}"
