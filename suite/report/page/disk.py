"""Reading a results folder into the model's pieces.

The layout every run shares: a *session* folder (``<stamp>-<label>/``, one pytest
session) holds ``build/record-*.json`` (and ``build/capabilities.json``),
``accel.json``, ``tables/``, ``perf/``, ``selection.json`` and ``cases/<slug>/`` with
``verdict.json``, ``table-N.{md,txt}``, ``evidence/``, ``commands.log``,
``after-case.txt``, ``repro/repro.sh``, ``phases.json`` and, for ``suite explore``,
``explore/``. A side of a run (a gate's base, a shard, a known bug at its bad
commit) is a folder holding sessions and, from an inner session, its ``junit.xml``.
Everything here turns those files into phrases and table cells.
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from suite.report import phases as phase_report
from suite.report.page.model import BuildRow, Case, CaseTable, Link, SideResult
from suite.symptoms import CaseVerdict

STAMP = re.compile(r"^(\d{8}-\d{6})")
EVIDENCE_FIRST = ("summary.txt", "reason.txt", "dstate.txt", "sysrq-w.txt", "console-tail.txt")
MAX_TEXT = 6000                          # characters of one file shown inline


def is_session(d: Path) -> bool:
    return d.is_dir() and any((d / m).exists() for m in ("cases", "build", "accel.json"))


def sessions_under(folder: Path) -> list[Path]:
    """The session folders of a side: the folder itself, or its children."""
    if is_session(folder):
        return [folder]
    return sorted(d for d in folder.glob("*") if is_session(d)) if folder.is_dir() else []


def read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def tail(path: Path, limit: int = MAX_TEXT) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text if len(text) <= limit else f"[... first {len(text) - limit} characters cut]\n" \
        + text[-limit:]


def started(session: Path) -> datetime | None:
    """When a session began, from its folder name (``20261201-173729-...``)."""
    m = STAMP.match(session.name)
    if not m:
        return None
    return datetime.strptime(m[1], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)


def session_label(session: Path) -> str:
    """``20261201-173729-869d8059...`` -> ``869d8059975 (2026-12-01 17:37)``."""
    begun = started(session)
    label = STAMP.sub("", session.name).lstrip("-") or session.name
    label = re.sub(r"\b([0-9a-f]{11})[0-9a-f]{29}\b", r"\1", label)
    return f"{label} ({begun:%Y-%m-%d %H:%M})" if begun else label


def minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# -- builds -------------------------------------------------------------------------

def build_phrase(rec: dict, session: Path) -> str:
    """Built by this run (and how long it took), or taken from the cache."""
    secs = sum(float(v) for v in (rec.get("seconds") or {}).values()
               if isinstance(v, (int, float)))
    took = f" in {minutes(secs)}" if secs else ""
    donor = (rec.get("incremental") or {}).get("donor")
    inc = f", incremental from {str(donor)[:11]}" if donor else ""
    try:
        created = datetime.fromisoformat(str(rec.get("created", "")).replace("+0000", "+00:00"))
    except ValueError:
        created = None
    begun = started(session)
    if created and begun and created < begun:
        return f"cached (built {created:%Y-%m-%d %H:%M}{took}{inc})"
    return f"built{took}{inc}" if created or secs else "?"


def series_phrase(src: dict) -> str:
    parts = []
    for s in src.get("series") or []:
        commits = s.get("commits") or []
        head = f", head {commits[-1][:11]}" if commits else ""
        parts.append(f"{s.get('name', '?')}: {len(commits)} commits{head}")
    return "; ".join(parts) or "(stock)"


def accel_phrase(acc: dict) -> str:
    if not acc:
        return "?"
    why = str(acc.get("reason", "")).split(":", 1)[0][:40]
    holds = f", holds x{acc['hold_scale']}" if "hold_scale" in acc else ""   # runs since holds had their own
    return f"{acc.get('name', '?')} x{acc.get('scale', '?')}{holds}" + (f" ({why})" if why else "")


def capability_cells(session: Path) -> list[tuple[str, str]]:
    """``build/capabilities.json``: each capability's value, or the build's behaviour
    without it."""
    path = session / "build" / "capabilities.json"
    if not path.exists():
        return []
    from suite.guest.capabilities import load
    try:
        caps = load(path)
    except (OSError, ValueError, TypeError):
        return [("capabilities", "capabilities.json does not read")]
    return [(c.name, (c.value or "yes") if c.have else c.behaviour) for c in caps]


def build_row(side: str, sessions: list[Path]) -> BuildRow | None:
    """The side's build from its first session that recorded one."""
    for s in sessions:
        recs = sorted((s / "build").glob("record-*.json"))
        acc = read_json(s / "accel.json")
        if not recs and not isinstance(acc, dict):
            continue
        rec = read_json(recs[0]) if recs else None
        rec = rec if isinstance(rec, dict) else {}
        src, kern = rec.get("source") or {}, rec.get("kernel") or {}
        zfs = (rec.get("modules") or {}).get("zfs") or {}
        return BuildRow(
            side=side,
            kernel=f"{kern.get('profile', '?')} {kern.get('release', '')}".strip(),
            openzfs=f"{src.get('describe', '?')} ({str(src.get('commit', ''))[:11]})"
            if src else "?",
            series=series_phrase(src), srcversion=str(zfs.get("srcversion") or "?"),
            accelerator=accel_phrase(acc if isinstance(acc, dict) else {}),
            build=build_phrase(rec, s) if rec else "no build record",
            capabilities=capability_cells(s))
    return None


