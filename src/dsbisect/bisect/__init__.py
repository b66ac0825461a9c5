"""Release and commit bisection over points run by ``run``; manual marks, a bisection's log and
its replay.

Imports: core ... run.
"""
