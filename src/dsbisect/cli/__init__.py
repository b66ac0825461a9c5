"""The command line: parse, call one domain function, print, map errors to exit codes.

Imports: everything below it.
"""

from dsbisect.cli.commands import app, main

__all__ = ["app", "main"]
