"""A run judged, in one place: its raw ending -> an ``Outcome`` -> a bisection's ``Verdict``, the
regression's identity (is this the same failure?), a hang's typed signature, and a regression as
a number: the readings in a run's text and the rule that judges samples of them; a run the
machine broke (``machine``: a failed CUDA initialisation). No I/O.

Imports: core, search.
"""
