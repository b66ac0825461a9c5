"""Release and commit bisection over points run by ``run``; manual marks, a bisection's log and
its replay; the requests of ``bisect``, ``mark``, ``log`` and ``replay``, checked, and their runs.

Imports: core ... run.
"""
