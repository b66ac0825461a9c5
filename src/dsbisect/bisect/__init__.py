"""Release and commit bisection over points run by ``run`` (``probe`` tests the points of any
search, ``points`` makes a release bisection's); manual marks, a bisection's log and its replay;
the requests of ``bisect``, ``mark``, ``log`` and ``replay``, checked, and their runs; the search
of a clone's commits alone (``span``, ``commits``, ``commitjob``), its budget (``budget``) and
its culprit as a forge shows it (``culprit``).

Imports: core ... run.
"""
