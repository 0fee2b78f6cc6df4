"""xfstests results: read ``./check``'s xunit report, say them as tables and JUnit.

Each xfstests test is reported under its own id, ``xfstests:generic/091``, with
``pass``, ``fail`` or ``notrun`` (its reason: the test's ``.notrun``), and, for a test
the selection named but an exclude list left out, ``excluded`` with that list's
reason. The exclude lists: the fork's own ``exclude.zfs.txt`` (its comment line above
each test is its reason) and this repository's ``patches/xfstests/exclude.toml`` (one
reason per test, and where it was checked).
"""
from __future__ import annotations

import json
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from suite import paths
from suite.casekit.xfstests import TEST_RE
from suite.report import xfsymptoms
from suite.symptoms import CaseVerdict, Symptom

RESULTS_FILE = "xfstests-results.json"
EXCLUDE = paths.PROJECT_ROOT / "patches" / "xfstests" / "exclude.toml"
FORK_EXCLUDE = "exclude.zfs.txt"


@dataclass
class XfsResult:
    test: str               # generic/091
    status: str             # pass | fail | notrun | excluded
    seconds: float = 0.0
    reason: str = ""        # why not run, why excluded, the failure's message
    kinds: list[str] = field(default_factory=list)  # a failure's errno kinds (xfsymptoms)

    @property
    def id(self) -> str:
        return f"xfstests:{self.test}"

    @property
    def failed(self) -> bool:
        return self.status == "fail"


@dataclass(frozen=True)
class Exclusion:
    test: str
    reason: str
    source: str             # "fork" | "suite"
    checked: str = ""
    accel: str = ""         # only under this accelerator ("tcg": too slow there, run on KVM)
    linux_before: str = ""  # only on kernels older than this ("6.5": an upstream finding's)
    finding: str = ""       # the upstream finding (patches/upstream/findings.toml) it meets
    fstyp: str = ""         # only on this file system ("zfs": not ext4 on a zvol)

    def applies(self, accel: str = "", release: str = "", fstyp: str = "zfs") -> bool:
        from suite.explore.crashes.avoid import older
        return (not self.accel or self.accel == accel) and \
            (not self.linux_before or older(release, self.linux_before)) and \
            (not self.fstyp or self.fstyp == fstyp)


def fork_exclusions(text: str) -> list[Exclusion]:
    """The fork's list: a ``# comment`` line gives the reason of the tests below it. It
    is ZFS's (``exclude.zfs.txt``): it does not bind ext4 made on a zvol."""
    out, reason = [], ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            reason = line.lstrip("# ").strip()
        elif TEST_RE.match(line):
            out.append(Exclusion(line, f"the fork excludes it: {reason or 'no reason given'}",
                                 "fork", fstyp="zfs"))
    return out


def _lists(path: Path) -> dict[str, list[dict]]:
    """This repository's list, read once, by table (``exclude``, ``run``): every entry
    with a test and a reason."""
    data = tomllib.loads(path.read_text()) if path.exists() else {}
    for table, entries in data.items():
        for e in entries:
            if not TEST_RE.match(e.get("test", "")) or not e.get("reason"):
                raise ValueError(f"{path}: an {table} entry needs a test (generic/NNN) and "
                                 f"a reason: {e}")
    return data


def _exclusion(e: dict) -> Exclusion:
    return Exclusion(e["test"], e["reason"], "suite", e.get("checked", ""), e.get("accel", ""),
                     e.get("linux_before", ""), e.get("finding", ""), e.get("fstyp", ""))


def suite_exclusions(path: Path | None = None) -> list[Exclusion]:
    """This repository's list: ``[[exclude]] test, reason, checked`` (``accel``)."""
    return [_exclusion(e) for e in _lists(path or EXCLUDE).get("exclude", [])]


def suite_runs(path: Path | None = None) -> dict[str, str]:
    """Tests the fork excludes that this repository runs: ``[[run]] test, reason,
    checked`` (the fork's reason did not hold on stock master here). Test -> reason."""
    return {e["test"]: e["reason"] for e in _lists(path or EXCLUDE).get("run", [])}


