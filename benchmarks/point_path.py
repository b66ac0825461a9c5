"""The modules one point's run passes through (issue 35), and how often it comes back to one.

    .venv/bin/python benchmarks/point_path.py            # a 1-rank toy point, traced
    .venv/bin/python benchmarks/point_path.py --show     # with the path itself

A 1-rank case of the toy package (tests/toypkg.py) at dsb-toy 1.0.0 is run once to build its
venv, then once more into a fresh store under ``sys.setprofile`` / ``threading.setprofile``:
``Runner.runs(case, point)``, the call a bisection's probe makes.  A *step* is a call made from
the modules that carry a point's run (``ORCHESTRATORS``: those present of run.runner,
run.local, run.launched) into another dsbisect module, leaving out the value packages (core,
records), property getters (attribute reads) and what dataclasses and comprehensions generate.
The path is the callee modules of the steps in order, repeats in a row counted once; *modules*
is how many differ, *returns* how many times the path comes back to a module it has left
(visits - modules).  The same figures are given by package.

Figures are printed, never asserted.  The numbers depend on the code, not on the machine; the
load average is printed all the same, as in the other benchmarks.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import pkgutil
import shutil
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import toypkg  # noqa: E402

import dsbisect  # noqa: E402
from dsbisect.core.model import IndexOptions, Point  # noqa: E402
from dsbisect.envs.venvs import EnvManager  # noqa: E402
from dsbisect.run.matrix import script_case  # noqa: E402
from dsbisect.run.runner import Runner  # noqa: E402
from dsbisect.store.store import Store  # noqa: E402

ORCHESTRATORS = ("dsbisect.run.runner", "dsbisect.run.local", "dsbisect.run.launched")
VALUES = {"core", "records"}


def trace_one_point(work: Path) -> list[tuple[str, str, str, str, int]]:
    """(callee module, function, caller module, file, first line) of every call into a dsbisect
    module while one toy point runs (its venv built beforehand)."""
    os.environ["UV_CACHE_DIR"] = str(work / "cache" / "uv")
    house = toypkg.build_wheelhouse(work / "wheelhouse", {"1.0.0": "ok"})
    script = work / "one.py"
    script.write_text("import dsb_toy\nprint('rank ran', dsb_toy.__name__)\n")
    case = replace(script_case(script, 1), name="one", timeout=120, env=(("OMP_NUM_THREADS", "1"),))
    point = Point((("dsb-toy", "1.0.0"),))

    def runner(store: str) -> Runner:
        envs = EnvManager(work / "cache", index=IndexOptions(offline=True, find_links=(str(house),)))
        return Runner(store=Store(work / store), envs=envs, progress=lambda kind, text: None)

    runner("warm").runs(case, point)
    events: list[tuple[str, str, str, str, int]] = []

    def profile(frame, event, arg):
        name = frame.f_globals.get("__name__", "")
        if event == "call" and name.startswith("dsbisect."):
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
            events.append((name, frame.f_code.co_name, caller, frame.f_code.co_filename, frame.f_code.co_firstlineno))

    traced = runner("traced")
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        outcome = traced.runs(case, point)[0].outcome
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    print(f"the traced point: {outcome.value}, {len(events)} calls into dsbisect modules", file=sys.stderr)
    return events


def property_getters() -> set[tuple[str, int]]:
    """(file, first line) of every property (and cached property) getter of dsbisect's classes."""
    found = set()
    for info in pkgutil.walk_packages(dsbisect.__path__, "dsbisect."):
        if "_hook" in info.name or info.name.endswith("__main__"):
            continue
        for _, cls in inspect.getmembers(importlib.import_module(info.name), inspect.isclass):
            for value in vars(cls).values():
                getter = getattr(value, "fget", None) or getattr(value, "func", None)
                if getter is not None and hasattr(getter, "__code__"):
                    found.add((getter.__code__.co_filename, getter.__code__.co_firstlineno))
    return found


def path_of(events, orchestrators: set[str], level) -> list[str]:
    """The steps' callee modules (or packages) in order, repeats in a row once."""
    getters = property_getters()
    out: list[str] = []
    for callee, function, caller, filename, line in events:
        if (caller not in orchestrators or callee == caller or callee.split(".")[1] in VALUES
                or (filename, line) in getters or function.startswith(("<", "__"))):
            continue
        shown = level(callee)
        if not out or out[-1] != shown:
            out.append(shown)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", action="store_true", help="print the path too")
    args = ap.parse_args()
    present = {m for m in ORCHESTRATORS if importlib.util.find_spec(m) is not None}
    work = Path(tempfile.mkdtemp(prefix="dsbisect-point-path-"))
    try:
        events = trace_one_point(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"orchestrating modules: {', '.join(sorted(present))}; load average {os.getloadavg()[0]:.2f}")
    for name, level in (("module", lambda m: m.removeprefix("dsbisect.")), ("package", lambda m: m.split(".")[1])):
        path = path_of(events, present, level)
        print(f"by {name}: {len(set(path))} {name}s, {len(path)} visits, {len(path) - len(set(path))} returns")
        if args.show:
            print("   ", " > ".join(path))


if __name__ == "__main__":
    main()
