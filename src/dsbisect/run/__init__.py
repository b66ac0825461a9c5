"""One point of one case: the matrix, the runner (venv, import check, launch, verdict, record),
reuse of recorded runs, memory and slots, and the executors (local, Slurm, multi-node); the
settings every command that runs points shares and the session they open, a sweep (``dsbisect
run``), and the upkeep of stores and venvs.

Imports: core ... envs.
"""
