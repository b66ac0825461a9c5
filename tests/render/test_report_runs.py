"""report and show on real recorded runs: nothing recorded is hidden, a crash reads as a crash.

One failing script run as `python fail.py` at two releases and under torchrun at one, then
bisected (reusing the recorded runs): `report` shows both variants of the case and every run,
in the table, in JSON and under `--case`, with the bisection's verdict; its Markdown carries the
failing rank's traceback; `show` into a pipe keeps every line whole and prints the command.
One rank each (the launcher's own logs are not what is tested; torchrun is the variant).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import toypkg
from conftest import cli_json, offline

pytestmark = pytest.mark.slow

FAIL = """\
import torch.distributed as dist
import dsb_toy

dist.init_process_group("gloo")
dsb_toy.step(dist)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("report-runs-wheels"), {"2.0.0": "ok", "2.1.0": "raise"},
                                   dist="dsb-toy")


def test_every_recorded_run_and_bisection_is_in_report_and_a_crash_has_its_traceback(cli, tmp_path, house, cache_dir):
    (tmp_path / "fail.py").write_text(FAIL)
    opts = ("--accelerator", "cpu", "--nproc", "1", "--collective-timeout", "5", *offline(house, cache_dir))
    direct, _ = cli_json(cli, "run", "--versions", "dsb-toy=2.0.0,2.1.0", *opts, "--", "python", "fail.py",
                         cwd=tmp_path)
    assert [r["outcome"] for r in direct["runs"]] == ["pass", "fail"]
    assert direct["runs"][0]["environment"]["command"] == ["python", "fail.py"]  # the line as given
    launched, _ = cli_json(cli, "run", "--versions", "dsb-toy=2.1.0", *opts, "--",
                           "torchrun", "--nproc-per-node", "1", "fail.py", cwd=tmp_path)
    bisected, _ = cli_json(cli, "bisect", "dsb-toy", "2.0.0", "2.1.0", *opts, "--", "python", "fail.py", cwd=tmp_path)
    assert bisected["verdict"] == "found"
    ids = sorted(r["id"] for r in direct["runs"] + launched["runs"])

    for args in ((), ("--case", "fail")):
        report, _ = cli_json(cli, "report", *args, cwd=tmp_path)
        assert sorted(r["id"] for r in report["runs"]) == ids  # the latest command's runs alone, before
        assert report["cases"] == ["fail [python fail.py]", "fail [torchrun]"]
        assert [(b["verdict"], b["run_ids"]) for b in report["bisections"]] == [("found", [r["id"] for r in direct["runs"]])]

    table = cli("report", cwd=tmp_path)
    assert "fail [python fail.py]" in table.stdout and "fail [torchrun]" in table.stdout
    assert "— found" in table.stdout and "first bad release: dsb-toy 2.1.0" in table.stdout
    md = cli("report", "--format", "markdown", cwd=tmp_path).stdout
    assert "**Bisections**" in md and "<summary>Traceback of run" in md and "rank 0 raised first" in md
    assert 'raise ValueError("dsb_toy: the loss went NaN")' in md  # the frame's source line, in the block

    # run's own report: a title that runs it again, and how to reproduce it (the runs reused)
    again = cli("run", "--versions", "dsb-toy=2.1.0", *opts, "--", "torchrun", "--nproc-per-node", "1", "fail.py",
                cwd=tmp_path)
    assert "dsbisect run --versions dsb-toy=2.1.0 --collective-timeout 5 --accelerator cpu -- torchrun " \
           "--nproc-per-node 1 fail.py" in again.stdout.splitlines()[0]  # the timeout is part of the case
    assert "Reproduce with:" in again.stdout and f"#{launched['runs'][0]['id']}" in again.stdout

    failed = direct["runs"][1]["id"]
    piped = subprocess.run([sys.executable, "-m", "dsbisect", "show", str(failed)], cwd=tmp_path, capture_output=True,
                           text=True, env=os.environ | {"COLUMNS": "80"}, timeout=120)  # into a pipe, 80 columns
    shown = piped.stdout
    lines = shown.splitlines()
    assert "  command     python fail.py" in lines
    frame = next(ln for ln in lines if "dsb_toy/__init__.py" in ln and ln.startswith("  File "))
    assert len(frame) > 80 and frame.endswith(", in step")  # whole: the line number and function at its end
    assert any(ln.startswith("── traceback: rank 0 raised first") for ln in lines)
    assert "last stack seen" not in shown
