"""Pure searches over a list: the first bad point (k-ary steps, look-ahead), the probabilistic
bisection behind ``--confidence`` and what it says of its answer, the level-1 search over
the changes between two environments, and the search for where a noisy number got worse. No I/O: a probe passed in does every run.

Imports: core.
"""
