"""The shape of the harness itself: no import cycles between its modules."""
from __future__ import annotations

import ast
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent / "suite"


def _module(path: Path) -> str:
    parts = path.relative_to(SUITE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Runtime imports between suite modules (``if TYPE_CHECKING:`` blocks excluded)."""
    files = {_module(p): p for p in SUITE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
                continue
            for n in ast.walk(node):
                if not isinstance(n, ast.ImportFrom):
                    continue
                if n.level:
                    base = ".".join(pkg.split(".")[: len(pkg.split(".")) - n.level + 1])
                    targets = ([f"{base}.{n.module}"] if n.module
                               else [f"{base}.{a.name}" for a in n.names])
                else:
                    targets = [n.module or ""]
                deps |= {t for t in targets if t in files}
        graph[name] = deps - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (c := visit(d, path + [d])):
                return c
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m, [m])):
            return c
    return None


def test_the_suite_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


# The pipeline's floors, lowest first: a module imports only from its own floor or
# one below (names several floors need live on the lowest one that uses them).
STAGES = ("foundation", "ioengine", "judges", "source", "build", "vm", "guest", "casekit",
          "explore", "coverage", "impact", "report", "plugin", "campaign", "commands")
FOUNDATION = {"suite", "suite.errors", "suite.paths", "suite.progress", "suite.locks",
              "suite.symptoms", "suite.sessions", "suite.signatures"}
COMMANDS = {"suite.cli", "suite.__main__", "suite.doctor", "suite.shell", "suite.xfstests_lane",
            "suite.bugs_cmd"}


def stage(module: str) -> str:
    if module in FOUNDATION:
        return "foundation"
    if module in COMMANDS:
        return "commands"
    return module.split(".")[1]


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a floor above the importer's."""
    return [f"{m} ({stage(m)}) imports {d} ({stage(d)})" for m, ds in sorted(graph.items())
            for d in sorted(ds) if STAGES.index(stage(d)) > STAGES.index(stage(m))]


def test_every_module_has_a_floor_and_imports_point_down():
    graph = import_graph()
    assert {stage(m) for m in graph} <= set(STAGES)
    assert upward(graph) == []


def test_the_floor_rule_sees_an_upward_import():
    assert upward({"suite.guest.lifecycle": {"suite.casekit.dio"}, "suite.casekit.dio": set()}) \
        == ["suite.guest.lifecycle (guest) imports suite.casekit.dio (casekit)"]
    assert upward({"suite.campaign.gate": {"suite.guest.zfs"}, "suite.guest.zfs": set()}) == []
    assert upward({"suite.report.outcomes": {"suite.campaign.gate"}, "suite.campaign.gate": set()}) \
        == ["suite.report.outcomes (report) imports suite.campaign.gate (campaign)"]


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_over_500_lines():
    big = {str(p.relative_to(SUITE)): n for p in SUITE.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > 500}
    assert not big, f"split these by concern: {big}"


def test_the_packages_read_like_the_pipeline():
    """source -> series -> build -> vm -> guest -> cases -> report, each a folder."""
    for pkg in ("source", "build", "vm", "guest", "ioengine", "casekit", "explore", "coverage",
                "report", "plugin", "campaign", "campaign/lanes"):
        assert (SUITE / pkg / "__init__.py").is_file(), pkg
    table = (SUITE.parent / "docs" / "architecture.md").read_text()
    for p in SUITE.rglob("*.py"):
        if p.name not in ("__init__.py", "__main__.py") and p.parent.name != "ioengine":
            assert f"`{p.name}`" in table, \
                f"docs/architecture.md's pipeline table lacks {p.parent.name}/{p.name}"


def test_every_case_module_collects_and_the_opt_in_lanes_stay_out_by_default():
    """A case module that fails to import (a misplaced mark, say) breaks every run
    that collects ``cases/``, not only its own cases."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]

    def collect(*args: str) -> list[str]:
        r = subprocess.run([sys.executable, "-m", "pytest", "cases", "--collect-only", "-q",
                            "-p", "no:cacheprovider", *args], cwd=root, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        return [ln for ln in r.stdout.splitlines() if "::" in ln]

    default = collect()
    assert default and not any("test_zts.py" in n or "test_perf.py" in n for n in default)
    zts = collect("-m", "zts")
    assert zts and all("test_zts.py::" in n for n in zts)
    perf = collect("-m", "perf")
    assert perf and all("test_perf.py::" in n for n in perf)


def _fixture_names() -> set[str]:
    import suite.plugin.fixtures as fx
    return {n for n, o in vars(fx).items()
            if "Fixture" in type(o).__name__ or hasattr(o, "_pytestfixturefunction")}


def _param_names(path: Path) -> set[str]:
    """The argnames of every ``@pytest.mark.parametrize("a,b", ...)`` in a module."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "parametrize" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out |= {a.strip() for a in node.args[0].value.split(",")}
    return out


def test_no_case_parameter_shadows_a_fixture(tmp_path):
    """A parameter named like a fixture silently replaces it for the whole case, and
    for every fixture built on it (``dio`` under ``zdio``: the case errors in setup
    with the parameter's value where the bench should be)."""
    fixtures = _fixture_names()
    assert {"dio", "zdio", "accel"} <= fixtures
    bad = {p.name: sorted(_param_names(p) & fixtures) for p in (SUITE.parent / "cases").glob("*.py")}
    assert not {k: v for k, v in bad.items() if v}
    broken = tmp_path / "case.py"
    broken.write_text('import pytest\n@pytest.mark.parametrize("checksum,dio", [])\ndef test_x(): ...\n')
    assert _param_names(broken) & fixtures == {"dio"}


# What starts a pytest session, a build or a guest: the campaign's business, never the
# report's (the report reads results folders and renders them).
RUNNERS = ("subprocess", "suite.sessions.run_cases", "suite.vm", "suite.guest.lifecycle",
           "suite.build.pipeline", "suite.explore.lane", "suite.coverage.lane", "suite.campaign")


def runners(path: Path) -> list[str]:
    """What ``path`` imports that runs something (every import, lazy ones too)."""
    names: list[str] = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            names += [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            names += [n.module, *(f"{n.module}.{a.name}" for a in n.names)]
    return sorted({m for m in names for r in RUNNERS if m == r or m.startswith(r + ".")})


def test_the_report_renders_and_runs_nothing(tmp_path):
    found = {str(p.relative_to(SUITE)): r for p in (SUITE / "report").rglob("*.py")
             if (r := runners(p))}
    assert not found, f"the report runs nothing; move these to suite/campaign/: {found}"
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from suite.sessions import run_cases, count\n"
                   "    import subprocess\n")
    assert runners(bad) == ["subprocess", "suite.sessions.run_cases"]
