"""SPL/ZFS named kstats, and the accounting rules they must keep.

A named kstat file (``/proc/spl/kstat/zfs/abdstats``) is a header line, a column
line (``name type data``) and one ``name type value`` line per counter; type 4 is
an unsigned 64-bit value, 3 a signed one. Rules (``vmimages/kstat-rules.toml``,
each with its reason):

- ``[[wrap]]``: no unsigned value of the matching files at or above 2^63 (a
  counter decremented below zero), unless it already was before the case;
- ``[[limit]]``: ``name`` of ``file`` at most ``max`` (a number or another
  counter of the same file) times ``slack``;
- ``[[returns]]``: with every pool exported, ``names`` of ``file`` are back to
  what they were before the guest's first pool, within ``slack`` (a gauge that
  stays up after the pool is gone is memory that was never given back). Checked
  by ``--thorough`` when it exports a case's pool (``suite/judges/ondisk.py``).
"""
from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

from suite.errors import SuiteError

UINT64, INT64 = 4, 3
WRAP = 1 << 63


def as_signed(value: int) -> int:
    """A u64 kstat read as the signed count it is kept in (at or above WRAP: below zero)."""
    return value - (1 << 64) if value >= WRAP else value


Kstat = dict[str, tuple[int, int]]        # name -> (type, value)


def parse(text: str) -> Kstat:
    """A named kstat's counters; {} for anything else (raw or I/O kstats)."""
    lines = text.splitlines()
    if len(lines) < 2 or lines[1].split()[:3] != ["name", "type", "data"]:
        return {}
    out: Kstat = {}
    for ln in lines[2:]:
        parts = ln.split()
        if len(parts) == 3 and parts[1].isdigit():
            try:
                out[parts[0]] = (int(parts[1]), int(parts[2], 0))
            except ValueError:
                continue            # a string kstat
    return out


@dataclass(frozen=True)
class WrapRule:
    files: str                      # fnmatch on the file's name (``abdstats``, ``*``)
    reason: str
    ignore: tuple[str, ...] = ()    # counter names (fnmatch) that may legitimately be huge


@dataclass(frozen=True)
class LimitRule:
    file: str
    name: str
    max: str                        # a number, or another counter of the file
    reason: str
    slack: float = 1.0


@dataclass(frozen=True)
class ReturnRule:
    file: str
    names: tuple[str, ...]
    reason: str
    slack: int = 0                  # how far above its baseline a gauge may stay
    # What may still be cached with no pool imported and is not a leak: buffers the
    # ARC can evict ("file:name" gauges of the same snapshot, summed), and per such
    # byte how far each gauge may stay up (sizes 1, counts 1/512: the smallest buffer).
    evictable: tuple[str, ...] = ()
    per_evictable_byte: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Rules:
    wrap: tuple[WrapRule, ...]
    limit: tuple[LimitRule, ...]
    collect: tuple[str, ...] = ("abdstats", "arcstats")   # kstat files read, as globs
    returns: tuple[ReturnRule, ...] = ()

    def return_files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.file for r in self.returns))


def load_rules(path: Path | None = None) -> Rules:
    from suite.paths import vmimages_dir
    path = path or vmimages_dir() / "kstat-rules.toml"
    try:
        d = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SuiteError(f"cannot read the kstat rules {path}: {e}", fix="fix its TOML") from e
    for section in ("wrap", "limit", "returns"):
        for r in d.get(section, []):
            if not str(r.get("reason", "")).strip():
                raise SuiteError(f"{path}: a [[{section}]] rule has no reason",
                                 fix="every rule says why it must hold")
    return Rules(tuple(WrapRule(r["files"], r["reason"], tuple(r.get("ignore", ())))
                       for r in d.get("wrap", [])),
                 tuple(LimitRule(r["file"], r["name"], str(r["max"]), r["reason"],
                                 float(r.get("slack", 1.0))) for r in d.get("limit", [])),
                 tuple(d.get("collect", Rules.collect)),
                 tuple(ReturnRule(r["file"], tuple(r["names"]), r["reason"],
                                  int(r.get("slack", 0)), tuple(r.get("evictable", ())),
                                  tuple((k, float(v)) for k, v in
                                        r.get("per_evictable_byte", {}).items()))
                       for r in d.get("returns", [])))


@dataclass(frozen=True)
class Breach:
    kind: str                       # wrap | limit | leak | missing
    file: str
    name: str
    detail: str


