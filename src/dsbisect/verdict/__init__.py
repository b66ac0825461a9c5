"""A run judged, in one place: its raw ending -> an ``Outcome`` -> a bisection's ``Verdict``, the
regression's identity (is this the same failure?) and a hang's typed signature. No I/O.

Imports: core, search.
"""
