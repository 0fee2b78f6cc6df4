"""``python -m suite gate --series S``: what a series changes against its base.

The chosen cases run twice, in one results folder, with the same kernel, guest
shape and trials: at the series' base (stock OpenZFS at that commit) and at
base+series. Every case then falls in one class:

- **regression**: passes on base, fails with the series (reproduced on rerun),
  or a series feature (not applicable on base) that fails: the gate fails;
- **fixed**: fails on base, passes with the series;
- **still failing**: fails on both with the same signatures (a finding on stock to
  chase, not the PR's); a side that fails with a signature the base never showed
  (another panic title, another row, another kind: ``Symptom.signature``) is a
  **regression**;
- **unchanged pass**: passes on both;
- **not applicable on base**: skipped on base for want of the series' feature,
  passes with it;
- **not applicable**: skipped on both sides for want of the same feature (a case of
  the async path gating a fix on stock OpenZFS): counted, left out of the verdict (a
  gate where nothing else ran is INCONCLUSIVE: nothing ran to a verdict);
- **flaky**: failed with the series, then passed every rerun (or failed on base
  on rerun too): reported as such, never passed silently;
- **inconclusive**: a side proved nothing (guest lost, build failed, no verdict,
  skipped with the series): the gate fails with that reason.

Reruns: a case whose class would change the verdict or claim a change is run
again ``--reruns`` times (default 2) on both sides: one that passed on base and
failed with the series, one that failed on base and passed with the series
(**fixed** only if the base fails every rerun and the series passes every one;
else **flaky**), and one that fails on both with a signature the base did not show
(a **regression** only if that signature comes back with the series and never on
base; else **flaky** or **still failing**). A failing series feature is rerun with
the series. A timing-dependent case (a write refused while its record is still
dirty, or not) decides no verdict either way. A case runs every condition 14 trials by
default, so a failure present in 1 trial in 5 shows in one run with 95%
probability, and misses 2 reruns with 0.2%: a failure that does not come back
in 2 reruns is not the series' regression at that rate.

With ``--explore`` each explore sequence is sorted on its own (``explore:<seed>``,
the head running the base's sequences: ``suite/campaign/gate_explore.py``).

Exit codes: 0 pass, 1 regression, 2 inconclusive (or usage). A case's state on
one side (``state``), the classes' record and the verdict from them (``CaseClass``,
``GateRun``, ``verdict``) are what the report reads back: ``suite/report/outcomes.py``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from suite import paths
from suite.campaign import gate_explore
from suite.report.outcomes import CaseClass, GateRun, state
from suite.report.upstream import UpstreamFinding, applying, covering, git_lacks, load
from suite.report.xfstests import verdicts as xfstests_verdicts
from suite.sessions import GATE_SESSION, load_verdicts, run_cases
from suite.symptoms import INFRASTRUCTURE, CaseVerdict


def signatures(v: CaseVerdict | None) -> set[str]:
    """The signatures of what a side failed by (what the harness failed to prove
    left out)."""
    return {s.signature() for s in (v.symptoms if v else []) if s.kind not in INFRASTRUCTURE}


def need(why: str) -> str:
    """What a feature-skip says the case needs, without the build that lacked it (each
    side names its own: ``(build zfs-2.4.99-830-g625f5e268e)``)."""
    return re.sub(r" \(build [^)]*\)", "", why)


KNOWN = re.compile(gate_explore.KNOWN_WHY + r"(\S+)")


def known_finding(v: CaseVerdict | None) -> str:
    """The known upstream finding a case xfailed by alone (its symptoms matched that
    finding's signatures: suite/plugin/expected.py), or ""."""
    m = KNOWN.match(v.reason) if v is not None and v.outcome == "xfailed" else None
    return m.group(1) if m else ""


def classify(nodeid: str, base: CaseVerdict | None, series: CaseVerdict | None,
             reruns: dict[str, list[str]] | None = None,
             rerun_signatures: dict[str, list[str]] | None = None,
             base_known: frozenset[str] = frozenset(),
             standing: tuple[UpstreamFinding, ...] = ()) -> CaseClass:
    """``base_known``: the known upstream findings the base's other cases xfailed by: a
    case the base cannot run that fails with the series by one of those alone is not
    the series' doing. ``standing``: the findings that stand at the base's commit (it
    lacks their fixes): what explore meets on the head only where the base never got
    (past the bug the series fixes) is theirs, matched by signature."""
    if nodeid == gate_explore.NODE:         # its sequences are sorted one by one
        base, series = gate_explore.after_case(base), gate_explore.after_case(series)
    b, bwhy = state(base)
    s, swhy = state(series)
    c = CaseClass(nodeid, "", "", b, s, reruns or {}, rerun_signatures or {})
    if nodeid.startswith(gate_explore.PREFIX) and (b, s) == ("fail", "fail") and \
            (at := gate_explore.past_the_base(base, series)) is not None and \
            all(gate_explore.is_known(x) for x in series.symptoms):
        _past_the_base(c, base, series, at, bwhy)
        return c
    if nodeid.startswith(gate_explore.PREFIX) and (b, s) == ("fail", "fail") and \
            all(gate_explore.is_known(x) for x in [*base.symptoms, *series.symptoms]):
        c.cls, c.why = "still failing", (f"only by known upstream findings on both sides "
                                         f"(explore matched each by its signature): base: "
                                         f"{bwhy}; series: {swhy}")
        return c
    if nodeid == gate_explore.NODE and s == "fail" and b in ("pass", "fail") and \
            (known := _standing_at_base(base, series, standing)):
        c.cls, c.why = "still failing", (
            f"new with the series only by {known}, which stands at the base too (it lacks "
            f"the fix): explore's sequences reach further on the head; series: {swhy}")
        return c
    if (b, s) == ("feature-skip", "feature-skip") and need(bwhy) == need(swhy):
        c.cls, c.why = "not applicable", f"neither side has what it needs: {swhy}"
    elif (b, s) == ("skip", "skip") and bwhy == swhy:
        # skipped alike on both sides (an xfstests test the kernel cannot run, or one
        # excluded with its reason): it proves nothing either way, counted and left out
        c.cls, c.why = "not applicable", f"skipped on both sides alike: {swhy}"
    elif s in ("missing", "inconclusive", "skip", "feature-skip"):
        c.cls, c.why = "inconclusive", f"with the series: {s}: {swhy}"
    elif b == "feature-skip" and s == "pass":
        c.cls, c.why = "not applicable on base", f"base: {bwhy}"
    elif b == "feature-skip" and known_finding(series) in base_known:
        c.cls, c.why = "not applicable on base", (
            f"base: {bwhy}; with the series it fails only by the known upstream finding "
            f"{known_finding(series)}, which the base shows too in other cases")
    elif b == "feature-skip":               # the series' own feature fails: rerun it
        rs = c.reruns.get("series", [])
        if rs and "fail" not in rs:
            c.cls, c.why = "flaky", f"a series feature failed, then passed {len(rs)} rerun(s)"
        else:
            c.cls = "regression"
            c.why = f"a series feature fails: {swhy}" + (
                f" (again in {rs.count('fail')} of {len(rs)} reruns)" if rs else "")
    elif b in ("missing", "inconclusive", "skip"):
        c.cls, c.why = "inconclusive", f"on base: {b}: {bwhy}"
    elif (b, s) == ("pass", "pass"):
        c.cls = "unchanged pass"
    elif (b, s) == ("fail", "pass"):
        _fixed(c, bwhy)
    elif (b, s) == ("fail", "fail"):
        _both_fail(c, base, series, bwhy, swhy)
    else:                                   # passes on base, fails with the series
        rs, rb = c.reruns.get("series", []), c.reruns.get("base", [])
        if not rs and not rb:
            c.cls, c.why = "regression", f"{swhy} (not rerun)"
        elif "fail" in rb:
            c.cls, c.why = "flaky", f"failed on base too on rerun ({rb}); series: {swhy}"
        elif "fail" not in rs:
            c.cls, c.why = "flaky", f"did not come back in {len(rs)} rerun(s) ({rs}): {swhy}"
        else:
            c.cls = "regression"
            c.why = f"{swhy} (again in {rs.count('fail')} of {len(rs)} reruns; base {rb})"
    return c


def _standing_at_base(base: CaseVerdict | None, series: CaseVerdict,
                      standing: tuple[UpstreamFinding, ...]) -> str:
    """The findings standing at the base that account, by their signatures, for every
    symptom the series shows and the base does not ("" if any is none of theirs)."""
    mine = signatures(base)
    new = [str(x) for x in series.symptoms if x.kind not in INFRASTRUCTURE
           and x.signature() not in mine]
    found = covering(series.nodeid, new, list(standing)) if new else []
    return ", ".join(f"the known upstream finding {f.id}" for f in found)


def _past_the_base(c: CaseClass, base: CaseVerdict, series: CaseVerdict,
                   at: tuple[int, int], bwhy: str) -> None:
    """An explore sequence the head ran past the op where the base failed, to fail
    further on only by known upstream findings (explore matched each by its
    signature): what the base never reached, and not the series'. The base's failure
    is fixed if the base fails so again on rerun and the head never does. (A head
    failure there that is no known finding is compared as any new signature is:
    ``_both_fail``, a regression if it comes back.)"""
    b_op, h_op = at
    known = "; ".join(sorted({x.detail[len(gate_explore.KNOWN_WHY):] for x in series.symptoms}))
    past = (f"the head runs op {b_op} where the base fails ({bwhy}), and fails further on "
            f"(op {h_op}) only by known upstream finding(s) {known}")
    rs, rb = c.reruns.get("series", []), c.reruns.get("base", [])
    mine = signatures(base)
    if not rs and not rb:
        c.cls, c.why = "fixed", f"{past} (not rerun)"
    elif not rb or any(x != "fail" for x in rb) or \
            not mine & set(c.rerun_signatures.get("base", [])) or \
            mine & set(c.rerun_signatures.get("series", [])):
        c.cls, c.why = "flaky", (f"fixed on the first run, not on rerun (base {rb}, series "
                                 f"{rs}): {past}")
    else:
        c.cls, c.why = "fixed", (f"{past}; the base failed so again in {rb.count('fail')} of "
                                 f"{len(rb)} rerun(s), the head never")


def _fixed(c: CaseClass, bwhy: str) -> None:
    """Fails on base, passes with the series: fixed only if the reruns agree."""
    rs, rb = c.reruns.get("series", []), c.reruns.get("base", [])
    if not rs and not rb:
        c.cls, c.why = "fixed", f"on base: {bwhy} (not rerun)"
    elif "pass" in rb or "fail" in rs:
        c.cls, c.why = "flaky", (f"fixed on the first run, not on rerun (base {rb}, series "
                                 f"{rs}): the case's outcome depends on timing; base: {bwhy}")
    else:
        c.cls, c.why = "fixed", (f"on base: {bwhy} (base failed again in {len(rb)} of "
                                 f"{len(rb)} reruns, the series passed {len(rs)} of {len(rs)})")


def _both_fail(c: CaseClass, base: CaseVerdict | None, series: CaseVerdict | None,
               bwhy: str, swhy: str) -> None:
    """Fails on both: a signature the base never showed is a regression, if it comes
    back with the series on rerun and never shows on base."""
    new = signatures(series) - signatures(base)
    if not new:
        c.cls, c.why = "still failing", f"base: {bwhy}; series: {swhy}"
        return
    rs, rb = c.reruns.get("series", []), c.reruns.get("base", [])
    shown = f"fails with a new signature: {'; '.join(sorted(new))} (base: {bwhy})"
    if not rs and not rb:
        c.cls, c.why = "regression", f"{shown} (not rerun)"
        return
    on_base = new & set(c.rerun_signatures.get("base", []))
    again = new & set(c.rerun_signatures.get("series", []))
    if on_base:
        c.cls, c.why = "still failing", (f"the base shows it too on rerun "
                                         f"({'; '.join(sorted(on_base))}): {shown}")
    elif not again:
        c.cls, c.why = "flaky", f"the new signature did not come back in {len(rs)} rerun(s): {shown}"
    else:
        c.cls, c.why = "regression", f"{shown} (again on rerun: {'; '.join(sorted(again))})"


def gate_sides(series_sel: str, base: str, series_on_base: bool) -> dict[str, list[str]]:
    """Each side's build options: the base ref alone, and the series on it (named
    explicitly for a patch folder or a base other than the manifest's)."""
    on = ["--zfs-ref", base] if series_on_base else []
    return {"base": ["--zfs-ref", base], "series": ["--series", series_sel, *on]}


def run_gate(series_sel: str, base: str, selection: list[str], extra: list[str],
             reruns: int = 2, root: Path | None = None,
             series_on_base: bool = False, head_params: list[str] = (),
             label: str = "") -> GateRun:
    """Both sessions (and one more head session per ``head_params`` NAME=VALUE: a
    tunable the series adds, set at load), the reruns, the classes. Reports are
    written by the caller."""
    root = root or paths.stamped("gate")
    g = GateRun(series_sel, base, root, selection, label=label)
    sides = gate_sides(series_sel, base, series_on_base)
    for a in head_params:
        sides[f"series+{a}"] = [*sides["series"], "--zfs-param", a]
    g.heads = [s for s in sides if s != "base"]
    verdicts: dict[str, dict[str, CaseVerdict]] = {}
    exploring = "--explore-budget" in extra
    for side, args in sides.items():
        # explore: the base for its whole budget, the heads on the base's sequences
        more = ([] if not exploring else gate_explore.BASE_ARGS if side == "base"
                else gate_explore.replay_args(root / "base"))
        print(f"==> gate: {side} ({' '.join(args)}) {' '.join(selection)}"
              + (f" (explore: {more.count('--explore-replay')} sequences of the base)"
                 if side != "base" and
                 exploring else ""), flush=True)
        _, problem, g.seconds[side] = run_cases([*selection, *args, *more], root / side,
                                                gate_explore.counted(extra, more),
                                                inner=GATE_SESSION)
        if problem:
            g.problems[side] = problem
        verdicts[side] = side_verdicts(root / side)
        print(f"<== {side}: {len(verdicts[side])} verdicts in {g.seconds[side]:.0f}s"
              f"{'; ' + problem if problem else ''}", flush=True)
    pairs = [(h, n) for h in g.heads for n in sorted(set(verdicts["base"]) | set(verdicts[h]))]
    base_known, standing = _known_at_base(verdicts["base"], base, exploring)
    first = {(h, n): classify(n, verdicts["base"].get(n), verdicts[h].get(n),
                              base_known=base_known, standing=standing) for h, n in pairs}
    suspects = [k for k, c in first.items() if _rerun(c)]
    again = {k: {"base": [], "series": []} for k in suspects}
    seen: dict = {k: {"base": set(), "series": set()} for k in suspects}
    for i in range(reruns if suspects else 0):
        for side, args in sides.items():
            # the base once a round for every head's suspects
            todo = sorted({n for h, n in suspects if _reran_on(side, h, n, first[(h, n)])})
            if not todo:
                continue
            out = root / f"rerun{i + 1}-{side}"
            print(f"==> gate: rerun {i + 1}/{reruns} on {side}: {len(todo)} case(s)",
                  flush=True)
            cases = [n for n in todo if not n.startswith(gate_explore.PREFIX)]
            replay = [n for n in todo if n not in cases or n == gate_explore.NODE]
            if replay and gate_explore.NODE not in cases:
                cases.append(gate_explore.NODE)
            more = gate_explore.rerun_args(root / "base", replay) if replay else []
            _, _, g.seconds[f"rerun{i + 1}-{side}"] = run_cases(
                [*args, *more], out, gate_explore.counted(extra, more),
                targets=[str(paths.PROJECT_ROOT / n) for n in cases], inner=GATE_SESSION)
            got = side_verdicts(out)
            for h, n in suspects:
                if n in todo and (side == "base" or side == h):
                    key = "base" if side == "base" else "series"
                    again[(h, n)][key].append(state(got.get(n))[0])
                    seen[(h, n)][key] |= signatures(got.get(n))
    for h, n in pairs:
        c = classify(n, verdicts["base"].get(n), verdicts[h].get(n), again.get((h, n)),
                     {k: sorted(v) for k, v in seen.get((h, n), {}).items()}, base_known,
                     standing)
        c.head = h
        g.classes.append(c)
    return g


def side_verdicts(folder: Path) -> dict[str, CaseVerdict]:
    """A side's verdicts: each case's, each xfstests test's, each explore sequence's."""
    out = load_verdicts(folder)
    out.update(xfstests_verdicts(folder))
    out.update(gate_explore.verdicts(folder))
    return out


def _known_at_base(base: dict[str, CaseVerdict], ref: str, exploring: bool
                   ) -> tuple[frozenset[str], tuple[UpstreamFinding, ...]]:
    """What ``classify`` knows of the base: the known findings its cases xfailed by,
    and (exploring) the findings standing at its commit."""
    known = frozenset(known_finding(v) for v in base.values()) - {""}
    return known, tuple(applying(load(), git_lacks([ref]))) if exploring else ()


def resort(root: Path) -> GateRun:
    """A finished gate (``gate.json`` and its sides' folders) sorted again by today's
    rules (a finding added to findings.toml, a class's rule mended) without running
    anything: the reruns as ``gate.json`` recorded them."""
    meta = json.loads((root / "gate.json").read_text())
    g = GateRun(meta["series"], meta["base"], root, meta["selection"],
                seconds=meta.get("seconds", {}), problems=meta.get("problems", {}),
                heads=meta.get("heads", ["series"]), label=meta.get("label", ""))
    verdicts = {side: side_verdicts(root / side) for side in ["base", *g.heads]}
    recorded = {(c.get("head", "series"), c["nodeid"]): c for c in meta.get("cases", [])}
    base_known, standing = _known_at_base(
        verdicts["base"], g.base, any(n.startswith(gate_explore.PREFIX) for n in verdicts["base"]))
    for h in g.heads:
        for n in sorted(set(verdicts["base"]) | set(verdicts[h])):
            r = recorded.get((h, n), {})
            c = classify(n, verdicts["base"].get(n), verdicts[h].get(n), r.get("reruns"),
                         r.get("rerun_signatures"), base_known, standing)
            c.head = h
            g.classes.append(c)
    return g


def _reran_on(side: str, head: str, nodeid: str, first: CaseClass) -> bool:
    """Whether a suspect of ``head`` is rerun on ``side``: on its head always, on the
    base unless the base lacks the feature; never an xfstests test (run as a whole).
    An explore sequence, and ``test_explore``, are rerun as a replay of the base's
    sequences (``gate_explore.rerun_args``), never as a fresh exploration."""
    if nodeid.startswith("xfstests:"):
        return False
    return side == head or (side == "base" and first.base != "feature-skip")


def series_tunables(folder: Path) -> list[tuple[str, str]]:
    """Module parameters a folder of patches adds (``ZFS_MODULE_PARAM`` lines it adds),
    each with its default where the patch sets one (``uint_t name = 1;``), else ""."""
    text = "\n".join(f.read_text(errors="replace") for f in sorted(folder.glob("*.patch")))
    added = [ln[1:] for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    body = "\n".join(added)
    out: list[tuple[str, str]] = []
    for m in re.finditer(r"ZFS_MODULE_PARAM\(\s*\w+\s*,\s*(\w+)\s*,\s*(\w+)\s*,", body):
        name = m.group(1) + m.group(2)
        d = re.search(rf"\b{name}\s*=\s*(-?\d+)\s*;", body)
        out.append((name, d.group(1) if d else ""))
    return list(dict.fromkeys(out))


def head_variants(tunables: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """The head sessions a series' new tunables ask for: a boolean's other value (the
    default already runs); the others named as left out (no value to draw is known)."""
    runs, left = [], []
    for name, default in tunables:
        if default in ("0", "1"):
            runs.append(f"{name}={1 - int(default)}")
        else:
            left.append(f"{name} (default {default or 'unknown'}: not a switch)")
    return runs, left


def _rerun(c: CaseClass) -> bool:
    """Whether a first-run class claims a change the reruns must confirm."""
    return (c.cls in ("fixed", "regression")
            or (c.series == "fail" and c.base in ("pass", "feature-skip")))


def gate_head_params(args: Any, folder: Path | None) -> list[str]:
    """--head-param, and (--tunables auto) each switch a folder of patches adds, set to
    the value its default is not: one more head session each."""
    params = list(args.head_param)
    if folder is not None and args.tunables == "auto":
        found = series_tunables(folder)
        runs, left = head_variants(found)
        for r in runs:
            print(f"==> gate: the series adds a tunable: a head session with {r}", flush=True)
        for x in left:
            print(f"==> gate: the series adds {x}; not drawn (give --head-param)", flush=True)
        params += [r for r in runs if r.split("=")[0] not in
                   {p.split("=")[0] for p in params}]
    return params
