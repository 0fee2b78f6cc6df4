"""Findings ready to file upstream: ``python -m suite findings``.

``list`` prints the known upstream findings (``patches/upstream/findings.toml``): id,
title, where seen, fixed by. ``export ID`` writes, for one finding, an issue body in
OpenZFS's bug report form (system information, what happens, how to reproduce, the
kernel's lines) and beside it a **standalone reproducer**: the ``repro/`` of the newest
case in a results folder that failed (or xfailed) by that finding's symptoms, which the
harness writes for every failed case (a shell script carrying the standard-library I/O
engine as a zip, the plans or sequences it replays, what to expect). Nothing of the
suite is needed to run it. ``verify ID`` runs that reproducer in a fresh guest on a
build (stock master unless told): exit 1 reproduced, 0 not, 2 no reproducer or setup.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from suite import paths
from suite.errors import SuiteError
from suite.report import upstream
from suite.report.repro import write_reproducer
from suite.symptoms import CaseVerdict

REPORTS = "upstream/reports"            # under patches/: the exported bodies, kept
# What a run's text says about this machine that a maintainer's copy should not:
# the build's tools by their cache path, the engine's launcher, the checkout.
SCRUB = ((re.compile(r"LD_LIBRARY_PATH=\S+ "), ""),
         (re.compile(r"/\S*/builds/[0-9a-f]{16}/src/(?:\S*/)?(zpool|zfs|zinject|zdb)\b"), r"\1"),
         (re.compile(r"PYTHONPATH=\S+ (?:bash \S+/client\.sh \S+ \S+|\S+ -m suite\.ioengine)"),
          "the I/O engine"),
         (re.compile(r"/\S*/builds/[0-9a-f]{16}/\S*"), "<build>"))


def scrub(text: str) -> str:
    """``text`` without the paths of the machine that ran it."""
    for pat, rep in SCRUB:
        text = pat.sub(rep, text)
    return text


def scrub_folder(dest: Path) -> None:
    """The exported files' text scrubbed (a script's comment lines only: its payload
    is data)."""
    for p in dest.iterdir():
        if p.suffix in (".md", ".json", ".txt"):
            p.write_text(scrub(p.read_text()))
        elif p.suffix == ".sh":
            p.write_text("".join(scrub(ln) if ln.startswith("#") else ln
                                 for ln in p.read_text().splitlines(keepends=True)))


@dataclass(frozen=True)
class Evidence:
    """A case of a results folder that failed by the finding, and its reproducer."""
    case_dir: Path
    verdict: CaseVerdict

    @property
    def repro(self) -> Path:
        return self.case_dir / "repro"


def get(fid: str) -> upstream.UpstreamFinding:
    found = {f.id: f for f in upstream.load()}
    if fid not in found:
        raise SuiteError(f"no upstream finding {fid!r}",
                         fix=f"known: {', '.join(found)} (python -m suite findings)")
    return found[fid]


def table() -> str:
    rows = ["| id | what | seen | fixed by |", "| --- | --- | --- | --- |"]
    for f in upstream.load():
        rows.append(f"| {f.id} | {f.title[:110]} | {f.seen[:80]} | {f.fixed_by or '-'} |")
    return "\n".join(rows)


def evidence(f: upstream.UpstreamFinding, roots: list[Path]) -> Evidence | None:
    """The newest case under ``roots`` that failed (or xfailed) by ``f``'s symptoms
    alone and left a reproducer."""
    hits = []
    for root in roots:
        for vfile in root.glob("**/cases/*/verdict.json"):
            try:
                v = CaseVerdict.load(vfile)
            except (OSError, ValueError, KeyError):
                continue
            if v.outcome in ("failed", "xfailed") and f.covers(v.nodeid, [s.signed() for s in
                                                                          v.symptoms]) \
                    and (vfile.parent / "repro" / "repro.sh").exists():
                hits.append((vfile.stat().st_mtime, Evidence(vfile.parent, v)))
    return max(hits, key=lambda h: h[0])[1] if hits else None


def system_table(case_dir: Path) -> list[str]:
    """OpenZFS's "System information" table, from the run's build record."""
    recs = sorted(case_dir.parent.parent.glob("build/record-*.json"))
    rec = json.loads(recs[0].read_text()) if recs else {}
    kernel, source = rec.get("kernel") or {}, rec.get("source") or {}
    rows = [("Distribution Name", "Debian"), ("Distribution Version", "12 (bookworm)"),
            ("Kernel Version", kernel.get("release", "?")), ("Architecture", "x86_64"),
            ("OpenZFS Version", f"{source.get('describe', '?')} ({source.get('commit', '?')[:11]})")]
    return ["Type | Version/Name", "--- | ---", *[f"{k} | {v}" for k, v in rows]]


def body(f: upstream.UpstreamFinding, ev: Evidence) -> str:
    v = ev.verdict
    kernel = ev.case_dir / "evidence" / "console-tail.txt"
    lines = ["### System information", "", *system_table(ev.case_dir), "",
             "### Describe the problem you're observing", "", f.title, "",
             f"Seen: {f.seen}." if f.seen else "", "",
             *(_status_lines(f)),
             "### Describe how to reproduce the problem", "",
             *(_plain_steps() if plain(f.id) else _replay_steps(ev)),
             "### Include any warning/errors/backtraces from the system logs", "",
             "What the run recorded:", "", "```",
             *[str(s) for s in v.symptoms][:12], "```"]
    if kernel.exists():
        tail = [ln for ln in kernel.read_text(errors="replace").splitlines()
                if any(k in ln for k in ("VERIFY", "PANIC", "BUG", "WARNING", "Call Trace",
                                         "+0x", "lockdep", "blocked for"))][:40]
        if tail:
            lines += ["", "The kernel's lines:", "", "```", *tail, "```"]
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


FIXES = "upstream/fixes"                # under patches/: a candidate fix of ours per finding


def _status_lines(f: upstream.UpstreamFinding) -> list[str]:
    """Where it stands upstream, and the candidate fix attached when we wrote one."""
    out = []
    if f.status:
        ref = f" ({f.status_ref})" if f.status_ref else ""
        out += [f"Upstream status: {f.status}{ref}: {f.status_why}.", ""]
    if f.production:
        out += [f"A build without `--enable-debug`: {f.production}.", ""]
    if f.impact:
        out += [f"Impact: {f.impact}.", ""]
    if fix_folder(f).is_dir():
        out += [f"A candidate fix is attached (`patches/{FIXES}/{fix_folder(f).name}/`).", ""]
    return out


def fix_folder(f: upstream.UpstreamFinding) -> Path:
    """Our candidate fix's folder (one fix may serve two findings: ``fix = "<id>"``)."""
    return paths.patches_dir() / FIXES / (f.fix or f.id)


