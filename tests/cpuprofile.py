"""An opt-in pytest plugin: each test's wall time and CPU time, its own and its children's.

    PYTHONPATH=tests DSBISECT_TEST_PROFILE=prof.jsonl .venv/bin/python -m pytest -p cpuprofile

writes one JSON line per test (setup, call and teardown together): ``id``, ``wall``,
``self_cpu`` (this process: the in-process CLI), ``child_cpu`` (the processes it started and
reaped: launchers, ranks, uv, subprocess CLIs; not what Slurm or an sshd ran), ``load0`` and
``load1`` (the 1-minute load average before and after), ``worker`` (pytest-xdist's, or ""),
``kind`` (``slow`` or ``fast``),
``start`` (its monotonic start, to lay the workers' lanes side by side).
CPU seconds carry over between machines and loads; wall seconds only say the load beside them.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

OUT = os.environ.get("DSBISECT_TEST_PROFILE", "test-profile.jsonl")


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    wall, (own, children), load = time.monotonic(), _cpu(), os.getloadavg()[0]
    yield
    own2, children2 = _cpu()
    record = {"id": item.nodeid, "wall": round(time.monotonic() - wall, 2), "self_cpu": round(own2 - own, 2),
              "child_cpu": round(children2 - children, 2), "load0": load, "load1": os.getloadavg()[0],
              "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
              "kind": "slow" if item.get_closest_marker("slow") else "fast",
              "start": round(wall, 2)}
    with open(OUT, "a") as f:
        f.write(json.dumps(record) + "\n")
