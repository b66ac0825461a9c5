"""The ranks get one ninja, dsbisect's own, whatever the caller's PATH (issue 23 item 4)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dsbisect.envs import toolchain

# What a rank sees: the ninja torch's cpp_extension would run (the first on PATH).
SEE = """\
import json, os, shutil
found = shutil.which("ninja")
with open(os.environ["DSB_SEEN"], "a") as f:
    f.write(json.dumps({"ninja": os.path.realpath(found) if found else None}) + "\\n")
"""


def _fake_ninja(folder: Path) -> Path:
    folder.mkdir()
    fake = folder / "ninja"
    fake.write_text("#!/bin/sh\necho 1.0.0-fake\n")
    fake.chmod(0o755)
    return folder


def test_the_tools_folder_holds_only_dsbisects_ninja(tmp_path):
    own = toolchain.own_ninja()
    if own is None:
        pytest.skip("dsbisect's environment has no ninja")
    folder = toolchain.ninja_dir(tmp_path)
    assert [p.name for p in folder.iterdir()] == ["ninja"]  # no python, no pip of dsbisect's venv
    assert (folder / "ninja").resolve() == own and toolchain.ninja_dir(tmp_path) == folder  # made once
    env = toolchain.first_on_path({"PATH": "/usr/bin"}, folder)
    assert env["PATH"] == f"{folder}{os.pathsep}/usr/bin"
    assert toolchain.first_on_path({"PATH": "/usr/bin"}, None) == {"PATH": "/usr/bin"}


@pytest.mark.slow
def test_two_runs_with_different_caller_paths_see_the_same_ninja(tmp_path, cli, cache_dir, wheelhouse, monkeypatch):
    own = toolchain.own_ninja()
    if own is None:
        pytest.skip("dsbisect's environment has no ninja")
    (tmp_path / "see.py").write_text(SEE)
    seen = tmp_path / "seen.jsonl"
    monkeypatch.setenv("DSB_SEEN", str(seen))
    args = ["run", "--versions", "dsb-toy=1.0.0", "--accelerator", "cpu", "--offline", "--find-links", str(wheelhouse),
            "--cache-dir", str(cache_dir), "--nproc", "1", "-q", "--rerun", "--", "python", "see.py"]
    system = os.pathsep.join(["/usr/bin", "/bin"])  # as `.venv/bin/dsbisect` from a plain shell
    fake = _fake_ninja(tmp_path / "other")  # as another venv, activated, with its own ninja
    for path in (system, f"{fake}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{system}"):
        monkeypatch.setenv("PATH", path)
        res = cli(*args, cwd=tmp_path)
        assert res.exit_code == 0, res.output
    runs = [json.loads(ln) for ln in seen.read_text().splitlines()]
    assert len(runs) == 2 and {r["ninja"] for r in runs} == {str(own)}, runs
