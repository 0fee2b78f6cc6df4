"""What the exerciser (``suite explore``) found at each known bug's bad commit.

``python -m suite bugs SERIES --explore BUDGET`` runs ``suite explore`` alone (the
``explore`` case, no targeted case) once at every distinct bad commit of the
series' bugs, with ``--explore-seed N`` and ``--explore-target file|zvol``; the run
is shared by every bug at that commit. ``--explore-only`` leaves the suite's own
cases out; ``--explore-from DIR`` reads earlier explore results instead of running,
matched to a commit through the build record each run folder holds
(``<run>/build/record-*.json``: the series' last applied commit). The table:

    bug | bad commit | explore at bad

Explore is credited with a *failure at the commit*, as ZTS is: the cell gives the
symptom and its detail, and ``(matches the bug's symptom)`` only where it is the
bug's own by its ``[bugs.symptom]``: the kind, the functions on its stacks and the
op the manifest names (:func:`credited`). A
bug the manifest defers (no userspace symptom on this kernel) says so and is not
run for.
"""
from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from suite.campaign.lanes import Lane, chosen, escaped
from suite.errors import SuiteError
from suite.explore.budget import budget_arg
from suite.symptoms import INFRASTRUCTURE, PASSED, CaseVerdict, Symptom, SymptomSpec
from suite.source.series import KnownBug

SUMMARY = "cases/*/explore/summary.json"          # under a run folder
DEPTHS = ("", "*/", "*/*/", "*/*/*/")              # session, results root, bugs-*, bugs root


def duration(s: float) -> str:
    s = int(round(s))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@dataclass
class Failure:
    """A failure explore met at the commit."""
    kind: str
    detail: str = ""
    row: str = ""
    after_s: float | None = None     # from exploring's start to the end of the failing sequence
    approx: bool = False             # summed from sequence times (a summary without at_s)
    ops_from: int | None = None      # the generated sequence's ops
    ops_to: int | None = None        # the shrunk one's
    confirmed: bool = True
    in_sequence: bool = True         # False: not in a finished sequence (a judge, a hang)
    stack: tuple[str, ...] = ()      # D-state: the stuck tasks' functions; kernel:*: the report's


def credited(spec: SymptomSpec | None, kind: str, detail: str = "",
             stack: tuple[str, ...] = ()) -> bool:
    """Explore's failure is the bug's own symptom: its kind, the functions the bug's
    symptom names on its stacks (rollback-drain-deadlock: both sides of the deadlock),
    and, where the manifest says which, the op it failed in (an early barrier is
    fsync's bug only where an fsync returned early)."""
    return bool(spec) and same_kind(kind, spec.kinds) and \
        all(f in stack for f in spec.stack) and \
        (not spec.op or re.search(spec.op, detail) is not None)


@dataclass
class ExploreAt:
    commit: str
    budget: str = ""
    target: str = "file"
    seed: int | None = None
    sequences: int = 0
    elapsed_s: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    problem: str = ""
    results: str = ""
    known: int = 0                   # sequences that failed as a known finding (not shrunk)
    aside: list[dict] = field(default_factory=list)  # what shrinking met on the way

    def describe(self, spec: SymptomSpec | None = None) -> str:
        text = self._describe(spec)
        if not self.aside or text.startswith("INCONCLUSIVE"):
            return text
        mine = [a for a in self.aside if credited(spec, str(a.get("kind")),
                                                  f"{a.get('op', '')}: {a.get('why', '')}")]
        kinds = ", ".join(str(a.get("kind")) for a in self.aside)
        return text + (f"; met while shrinking another finding: {kinds}"
                       + (" (the bug's symptom; kept aside, not replayed)" if mine else ""))

    def _describe(self, spec: SymptomSpec | None = None) -> str:
        if self.problem:
            return f"INCONCLUSIVE: {self.problem}"
        on = f", target {self.target}" if self.target != "file" else ""
        on += f"; {self.known} failed as known findings" if self.known else ""
        if not self.failures:
            return f"not found in {self.budget} ({self.sequences} sequences{on})"
        # the failure of the bug's kind leads, where there is one (of the kinds the
        # manifest names, the one it names first: EFAULT before wrong-bytes)
        hits = [x for x in self.failures if credited(spec, x.kind, x.detail, x.stack)]
        f = min(hits, key=lambda x: kind_rank(x.kind, spec.kinds)) if hits and spec \
            else self.failures[0]
        rest = [x for x in self.failures if x is not f]
        if f.in_sequence:
            when = "?" if f.after_s is None else ("~" if f.approx else "") + duration(f.after_s)
            how = f" after {when} (shrunk {f.ops_from} -> {f.ops_to} ops)"
            how += "" if f.confirmed else " (the shrunk sequence did not fail again)"
        else:
            how = (f" outside a finished sequence ({self.sequences} finished in "
                   f"{duration(self.elapsed_s)}; nothing shrunk)")
        match = " (matches the bug's symptom)" if hits else ""
        row = f" [{f.row}]" if f.row else ""
        also = f"; also {', '.join(x.kind for x in rest)}" if rest else ""
        detail = f": {f.detail}" if f.detail else ""
        if spec and spec.kinds and not hits:
            # Explore met other failures (often the base's upstream bugs): the bug
            # itself was not found, and the cell must not read as if it were.
            return (f"not by its symptom ({wanted(spec)}) in {self.budget} "
                    f"({self.sequences} sequences{on}); met instead: "
                    f"{f.kind}{how}{detail}{row}{also}")
        return f"found: {f.kind}{how}{match}{on}{detail}{row}{also}"


