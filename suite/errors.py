"""One exception type for everything a user can fix, always with the next step."""
from __future__ import annotations


class SuiteError(Exception):
    """An error the user can act on.

    ``what`` says what went wrong, ``fix`` what to do next. ``detail`` carries
    evidence (failing compiler lines, the hunk that did not apply, dmesg) and is
    printed after the two.
    """

    def __init__(self, what: str, fix: str = "", detail: str = "") -> None:
        self.what = what
        self.fix = fix
        self.detail = detail
        super().__init__(self.__str__())

    def __str__(self) -> str:
        parts = [self.what]
        if self.fix:
            parts.append(f"  -> {self.fix}")
        if self.detail:
            parts.append(self.detail.rstrip())
        return "\n".join(parts)


class SourceError(SuiteError):
    """A git source (URL, ref, local dir) could not be used."""


class SourceUnreachable(SourceError):
    """The source's URL did not answer (no network, no mirror): the one build
    failure that says nothing about the build. ``url`` names it."""

    def __init__(self, url: str, what: str, fix: str = "", detail: str = "") -> None:
        self.url = url
        super().__init__(what, fix, detail)


class SeriesError(SuiteError):
    """A patch series is unknown, malformed, or does not apply."""


class BuildError(SuiteError):
    """configure or make failed, or the build cache is unusable."""


class KernelError(SuiteError):
    """A kernel profile is missing, incomplete, or cannot be installed."""


class VMError(SuiteError):
    """A guest could not be booted, reached, or controlled."""


class BootTimeout(VMError):
    """The guest did not answer in time, with no crash seen: a host too busy, most often."""


class BootStorm(BootTimeout):
    """The guest kernel drowned in its own reports while booting, before any module (the
    debug profile's early-boot KASAN storm under TCG): the kernel's fault, not the build's."""


class GuestError(SuiteError):
    """A command in the guest failed or overran its deadline."""


class HarnessStepError(SuiteError):
    """A step of the harness's own (not the case's) failed or hung the guest:
    infrastructure, never a finding about the build."""


class KernelTripped(GuestError):
    """The guest kernel reported a dead thread (a failed VERIFY, an oops) while a
    command waited: it will not finish, so the wait ends now, not at its deadline."""

    row = ""            # the engine trial (condition) in flight, when the command was the engine
