"""gmpmon's error hierarchy. Every failure a user can cause or meet ends in one of these.

The CLI catches :class:`GmpmonError`, prints ``gmpmon: <message>`` as one line on stderr and
exits with the class's ``exit_code``. Exit codes are documented in docs/exit-codes.md; keep
the two in step.
"""

from __future__ import annotations


class GmpmonError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        msg = str(self).replace("\n", " ")
        return f"{msg} ({self.hint})" if self.hint else msg


class UsageError(GmpmonError):
    """Bad command-line arguments or an output path that cannot be written."""

    exit_code = 2


class TargetError(GmpmonError):
    """No such process, or it went away."""

    exit_code = 3


class NotGoError(GmpmonError):
    """The target is not a Go program (no .go.buildinfo / pclntab)."""

    exit_code = 4


class UnsupportedError(GmpmonError):
    """A Go program gmpmon cannot probe: Go version, architecture, missing runtime symbols."""

    exit_code = 5


class BinaryFormatError(GmpmonError):
    """A file that claims to be an ELF / Go binary but is malformed (truncated, corrupt)."""

    exit_code = 6


class PermissionDenied(GmpmonError):
    """Not root / missing CAP_BPF+CAP_PERFMON, or the target's memory cannot be read."""

    exit_code = 7


class KernelSupportError(GmpmonError):
    """BPF, uprobes, tracefs, ring buffers or kernel headers are missing."""

    exit_code = 8


class RecordingError(GmpmonError):
    """A recording that is not one, or is corrupt beyond its first batch."""

    exit_code = 9


class CaptureError(GmpmonError):
    """Attaching or running the probes failed for another reason."""

    exit_code = 10


# Finer kinds of the errors above, each with its own exit code so that scripts can tell them
# apart; being subclasses, an ``except`` of the broader kind still catches them.


class KernelHeadersError(KernelSupportError):
    """BCC found no usable kernel headers to compile the probes against."""

    exit_code = 11


class MissingSymbolsError(UnsupportedError):
    """A Go program without the runtime functions gmpmon probes (inlined away, stripped)."""

    exit_code = 12


class OutputPathError(UsageError):
    """An output file (--record, --summary-json, -o, ...) that cannot be written safely."""

    exit_code = 13



class TargetMemoryError(GmpmonError):
    """A read of the target's memory refused: an address outside user space, a length over
    its cap, or a runtime value (a count, a length) outside its plausible range. The target's
    memory is not trusted; this is what a damaged or hostile target gets."""

    exit_code = 14
