"""The manual stays true: every relative link resolves, every ``python -m suite``
command it shows parses, and the README's two commands are what CI and the main job
run."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from suite.cli import parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
COMMAND = re.compile(r"^\s*(?:[A-Z_]+=\S+\s+)*python3? -m suite (.+)$")


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(page.read_text())
            if not re.match(r"^[a-z]+:", m.group(1))]


INLINE = re.compile(r"`python3? -m suite ([^`]+)`")


def commands(page: Path) -> list[str]:
    """The ``python -m suite ...`` lines of a page's code blocks, without comments,
    and the commands its prose shows inline (`python -m suite lines newest`)."""
    out, fenced = [], False
    for line in page.read_text().splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        m = COMMAND.match(line) if fenced else None
        if m:
            out.append(m.group(1).split(" #", 1)[0].strip())
        elif not fenced:        # a bare command name (`python -m suite bugs`) is a name
            out += [c.strip() for c in INLINE.findall(line) if len(c.split()) > 1]
    return out


def words(command: str) -> list[str]:
    """The command's arguments up to ``--`` (the rest is pytest's), placeholders
    (``<run>``, ``...``) given a value."""
    argv = shlex.split(re.sub(r"<[^>]+>", "X", re.sub(r"\s*\[[^\]]*\]", "", command)))
    return argv[:argv.index("--")] if "--" in argv else argv


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path):
    missing = [target for target in links(page) if not (page.parent / target).exists()]
    assert not missing, f"{page.name} links to what does not exist: {missing}"


def test_every_command_the_manual_shows_parses():
    shown = [(page.name, c) for page in PAGES for c in commands(page)]
    assert len(shown) > 20, "the manual shows the suite's commands"
    ap = parser()
    bad = []
    for name, c in shown:
        try:
            ap.parse_args(words(c))
        except SystemExit:
            bad.append(f"{name}: python -m suite {c}")
    assert not bad, "\n".join(bad)


def test_the_command_check_sees_an_option_that_does_not_exist():
    with pytest.raises(SystemExit):
        parser().parse_args(words("explore --budget 15m --no-such-option"))
    assert words("gate --series async-dio -k eof -- -n 2") == ["gate", "--series", "async-dio",
                                                              "-k", "eof"]


def test_the_readme_opens_with_the_two_commands_ci_and_the_main_job_run():
    first = ROOT.joinpath("README.md").read_text().split("```")[1].splitlines()[1:]
    cmds = [ln.split("#", 1)[0].strip() for ln in first if ln.strip()]
    assert cmds == ["bash ci/main.sh", "python3 -m pytest tests -n 2"]
    assert (ROOT / "ci" / "main.sh").is_file()
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^python3 -m pytest tests -n 2\b", ci, re.M), ".ci/run runs another command"


def test_the_readme_stays_short():
    assert len(ROOT.joinpath("README.md").read_text().splitlines()) <= 150


def test_every_upstream_finding_is_in_the_manual():
    import tomllib
    data = tomllib.loads((ROOT / "patches" / "upstream" / "findings.toml").read_text())
    manual = (ROOT / "docs" / "findings.md").read_text()
    assert [f["id"] for f in data["findings"] if f"`{f['id']}`" not in manual] == []


def test_the_readmes_exit_codes_are_the_reports():
    from suite.report.page.model import EXIT
    text = (ROOT / "README.md").read_text()
    said = {w.lower(): int(n) for w, n in re.findall(r"\*\*(PASS|FAIL|INCONCLUSIVE)\*\* \(exit (\d)\)",
                                                     text)}
    assert said == {"pass": 0, "fail": 1, "inconclusive": 2} == EXIT


def test_the_findings_page_says_the_junit_the_report_writes():
    text = (ROOT / "docs" / "findings.md").read_text()
    assert "`skipped`\ntestcase of type `pytest.xfail`" in text or \
        "`skipped` testcase of type `pytest.xfail`" in text.replace("\n", " ")
    from suite.report.page import render_junit
    assert "known" in render_junit.SKIPPED
