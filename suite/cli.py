"""``python -m suite``: each subcommand's parser and its handler (``--help`` lists them)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from suite.build.pipeline import add_build_options
from suite.errors import SuiteError

if TYPE_CHECKING:
    from suite.report.outcomes import GateRun

def options_from(args: argparse.Namespace):
    from suite.build.pipeline import options_from as from_values
    return from_values(lambda dest: getattr(args, dest, None),
                       force=getattr(args, "force", False), jobs=getattr(args, "jobs", None))


def cmd_build(args: argparse.Namespace) -> int:
    from suite.build.pipeline import build
    t = time.monotonic()
    record, built = build(options_from(args))
    how = "built" if built else "cached"
    print(record.summary())
    print(f"key {record.key} ({how} in {time.monotonic() - t:.1f}s)")
    print(f"record {record.build_dir}/record.json")
    return 0


def cmd_series(args: argparse.Namespace) -> int:
    from suite.source import series
    from suite.source.objects import ObjectCache
    manifests = series.available()
    if not args.name:
        for m in manifests.values():
            print(f"{m.name:12s} {m.title}\n{'':12s} {m.url} {m.branch} @ {m.head[:11]}"
                  f" (base {m.base[:11]})  {m.pr}")
        return 0
    if args.name not in manifests:
        raise SuiteError(f"unknown series '{args.name}'",
                         fix=f"known: {', '.join(manifests)}")
    m = manifests[args.name]
    cache = ObjectCache()
    commits = series.series_commits(cache, m, None, offline=args.offline)
    print(f"{m.name}: {m.title}\n  {m.pr}\n  base {m.base[:11]} {cache.subject(m.base)}")
    for c in commits:
        print(f"  {c[:11]} {cache.subject(c)}{m.bug_tags(c)}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from suite.doctor import run_doctor
    return run_doctor(install=args.install, accel=args.accel)


def explore_args(args: argparse.Namespace) -> list[str]:
    """--explore BUDGET: the exerciser joins the selection on both sides, with the
    same seed; the series side runs the base's sequences and each sequence is sorted
    on its own (suite/campaign/gate_explore.py)."""
    if not args.explore:
        return []
    return ["-m", "explore or not explore", "--explore-budget", args.explore,
            "--explore-seed", str(args.explore_seed), "--explore-target", args.explore_target]


def cmd_gate(args: argparse.Namespace) -> int:
    from suite.campaign.gate import gate_head_params, resort, run_gate
    from suite.source import series
    if args.resort:
        return report_gate(resort(args.resort))
    if args.pr or args.head:
        pull_into_series(args)
    if not args.series:
        raise SuiteError("gate what? give --series NAME, --pr N or --head URL@REF",
                         fix="e.g. python -m suite gate --pr 18902 -- -n 2")
    name = args.series.split("@", 1)[0]
    manifests = series.available()
    folder = name not in manifests and Path(name).is_dir()
    if not folder and name not in manifests:
        raise SuiteError(f"unknown series '{name}'", fix=f"known: {', '.join(manifests)}, "
                                                         "or a folder of *.patch files")
    if folder and not args.zfs_ref:
        raise SuiteError(f"a folder of patches ({name}) has no base of its own",
                         fix="name the ref it applies to: --zfs-ref zfs-2.3.9 (a tag, "
                             "branch or commit)")
    base = args.zfs_ref or manifests[name].base
    selection = ["-k", args.k] if args.k else []
    if args.explore and args.k:
        from suite.campaign.gate_explore import explore_selected
        explore_selected(args.k)
    if args.impact_map:
        from suite.impact.cli import gate_deselect
        selection += gate_deselect(args.series, base, args.k, args.impact_map)
    extra = [*(["--kernel", args.kernel] if args.kernel else []), *explore_args(args),
             *args.pytest_args]
    g = run_gate(args.series, base, selection, extra, reruns=args.reruns,
                 series_on_base=folder or bool(args.zfs_ref),
                 head_params=gate_head_params(args, Path(name) if folder else None),
                 label=getattr(args, "gate_label", ""))
    return report_gate(g)


def report_gate(g: GateRun) -> int:
    """A gate's reports written, its verdict printed (and to a GitHub step summary)."""
    import os

    from suite.report.outcomes import verdict
    from suite.report.runreport import markdown, print_verdict, write_reports
    files = write_reports(g)
    print_verdict(g, files)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as f:
            f.write(markdown(g))
    return verdict(g.classes)[0]


