"""The time a search has left (core.eta): figured from rounds like the ones to come."""

from __future__ import annotations

from dsbisect.core import eta


def test_the_first_estimate_leaves_out_what_only_the_ends_cost():
    """The ends' round built two venvs and cached the base's bytecode (48 s of wall time) around
    runs of 12 s: three steps left are about 40 s, not 2.4 min; once a later round ran, its wall
    time (a look-ahead built its venv meanwhile) is the pace."""
    assert eta.about(eta.time_left(eta.pace([], [12.0, 12.0]), 3)) == "about 40 s"
    assert eta.about(eta.time_left(eta.pace([14.0], [12.0, 12.0]), 3)) == "about 40 s"
    assert eta.about(eta.time_left(eta.pace([48.0, 48.0][2:], [12.0]), 3)) != "about 2 min"
    assert eta.pace([], []) == [] and eta.time_left(eta.pace([], []), 3) is None
