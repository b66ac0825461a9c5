"""The conditions a run is measured under, read from nvidia-smi (issue 38): the current clocks
are kept but never compared (they follow idleness); the clock settings and the power limit are
read for the comparison.  nvidia-smi is a script on PATH that answers as one on an H200 does
(its CSV as ``--format=csv,noheader,nounits`` prints it)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from dsbisect.envs.conditions import at_start, gpu_states
from dsbisect.records.conditions import Gpu, differences


def _smi(folder: Path, sm: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(f"""#!/bin/sh
case "$1" in
  --query-gpu=*) echo "0, GPU-aaaa, NVIDIA H200, {sm}, 3201, 1980, 1980, 3201, 700.00"
                 echo "1, GPU-bbbb, NVIDIA H200, 1980, 3201, 1980, [N/A], [N/A], [Not Supported]";;
  --query-compute-apps=*) echo "GPU-bbbb, 4242";;
esac
""")
    path.chmod(0o755)


def test_gpu_settings_are_read_and_an_idle_clock_is_not_a_difference(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path / 'idle'}{os.pathsep}{os.environ['PATH']}")
    _smi(tmp_path / "idle", 345)
    idle = gpu_states(None)
    assert idle == (Gpu("NVIDIA H200", 345.0, 3201.0, 1980.0, 0, 1980.0, 3201.0, 700.0),
                    Gpu("NVIDIA H200", 1980.0, 3201.0, 1980.0, 1))
    assert gpu_states([1]) == idle[1:]
    before = at_start("cuda", {"OMP_NUM_THREADS": "1"}, [0])
    _smi(tmp_path / "idle", 1980)  # the same GPU just after a run: busy clocks, same settings
    after = at_start("cuda", {"OMP_NUM_THREADS": "1"}, [0])
    assert before.gpus[0].sm_clock == 345.0 and after.gpus[0].sm_clock == 1980.0
    steady = replace(after, load_start=before.load_start)  # the load is another test's
    assert differences(before, steady) == []