def pull_into_series(args: argparse.Namespace) -> None:
    """``--pr N[@COMMIT]`` / ``--head URL@REF``: the pull request's commits exported as
    a patch folder (the series) on its merge-base with its target (the base)."""
    from suite.source import pulls
    from suite.source.objects import ObjectCache
    if args.series:
        raise SuiteError("--series and --pr/--head both name what to gate",
                         fix="give one of them")
    cache = ObjectCache()
    if args.pr:
        pull = pulls.pull_request(cache, args.pr, target=args.target)
    else:
        url, ref, at = pulls.parse_head(args.head)
        pull = pulls.resolve_pull(cache, url, ref, at, target=args.target)
    folder = pulls.export_patches(cache, pull)
    print(f"==> gate {pull.describe(cache)}; patches {folder}", flush=True)
    args.series, args.zfs_ref = str(folder), args.zfs_ref or pull.base
    args.gate_label = f"openzfs/zfs#{args.pr}" if args.pr else args.head


def cmd_bisect(args: argparse.Namespace) -> int:
    from suite.campaign.bisect import run_bisect
    from suite.source import series
    from suite.source.objects import ObjectCache
    manifests = series.available()
    name, _, upto = args.series.partition("@")
    if name not in manifests:
        raise SuiteError(f"unknown series '{name}'", fix=f"known: {', '.join(manifests)}")
    m = manifests[name]
    cache = ObjectCache()
    commits = series.series_commits(cache, m, None)
    if upto:                # NAME@COMMIT: that commit is the bad end of the search
        ends = [i for i, c in enumerate(commits) if c.startswith(upto)]
        if not ends:
            raise SuiteError(f"{upto} is not a commit of {name}",
                             fix=f"python -m suite series {name} lists them")
        commits = commits[:ends[0] + 1]
    subjects = {c: cache.subject(c) for c in commits}
    extra_build = ["--kernel", args.kernel] if args.kernel else []
    b = run_bisect(m.name, args.case, commits, subjects, args.trials, args.pytest_args,
                   extra_build)
    print(f"\nbisect {m.name} {args.case}:")
    for i, st in enumerate(b.steps, 1):
        print(f"  step {i}: {st.commit[:11]} {st.state:12s} build {st.build_s:5.0f}s  "
              f"case {st.case_s:5.0f}s  {st.subject[:50]}")
    if b.first_bad:
        print(f"first bad commit: {b.first_bad[:11]} {subjects.get(b.first_bad, '')}")
        return 1
    print(f"no verdict: {b.problem}")
    return 2


def cmd_repro(args: argparse.Namespace) -> int:
    from pathlib import Path

    from suite.campaign.reproduce import run_repro
    return run_repro(Path(args.case_dir), options_from(args), accel=args.accel)


