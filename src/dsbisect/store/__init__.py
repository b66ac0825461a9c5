"""The store: one folder per run, the SQLite index of them (all SQL is here), claims on points
and on running bisections, repair from the run folders, which dsbisect wrote it (a newer one's
store is refused), and the sizes it reads and writes.  ``store.Store`` opens a folder and
composes the rest: ``access`` (the folder), ``index`` (the connection), ``schema``, ``values``
(a run's columns and record), ``reading``, ``writing``, ``bisections``, ``reindex``.

Imports: core, search, verdict, records.
"""
