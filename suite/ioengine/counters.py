"""Kernel state around a trial: kstat counters (also summed over a glob) and
per-trial module parameters, restored after.
"""
from __future__ import annotations

import glob as glob_mod
import os
from typing import Any

from .plan import DEFAULT_PARAM_DIR, errno_name


def to_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return int(text, 16) if text.lower().startswith("0x") else None
    except ValueError:
        return None


def parse_kstat(text: str) -> dict[str, int | str]:
    """Parse a SPL kstat "named" file: header line(s), then ``name type data``.

    Rows after the ``name type data`` header are ``name type value``; numeric
    values become ints, anything else stays a string. Without that header,
    every line ``name <digits> value`` is taken as a row.
    """
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.split()[:3] == ["name", "type", "data"]:
            start = i + 1
            break
    rows = lines[start:] if start is not None else lines
    out: dict[str, int | str] = {}
    for line in rows:
        parts = line.split(None, 2)
        if start is None and len(parts) == 2 and to_int(parts[1]) is not None:
            out[parts[0]] = to_int(parts[1])      # /proc/vmstat style: name value
            continue
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        value = to_int(parts[2])
        out[parts[0]] = value if value is not None else parts[2].strip()
    return out


def parse_kprobe_profile(text: str) -> dict[str, int]:
    """``kprobe_profile`` (tracefs): ``event  nhit  nmissed`` per probe -> {event: nhit}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def counter_spec(spec: Any) -> dict[str, Any]:
    if isinstance(spec, str):
        return {"path": spec}
    if isinstance(spec, dict) and ("path" in spec or "glob" in spec):
        return spec
    raise ValueError(f"counter spec needs a path or a glob: {spec!r}")


def read_counter(spec: Any) -> int | None:
    """Current value of a counter; None when the file or field is missing.

    ``{"glob": pattern, "field": f}`` sums ``f`` over every file that matches
    (kstats of objects created on demand, e.g. a pool's taskqs): no match is 0.
    ``{"path": ".../kprobe_profile", "kprobe": event}`` is a kprobe's hit count.
    """
    spec = counter_spec(spec)
    if "glob" in spec:
        total = 0
        for path in sorted(glob_mod.glob(spec["glob"])):
            v = read_counter({"path": path, "field": spec.get("field")})
            if v is None:
                return None
            total += v
        return total
    try:
        with open(spec["path"], encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    if spec.get("kprobe"):
        return parse_kprobe_profile(text).get(spec["kprobe"])
    fld = spec.get("field")
    if fld:
        rows = parse_kstat(text)
        if fld not in rows and "-" in fld:        # "a-b": difference of two fields
            a, b = (to_int(rows.get(x)) for x in fld.split("-", 1))
            return None if a is None or b is None else a - b
        return to_int(rows.get(fld))
    return to_int(text)


def snapshot_counters(specs: dict[str, Any]) -> dict[str, int | None]:
    return {name: read_counter(spec) for name, spec in specs.items()}


def counter_deltas(before: dict[str, int | None],
                   after: dict[str, int | None]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for name, b in before.items():
        a = after.get(name)
        out[name] = a - b if a is not None and b is not None else None
    return out


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _param_value(text: str) -> Any:
    value = to_int(text)
    return value if value is not None else text.strip()


class ParamManager:
    """Per-trial module parameters.

    Each trial runs with the original values plus its own ``params``: a value a
    previous trial set and this one does not mention is put back first.
    :meth:`restore_all` puts every touched parameter back (done at exit unless
    ``--keep-params``).
    """

    def __init__(self, param_dir: str = DEFAULT_PARAM_DIR) -> None:
        self.param_dir = param_dir
        self.original: dict[str, str] = {}
        self.active: set[str] = set()

    def _path(self, name: str) -> str:
        return os.path.join(self.param_dir, name)

    @staticmethod
    def _read(path: str) -> str:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()

    @staticmethod
    def _write(path: str, text: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # as `echo v > param` does
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def apply(self, params: dict[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
        """Set ``params``; returns (applied {name: value read back},
        unavailable [names], errors {name: why})."""
        applied: dict[str, Any] = {}
        unavailable: list[str] = []
        errors: dict[str, str] = {}
        for name in sorted(self.active - set(params)):
            try:
                self._write(self._path(name), self.original[name])
            except OSError as e:
                errors[name] = f"restore failed: {errno_name(e.errno)}"
            self.active.discard(name)
        for name, value in params.items():
            path = self._path(name)
            if "/" in name or not os.path.isfile(path):
                unavailable.append(name)
                continue
            try:
                if name not in self.original:
                    self.original[name] = self._read(path)
                self._write(path, _param_text(value))
                self.active.add(name)
                applied[name] = _param_value(self._read(path))
            except OSError as e:
                unavailable.append(name)
                errors[name] = f"{errno_name(e.errno)}: {e.strerror}"
        return applied, unavailable, errors

    def restore_all(self) -> dict[str, Any]:
        restored: dict[str, Any] = {}
        for name, text in self.original.items():
            try:
                self._write(self._path(name), text)
                restored[name] = _param_value(text)
            except OSError as e:
                restored[name] = f"restore failed: {errno_name(e.errno)}"
        self.active.clear()
        return restored


# ---------------------------------------------------------------------------


class Sampler:
    """min / max / first / last of counters sampled over time."""

    def __init__(self, specs: dict[str, Any]) -> None:
        self.specs = specs
        self.stats: dict[str, dict[str, Any]] = {
            n: {"count": 0, "min": None, "max": None, "first": None, "last": None}
            for n in specs}

    def sample(self) -> None:
        for name, spec in self.specs.items():
            v = read_counter(spec)
            s = self.stats[name]
            if v is None:
                continue
            s["count"] += 1
            s["min"] = v if s["min"] is None else min(s["min"], v)
            s["max"] = v if s["max"] is None else max(s["max"], v)
            s["first"] = v if s["first"] is None else s["first"]
            s["last"] = v
