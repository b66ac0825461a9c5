"""One point of one case: the matrix, the runner (venv, import check, launch, verdict, record),
reuse of recorded runs, memory and slots, and the executors (local, Slurm, multi-node).

Imports: core ... envs.
"""
