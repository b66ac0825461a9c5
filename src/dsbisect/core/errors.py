"""The errors a user can cause or meet, each with the exit code the CLI returns.

Bugs keep their traceback: only these are turned into one red line.
"""

from __future__ import annotations


class DsbisectError(Exception):
    """A failure that the user can act on. ``exit_code`` is what the CLI returns."""

    exit_code = 1


class InputError(DsbisectError):
    """Bad input: a malformed matrix, an unknown case, package or version, a missing script."""

    exit_code = 2


class MatrixError(InputError):
    """matrix.yaml does not parse or does not validate."""


class RangeError(InputError):
    """The version range of a bisection is malformed (good >= bad, not on the index...)."""


class ExternalFailure(DsbisectError):
    """Something outside dsbisect that it relies on failed: a package index it cannot reach, git
    in a clone, sbatch.  The input was fine, so this is exit 1, not 2; the message says what failed."""


class EnvBuildError(DsbisectError):
    """A point's virtual environment could not be built. Runs record it as SKIP."""


class StoreError(DsbisectError):
    """The store cannot be used as it is (damaged, locked, not writable); the message says what to do."""


class Interrupted(DsbisectError):
    """A signal (Ctrl-C, SIGTERM, SIGHUP) stopped dsbisect after its runs' processes were stopped.
    The exit code is 128 + the signal's number (130 for Ctrl-C), as a shell reports it."""

    exit_code = 130

    def __init__(self, message: str, signum: int = 2):
        super().__init__(message)
        self.exit_code = 128 + signum


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread like Ctrl-C so that every cleanup runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def signal_of(e: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: SIGTERM/SIGHUP for Stopped, else SIGINT."""
    return getattr(e, "signum", 2)


class DiskFull(DsbisectError):
    """A disk dsbisect writes to (store, cache, run folder) is full; the message names it."""