def wrapped(rule: WrapRule, before: dict[str, Kstat], after: dict[str, Kstat]) -> list[Breach]:
    out = []
    for file, stats in after.items():
        if not fnmatch.fnmatch(file.rsplit("/", 1)[-1], rule.files):
            continue
        for name, (typ, value) in stats.items():
            if typ != UINT64 or value < WRAP or any(fnmatch.fnmatch(name, i) for i in rule.ignore):
                continue
            was = before.get(file, {}).get(name, (typ, 0))[1]
            if was >= WRAP:
                continue                # wrapped before the case: not this case's
            out.append(Breach("wrap", file, name,
                              f"{file} {name} = {value} (= {as_signed(value)} as signed): "
                              f"below zero, was {was} before the case"))
    return out


def unwrapped(b: Breach, again: list[dict[str, Kstat]]) -> int | None:
    """A wrap that was one read's: the value (signed) a later read found at or above
    zero, or None when every read again (and at least one) still found it wrapped."""
    for stats in again:
        got = stats.get(b.file, {}).get(b.name)
        if got is not None and got[1] < WRAP:
            return got[1]
    return None


def over_limit(rule: LimitRule, after: dict[str, Kstat]) -> list[Breach]:
    stats = after.get(rule.file)
    if stats is None or rule.name not in stats:
        return [Breach("missing", rule.file, rule.name,
                       f"{rule.file} {rule.name}: not in this build's kstats, not checked")]
    value = stats[rule.name][1]
    if rule.max.lstrip("-").isdigit():
        cap = int(rule.max)
    elif rule.max in stats:
        cap = stats[rule.max][1]
    else:
        return [Breach("missing", rule.file, rule.max,
                       f"{rule.file} {rule.max}: not in this build's kstats, "
                       f"{rule.name} not checked")]
    if value > cap * rule.slack:
        return [Breach("limit", rule.file, rule.name,
                       f"{rule.file} {rule.name} = {value} > {rule.max} = {cap}"
                       + (f" x {rule.slack}" if rule.slack != 1.0 else ""))]
    return []


def not_returned(rule: ReturnRule, baseline: dict[str, Kstat],
                 now: dict[str, Kstat]) -> list[Breach]:
    """Gauges of ``rule`` still above their baseline with every pool exported
    (beyond what the ARC still holds and could evict)."""
    base, cur = baseline.get(rule.file), now.get(rule.file)
    evictable = evictable_bytes(rule, now)
    per = dict(rule.per_evictable_byte)
    out = []
    for name in rule.names:
        if base is None or cur is None or name not in base or name not in cur:
            out.append(Breach("missing", rule.file, name,
                              f"{rule.file} {name}: not in this build's kstats, not checked"))
            continue
        was, is_ = base[name][1], cur[name][1]
        cached = int(evictable * per.get(name, 0.0))
        if is_ >= WRAP:             # a u64 gauge below zero: frees counted twice
            out.append(Breach("leak", rule.file, name,
                              f"{rule.file} {name} = {as_signed(is_)} as signed with every "
                              f"pool exported, {was} before the guest's first pool: below "
                              "zero, so not a buffer held but a miscount (more frees counted "
                              "than allocations)"))
        elif is_ > was + rule.slack + cached:
            out.append(Breach("leak", rule.file, name,
                              f"{rule.file} {name} = {is_} with every pool exported, "
                              f"{was} before the guest's first pool (+{is_ - was}"
                              + (f", slack {rule.slack}" if rule.slack else "")
                              + (f", {cached} for the {evictable} bytes the ARC can still "
                                 f"evict" if cached else "") + ")"))
    return out


def evictable_bytes(rule: ReturnRule, now: dict[str, Kstat]) -> int:
    """The sum of the rule's ``evictable`` gauges (missing ones count 0)."""
    total = 0
    for ref in rule.evictable:
        file, _, name = ref.partition(":")
        total += now.get(file, {}).get(name, (UINT64, 0))[1]
    return total


def leaks(rules: Rules, baseline: dict[str, Kstat], now: dict[str, Kstat]) -> list[Breach]:
    return [b for r in rules.returns for b in not_returned(r, baseline, now)]


def check(rules: Rules, before: dict[str, Kstat], after: dict[str, Kstat]) -> list[Breach]:
    out: list[Breach] = []
    for w in rules.wrap:
        out += wrapped(w, before, after)
    for lim in rules.limit:
        out += over_limit(lim, after)
    return out