def wanted(spec: SymptomSpec) -> str:
    """The symptom a bug's cell waits for: its kinds, the functions and the op."""
    out = ", ".join(spec.kinds)
    out += f" with {', '.join(spec.stack)} on the stacks" if spec.stack else ""
    return out + (f", in an op matching /{spec.op}/" if spec.op else "")


def bare_kind(kind: str) -> str:
    """Explore's unexpected errno ``error:EINVAL`` as a case's table (and so a
    manifest) names it: ``EINVAL``."""
    return kind[len("error:"):] if kind.startswith("error:") else kind


# Explore's kinds that are a case's symptom under another name: a synced block gone
# after a crash point (a power cut, a frozen pool imported), or a synced size gone (the
# file back shorter or longer than any size it had since its last barrier), is what
# the barrier cases call acknowledged bytes lost after a power cut. A torn block is not:
# it may be a write no barrier covered.
ALIASES: dict[str, tuple[str, ...]] = {"crash-lost": ("lost-after-barrier",),
                                       "crash-size": ("lost-after-barrier",)}


def names(kind: str) -> tuple[str, ...]:
    return (kind, bare_kind(kind), *ALIASES.get(kind, ()))


def same_kind(kind: str, kinds: list[str] | tuple[str, ...]) -> bool:
    """Explore's symptom kind against a manifest's."""
    return any(k in kinds for k in names(kind))


def kind_rank(kind: str, kinds: list[str] | tuple[str, ...]) -> int:
    """Where the manifest lists ``kind``."""
    return list(kinds).index(next(k for k in names(kind) if k in kinds))


def _json(p: Path) -> dict:
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def read_run(summary_path: Path, commit: str = "") -> ExploreAt:
    """An explore case's outcome from its ``explore/summary.json`` and the case's
    ``verdict.json`` beside it."""
    s = _json(summary_path)
    case = summary_path.parent.parent
    out = ExploreAt(commit[:11], str(s.get("budget", "?")), str(s.get("target") or "file"),
                    s.get("master_seed"), distinct_sequences(s),
                    float(s.get("elapsed_s") or 0.0), results=str(case),
                    known=int(s.get("known") or 0),
                    aside=[a for a in s.get("aside") or [] if isinstance(a, dict)])
    if not s:
        out.problem = f"{summary_path} does not read as JSON (see pytest.log)"
        return out
    vpath = case / "verdict.json"
    if not vpath.exists():
        out.problem = (f"the explore case left no verdict.json (cut short, or still running; "
                       f"see {case.parent.parent.parent / 'pytest.log'})")
        return out
    v = CaseVerdict.load(vpath)
    runs = list(s.get("runs") or [])
    known = known_by_runs(runs)
    real = [x for x in v.symptoms if x.kind not in INFRASTRUCTURE
            and not known_runs_account(x, known)]
    for f in s.get("findings") or []:
        out.failures.append(_finding(f, runs, real))
    shown = {f.kind for f in out.failures}
    hang = next((f for f in out.failures if f.kind in ("hang", "kernel:hung_task")), None)
    for x in real:
        if x.kind == "D-state" and hang is not None and x.kind not in shown:
            # the tasks a hang left in D state: that finding's, timed and shrunk with it
            out.failures.append(replace(hang, kind="D-state", detail=f"{x.detail} in "
                                        f"{', '.join(x.stack[:4])}" if x.stack else x.detail,
                                        stack=x.stack))
        elif x.kind not in shown:
            out.failures.append(Failure(x.kind, x.detail, x.row, in_sequence=False,
                                        stack=x.stack))
    if out.failures:
        return out
    explained = bool(v.symptoms) and all(known_runs_account(x, known) for x in v.symptoms)
    if (v.outcome in PASSED or explained) and not s.get("no_result"):
        return out          # (a case failed by known findings alone: none met here)
    odd = [str(x) for x in v.symptoms] or [f"no-result: seed {n.get('seed')}: {n.get('why', '')}"
                                           for n in s.get("no_result") or []]
    out.problem = (f"{v.outcome}: " + ("; ".join(odd) or v.reason or "no recorded symptom"))[:300]
    return out


