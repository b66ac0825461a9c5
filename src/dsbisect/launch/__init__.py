"""One launch: the line per launcher, the supervised process tree (guard, watch, early-proof
rounds, teardown) and the processes found by their tag.

Imports: core ... forensics.
"""
