"""What a run and a bisection leave behind, typed, with their JSON form: ``RunRecord``, the inputs
that decide reuse, a bisection's request and result, the revert proof.

Imports: core, search, verdict.
"""