def distinct_sequences(summary: dict) -> int:
    """The sequences a run generated: a sequence run again past a known finding or a
    hang (``resumed``) is the same sequence (317cbaa578: 2 sequences, 5 runs)."""
    runs = summary.get("runs") or []
    if not runs:
        return int(summary.get("sequences") or 0)
    return len({r.get("k", i) for i, r in enumerate(runs)})


def known_by_runs(runs: list[dict]) -> list:
    """The upstream findings the runs were named (``known``), read once."""
    ids = {str(r["known"]) for r in runs if r.get("known")}
    if not ids:
        return []
    from suite.report import upstream
    return [f for f in upstream.load() if f.id in ids]


def known_runs_account(x: Symptom, known: list) -> bool:
    """The case's symptom is what a run explore named a known upstream finding left
    (the finding's own by its signature, or what follows from it): counted among the
    run's known findings, never a failure met at the commit (dc643dc204's io_uring
    quota panic, named known in its run, once read as the bug's own spl_panic)."""
    return any(f.accounts(x.signed()) or f.follows(x.signed()) for f in known)


def _finding(f: dict, runs: list[dict], symptoms: list[Symptom]) -> Failure:
    kind = str(f.get("kind") or "?")
    # the run that failed so (a sequence run again past a known finding shares its seed)
    mine = [i for i, r in enumerate(runs) if r.get("seed") == f.get("seed")]
    upto = next((i for i in mine if runs[i].get("kind") == kind), mine[0] if mine else None)
    run = runs[upto] if upto is not None else {}
    after, approx = run.get("at_s"), False
    if after is None and upto is not None:          # written before at_s was recorded
        after, approx = sum(float(r.get("seconds") or 0) for r in runs[:upto + 1]), True
    sym = next((x for x in symptoms if x.kind == kind), Symptom(kind))
    return Failure(kind, sym.detail, sym.row, after, approx, run.get("ops"), f.get("ops"),
                   bool(f.get("confirmed", True)), stack=sym.stack)


def read_session(results: Path, commit: str = "") -> ExploreAt:
    """What one explore session (a results folder of ``suite explore`` or of
    ``bugs --explore``'s ``explore/<commit>``) came to."""
    found = sorted(results.glob(f"*/{SUMMARY}"))
    if not found:
        return ExploreAt(commit[:11], results=str(results),
                         problem=f"the explore case left no summary.json (see "
                                 f"{results / 'pytest.log'})")
    out = read_run(found[-1], commit)
    out.results = str(results)
    return out


def built_commits(run: Path) -> list[str]:
    """The series commits a run's build was at (each applied series' last commit),
    from its ``build/record-*.json``."""
    out: list[str] = []
    for rec in sorted((run / "build").glob("record-*.json")):
        d = _json(rec)
        for s in [*(d.get("inputs") or {}).get("series", []),
                  *(d.get("source") or {}).get("series", [])]:
            commits = (s.get("commits") or []) if isinstance(s, dict) else []
            if commits and commits[-1] not in out:
                out.append(str(commits[-1]))
    return out


