"""Values and doors every package shares: the model (frozen dataclasses and enums), a metric's
spec and readings, a user's command line, errors with their exit codes, redaction of secrets,
text from outside made inert, the one subprocess seam, files read within limits, where a command
may write a file it was asked to (never into a store, never over an input), a full disk said in
one line, durations, the run folder's layout and the shims for old releases.

Imports: nothing else of dsbisect.
"""
