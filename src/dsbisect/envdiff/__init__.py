"""Two environments -> the changes between them -> the culprit change(s) -> their release and
commit: readers of freezes, lock files and venvs, the plan of a trial, and the engine that
drives ``bisect``'s searches; ``bisect``'s one entry (two environments, or releases).

Imports: core ... bisect.
"""
