"""Which functions a diff changes, read from the sources on both sides.

OpenZFS's C style puts a function's name at the start of its line and its braces
alone at column 0, so a function's span is found without a compiler: a ``{`` at
column 0 opens the body of the nearest name-and-parenthesis line above it, and the
next ``}`` at column 0 closes it. A changed line inside a span changes that function
(removed lines are placed in the old file, added ones in the new). A changed line
outside every span (a macro, a struct member, a global, a tunable) changes the
names it defines, and with them every function of ``module/`` that uses one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from suite.source.objects import git

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
FUNC = re.compile(r"^([A-Za-z_]\w*)\s*\(")
DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)")
DECLARED = re.compile(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:[;=,)]|\(\s*\w)")
KEYWORDS = frozenset("""if for while switch return sizeof case default do else goto break
continue static const volatile inline extern struct union enum typedef unsigned signed
int char long short void boolean_t uint64_t uint32_t uint16_t uint8_t int64_t int32_t
size_t ssize_t uint_t ulong_t B_TRUE B_FALSE NULL EXPORT_SYMBOL ZFS_MODULE_PARAM
module_param MODULE_PARM_DESC""".split())
FORWARD = re.compile(r"^\s*(?:struct|union|enum)\s+\w+\s*;")      # declares nothing new
KERNEL_PATHS = ("module/", "include/")     # what the guests' modules are built from
HEAD_LINES = 12               # a signature spans at most this many lines above its brace


@dataclass(frozen=True)
class Span:
    name: str
    start: int                # its type's line, else its name's (1-based)
    end: int                  # the closing brace's line


def spans(text: str) -> list[Span]:
    """The functions of a C source, by the column-0 braces of OpenZFS's style."""
    lines = text.splitlines()
    out: list[Span] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("{"):
            name, start = _signature(lines, i)
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("}")),
                       len(lines) - 1)
            if name:
                out.append(Span(name, start + 1, end + 1))
            i = end + 1
            continue
        i += 1
    return out


def _signature(lines: list[str], brace: int) -> tuple[str | None, int]:
    for j in range(brace - 1, max(-1, brace - 1 - HEAD_LINES), -1):
        ln = lines[j]
        if ln.startswith(("}", "#")) or (ln.rstrip().endswith(";") and not ln[:1].isspace()):
            break
        if m := FUNC.match(ln):
            return m.group(1), j - 1 if j and _return_type(lines[j - 1]) else j
    return None, brace


def _return_type(ln: str) -> bool:
    """The line above a function's name holds its type (``static int``)."""
    s = ln.strip()
    return bool(s) and not ln[:1].isspace() and not s.startswith(("}", "#", "/*", "*")) \
        and not s.endswith((";", "*/", "{", "}"))


AGGREGATE = re.compile(r"^(?:typedef\s+)?(?:struct|union|enum)\s*(\w*)\s*\{")
CLOSE_NAMES = re.compile(r"^\}\s*([\w\s,*]*);")


def aggregates(text: str) -> list[tuple[int, int, set[str]]]:
    """The struct, union and enum definitions at column 0: (first line, last line,
    their names: the tag and the typedef names after the brace)."""
    lines = text.splitlines()
    out: list[tuple[int, int, set[str]]] = []
    i = 0
    while i < len(lines):
        m = AGGREGATE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("}")),
                   len(lines) - 1)
        names = {m.group(1)} if m.group(1) else set()
        if c := CLOSE_NAMES.match(lines[end]):
            names |= {w for w in re.findall(r"\w+", c.group(1))}
        out.append((i + 1, end + 1, names))
        i = end + 1
    return out


def span_at(sp: list[Span], line: int) -> Span | None:
    return next((s for s in sp if s.start <= line <= s.end), None)


@dataclass
class FileDiff:
    path: str
    old: dict[int, str] = field(default_factory=dict)     # removed lines, old numbering
    new: dict[int, str] = field(default_factory=dict)     # added lines, new numbering


def parse(diff: str) -> list[FileDiff]:
    """A ``git diff -U0`` as the lines each file lost and gained."""
    out: list[FileDiff] = []
    cur: FileDiff | None = None
    o = n = 0
    out_old = ""
    for ln in diff.splitlines():
        if ln.startswith("diff --git "):
            cur = None
        elif ln.startswith("+++ "):
            path = ln[4:].removeprefix("b/")
            cur = FileDiff(path if path != "/dev/null" else out_old)
            out.append(cur)
        elif ln.startswith("--- "):
            out_old = ln[4:].removeprefix("a/")
        elif (m := HUNK.match(ln)) and cur is not None:
            o, n = int(m.group(1)), int(m.group(3))
        elif cur is not None and ln.startswith("-"):
            cur.old[o] = ln[1:]
            o += 1
        elif cur is not None and ln.startswith("+"):
            cur.new[n] = ln[1:]
            n += 1
    return out


