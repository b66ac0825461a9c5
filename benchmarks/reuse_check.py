"""What deciding reuse costs (issue 35), and what recording a run's inputs costs its ranks (issue 36).

    .venv/bin/python benchmarks/reuse_check.py            # N = 1, 5, 20 recorded runs of one point
    .venv/bin/python benchmarks/reuse_check.py --runs 1,10

1. decision   one point of a 1-rank toy case (its script reads a data file, imports numpy and a
              local module) with N recorded runs: the seconds ``Runner.reusable`` takes, made
              once per point (``Reuse.present`` once, each record compared), against the same
              with "what would run now" made per recorded run (as before issue 35)
2. hook       a point venv's python importing torch (``torch._dynamo``, as a rank does) and
              reading 2000 small files, with the start-up hook's record off
              (``DSBISECT_TRACK_IMPORTS=0``) and on: median wall seconds of 3

Figures are printed, never asserted; each line says the load average (1 min) when it was taken.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import toypkg  # noqa: E402
from conftest import invoke_cli, offline  # noqa: E402

from dsbisect.run import runner as runner_module  # noqa: E402
from dsbisect.run.reuse import stale  # noqa: E402

SCRIPT = """\
import numpy, helper
ok = open(DATA).read().strip() == "ok"
raise SystemExit(0 if ok else 1)
"""


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def _project(tmp: Path, house: Path) -> Path:
    folder = tmp / "project"
    folder.mkdir()
    (tmp / "data.txt").write_text("ok\n")
    (folder / "helper.py").write_text("A = 1\n")
    (folder / "x.py").write_text(f"DATA = {str(tmp / 'data.txt')!r}\n{SCRIPT}")
    (folder / "matrix.yaml").write_text("""\
defaults: {accelerator: cpu, nproc: 1, timeout: 120, launcher: direct}
cases:
  x: {script: x.py, axes: {dsb-bench-reuse: ["1.0.0"]}}
""")
    return folder


def _timed_reusable(per_record: bool) -> list[float]:
    """Wrap ``Runner.reusable`` to time it, warm (the base inspected and the store's key read
    by a first, untimed call), 5 times (``per_record``: what would run now made per record)."""
    times: list[float] = []
    real = runner_module.Runner.reusable

    def once(self, case, point):
        if not per_record:
            return real(self, case, point)
        done = self.store.done_runs(case.key, point.key)
        return [r for r in done if not stale(r, self.reuse.present(case, point, [r], self._where(case)))], ""

    def timed(self, case, point):
        out = once(self, case, point)
        for _ in range(5):
            t0 = time.perf_counter()
            once(self, case, point)
            times.append(time.perf_counter() - t0)
        return out

    runner_module.Runner.reusable = timed
    return times


def decision(counts: list[int]) -> None:
    for n in counts:
        with tempfile.TemporaryDirectory() as t:
            tmp = Path(t)
            house = toypkg.build_wheelhouse(tmp / "wheels", {"1.0.0": "ok"}, dist="dsb-bench-reuse")
            folder = _project(tmp, house)
            args = ("run", "matrix.yaml", *offline(house, tmp / "cache"), "-q", "--repeat", str(n))
            assert invoke_cli(*args, cwd=folder).exit_code == 0
            real = runner_module.Runner.reusable
            try:
                for per_record in (False, True):
                    times = _timed_reusable(per_record)
                    assert invoke_cli(*args, cwd=folder).exit_code == 0
                    runner_module.Runner.reusable = real
                    how = "per recorded run (before)" if per_record else "once per point"
                    print(f"decision  {n:3d} recorded runs, made {how:26s} {statistics.median(times) * 1000:7.1f} ms"
                          f"  ({_load()})")
            finally:
                runner_module.Runner.reusable = real


HOOKED = """\
import os, sys, time
t0 = time.perf_counter()
import torch, torch._dynamo
for i in range(2000):
    open(os.path.join(sys.argv[1], f"{i}.txt")).read()
print(time.perf_counter() - t0)
"""


def hook() -> None:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        hook_dir, run_dir, files = tmp / "hook", tmp / "run", tmp / "files"
        for d in (hook_dir, run_dir, files):
            d.mkdir()
        for name in ("dsbisect_hook.py", "dsbisect_trace.py"):
            (hook_dir / name).write_text((ROOT / "src/dsbisect/_hook" / name).read_text())
        (hook_dir / "sitecustomize.py").write_text("import dsbisect_hook\n")
        for i in range(2000):
            (files / f"{i}.txt").write_text(str(i))
        (tmp / "x.py").write_text(HOOKED)
        for track in ("0", "1"):
            env = {**os.environ, "PYTHONPATH": str(hook_dir), "DSBISECT_RUN_DIR": str(run_dir),
                   "DSBISECT_TRACK_IMPORTS": track}
            took = [float(subprocess.run([sys.executable, str(tmp / "x.py"), str(files)], env=env, check=True,
                                         capture_output=True, text=True).stdout) for _ in range(3)]
            print(f"hook      record {'on ' if track == '1' else 'off'}: import torch + read 2000 files "
                  f"{statistics.median(took):6.2f} s  ({_load()})")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", default="1,5,20", help="recorded runs of the point, comma-separated")
    p.add_argument("--only", default="decision,hook")
    a = p.parse_args()
    if "decision" in a.only:
        decision([int(n) for n in a.runs.split(",")])
    if "hook" in a.only:
        hook()


if __name__ == "__main__":
    main()
