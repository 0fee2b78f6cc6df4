"""``python -m suite explore``: an inner pytest session of
``cases/test_explore.py -m explore`` at one build, then what it found.

Exit 0: the exploration ran and found nothing; 1: a finding (a failed case
with a symptom about the build, not the harness); 2: inconclusive (no case came
to a verdict, the guest or the engine gave out, the session overran) or usage.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from suite import paths
from suite.build.pipeline import BUILD_OPTIONS
from suite.explore.budget import Budget, parse_budget
from suite.sessions import SESSION_TIMEOUT, load_verdicts, run_cases
from suite.symptoms import INFRASTRUCTURE, CaseVerdict

CASES = paths.PROJECT_ROOT / "cases" / "test_explore.py"
MARGIN_S = 3 * 3600.0           # a build, a guest and shrinking, on top of the budget


def build_argv(get: Callable[[str], Any]) -> list[str]:
    """The build options given (``get(dest)``), as pytest arguments."""
    out: list[str] = []
    for o in BUILD_OPTIONS:
        v = get(o.dest)
        if o.kind == "append":
            out += [x for item in v or [] for x in (o.flag, item)]
        elif o.kind == "flag":
            out += [o.flag] if v else []
        elif v:
            out += [o.flag, str(v)]
    return out


def classify(verdicts: dict[str, CaseVerdict], problem: str = "") -> tuple[int, str]:
    """(exit code, why) of a session's explore verdicts."""
    cases = [v for v in verdicts.values() if "test_explore" in v.nodeid]
    if not cases:
        return 2, problem or "no explore case came to a verdict (see pytest.log)"
    found = [v for v in cases if v.outcome == "failed"
             and any(s.kind not in INFRASTRUCTURE for s in v.symptoms)]
    if found:
        return 1, "finding: " + "; ".join(str(s) for v in found for s in v.symptoms
                                          if s.kind not in INFRASTRUCTURE)
    if problem:
        return 2, problem
    if all(v.outcome == "passed" for v in cases):
        return 0, "no finding"
    return 2, "inconclusive: " + "; ".join(
        f"{v.outcome}: {v.reason or ', '.join(str(s) for s in v.symptoms)}" for v in cases
        if v.outcome != "passed")


def print_draws(seed: int, draws: str, target: str = "file") -> int:
    """The reach table of the first N sequences of ``seed`` (every parameter and
    property varied, as on a build that has them all); no guest."""
    from suite.explore import reach
    from suite.explore.gen import Choices, generate, sequence_seed
    from suite.explore.targets import param_table
    n = parse_budget(draws).sequences
    if n is None:
        print(f"--draws {draws}: give a number of sequences, e.g. 20x")
        return 2
    ch = Choices(params=tuple(sorted(param_table(target))), zfs_ops=True)
    r = reach.drawn(generate(sequence_seed(seed, k), 40, target, 3 << 20, ch) for k in range(n))
    print(reach.table(r))
    missing = r.missing(asked=(reach.REWRITE_CELL,) if target == "zvol" else ())
    print(f"not drawn in {n} sequences: {', '.join(missing)}" if missing
          else f"every cell drawn in {n} sequences")
    return 0


def run_lane(build: list[str], seed: int, budget_text: str, pytest_args: list[str],
             results: Path | None = None, target: str = "file", findings: int = 1,
             shrink_s: float | None = None, known: list[str] | None = None,
             cover: bool = False, power_share: float | None = None,
             replay: list[str] | None = None) -> int:
    """``target``: what each sequence runs on, a fresh ``file`` or a fresh ``zvol``;
    ``findings``: distinct findings to collect before stopping; ``known``: summaries
    (or folders) of findings already known, not shrunk again; ``cover``: only sequences
    that reach a cell not executed yet, until every cell was."""
    # Given sequences: each run once (the file given twice: twice), whatever the budget.
    budget: Budget = parse_budget(f"{len(replay)}x" if replay else budget_text)
    tail = "-zvol" if target == "zvol" else ""
    results = results or paths.stamped("explore", f"-seed{seed}{tail}")
    args = ["-m", "explore", "--explore-seed", str(seed), "--explore-budget", str(budget),
            "--explore-target", target, "--explore-findings", str(findings), *build,
            *(["--explore-shrink", str(shrink_s)] if shrink_s else []),
            *(["--explore-cover"] if cover else []),
            *(["--explore-power-share", str(power_share)] if power_share is not None else []),
            *[a for r in replay or [] for a in ("--explore-replay", str(Path(r).resolve()))],
            *[a for k in known or [] for a in ("--explore-known", str(Path(k).resolve()))]]
    print(f"==> explore: seed {seed}, budget {budget}, target {target}; pytest {' '.join(args)} "
          f"(results {results})", flush=True)
    timeout = max(SESSION_TIMEOUT, budget.explore_s(120.0) + MARGIN_S * findings)
    _, problem, secs = run_cases(args, results, pytest_args, timeout=timeout, targets=[str(CASES)])
    verdicts = load_verdicts(results)
    code, why = classify(verdicts, problem)
    for v in verdicts.values():
        print(f"{v.outcome:8s} {v.nodeid}" + "".join(f"\n         {s}" for s in v.symptoms))
    for txt in sorted(results.glob("*/cases/*/explore/minimal-*.txt")):
        print(f"\n--- {txt}\n{txt.read_text().rstrip()}")
    for summary in sorted(results.glob("*/cases/*/explore/summary.json")):
        print(f"summary: {summary}")
        table = summary.with_name("reach.txt")
        if table.exists():
            print(table.read_text().rstrip())
    print(f"\nexplore: {why} (exit {code}; {secs:.0f}s; {results}, pytest.log there)")
    return code
