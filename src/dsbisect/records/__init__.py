"""What a run and a bisection leave behind, typed, with their JSON form: ``RunRecord``, the inputs
that decide reuse (and the start-up hook's record of what a run used, read back), a bisection's
request and result, the revert proof; what a nightly makes of an answer (``finding``) and what a
forge needs of it (``forge``: the culprit's pull request, the regression's stable key).

Imports: core, search, verdict.
"""