def build_commits(sessions: list[Path]) -> list[str]:
    """The source commit of every build the sessions ran (``build/record-*.json``)."""
    out: list[str] = []
    for s in sessions:
        for rec in sorted((s / "build").glob("record-*.json")):
            data = read_json(rec)
            src = data.get("source") if isinstance(data, dict) else None
            commit = str((src or {}).get("commit") or "")
            if commit and commit not in out:
                out.append(commit)
    return out


def trial_count(sessions: list[Path]) -> int:
    """Trials the run's condition x outcome tables account for."""
    n = 0
    for s in sessions:
        for t in s.glob("tables/*.json"):
            data = read_json(t)
            try:
                n += sum(int(r.get("trials", 0)) for r in data["rows"].values())
            except (TypeError, KeyError, AttributeError, ValueError):
                continue
    return n


# -- cases --------------------------------------------------------------------------

def table_number(p: Path) -> tuple[int, str]:
    m = re.search(r"(\d+)$", p.stem)
    return (int(m[1]) if m else 0, p.name)


def case_tables(folder: Path, side: str) -> list[CaseTable]:
    out = []
    for md in sorted(folder.glob("table-*.md"), key=table_number):
        txt = md.with_suffix(".txt")
        out.append(CaseTable(side, md.read_text(errors="replace").strip(),
                             txt.read_text(errors="replace").rstrip() if txt.exists() else "",
                             txt if txt.exists() else md))
    return out


def case_links(folder: Path, side: str = "") -> list[Link]:
    """The files a maintainer opens for a case, most telling first."""
    pre = f"{side}: " if side else ""
    found: list[Path] = sorted(folder.glob("table-*.txt"), key=table_number)
    ev = folder / "evidence"
    if ev.is_dir():
        files = [p for p in sorted(ev.iterdir()) if p.is_file() and p.stat().st_size]
        found += sorted(files, key=lambda p: (p.name not in EVIDENCE_FIRST,
                                              EVIDENCE_FIRST.index(p.name)
                                              if p.name in EVIDENCE_FIRST else 0, p.name))
    found += [folder / n for n in ("commands.log", "after-case.txt", "ondisk.txt", "pool.txt")]
    found.append(folder / "repro" / "repro.sh")
    found += sorted(folder.glob("explore/minimal-*.txt"))
    found += sorted(folder.glob("zts-*/*.txt"))[:5]
    return [Link(pre + p.relative_to(folder).as_posix(), p) for p in found if p.is_file()]


