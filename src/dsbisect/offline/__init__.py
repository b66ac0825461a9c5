"""Wheelhouses for machines with no network (``dsbisect prefetch``).

Imports: core ... envdiff.
"""