def built_kernel(run: Path) -> str:
    """The kernel profile a run's build was for (``kernel.profile`` of its build record)."""
    for rec in sorted((run / "build").glob("record-*.json")):
        name = (_json(rec).get("kernel") or {}).get("profile")
        if name:
            return str(name)
    return ""


@dataclass
class Earlier:
    summary: Path
    commits: list[str]
    target: str
    finished: bool          # its case wrote verdict.json
    kernel: str = ""        # the kernel profile its build was for (record's kernel name)


def earlier_runs(roots: list[Path]) -> list[Earlier]:
    """Every explore run under ``roots`` (a session, a results folder, a ``bugs-*``
    folder or one holding them), newest first (by the run folder's time stamp)."""
    seen: dict[Path, Earlier] = {}
    for r in roots:
        for depth in DEPTHS:
            for p in r.glob(f"{depth}*/{SUMMARY}"):
                run = p.parents[3]
                seen[p.resolve()] = Earlier(p, built_commits(run),
                                            str(_json(p).get("target") or "file"),
                                            (p.parent.parent / "verdict.json").exists(),
                                            built_kernel(run))
    return sorted(seen.values(), key=lambda e: (e.summary.parents[3].name,
                                                e.summary.stat().st_mtime), reverse=True)


def read_explore_at(commit: str, roots: list[Path], target: str = "file",
                    runs: list[Earlier] | None = None, kernel: str = "") -> ExploreAt:
    """What explore saw at ``commit`` in earlier runs under ``roots``: the newest
    finished run on ``target`` whose build was at that commit, on ``kernel`` where a
    bug names one (else on any other)."""
    runs = earlier_runs(roots) if runs is None else runs
    at = [e for e in runs if any(c.startswith(commit[:11]) or commit.startswith(c)
                                 for c in e.commits)
          and (e.kernel == kernel if kernel else not e.kernel.endswith("-debug"))]
    mine = [e for e in at if e.target == target]
    if not mine:
        c = commit[:11]
        if at:
            return ExploreAt(c, problem=f"explore ran at {c} only on a {at[0].target} target "
                                        f"({at[0].summary.parents[3]}): ask for that with "
                                        f"--explore-target {at[0].target}")
        seen = sorted({x[:11] for e in runs for x in e.commits}) or ["none"]
        return ExploreAt(c, problem=f"no explore run at {c} under --explore-from ({len(runs)} "
                                    f"run(s) there, at {', '.join(seen)}): run it with "
                                    f"--explore BUDGET")
    best = next((e for e in mine if e.finished), mine[0])
    out = read_run(best.summary, commit)
    print(f"<== explore at {commit[:11]}: {out.describe()}, read from {out.results}", flush=True)
    return out


@dataclass
class ExploreLane(Lane):
    """``bugs --explore``: how to run explore at each bad commit, or where to read it."""
    name, label, column = "explore", "explore", "explore at bad"
    file, title = "explore-at-bad.md", "explore at each bad commit"
    budget: str = ""
    seed: int = 1
    target: str = "file"
    findings: int = 3
    only: bool = False
    known: list[str] = field(default_factory=list)  # findings known already (not shrunk)
    read_from: list[Path] = field(default_factory=list)

    def at(self, name: str, commit: str, root: Path, extra: list[str],
           base: bool = False, kernel: str = "") -> ExploreAt:
        if self.read_from:
            return read_explore_at(commit, self.read_from, self.target, kernel=kernel)
        return run_explore_at(name, commit, root, extra, self, kernel=kernel)

    @staticmethod
    def key(b: KnownBug) -> str:
        """One run per bad commit and kernel (:func:`explore_kernel`), shared by the
        bugs explored on it."""
        kernel = explore_kernel(b)
        return b.bad[:11] + (f"@{kernel}" if kernel else "")

    def visit(self, m, bug: KnownBug, role: str, commit: str, root: Path,
              extra: list[str]) -> None:
        if role == "bad" and self.key(bug) not in self.runs:
            self.runs[self.key(bug)] = self.at(m.name, commit, root, extra,
                                               kernel=explore_kernel(bug))

    def run(self, bug: KnownBug) -> ExploreAt | None:
        return self.runs.get(self.key(bug))

    def cell(self, b: KnownBug) -> str:
        """The ``explore at bad`` cell of bug ``b``."""
        e = self.run(b)
        if b.deferred:
            seen = f"; explore at this commit: {e.describe()}" if e else ""
            return escaped(f"deferred in the manifest ({b.deferred}){seen}")
        return escaped(e.describe(b.symptom) if e else "not run")