def exclusions(tree: Path | None, accel: str = "", release: str = "",
               fstyp: str = "zfs") -> dict[str, Exclusion]:
    """Every exclusion by test. A test this repository lists (``[[exclude]]`` or
    ``[[run]]``) is judged by its entry alone, checked on stock master here; the fork's
    reason for it is set aside, so an entry bound to TCG lets the test run under KVM. One
    bound to an accelerator (``accel = "tcg"``: a test too slow to emulate) applies only
    under it, one bound to ``linux_before`` only on an older guest kernel (``release``),
    one bound to ``fstyp`` only on that file system (ext4 on a zvol is not ZFS's file)."""
    lists = _lists(EXCLUDE)
    ours = [_exclusion(e) for e in lists.get("exclude", [])]
    taken = {e.test for e in ours} | {e["test"] for e in lists.get("run", [])}
    found: dict[str, Exclusion] = {}
    fork = tree / FORK_EXCLUDE if tree is not None else None
    if fork is not None and fork.exists():
        found.update({e.test: e for e in fork_exclusions(fork.read_text())
                      if e.test not in taken and e.applies(accel, release, fstyp)})
    found.update({e.test: e for e in ours if e.applies(accel, release, fstyp)})
    return found


def exclude_file(excl: dict[str, Exclusion], dest: Path) -> Path:
    """The ``-E`` file for ./check (one test a line, its reason above it)."""
    lines = []
    for t, e in sorted(excl.items()):
        lines += [f"# {e.source}: {e.reason}", t]
    dest.write_text("\n".join(lines) + "\n")
    return dest


def groups(tree: Path) -> dict[str, set[str]]:
    """Group -> tests, from the built tree's ``tests/*/group.list``."""
    out: dict[str, set[str]] = {}
    for gl in sorted(tree.glob("tests/*/group.list")):
        kind = gl.parent.name
        for line in gl.read_text().splitlines():
            parts = line.split("#")[0].split()
            if len(parts) < 2 or not parts[0].isdigit():
                continue
            for g in parts[1:]:
                out.setdefault(g, set()).add(f"{kind}/{parts[0]}")
    return out


def expand(selection: list[str], tree: Path, fstyp: str = "zfs") -> list[str]:
    """The tests a ./check selection names (``-g aio``, ``-g quick``, ``generic/091``;
    ``-x GROUP`` and ``-e TEST,TEST`` remove), of the folders ./check runs for
    ``fstyp``: ``generic``, ``shared`` and the file system's own."""
    dirs = ("generic/", "shared/", f"{fstyp}/")
    gs = {g: {t for t in ts if t.startswith(dirs)} for g, ts in groups(tree).items()}
    want: set[str] = set()
    drop: set[str] = set()
    it = iter(selection)
    for a in it:
        if a in ("-g", "-x"):
            names = next(it, "")
            tests = set().union(*(gs.get(n, set()) for n in names.split(",")))
            (want if a == "-g" else drop).update(tests)
        elif a == "-e":
            drop.update(n for n in next(it, "").split(",") if n)
        elif TEST_RE.match(a):
            want.add(a)
    return sorted(want - drop)


def parse_xunit(text: str) -> list[XfsResult]:
    """The testcases of ./check's ``result.xml``."""
    out = []
    root = ET.fromstring(text)
    for tc in root.iter("testcase"):
        name = tc.get("name", "")
        sec = float(tc.get("time") or 0)
        fail, skip = tc.find("failure"), tc.find("skipped")
        if fail is not None:
            out.append(XfsResult(name, "fail", sec, fail.get("message", "")))
        elif skip is not None:
            out.append(XfsResult(name, "notrun", sec, (skip.get("message") or "").strip()))
        else:
            out.append(XfsResult(name, "pass", sec))
    return out


def results(out_dir: Path, selected: list[str], excl: dict[str, Exclusion],
            tree: Path | None = None) -> list[XfsResult]:
    """What the run in ``out_dir`` says per test, with the selected tests an exclude list
    left out (``excluded``) and those that never got a result (``not run: no result``:
    the run died before them); a failure carries the errno kinds its ``.out.bad`` adds
    to the golden output of ``tree``."""
    xml = sorted((out_dir / "results").glob("**/result.xml"))
    got = {r.test: r for x in xml for r in parse_xunit(x.read_text(errors="replace"))}
    for r in got.values():
        if r.failed:
            r.kinds = xfsymptoms.of_test(out_dir / "results", r.test, tree)
    for t in selected:
        if t in got:
            continue
        if t in excl:
            got[t] = XfsResult(t, "excluded", 0.0, excl[t].reason)
        else:
            got[t] = XfsResult(t, "notrun", 0.0, "no result: the run ended before it")
    return [got[k] for k in sorted(got)]


