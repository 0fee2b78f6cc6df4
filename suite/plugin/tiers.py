"""``--tier quick|full|auto``: how much of the selection runs, decided in one place.

- ``full``: every collected case (the default of ``pytest cases``);
- ``quick``: each case function once, with the same controls and trials inside
  it (a case alternates its conditions itself): the variant its
  ``@pytest.mark.quick("id")`` names as the most telling, else its first; and for
  each known bug of the manifests (``[[bugs]] cases``) whose selection that
  variant misses, the first variant the bug's selection picks, so every bug's
  targeted case still runs; on a stock build (no ``--series``) the sibling of each
  chosen variant that the build can run (``async0`` for ``async1``);
- ``auto``: ``full`` where guests run under KVM, ``quick`` under TCG (where a
  case costs minutes), said in one line with how to get the other.
"""
from __future__ import annotations

import os
from collections import OrderedDict

import pytest
from _pytest.mark import KeywordMatcher
from _pytest.mark.expression import Expression

from suite import sessions

TIERS = ("auto", "quick", "full")
INNER_SESSION = "OZFS_VMCI_INNER_SESSION"   # a gate's or `suite bugs`' side (sessions.py)


def bug_selections(kernel: str = "") -> list[str]:
    """The ``-k`` expression of each known bug that is run (not deferred) on ``kernel``
    (a run's ``--kernel``): a bug seen only on its own profile (KASAN) is kept only
    there, since its case elsewhere would run blind."""
    from suite.source import series
    out = []
    for m in series.available().values():
        for b in m.bugs:
            if b.cases and not b.deferred and b.kernel in ("", kernel):
                out.append(" or ".join(f"({c})" for c in b.cases))
    return out


def _variant(item: pytest.Item) -> str:
    cs = getattr(item, "callspec", None)
    return cs.id if cs is not None else ""


# A stock build (no --series) has neither the async path nor zvol Direct I/O: the
# variant that asks for them would only skip there. Its sibling that asks for the
# build's own behaviour is the telling one on stock.
STOCK_SWAPS = (("async1", "async0"), ("dio1", "dio0"), ("-async", "-sync"))


def stock_sibling(item: pytest.Item, group: list[pytest.Item]) -> pytest.Item:
    """The variant of ``item`` a stock build can run (``item`` itself if none)."""
    vid = _variant(item)
    for series_only, stock in STOCK_SWAPS:
        if series_only in vid:
            want = vid.replace(series_only, stock)
            return next((it for it in group if _variant(it) == want), item)
    return item


def asked_for(config: pytest.Config) -> list[str]:
    """``-k``-style expressions of the variants the run's options ask for by name: a
    variant the quick tier must keep, as the option would skip any other
    (``--xfstests-profile direct``: the ``direct`` profile's case, not ``plain``)."""
    return [f"xfstests and {p}" for p in config.getoption("xfstests_profile", None) or []]


def _part(item: pytest.Item) -> str:
    """``item``'s variant without its ``partIofN`` (the parts of one case that run at
    once on different workers: ``--xfstests-split``)."""
    return "-".join(x for x in _variant(item).split("-")
                    if not (x.startswith("part") and "of" in x))


def quick(items: list[pytest.Item], selections: list[str],
          stock: bool = False, both: bool = False,
          asked: list[str] | None = None) -> list[pytest.Item]:
    """The quick tier of ``items`` (their order kept); ``stock``: the session tests a
    build without a series, so each chosen variant is one it can run; ``both`` (a
    gate's sides, which may both be stock, as for a pull request): each chosen variant
    and the stock sibling beside it, so neither side runs only what it must skip;
    ``asked`` (:func:`asked_for`): variants an option names, chosen in place of the
    case's own pick. A chosen variant split in parts keeps all its parts."""
    asks = [Expression.compile(s) for s in asked or []]
    exprs = [Expression.compile(s) for s in selections]
    groups: "OrderedDict[tuple, list[pytest.Item]]" = OrderedDict()
    for it in items:
        groups.setdefault((str(it.path), getattr(it, "originalname", it.name)), []).append(it)
    keep: set[int] = set()
    for group in groups.values():
        m = group[0].get_closest_marker("quick")
        chosen = [it for it in group
                  if any(e.evaluate(KeywordMatcher.from_item(it)) for e in asks)]
        chosen = chosen or [it for it in group if m and _variant(it) in m.args]
        for e in exprs:                 # every bug keeps a variant it selects
            if not any(e.evaluate(KeywordMatcher.from_item(it)) for it in chosen):
                hit = next((it for it in group if e.evaluate(KeywordMatcher.from_item(it))), None)
                chosen += [hit] if hit is not None else []
        chosen = chosen or group[:1]
        if stock:
            chosen = [stock_sibling(it, group) for it in chosen]
        elif both:
            chosen += [stock_sibling(it, group) for it in chosen]
        parts = {_part(it) for it in chosen}
        keep.update(id(it) for it in group if it in chosen or _part(it) in parts
                    and _part(it) != _variant(it))
    return [it for it in items if id(it) in keep]


def resolve(config: pytest.Config, tier: str) -> tuple[str, str]:
    """(quick|full, why) for ``--tier auto`` by the accelerator guests will get."""
    if tier != "auto":
        return tier, f"--tier {tier}"
    from suite.build.kernel import resolve_kernel
    from suite.vm.accel import choose
    try:
        accel = choose(config.getoption("accel"),
                       resolve_kernel(config.getoption("kernel"), allow_install=False).vmlinuz)
    except Exception as e:          # no kernel yet: the build will say so; be quick
        return "quick", f"the accelerator is unknown ({e}); --tier full runs everything"
    if accel.name == "kvm":
        return "full", "KVM works: the full selection (--tier quick for a first look)"
    return "quick", ("guests run under TCG: the quick tier, each case function once with its "
                     "bug-catching variant (--tier full runs every variant, hours here)")


class TierPlugin:
    """Registered by the plugin's ``pytest_configure``: the tier is applied after
    every other selection (``-k``, ``-m``), so it thins what was selected."""

    def __init__(self) -> None:
        self.resolved: tuple[str, str] | None = None

    def _resolve(self, config: pytest.Config) -> tuple[str, str]:
        if self.resolved is None:
            self.resolved = resolve(config, config.getoption("tier", "full") or "full")
        return self.resolved

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        if (config.getoption("tier", "full") or "full") == "full":
            return []
        tier, why = self._resolve(config)
        return [f"ozfs-vmci: tier {tier}: {why}"]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if (config.getoption("tier", "full") or "full") == "full" or \
                not any(i.get_closest_marker("ozfs_case") for i in items):
            return
        if self._resolve(config)[0] != "quick":
            return
        # A gate's base side is stock too, but must run the variants its series side
        # runs (the classes compare them): only a session of its own swaps.
        inner = os.environ.get(INNER_SESSION, "")
        stock = not config.getoption("series", None) and not inner
        # The manifests' bugs live in their series: a stock session keeps none of them.
        kernel = str(config.getoption("kernel", "") or "")
        kept = quick(items, [] if stock else bug_selections(kernel), stock=stock,
                     both=inner == sessions.GATE_SESSION, asked=asked_for(config))
        drop = [i for i in items if i not in kept]
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = kept
