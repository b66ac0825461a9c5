"""A rank's ``peak_rss`` is its own (``_hook/dsbisect_measure.py``), whatever started it.

On Linux ``getrusage``'s ``ru_maxrss`` of a process started through ``vfork``/``posix_spawn``
(Python's ``subprocess.Popen``: how torchrun and the guard start their children) or ``fork``
then ``exec`` begins at the peak its parent had reached: every rank under a launcher that
imported torch would read at least the launcher's peak.  Real processes: a parent that held
600 MiB (and let it go, or holds it) starts a child that holds 64 MiB; the child's measured peak is its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HOOK = Path(__file__).parents[2] / "src" / "dsbisect" / "_hook"
MiB = 1 << 20

CHILD = """\
import sys
sys.path.insert(0, sys.argv[1])
import dsbisect_measure
dsbisect_measure.start(sys.argv[2], "0")
held = bytearray(64 << 20)
held[::4096] = b"x" * len(held[::4096])
"""

PARENT = """\
import subprocess, sys
big = bytearray(600 << 20)
big[::4096] = b"x" * len(big[::4096])
kw = {}
if sys.argv[1] == "fork":  # a preexec_fn makes Popen fork (the child's copy holds what the parent holds)
    kw["preexec_fn"] = lambda: None
else:  # vfork: gone before the start, but the parent's peak stays at 600 MiB and more
    del big
sys.exit(subprocess.run([sys.executable, "-c", sys.argv[2], sys.argv[3], sys.argv[4]], **kw).returncode)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the inherited peak is Linux's")
@pytest.mark.parametrize("how", ["vfork", "fork"])
def test_a_rank_reads_its_own_peak_not_its_launchers(tmp_path, how):
    subprocess.run([sys.executable, "-c", PARENT, how, CHILD, str(HOOK), str(tmp_path)], check=True, timeout=300)
    (written,) = (tmp_path / "measured").glob("rank0.pid*.json")
    peak = json.loads(written.read_text())["peak_rss"]
    assert 64 * MiB <= peak < 400 * MiB, peak / MiB