PRIVATE_NOTE = """# Not for a public issue: report privately

This finding is a memory-safety result ({why}). OpenZFS's security policy
(SECURITY.md) asks for such reports through the **Report a vulnerability** button
under the Security tab of github.com/openzfs/zfs, not a public issue. Paste the
sections below there; the reproducer and the candidate fix are in this folder.

"""


def private_report(f: upstream.UpstreamFinding, ev: Evidence) -> str:
    """What the security advisory form asks (description, steps, affected versions,
    proof, impact), from the same parts as the public body."""
    return (PRIVATE_NOTE.format(why=f.production)
            + body(f, ev).replace("### Describe the problem you're observing",
                                  "### Description and impact"))


CORPUS = paths.PROJECT_ROOT / "cases" / "explore_corpus"


def corpus_sequences(f: upstream.UpstreamFinding) -> list[str]:
    """The explore corpus sequences among a finding's cases (``test_explore_corpus[NAME]``)."""
    names = [c.split("[", 1)[1].rstrip("]") for c in f.cases
             if c.startswith("test_explore_corpus[")]
    return [n for n in names if (CORPUS / f"{n}.json").is_file()]


def dedupe_sequences(folder: Path) -> None:
    """One file per distinct sequence: a case that replays one sequence three times left
    three identical ``.seq.json``; the replay script is pointed at the first."""
    first: dict[bytes, str] = {}
    script = folder / "suite-replay.sh"
    if not script.exists():
        script = folder / "repro.sh"
    text = script.read_text() if script.exists() else ""
    for p in sorted(folder.glob("*.seq.json")):
        data = p.read_bytes()
        if data in first:
            text = text.replace(p.name, first[data])
            p.unlink()
        else:
            first[data] = p.name
    if script.exists():
        script.write_text(text)


REPRO = "upstream/repro"                # under patches/: one folder per finding


def plain(fid: str) -> Path | None:
    """The finding's hand-written reproducer folder (``patches/upstream/repro/<id>/``)."""
    d = paths.patches_dir() / REPRO / fid
    return d if (d / "repro.sh").is_file() else None


def _plain_steps() -> list[str]:
    return ["As root, on a machine with this OpenZFS loaded and its `zpool`/`zfs` on PATH:",
            "", "```sh", "bash repro.sh", "```", "",
            "`repro.sh` (beside this file, with the `repro.c` it compiles where there is one) "
            "makes a pool of its own on file-backed vdevs in a temporary directory, refuses "
            "to start if that pool name exists, and destroys only what it created; a real "
            "disk only when given (`--disk /dev/X`). Exit 1 reproduced, 0 not, 2 could not "
            "test. `suite-replay.sh` replays the suite's own failing run (its engine "
            "embedded), for the curious.", ""]