def defined_names(line: str) -> set[str]:
    """The names a line outside any function defines or changes."""
    if m := DEFINE.match(line):
        return {m.group(1)}
    code = re.sub(r"/\*.*?\*/|//.*$|\"[^\"]*\"", " ", line).strip()
    if not code or code.startswith(("*", "/*", "#")):
        return set()
    if "(" in code:         # a prototype or a macro call: its name, never its parameters'
        m = re.search(r"([A-Za-z_]\w*)\s*\(", code)
        return {m.group(1)} - KEYWORDS if m else set()
    return {w for w in DECLARED.findall(code) if w not in KEYWORDS}


@dataclass
class Impact:
    functions: set[str] = field(default_factory=set)      # "path:name"
    names: set[str] = field(default_factory=set)          # changed outside any function
    users: dict[str, set[str]] = field(default_factory=dict)   # name -> "path:fn" using it
    files: set[str] = field(default_factory=set)          # C files and headers changed
    other: set[str] = field(default_factory=set)          # not C (tests, scripts, docs)

    def all_functions(self) -> set[str]:
        return self.functions.union(*self.users.values()) if self.users else set(self.functions)


def is_c(path: str) -> bool:
    return path.endswith((".c", ".h"))


def file_impact(fd: FileDiff, old_text: str, new_text: str, imp: Impact) -> None:
    """What one C file's diff changes: its functions, else the names it defines."""
    imp.files.add(fd.path)
    for text, lines in ((old_text, fd.old), (new_text, fd.new)):
        sp, ag = spans(text), aggregates(text)
        for n, line in lines.items():
            s = span_at(sp, n)
            inside = next(((a, b, names) for a, b, names in ag if a <= n <= b), None)
            if s is not None:
                imp.functions.add(f"{fd.path}:{s.name}")
            elif inside is not None and n in inside[:2]:    # its braces: the type's names
                imp.names |= inside[2]
            elif inside is not None:        # a member: used as ->name or .name
                imp.names |= {"." + n for n in defined_names(line)}
            elif line.strip() and not FORWARD.match(line):
                imp.names |= defined_names(line)


def users(sources: dict[str, str], names: set[str]) -> dict[str, set[str]]:
    """Every function of ``sources`` (path -> text) whose body uses one of ``names``."""
    out: dict[str, set[str]] = {n: set() for n in names}
    if not names:
        return out
    plain = sorted(n for n in names if not n.startswith("."))
    members = sorted(n[1:] for n in names if n.startswith("."))
    pats = ([(re.compile(r"\b(" + "|".join(map(re.escape, plain)) + r")\b"), "")]
            if plain else []) + \
        ([(re.compile(r"(?:->|\.)\s*(" + "|".join(map(re.escape, members)) + r")\b"), ".")]
         if members else [])
    for path, text in sources.items():
        lines = text.splitlines()
        for s in spans(text):
            body = "\n".join(lines[s.start - 1:s.end])
            for rx, prefix in pats:
                for m in rx.finditer(body):
                    out[prefix + m.group(1)].add(f"{path}:{s.name}")
    return out


def _show(git_dir: Path, commit: str, path: str) -> str:
    p = git("show", f"{commit}:{path}", git_dir=git_dir, check=False)
    return p.stdout if p.returncode == 0 else ""


def from_git(git_dir: Path, base: str, head: str, users_under: str = "module/") -> Impact:
    """What ``base..head`` changes, function by function; the functions of
    ``users_under`` at ``head`` that use a name it changes outside a function."""
    diff = git("diff", "-U0", "--no-color", "--no-ext-diff", "-M", base, head,
               git_dir=git_dir).stdout
    imp = Impact()
    for fd in parse(diff):
        if not is_c(fd.path) or not fd.path.startswith(KERNEL_PATHS):
            imp.other.add(fd.path)          # a test program's main() is no module's
            continue
        file_impact(fd, _show(git_dir, base, fd.path), _show(git_dir, head, fd.path), imp)
    if imp.names:
        args = [a for n in sorted({n.lstrip(".") for n in imp.names}) for a in ("-e", n)]
        p = git("grep", "-l", "-w", *args, head, "--", users_under, git_dir=git_dir, check=False)
        files = [ln.split(":", 1)[1] for ln in p.stdout.splitlines() if ":" in ln]
        imp.users = users({f: _show(git_dir, head, f) for f in files if is_c(f)}, imp.names)
    return imp
