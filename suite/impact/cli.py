"""``python -m suite impact``: the per-case map, a change's selection, the table.

- ``map RESULTS...``: the per-case map of the gcov runs in those folders, one file a
  build (``<first>/coverage/casemap-<build>.json``);
- ``select --map F (--pr N | --base A --head B)``: the cases a change reaches, the
  rest left out, each with why;
- ``table --map F --series S``: at every known bug's bad commit of ``S``, what the
  commit changed, the cases kept, and whether the case that catches the bug is one.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from suite import paths
from suite.errors import SuiteError
from suite.impact.casemap import CaseMap, build_map, ran_body
from suite.impact.changed import from_git
from suite.impact.choose import Choice, choose


class ImpactError(SuiteError):
    pass


def collect(k: str = "", root: Path | None = None) -> list[str]:
    """The node ids ``pytest cases -k K`` would run (every tier, explore too)."""
    root = root or paths.PROJECT_ROOT
    p = subprocess.run([sys.executable, "-m", "pytest", "cases", "--collect-only", "-q",
                        "-p", "no:cacheprovider", "-m", "explore or not explore", "--tier", "full",
                        *(["-k", k] if k else [])],
                       cwd=root, capture_output=True, text=True, timeout=300)
    ids = [ln.strip() for ln in p.stdout.splitlines() if "::" in ln and not ln.startswith(" ")]
    if p.returncode not in (0, 5):
        raise ImpactError(f"collecting the cases failed (exit {p.returncode})",
                          fix="run the same pytest --collect-only and read its error",
                          detail=(p.stdout + p.stderr)[-1500:])
    return ids


def map_cmd(results: list[Path], out: Path | None) -> int:
    from suite.coverage.lane import find_record
    roots = [d for r in results for d in sorted(r.glob("**/coverage/cases/*")) if d.is_dir()]
    if not roots:
        raise ImpactError(f"no per-case counters (coverage/cases/) under "
                          f"{', '.join(map(str, results))}",
                          fix="run the cases on a gcov build: pytest cases --kernel "
                              "debian-6.1-debug (each case's counters are copied at its end)")
    by_key: dict[str, list[Path]] = {}
    for d in roots:
        by_key.setdefault(d.name, []).append(d)
    for key, dirs in by_key.items():
        rec = find_record(key, dirs[0].parent.parent.parent)
        if rec is None:
            print(f"skipped build {key}: no build record (the build cache was emptied?)")
            continue
        print(f"==> map of build {key}: {len(dirs)} run(s)", flush=True)
        m = build_map(dirs, Path(rec.src_dir), key, rec.source.get("commit", ""),
                      ran=lambda bdir, case: ran_body(bdir.parent.parent.parent, case))
        dest = out or results[0] / "coverage" / f"casemap-{key}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(m.to_json())
        print(f"<== {len(m.cases)} case(s), {len(m.reached())} function(s) reached: {dest}")
    return 0


def show(ch: Choice) -> None:
    print(ch.summary())
    for c in ch.kept:
        print(f"  keep  {c}  ({ch.why.get(c, '')})")
    for c in ch.left:
        print(f"  leave {c}")


def select_cmd(a: argparse.Namespace) -> int:
    base, head = a.base, a.head
    if a.pr:
        from suite.source.objects import ObjectCache
        from suite.source.pulls import pull_request
        pull = pull_request(ObjectCache(paths.git_cache()), a.pr, a.target)
        base, head = pull.base, pull.head
    if not (base and head):
        raise ImpactError("select needs --pr N or --base A --head B",
                          fix="python -m suite impact select --map F --pr 18844")
    show(choice(base, head, a.k, a.map))
    return 0


def choice(base: str, head: str, k: str, map_path: Path) -> Choice:
    """The cases of ``-k K`` the change ``base..head`` reaches, by the map."""
    return choose(collect(k), CaseMap.load(map_path),
                  from_git(paths.git_cache(), base, head), paths.case_slug)


def series_head(series_sel: str, base: str) -> tuple[str, str]:
    """(base commit, head commit) of what a gate builds: a folder of patches applied
    on ``base``, or a named series at its selection (on its manifest's base)."""
    from suite.source import series
    from suite.source.objects import ObjectCache, resolve_source
    cache_base = resolve_source(None, base)
    folder = Path(series_sel.split("@", 1)[0])
    if folder.is_dir():
        head, _ = series.apply_patch_dir(ObjectCache(), cache_base.commit, folder)
        return cache_base.commit, head
    tree = series.resolve(ObjectCache(), None, series.parse_selection(series_sel))
    return tree.base.commit, tree.commit


def gate_deselect(series_sel: str, base: str, k: str, map_path: Path) -> list[str]:
    """The gate's ``--impact-map``: ``--deselect`` for each case the change does not
    reach (printed with the kept ones and why)."""
    ch = choice(*series_head(series_sel, base), k, map_path)
    print(f"==> gate: {ch.summary()}", flush=True)
    for c in ch.left:
        print(f"    left out: {c}", flush=True)
    return [a for c in ch.left for a in ("--deselect", c)]


def table_rows(series: str, m: CaseMap, cases: list[str], catching) -> list[str]:
    """One row a known bug: what its bad commit changed, the mapped cases kept, and
    whether a case that catches it (its manifest's ``cases``) is among them."""
    from suite.source.series import available
    man = available()[series]
    rows = ["| bug | bad commit | functions changed | mapped cases kept | catching case kept |",
            "| --- | --- | --- | --- | --- |"]
    diffs: dict[str, tuple] = {}        # several bugs share a bad commit: read it once
    for b in man.bugs:
        if b.bad not in diffs:
            imp = from_git(paths.git_cache(), f"{b.bad}^", b.bad)
            diffs[b.bad] = (imp, choose(cases, m, imp, paths.case_slug))
        imp, ch = diffs[b.bad]
        want = [c for k in b.cases for c in catching(k)]
        rows.append(table_row(b.id, b.bad, imp, ch, want, m))
    return rows


def table_row(bug: str, bad: str, imp, ch: Choice, want: list[str], m: CaseMap,
              slug=paths.case_slug) -> str:
    """Judged on the cases the map knows: a case it does not know is kept whatever the
    change, so it proves nothing about the selection (counted apart)."""
    fns = sorted(f.split(":")[-1] for f in imp.all_functions())
    mapped = [c for c in ch.kept + ch.left if slug(c) in m.cases]
    kept = [c for c in mapped if c in ch.kept]
    kept_cell = (f"all: {ch.everything}" if ch.everything else
                 f"{len(kept)} of {len(mapped)} (+{len(ch.unknown)} not in the map)")
    known = [c for c in want if slug(c) in m.cases]
    hit = [c for c in known if c in ch.kept]
    if not want:
        verdict = "no case named"
    elif not known:
        verdict = f"not judged: none of its {len(want)} case(s) in the map"
    elif hit:
        verdict = f"yes: {ch.why.get(hit[0], '')}"
    else:
        verdict = (f"**no** ({len(known)} mapped, none reached "
                   + (", ".join(f.split(":")[-1] for f in ch.unreached[:3]) or "a changed function")
                   + ")")
    return (f"| {bug} | {bad[:10]} | {len(fns)}: {', '.join(fns[:4])}"
            f"{' ...' if len(fns) > 4 else ''} | {kept_cell} | {verdict} |")


def table_cmd(a: argparse.Namespace) -> int:
    m = CaseMap.load(a.map)
    cases = collect()
    print("\n".join(table_rows(a.series, m, cases, collect)))
    return 0


def add_parser(sub) -> None:
    im = sub.add_parser("impact", help="test impact selection: the per-case map of a gcov run, "
                        "the cases a change reaches, the table at every bad commit")
    isub = im.add_subparsers(dest="impact_cmd", required=True)
    mp = isub.add_parser("map", help="the per-case map of the gcov runs in RESULTS")
    mp.add_argument("results", nargs="+", type=Path)
    mp.add_argument("--out", type=Path, help="the map's file (default: in the first folder)")
    mp.set_defaults(func=lambda a: map_cmd(a.results, a.out))
    sl = isub.add_parser("select", help="the cases a change reaches, and what is left out")
    sl.add_argument("--map", type=Path, required=True)
    sl.add_argument("--pr", help="an openzfs/zfs pull request by number")
    sl.add_argument("--target", default="master")
    sl.add_argument("--base")
    sl.add_argument("--head")
    sl.add_argument("-k", default="", help="choose among these cases only")
    sl.set_defaults(func=select_cmd)
    tb = isub.add_parser("table", help="at each known bug's bad commit: is its case kept?")
    tb.add_argument("--map", type=Path, required=True)
    tb.add_argument("--series", required=True)
    tb.set_defaults(func=table_cmd)
