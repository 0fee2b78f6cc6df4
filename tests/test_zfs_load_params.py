"""Self-tests (no VM) of ``--zfs-param``: every load of a guest passes the session's
zfs.ko parameters to insmod, and a parameter that does not read back refuses the
guest (a gate's head side with a tunable must run with it, or not at all)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from suite.build.recipe import BuildRecord, ModuleInfo
from suite.errors import SuiteError
from suite.guest.params import load_params
from suite.guest.zfs import ParamNotSet, Zfs

SRC = {"spl": "S1", "zfs": "Z1"}


class FakeGuest:
    """A guest whose zfs.ko honours (or ignores) load-time parameters."""

    def __init__(self, honours: bool = True) -> None:
        self.loaded: dict[str, str | None] = {"spl": None, "zfs": None}
        self.params: dict[str, str] = {}
        self.honours = honours
        self.commands: list[str] = []

    def run(self, cmd: str, timeout: float = 0, check: bool = True, **kw):
        self.commands.append(cmd)
        out = ""
        if cmd.startswith("for m in spl zfs"):
            out = "\n".join(f"{m} {v or '-'}" for m, v in self.loaded.items())
        elif cmd.startswith("insmod"):
            mod = "spl" if "spl.ko" in cmd else "zfs"
            self.loaded[mod] = SRC[mod]
            if mod == "zfs" and self.honours:
                self.params.update(a.split("=", 1) for a in cmd.split()[2:])
        elif cmd.startswith("cat /sys/module/zfs/parameters/"):
            out = self.params.get(cmd.rsplit("/", 1)[1], "1")
        return SimpleNamespace(rc=0, stdout=out, stderr="")


def zfs(guest: FakeGuest, **params: str) -> Zfs:
    rec = BuildRecord("k", "/b", "/s", "", {}, {}, {}, "2.4.99",
                      {m: ModuleInfo(f"/b/module/{m}.ko", v, "") for m, v in SRC.items()},
                      {}, "")
    return Zfs(guest, rec, load_params=params)


def test_every_load_passes_the_session_parameters_and_checks_them():
    g = FakeGuest()
    z = zfs(g, zfs_vdev_direct_read_verify="0")
    z.load()
    insmod = [c for c in g.commands if c.startswith("insmod") and "zfs.ko" in c]
    assert insmod == ["insmod /b/module/zfs.ko zfs_vdev_direct_read_verify=0"]
    assert g.params == {"zfs_vdev_direct_read_verify": "0"}


def test_a_build_that_ignores_the_parameter_is_refused():
    with pytest.raises(ParamNotSet, match="zfs_vdev_direct_read_verify=0 reads back 1"):
        zfs(FakeGuest(honours=False), zfs_vdev_direct_read_verify="0").load()


def test_the_option_is_name_equals_value():
    assert load_params(["a_b=0", "c=12"]) == {"a_b": "0", "c": "12"}
    for bad in ("a_b", "=1", "A=1", "a="):
        with pytest.raises(SuiteError):
            load_params([bad])
