"""What a run and a bisection leave behind, typed, with their JSON form: ``RunRecord`` (with its
host and files), the inputs that decide reuse (and the start-up hook's record of what a run
used, read back), a bisection's request, result and record (``AskedFor``, ``BisectionRecord``),
the revert proof; the one door for older shapes (``migrate``: every record is read through
it, so no reader branches on a past shape); what a nightly makes of an answer (``finding``) and
what a forge needs of it (``forge``: the culprit's pull request, the regression's stable key).

Imports: core, search, verdict.
"""
