"""The quiet snapshot (taken when a run's output first goes quiet, of a job that may be fine and
is often still importing) never signals a rank for a faulthandler dump: dumping every thread of a
rank that is starting threads crashed one with SIGSEGV during 'import torch' (seen once in the
full suite). Stacks taken when a run is judged a hang still are."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from conftest import wait_until
from dsbisect.forensics.evidence import STACK_SIGNAL, Capture
from dsbisect.core.rundir import RunDir

pytestmark = pytest.mark.slow  # a real process


def test_the_quiet_snapshot_sends_no_stack_signal_and_a_hang_snapshot_does(tmp_path, monkeypatch):
    got = tmp_path / "got"
    code = ("import signal, sys, time\n"
            f"signal.signal(signal.{STACK_SIGNAL}, lambda *a: open({str(got)!r}, 'a').write('x'))\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, RANK="0"), stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        run = RunDir(tmp_path / "run")
        run.stacks.mkdir(parents=True)
        run.faulthandler(0, child.pid).write_text("")  # what the start-up hook leaves when it registers
        monkeypatch.setenv("DSBISECT_PYSPY", "/bin/false")  # py-spy refused: faulthandler is all there is
        capture = Capture(run)
        capture([psutil.Process(child.pid)], "quiet")
        time.sleep(0.5)
        assert not got.exists()
        assert any("no faulthandler signal" in n for n in capture.notes), capture.notes
        capture([psutil.Process(child.pid)], "watchdog")
        wait_until(got.exists, 60, "the hang-time snapshot's signal")
    finally:
        child.kill()
        child.wait()
