"""The facts a report gives beside torch/CUDA/NCCL: driver, nvcc, RAM, /dev/shm, GPU topology, CPU.

Gathered once per process through ``proc.run``; a machine without a GPU or a toolkit leaves
those facts out instead of failing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from dsbisect.envs import facts
from dsbisect.core import proc
from dsbisect.records.run import Host, RunFacts


@pytest.fixture
def fresh_facts():
    """The once-per-process caches emptied before and after (a test may fake nvidia-smi)."""
    for f in (facts.machine, facts._smi_gpus, facts.nvcc_version):
        f.cache_clear()
    yield
    for f in (facts.machine, facts._smi_gpus, facts.nvcc_version):
        f.cache_clear()


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_this_machine_ram_shm_and_cpu_and_no_gpu_facts_without_a_gpu(fresh_facts):
    h = facts.host()
    assert h.cpu_model and isinstance(h.cpu_model, str)
    assert h.ram_bytes > 1 << 28
    if Path("/dev/shm").is_dir():
        assert h.shm_bytes == shutil.disk_usage("/dev/shm").total
    if shutil.which("nvidia-smi") is None:
        assert "driver" not in h.keys() and "topology" not in h.keys() and h.gpus == ()
    line = facts.describe_host(h)
    assert f"{h.cpus} CPUs ({h.cpu_model})" in line and "RAM " in line
    assert Host.from_json(json.loads(json.dumps(h.to_json()))) == h  # stored with every run


def test_machine_facts_are_gathered_once_per_process(fresh_facts, monkeypatch):
    calls = []
    real = proc.run
    monkeypatch.setattr(proc, "run", lambda argv, **kw: calls.append(argv) or real(argv, **kw))
    first = facts.host()
    again = facts.host()
    assert first == again and facts.machine.cache_info().hits >= 1
    assert len(calls) <= 2  # at most nvidia-smi's query and its topology, once


def test_driver_and_topology_from_nvidia_smi(fresh_facts, tmp_path, monkeypatch):
    _script(tmp_path / "bin" / "nvidia-smi", """
if [ "$1" = topo ]; then
  printf '\\033[4m\\tGPU0\\tGPU1\\tCPU Affinity\\033[0m\\nGPU0\\t X \\tNV18\\t0-63\\nGPU1\\tNV18\\t X \\t0-63\\n\\nLegend:\\n  X = Self\\n'
else
  echo 'NVIDIA H200, 570.86.15'; echo 'NVIDIA H200, 570.86.15'
fi
""")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    h = facts.host()
    assert h.gpus == ("NVIDIA H200", "NVIDIA H200") and h.driver == "570.86.15"
    assert h.topology == "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-63\nGPU1\tNV18\t X \t0-63"
    assert "2 GPUs (NVIDIA H200), NVIDIA driver 570.86.15, RAM " in facts.describe_host(h)


def test_a_failing_nvidia_smi_is_no_gpu(fresh_facts, tmp_path, monkeypatch):
    _script(tmp_path / "bin" / "nvidia-smi", "echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    h = facts.host()
    assert h.gpus == () and "driver" not in h.keys() and "topology" not in h.keys()


def test_nvcc_of_the_point_venvs_cuda_home(fresh_facts, tmp_path):
    _script(tmp_path / "cuda" / "bin" / "nvcc",
            "echo 'nvcc: NVIDIA (R) Cuda compiler driver'; echo 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    assert facts.nvcc_version(str(tmp_path / "cuda")) == "12.4.131"
    assert facts.nvcc_version(str(tmp_path / "no-toolkit")) == "none"
    assert facts.nvcc_version("") == "none"

    # import_check turns the venv's CUDA_HOME into the nvcc fact; a CPU torch says nothing of nvcc.
    for cuda, home, want in (("12.4", str(tmp_path / "cuda"), "12.4.131"), ("12.4", "", "none"), (None, None, None)):
        out = {"python": "3.12.3", "versions": {"torch": "2.4.0"}, "error": "", "cuda": cuda}
        if home is not None:
            out["cuda_home"] = home
        python = _script(tmp_path / "venv" / "python", f"echo 'DSBISECT-CHECK {json.dumps(out)}'\n")
        check = facts.import_check(python, [], dict(os.environ))
        assert check.ok and "cuda_home" not in check.facts.to_json()
        assert check.facts.nvcc == want
    assert "nvcc 12.4.131" in facts.describe_env(RunFacts.of(python="3.12.3", versions={"torch": "2.4.0"},
                                                             cuda="12.4", nvcc="12.4.131"))


@pytest.mark.slow  # subprocesses that start interpreters: ~1.5-2.5 s (the fast tier's budget)
def test_the_check_code_reads_cuda_home_only_for_a_cuda_torch(fresh_facts, tmp_path):
    check = facts.import_check(Path(sys.executable), ["packaging"], proc.clean_env())
    assert check.ok, check.reason
    if not check.facts.cuda:
        assert "nvcc" not in check.facts.to_json()
    else:
        assert check.facts.nvcc


def test_old_host_records_render_what_they_have():
    old = {"name": "n", "platform": "Linux", "cpus": 8, "gpus": []}
    assert facts.describe_host(Host.from_json(old)) == "host n: Linux, 8 CPUs, 0 GPUs"
    assert facts.size(2 * 1024**4) == "2.0 TiB" and facts.size(64 * 1024) == "64 KiB" and facts.size(None) == "?"


@pytest.mark.slow  # two interpreters that import torch
def test_the_separate_check_and_the_node_check_are_the_hooks_one_check(fresh_facts):
    """The hook runs in the venv's python without dsbisect: the one copy of the check is its
    _venv_facts, whose text both scripts run; their facts agree where they overlap."""
    import ast
    from importlib import resources

    hook = resources.files("dsbisect").joinpath("_hook/dsbisect_hook.py").read_text()
    (fn,) = [n for n in ast.parse(hook).body if isinstance(n, ast.FunctionDef) and n.name == "_venv_facts"]
    source = ast.get_source_segment(hook, fn)
    assert source in facts.check_code() and source in facts.node_check_code()
    check = facts.import_check(Path(sys.executable), ["packaging"], proc.clean_env())
    node = proc.run([sys.executable, "-c", facts.node_check_code()], env=proc.clean_env(), timeout=300)
    (line,) = [ln for ln in node.stdout.splitlines() if ln.startswith("DSBISECT-NODE ")]
    answer = json.loads(line.removeprefix("DSBISECT-NODE "))
    assert check.ok and answer["error"] == ""
    assert answer["torch"] == check.facts.version("torch") and answer["cuda"] == check.facts.cuda
    assert answer["gpus"] == len(check.facts.gpus or ()) and answer["nccl"] == check.facts.nccl
    broken = facts.import_check(Path(sys.executable), ["no-such-dist"], proc.clean_env())
    assert not broken.ok and broken.reason == "no-such-dist is not installed" and broken.facts.versions is not None


def test_the_check_code_is_built_safely_from_many_threads_at_once():
    """Two venvs built at once each make an import check: CPython 3.11.7's parser raised
    SystemError ("AST constructor recursion depth mismatch") when two threads parsed together."""
    import threading

    from dsbisect.envs import facts

    errors, texts = [], []

    def build():
        try:
            for _ in range(3):  # the parses are one at a time (the lock): 160 took 6.7 s of the fast tier
                texts.append(facts._hook_functions(*facts._CHECK_FUNCTIONS))
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(texts)) == 1 and len(texts) == 24
