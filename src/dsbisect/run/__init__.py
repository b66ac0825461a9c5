"""One point of one case: the matrix, the runner (reuse of recorded runs, slots, look-ahead),
and the executors that make a run: ``executor`` (the interface), ``local`` (venv, import check
``importcheck``, launch line ``launchline``, verdict ``launched``, record; its multi-node ranks
through ``multinode``), ``slurm``; the settings
every command that runs points shares and the session they open, a sweep (``dsbisect run``), and
the upkeep of stores and venvs.

Imports: core ... envs.
"""