def counts(rs: list[XfsResult]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rs:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def markdown(rs: list[XfsResult], title: str, seconds: float | None = None) -> str:
    c = counts(rs)
    head = ", ".join(f"{k} {c.get(k, 0)}" for k in ("pass", "fail", "excluded", "notrun"))
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    lines = [f"#### {title}", "", f"{len(rs)} tests{took}: {head}", "",
             "| xfstests test | result | time | why |", "|---|---|---|---|"]
    order = {"fail": 0, "notrun": 2, "excluded": 3, "pass": 1}
    for r in sorted(rs, key=lambda r: (order.get(r.status, 9), r.test)):
        lines.append(f"| `{r.test}` | {r.status} | {r.seconds:.0f} s | {r.reason[:120]} |")
    return "\n".join(lines) + "\n"


def save(rs: list[XfsResult], path: Path, meta: dict) -> None:
    path.write_text(json.dumps({**meta, "results": [asdict(r) for r in rs]}, indent=1))


def load(path: Path) -> tuple[dict, list[XfsResult]]:
    """A results file; fields this version does not know are left out (a file written
    by a newer lane, read by a longer-running older process, still reads)."""
    data = json.loads(path.read_text())
    known = {f.name for f in fields(XfsResult)}
    return data, [XfsResult(**{k: v for k, v in r.items() if k in known})
                  for r in data.pop("results")]


def seconds_of(run_dir: Path) -> dict[str, float]:
    """Each xfstests test that ran in a session (passed or failed) and its seconds,
    under its id and profile (``xfstests:generic/133[direct]``: a test takes three
    times longer under ``direct=always``): recorded with the cases' times, so
    ``--xfstests-split`` deals the next run's parts by them."""
    out: dict[str, float] = {}
    for f in sorted(run_dir.glob(f"cases/*/{RESULTS_FILE}")):
        meta, rs = load(f)
        out.update({f"{r.id}[{meta.get('profile', 'plain')}]": r.seconds for r in rs
                    if r.status in ("pass", "fail") and r.seconds})
    return out


def junit_suite(rs: list[XfsResult], name: str, where: str = "") -> ET.Element:
    """One ``<testsuite>``: a testcase per xfstests test, under its own id."""
    suite = ET.Element("testsuite", name=name, tests=str(len(rs)),
                       failures=str(sum(r.failed for r in rs)),
                       skipped=str(sum(r.status in ("notrun", "excluded") for r in rs)),
                       errors="0", time=f"{sum(r.seconds for r in rs):.0f}")
    for r in rs:
        kind, num = r.test.split("/", 1)
        tc = ET.SubElement(suite, "testcase", classname=f"xfstests.{kind}", name=num,
                           time=f"{r.seconds:.0f}")
        tc.set("file", r.id)
        if r.failed:
            el = ET.SubElement(tc, "failure", message=r.reason or "failed")
            el.text = f"{r.id}: {r.reason}; .out.bad and .full in {where}"
        elif r.status in ("notrun", "excluded"):
            ET.SubElement(tc, "skipped", message=f"{r.status}: {r.reason}")
    return suite


def fold_into_junit(xml_path: Path, result_files: list[Path]) -> int:
    """Append a ``<testsuite>`` per xfstests results file to the JUnit XML."""
    from suite.report.zts import append_suites
    if not xml_path.exists() or not result_files:
        return 0
    suites, added = [], 0
    for f in result_files:
        meta, rs = load(f)
        suites.append(junit_suite(rs, f"xfstests-{meta.get('profile', 'plain')}",
                                  str(f.parent / "xfstests" / "results")))
        added += len(rs)
    append_suites(xml_path, suites)
    return added


def verdicts(session_dir: Path) -> dict[str, CaseVerdict]:
    """Each xfstests test of a session's results as a verdict of its own
    (``xfstests:generic/091[direct]``), so a gate sorts them as it sorts cases: a
    test that passes on the base and fails with the series is a regression even when
    its profile's case fails on both sides."""
    out: dict[str, CaseVerdict] = {}
    for f in sorted(session_dir.glob(f"*/cases/*/{RESULTS_FILE}")):
        meta, rs = load(f)
        for r in rs:
            nodeid = f"{r.id}[{meta.get('profile', 'plain')}]"
            if r.status == "pass":
                out[nodeid] = CaseVerdict(nodeid, "passed")
            elif r.failed:
                out[nodeid] = CaseVerdict(nodeid, "failed", [Symptom("xfstests-fail", r.reason)],
                                          r.reason)
            else:
                out[nodeid] = CaseVerdict(nodeid, "skipped", [], f"{r.status}: {r.reason}")
    return out