# Kinds only a debug kernel reports (suite/vm/console.py's rules for KASAN, KFENCE,
# lockdep, DEBUG_ATOMIC_SLEEP): a stock kernel never says them.
DEBUG_KINDS = ("kernel:kasan", "kernel:kfence", "kernel:lockdep", "kernel:atomic_sleep")


def explore_kernel(b: KnownBug) -> str:
    """The kernel a bug is explored on: the one its manifest names (``kernel =
    "debian-6.1-debug"``, for its cases) only where every kind of its symptom is a
    report only that kernel makes; else the run's own, many times faster under TCG
    (write-iovec-use-after-free: KASAN's report, or with the submitter gone an oops
    on any kernel)."""
    kinds = b.symptom.kinds if b.symptom else ()
    return b.kernel if b.kernel and kinds and set(kinds) <= set(DEBUG_KINDS) else ""


def run_explore_at(name: str, commit: str, root: Path, extra: list[str],
                   plan: ExploreLane, kernel: str = "") -> ExploreAt:
    from suite.explore.lane import run_lane
    results = root / "explore" / (commit[:11] + (f"-{kernel}" if kernel else ""))
    print(f"==> explore at {name}@{commit[:11]} (seed {plan.seed}, budget {plan.budget}, "
          f"target {plan.target}{', kernel ' + kernel if kernel else ''})", flush=True)
    build = ["--series", f"{name}@{commit[:11]}", *(["--kernel", kernel] if kernel else [])]
    run_lane(build, plan.seed, plan.budget, list(extra),
             results=results, target=plan.target, findings=plan.findings, known=plan.known)
    out = read_session(results, commit)
    print(f"<== explore at {commit[:11]}: {out.describe()}; {results}", flush=True)
    return out


def add_options(kb: argparse.ArgumentParser) -> None:
    """``bugs``' explore options."""
    kb.add_argument("--explore", type=budget_arg, default=None, metavar="BUDGET",
                    help="also run `suite explore` alone for BUDGET (15m, 20x) once at each "
                         "distinct bad commit and print what it found beside each bug")
    kb.add_argument("--explore-only", action="store_true",
                    help="run only the explore lane at each bad commit (no suite cases)")
    kb.add_argument("--explore-seed", type=int, default=1, help="--explore: master seed")
    kb.add_argument("--explore-target", choices=("file", "zvol"), default="file",
                    help="--explore: a fresh file per sequence, or a fresh zvol")
    kb.add_argument("--explore-findings", type=int, default=3, metavar="N",
                    help="--explore: distinct findings per bad commit before stopping "
                         "(default 3: an upstream finding met first does not end the run)")
    kb.add_argument("--explore-known", action="append", default=[], metavar="PATH",
                    help="--explore: findings already known (an explore run on the base or "
                         "master): counted and named at each bad commit, not shrunk")
    kb.add_argument("--explore-from", action="append", default=[], metavar="DIR",
                    help="read explore's side from earlier explore results folders (`suite "
                         "explore` or `bugs --explore`) instead of running it, each matched "
                         "to a bad commit by its build record (repeatable; the newest "
                         "finished run on --explore-target wins)")


def from_args(args: argparse.Namespace) -> ExploreLane | None:
    """``bugs --explore BUDGET`` / ``--explore-from DIR`` / ``--lane explore``: the
    exerciser at each bad commit (None: not asked for). ``--explore-from`` alone reads
    it, the suite's cases left out, as ``--zts-from`` alone does."""
    picked, alone = chosen(args, "explore")
    if not (args.explore or args.explore_from):
        if args.explore_only or picked:
            flag = "--explore-only" if args.explore_only else "--lane explore"
            raise SuiteError(f"{flag} runs nothing without a budget",
                             fix="give --explore 15m (or 20x), or --explore-from DIR to read "
                                 "earlier explore runs")
        return None
    return ExploreLane(args.explore or "", args.explore_seed, args.explore_target,
                       findings=args.explore_findings, known=list(args.explore_known),
                       only=args.explore_only or not args.explore or alone,
                       read_from=[Path(d) for d in args.explore_from])
