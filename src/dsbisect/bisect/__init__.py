"""Release and commit bisection over points run by ``run`` (``probe`` tests the points of any
search, ``points`` makes a release bisection's); manual marks, a bisection's log and its replay;
the requests of ``bisect``, ``mark``, ``log`` and ``replay``, checked, and their runs.

Imports: core ... run.
"""
