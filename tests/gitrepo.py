"""Throwaway git repositories for self-tests."""
from __future__ import annotations

import subprocess
from pathlib import Path


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                               "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
                               "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
                               "HOME": str(cwd), "PATH": "/usr/bin:/bin"}).stdout.strip()


def commit(repo: Path, files: dict[str, str], msg: str) -> str:
    for name, text in files.items():
        p = repo / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-q", "-m", msg)
    return sh(repo, "git", "rev-parse", "HEAD")