def _replay_steps(ev: Evidence) -> list[str]:
    return ["As root, on a machine with this OpenZFS loaded and its `zpool`/`zfs` on PATH, "
            "with spare disks (they are destroyed):", "", "```sh",
            f"bash repro.sh {' '.join(f'/dev/sdX{i}' for i in range(_devices(ev)))}",
            "```", "",
            "`repro.sh` (beside this file) creates the pool and dataset as the failing run "
            "did, sets the module parameters, replays the requests with a small "
            "standard-library Python engine it carries, and says what it expected and "
            "what it saw: exit 1 reproduced, 0 not, 2 setup failed.", ""]


def _devices(ev: Evidence) -> int:
    exp = ev.repro / "expected.json"
    try:
        return int(json.loads(exp.read_text()).get("devices", 1))
    except (OSError, ValueError):
        return 1


REPRODUCE, LOGS = "### Describe how to reproduce the problem", "### Include any warning"


def adopt_plain(fid: str, dest: Path) -> list[str]:
    """A report folder ``dest`` carries the finding's plain reproducer byte for byte
    (``repro.sh`` and what it compiles), the suite's own replay beside it as
    ``suite-replay.sh``, and its issue body tells how to run the plain one; the
    files it changed (none: it was up to date, or the finding has no plain one)."""
    hand = plain(fid)
    if hand is None:
        return []
    changed = []
    ours = dest / "repro.sh"
    if ours.exists() and not (dest / "suite-replay.sh").exists():
        ours.rename(dest / "suite-replay.sh")   # exported before the plain one was written
        changed.append("suite-replay.sh")
    for name in differing(hand, dest):
        shutil.copy2(hand / name, dest / name)
        changed.append(name)
    text = dest / "issue.md"
    if text.exists():
        body_now = text.read_text()
        head, sep, rest = body_now.partition(REPRODUCE)
        _, sep2, tail = rest.partition(LOGS)
        if sep and sep2:
            steps = "\n".join([REPRODUCE, "", *_plain_steps()]) + "\n"
            new = head + steps + LOGS + tail
            if new != body_now:
                text.write_text(new)
                changed.append("issue.md")
    return changed


def differing(hand: Path, dest: Path) -> list[str]:
    """The files of the plain reproducer folder ``hand`` that ``dest`` lacks or holds
    otherwise."""
    return [p.name for p in sorted(hand.iterdir()) if p.is_file() and
            (not (dest / p.name).exists() or (dest / p.name).read_bytes() != p.read_bytes())]


def stale_reports(root: Path) -> dict[str, list[str]]:
    """Each committed report whose plain reproducer is missing or differs from
    ``patches/upstream/repro/<id>/``: its id and the files that differ."""
    out = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        hand = plain(d.name)
        if hand is None:
            continue
        if bad := differing(hand, d):
            out[d.name] = bad
    return out


def refresh(root: Path, ids: list[str]) -> list[str]:
    """``findings refresh [ID]``: every committed report (or the one named) brought to
    its finding's plain reproducer as it is now; a line per report changed."""
    names = ids or sorted(p.name for p in root.iterdir() if p.is_dir())
    return [f"{fid}: {', '.join(files)}" for fid in names
            if (files := adopt_plain(fid, root / fid))]


def export(fid: str, roots: list[Path], out: Path) -> Path:
    """``out/<id>/issue.md`` and the reproducer beside it; the folder."""
    f = get(fid)
    ev = evidence(f, roots)
    if ev is None:
        raise SuiteError(f"{fid}: no case under {', '.join(map(str, roots))} failed by this "
                         "finding's symptoms and left a reproducer",
                         fix="run one of its cases first (python -m suite findings shows "
                             f"them: {', '.join(f.cases)}) and give that results folder")
    write_reproducer(ev.case_dir, ev.verdict.nodeid, ev.verdict)   # with today's translation
    dest = out / fid
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(ev.repro, dest)
    adopt_plain(fid, dest)                      # the plain one is what a maintainer runs
    fixes = fix_folder(f)
    for p in sorted(fixes.glob("*.patch")) if fixes.is_dir() else []:
        shutil.copy2(p, dest / p.name)          # the candidate fix, attached
    dedupe_sequences(dest)
    for name in corpus_sequences(f):            # every shape that meets it, not one
        (dest / "sequences").mkdir(exist_ok=True)
        shutil.copy2(CORPUS / f"{name}.json", dest / "sequences" / f"{name}.json")
    if f.private:                               # never a public body for it
        (dest / "security-report.md").write_text(private_report(f, ev))
    else:
        (dest / "issue.md").write_text(body(f, ev))
    (dest / "source.txt").write_text(f"{ev.verdict.nodeid}\nrun {ev.case_dir.parent.parent.name}, "
                                     f"case folder {ev.case_dir.name}\n")
    scrub_folder(dest)
    return dest