def verdicts(sessions: list[Path]) -> dict[str, tuple[CaseVerdict, Path]]:
    """nodeid -> (what the case came to, its folder) over a side's sessions."""
    out: dict[str, tuple[CaseVerdict, Path]] = {}
    for s in sessions:
        for p in sorted(s.glob("cases/*/verdict.json")):
            try:
                v = CaseVerdict.load(p)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            out[v.nodeid] = (v, p.parent)
    return out


def status_of(v: CaseVerdict) -> tuple[str, str]:
    """(status, why) of one case verdict: a failure that proved nothing about the
    build (guest lost, setup, no result) is inconclusive, never a finding."""
    from suite.report.outcomes import state
    st, why = state(v)
    return {"pass": "pass", "fail": "fail", "skip": "skip", "feature-skip": "skip",
            "missing": "inconclusive"}.get(st, "inconclusive"), why or v.reason


def fill_from_folder(case: Case, folder: Path, side: str, label_side: bool) -> None:
    """A case's tables, links and (when it failed there) evidence from one side."""
    case.tables += case_tables(folder, side)
    case.links += case_links(folder, side if label_side else "")
    summary = folder / "evidence" / "summary.txt"
    if summary.exists() and not case.evidence:
        case.evidence = tail(summary)


def case_from_verdict(v: CaseVerdict, folder: Path, side: str = "", group: str = "") -> Case:
    status, why = status_of(v)
    if v.outcome == "xfailed":              # its known upstream finding: not a red run
        status, why = "known", v.reason
    elif v.outcome == "xpassed":
        why = v.reason
    phases = read_json(folder / "phases.json")
    secs = sum(float(x) for k, x in phases.items() if k in phase_report.ORDER
               and isinstance(x, (int, float))) if isinstance(phases, dict) else 0.0
    c = Case(v.nodeid, status, v.outcome, why or v.reason,
             [SideResult(side or "result", v.outcome, v.reason)],
             [s.signed() for s in v.symptoms], seconds=secs, group=group)
    fill_from_folder(c, folder, side, False)
    return c


# -- JUnit --------------------------------------------------------------------------

@dataclass
class JunitCase:
    nodeid: str
    outcome: str                          # passed | failed | error | skipped
    message: str
    text: str
    seconds: float


def junit_nodeid(tc: ET.Element) -> str:
    """A testcase's pytest node id (a ZTS test keeps its own ``zts:`` id)."""
    if (tc.get("file") or "").startswith("zts:"):
        return str(tc.get("file"))
    cls, name = tc.get("classname", ""), tc.get("name", "")
    return f"{cls.replace('.', '/')}.py::{name}" if cls else name


def junit_cases(xml: Path) -> list[JunitCase]:
    """Every testcase of a JUnit file (raises ET.ParseError on a broken one)."""
    out = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        outcome, msg, text = "passed", "", ""
        for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            el = tc.find(tag)
            if el is not None:
                outcome = name
                first = (el.get("message") or "").strip().splitlines()[:1]
                msg = (first[0] if first else "")[:300]
                text = (el.text or "")[-MAX_TEXT:]
                break
        out.append(JunitCase(junit_nodeid(tc), outcome, msg, text,
                             float(tc.get("time") or 0)))
    return out


def junit_seconds(xml: Path) -> float:
    try:
        root = ET.parse(xml).getroot()
    except (ET.ParseError, OSError):
        return 0.0
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    return sum(float(s.get("time") or 0) for s in suites
               if not (s.get("name") or "").startswith("zts-"))


def case_from_junit(j: JunitCase, side: str = "", group: str = "") -> Case:
    status = {"passed": "pass", "skipped": "skip"}.get(j.outcome, "fail")
    return Case(j.nodeid, status, j.outcome, j.message, [SideResult(side or "result",
                                                                    j.outcome, j.message)],
                output=j.text, seconds=j.seconds, group=group)