def cmd_findings(args: argparse.Namespace) -> int:
    import shutil
    import tempfile
    from pathlib import Path

    from suite import paths
    from suite.report import findings
    from suite.campaign.reproduce import run_repro
    reports = paths.patches_dir() / findings.REPORTS
    if args.action in ("list", "refresh"):
        print(findings.table() if args.action == "list" else
              "\n".join(findings.refresh(reports, [args.id] if args.id else [])) or "up to date")
        return 0
    if not args.id:
        raise SuiteError(f"findings {args.action}: which finding?",
                         fix="give its id (python -m suite findings lists them)")
    if args.action == "export":
        roots = [Path(r) for r in args.results] or [paths.results_root()]
        dest = findings.export(args.id, roots, Path(args.out) if args.out else reports)
        text = dest / "issue.md"
        if not text.exists():
            text = dest / "security-report.md"
            print("a memory-safety finding: report it privately (security-report.md says how), "
                  "not as a public issue")
        print(f"wrote {text} and its reproducer {dest / 'repro.sh'}")
        return 0
    findings.get(args.id)
    if args.plain:                  # the hand-written reproducer (suite/campaign/plainrepro.py)
        from suite.campaign.plainrepro import run_lines, run_plain
        if args.lines:              # master and each supported line's newest release
            from suite.source import lines
            refs = lines.refs_to_test(lines.remote_tags())[::-1]

            def opts_for(ref: str):
                args.zfs_ref = ref
                return options_from(args)
            return run_lines(args.id, opts_for, refs, accel=args.accel,
                             args=args.repro_args)[0]
        if not (args.zfs_ref or args.series or args.zfs_source):
            args.zfs_ref = "master"
        return run_plain(args.id, options_from(args), accel=args.accel, args=args.repro_args,
                         script=args.script)
    exported = reports / args.id
    if not (exported / "repro.sh").exists():
        raise SuiteError(f"{args.id} has no exported reproducer in {exported}",
                         fix=f"python -m suite findings export {args.id} --results DIR first")
    case = Path(tempfile.mkdtemp(prefix=f"verify-{args.id}-"))
    shutil.copytree(exported, case / "repro")
    if (case / "repro" / "suite-replay.sh").exists():     # the plain one runs with --plain
        (case / "repro" / "suite-replay.sh").replace(case / "repro" / "repro.sh")
    if not (args.zfs_ref or args.series or args.zfs_source):
        args.zfs_ref = "master"                 # stock upstream unless told
    return run_repro(case, options_from(args), accel=args.accel)


def cmd_explore(args: argparse.Namespace) -> int:
    from suite.explore.lane import build_argv, print_draws, run_lane
    if args.draws:
        return print_draws(args.seed, args.draws, args.target)
    return run_lane(build_argv(lambda dest: getattr(args, dest, None)), args.seed,
                    args.budget, args.pytest_args, target=args.target,
                    findings=args.findings, shrink_s=args.shrink_time, known=args.known,
                    cover=args.cover, power_share=args.power_share, replay=args.replay)


def cmd_merge(args: argparse.Namespace) -> int:
    from suite.campaign.merge import merge
    return merge([Path(d) for d in args.shards], Path(args.out), expected=args.expect)


def cmd_report(args: argparse.Namespace) -> int:
    from suite.report import page
    p = page.load(Path(args.results))
    out = Path(args.out) if args.out else p.root
    files = page.write(p, out, with_junit=args.junit or not (out / "junit.xml").exists())
    print(f"{p.kind} run {p.root}")
    print("\n".join(f"wrote {f}" for f in files))
    print(page.verdict_line(p))
    return p.verdict.exit_code


def cmd_shell(args: argparse.Namespace) -> int:
    from suite.shell import run_shell
    return run_shell(options_from(args), accel=args.accel, nvme=args.nvme, keep=args.keep)


def cmd_lines(args: argparse.Namespace) -> int:
    if args.what == "newest":
        import json

        from suite.source.lines import SUPPORTED, refs_to_test, remote_tags
        lines = tuple(args.line or SUPPORTED)
        refs = refs_to_test(remote_tags(args.url), lines, master=not args.no_master)
        print(json.dumps(refs) if args.json else "\n".join(refs))
        return 0
    from suite.campaign import lines as side_by_side
    if not args.folders:
        raise SuiteError("lines table needs the results folder of each line's run",
                         fix="python -m suite lines table results/zfs-2.3.9 results/master")
    labels = args.label or []
    runs = [side_by_side.read_run(Path(f), labels[i] if i < len(labels) else None)
            for i, f in enumerate(args.folders)]
    text = side_by_side.markdown(runs, every_case=args.all)
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")
    return side_by_side.exit_code(runs)


