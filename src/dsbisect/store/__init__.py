"""The store: one folder per run, the SQLite index of them (all SQL is here), claims on points,
and repair from the run folders.

Imports: core, search, verdict, records.
"""
