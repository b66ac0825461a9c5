"""The command line: parse, call one domain function, print, map errors to exit codes.

``app`` (the Typer app, ``main``, the one mapping of errors to exit codes), ``options`` and
``groups`` (options declared once, gathered into frozen groups), ``output`` (stdout, stderr, the
report formats); then one module per command family, each registering its commands on ``app``
when imported here, in the order ``--help`` lists them.

Imports: everything below it.
"""

from dsbisect.cli.app import app, main
from dsbisect.cli import run, report, bisect, workaround, marks, diff, prefetch, upkeep  # noqa: F401 - registers the commands

__all__ = ["app", "main"]
