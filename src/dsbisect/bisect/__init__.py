"""Release and commit bisection over points run by ``run`` (``probe`` tests the points of any
search, ``points`` makes a release bisection's); manual marks, a bisection's log and its replay.

Imports: core ... run.
"""
