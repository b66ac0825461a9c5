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


class EnvBuildError(DsbisectError):
    """A point's virtual environment could not be built. Runs record it as SKIP."""


class EndsError(DsbisectError):
    """The ends of a bisection do not behave as declared: nothing to bisect."""


class Interrupted(DsbisectError):
    """Ctrl-C: the child process group has been stopped."""

    exit_code = 130