def cmd_coverage(args: argparse.Namespace) -> int:
    from suite.coverage.lane import run
    return run(args.series, [Path(d) for d in args.results],
               Path(args.out) if args.out else None, html=not args.no_html)


def _budget(text: str) -> str:
    from suite.explore.budget import budget_arg
    return budget_arg(text)


def parser() -> argparse.ArgumentParser:
    """Every command and its options (the manual's commands are checked against it)."""
    from suite.bugs_cmd import add_parser as add_bugs
    ap = argparse.ArgumentParser(prog="python -m suite",
                                 description="Test OpenZFS patch series in virtme-ng guests.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="fetch, patch and build OpenZFS (cached by inputs)")
    add_build_options(b.add_argument)
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument("-j", "--jobs", type=int, help="make -j (default: all cores)")
    b.set_defaults(func=cmd_build)
    s = sub.add_parser("series", help="list series, or the commits of one")
    s.add_argument("name", nargs="?")
    s.add_argument("--offline", action="store_true")
    s.set_defaults(func=cmd_series)
    d = sub.add_parser("doctor", help="check this machine and say what to fix")
    d.add_argument("--install", action="store_true", help="install what is missing (apt)")
    d.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    d.set_defaults(func=cmd_doctor)
    add_bugs(sub)
    gt = sub.add_parser("gate", help="run cases at the series' base and at base+series; "
                                     "sort each case (regression, fixed, ...); exit 0/1/2")
    gt.add_argument("--pr", default="", metavar="N[@COMMIT]",
                    help="an openzfs/zfs pull request by number (refs/pull/N/head, fetched "
                         "through the object cache): its commits on their merge-base with "
                         "--target; @COMMIT stops at one of its commits")
    gt.add_argument("--head", default="", metavar="URL@REF[@COMMIT]",
                    help="any fork's branch, tag or commit, gated like a pull request")
    gt.add_argument("--target", default="master",
                    help="--pr/--head: the upstream branch it targets (default master)")
    gt.add_argument("--series", default="", help="NAME, NAME@COMMIT (base: the "
                                                     "manifest's) or a folder of *.patch")
    gt.add_argument("--zfs-ref", default="", help="the base: a tag, branch or commit (a "
                                                  "backport: zfs-2.3.9 and a patch folder)")
    gt.add_argument("-k", default="", help="pytest -k selection (default: every case)")
    gt.add_argument("--kernel", default=None, help="kernel profile for both sides")
    gt.add_argument("--explore", default="", metavar="BUDGET",
                    help="also run `suite explore` on both sides for BUDGET (15m, 20x), "
                         "the same seed on each")
    gt.add_argument("--explore-seed", type=int, default=1)
    gt.add_argument("--explore-target", choices=("file", "zvol"), default="file",
                    help="--explore: a fresh file per sequence, or a fresh zvol")
    gt.add_argument("--reruns", type=int, default=2,
                    help="reruns of a case whose first class claims a change (regression, "
                         "fixed, a new signature), on both sides")
    gt.add_argument("--head-param", action="append", default=[], metavar="NAME=VALUE",
                    help="one more head session with this zfs.ko parameter set at load "
                         "(repeatable: one session each)")
    gt.add_argument("--tunables", choices=("auto", "off"), default="auto",
                    help="auto: each switch (0/1) a pull request or patch folder adds gets "
                         "a head session with its other value")
    gt.add_argument("--resort", type=Path, default=None, metavar="DIR",
                    help="sort a finished gate's results (results/gate-*) again by today's "
                         "rules and findings, running nothing")
    gt.add_argument("--impact-map", type=Path, default=None, metavar="FILE",
                    help="test impact selection: of the -k cases, run those the map "
                         "(python -m suite impact map) says reach what the series changes, "
                         "and every case it does not know; the rest deselected, named")
    gt.set_defaults(func=cmd_gate)
    bi = sub.add_parser("bisect", help="the first commit of a series at which a case fails")
    bi.add_argument("--series", required=True,
                    help="series NAME, or NAME@COMMIT to search up to that (failing) commit")
    bi.add_argument("--case", required=True, help="pytest node id, e.g. "
                    "'cases/test_dio_eof.py::test_eof_tail[...]'")
    bi.add_argument("--trials", type=int, default=29,
                    help="trials per condition at each step (default 29: a 1-in-10 symptom "
                         "shows with 95%%)")
    bi.add_argument("--kernel", default=None)
    bi.set_defaults(func=cmd_bisect)
    rp = sub.add_parser("repro", help="run a failed case's reproducer in a fresh guest at "
                                      "any build: exit 1 reproduced, 0 not")
    rp.add_argument("case_dir", help="the case's results folder (has repro/repro.sh)")
    add_build_options(rp.add_argument)
    rp.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    rp.set_defaults(func=cmd_repro)
    fd = sub.add_parser("findings", help="known upstream findings: list them, export one as an "
                                         "issue body with a standalone reproducer, or verify "
                                         "its reproducer in a fresh guest (exit 1 reproduced)")
    fd.add_argument("action", nargs="?", default="list", choices=("list", "export", "verify", "refresh"))
    fd.add_argument("id", nargs="?", default="", help="the finding's id")
    fd.add_argument("--results", action="append", default=[], metavar="DIR",
                    help="export: results folders to take the newest failing case from "
                         "(default ./results)")
    fd.add_argument("--out", default="", help="export: where (default patches/upstream/reports)")
    fd.add_argument("--plain", action="store_true",
                    help="verify: run the hand-written reproducer of patches/upstream/repro/ID "
                         "(nothing of the suite in the guest) instead of the exported one")
    fd.add_argument("--lines", action="store_true",
                    help="verify --plain: on master and the newest 2.4.x and 2.3.x release, one "
                         "fresh guest each: the finding's 'seen on' table")
    fd.add_argument("--repro-args", default="", metavar="ARGS",
                    help="verify --plain: arguments for repro.sh (e.g. '--rounds 5')")
    fd.add_argument("--script", default="repro.sh", metavar="NAME",
                    help="verify --plain: another script of the finding's folder (nfs.sh: "
                         "what an NFS client of the dataset meets)")
    add_build_options(fd.add_argument)
    fd.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    fd.set_defaults(func=cmd_findings)
    ex = sub.add_parser("explore", help="seeded op sequences on a file of a dataset (or a zvol), "
                        "every read checked against a model, a failure shrunk: exit 0 "
                        "nothing found, 1 a finding, 2 inconclusive")
    add_build_options(ex.add_argument)
    ex.add_argument("--seed", type=int, default=1, help="master seed (default 1)")
    ex.add_argument("--budget", type=_budget, default="5m",
                    help="how long to explore: 90s, 15m, 1h, or 20x for 20 sequences "
                         "(default 5m; shrinking a finding comes on top)")
    ex.add_argument("--target", choices=("file", "zvol"), default="file",
                    help="each sequence on a fresh file of the case's dataset (default) or "
                         "a fresh zvol under it, with the sequence's properties")
    ex.add_argument("--findings", type=int, default=1, metavar="N",
                    help="distinct findings to collect before stopping (default 1); past "
                         "the first, a failure like one already found is counted, not "
                         "shrunk again, so a frequent one does not hide the next")
    ex.add_argument("--shrink-time", type=float, default=None, metavar="SECONDS",
                    help="wall clock for shrinking one finding (default 1200 s)")
    ex.add_argument("--known", action="append", default=[], metavar="PATH",
                    help="findings already known: an explore summary.json or a results "
                         "folder holding them (the base's, master's); a failure with the "
                         "signature of one is counted, not shrunk (repeatable)")
    ex.add_argument("--cover", action="store_true", help="only sequences that reach a "
                    "cell no run executed yet, until every cell was (docs/explore.md)")
    ex.add_argument("--power-share", type=float, default=None, metavar="F", help="share "
                    "of sequences ending in a real power cut (default 0.12)")
    ex.add_argument("--replay", action="append", default=[], metavar="SEQ.json", help="run "
                    "these sequences (a minimal-<seed>.json) once each instead of generated ones")
    ex.add_argument("--draws", type=_budget, default=None, metavar="Nx",
                    help="run nothing: print the reach table the seed's first N sequences "
                         "draw (e.g. 20x), to choose a budget")
    ex.set_defaults(func=cmd_explore)
    mg = sub.add_parser("merge", help="merge --shard runners' results folders into one "
                                      "JUnit, summary.md, report.html and verdict (exit 0 "
                                      "pass, 1 fail, 2 inconclusive: a shard missing or empty)")
    mg.add_argument("shards", nargs="+", help="each shard's results folder")
    mg.add_argument("--out", required=True, help="where the merged reports go")
    mg.add_argument("--expect", type=int, default=0,
                    help="how many shards there should be (a missing one is inconclusive)")
    mg.set_defaults(func=cmd_merge)
    ln = sub.add_parser("lines", help="release lines: the newest tag of each (newest), or "
                                      "their runs side by side (table DIR...: exit 0 all "
                                      "passed, 1 a failure, 2 a line without results)")
    ln.add_argument("what", choices=["newest", "table"])
    ln.add_argument("folders", nargs="*", help="table: each line's results folder")
    ln.add_argument("--label", action="append", help="table: a name per folder, in order")
    ln.add_argument("--all", action="store_true", help="table: every case, not only those "
                                                       "that differ")
    ln.add_argument("--out", help="table: also write the markdown here")
    ln.add_argument("--line", action="append", help="newest: a line (default 2.3 and 2.4)")
    ln.add_argument("--no-master", action="store_true", help="newest: leave master out")
    ln.add_argument("--json", action="store_true", help="newest: a JSON list (a job matrix)")
    ln.add_argument("--url", default="https://github.com/openzfs/zfs")
    ln.set_defaults(func=cmd_lines)
    rr = sub.add_parser("report", help="render any results folder (a run, gate, merged "
                                       "shards, suite bugs) as report.html and a summary; "
                                       "exit 0 pass, 1 fail, 2 inconclusive")
    rr.add_argument("results", help="the results folder (a folder of runs: its newest)")
    rr.add_argument("--out", default=None, help="where to write (default: the run's folder)")
    rr.add_argument("--junit", action="store_true",
                    help="write junit.xml even where one exists (pytest's own is kept)")
    rr.set_defaults(func=cmd_report)
    cv = sub.add_parser("coverage", help="the lines a series adds or changes in module/ "
                                         "and which of them the cases executed (runs on a "
                                         "gcov kernel profile: --kernel debian-6.1-debug)")
    cv.add_argument("--series", required=True, help="series name, e.g. async-dio")
    cv.add_argument("--results", action="append", default=[], metavar="DIR",
                    help="a results folder whose guests left coverage/gcda/ (repeatable: "
                         "shards, sessions; default: the newest run that has them)")
    cv.add_argument("--out", default=None, help="where coverage/<build>/ goes (default: "
                                                "the first --results folder)")
    cv.add_argument("--no-html", action="store_true", help="no genhtml pages")
    cv.set_defaults(func=cmd_coverage)
    from suite.impact.cli import add_parser as add_impact
    add_impact(sub)
    from suite.xfstests_lane import add_parser as add_xfstests
    add_xfstests(sub, add_build_options)
    sh = sub.add_parser("shell", help="boot a guest with the build loaded and a pool; "
                                      "open a shell")
    add_build_options(sh.add_argument)
    sh.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    sh.add_argument("--nvme", type=int, default=2)
    sh.add_argument("--keep", action="store_true", help="leave the guest running on exit")
    sh.set_defaults(func=cmd_shell)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.pytest_args = passthrough          # `python -m suite bugs NAME -- -n 2`
    try:
        return args.func(args)
    except SuiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
