"""dsbisect's benchmarks: every cost a user waits on, each next to its by-hand baseline.

    .venv/bin/python benchmarks/bench.py                 # all five, prints a table
    .venv/bin/python benchmarks/bench.py --only env,hang --out docs/benchmarks.md

1. env          venv per point: cold / warm uv builds, layered and isolated, disk use,
                against `python -m venv` + `pip install` of the same pins from the same wheelhouse
2. launch       `dsbisect run` of one passing case against the bare `deepspeed` launcher
3. hang         seconds from the deadlock to the stored HANG verdict (with stacks), collective
                timeouts of 30 and 60 s, against NCCL's 30-minute default watchdog
4. bisect       a toy bisection over 16 releases: runs used against ceil(log2 16) + 2, wall time
5. concurrency  a matrix of 4 toy points, --jobs 1 against --jobs 2
6. accelerate   the per-point cost against the peers (issue 16): accelerate's removal of
                accelerate.utils.is_tpu_available (good 0.20.3, bad 1.0.0, 27 releases, 1 rank,
                --regress-on fail, answer 0.28.0): dsbisect --jobs 2 / --jobs 1 / as before (the
                launcher chain and a separate import check), a uv loop and a pip loop driven by
                a plain bisection, pypi-version-bisect where it is importable; fresh caches each
                (the uv loop's cache holds torch beforehand); needs the package index
7. early        the early deadlock verdict against the collective timeout: the toy deadlock at a
                300 s collective timeout, and with --no-early-hang at 30 s
8. battery      the false-hang battery of tests/forensics/test_early_hang.py at 45 s (40 s for the checkpoint)
9. lookahead    the 16-release toy bisection with DSBISECT_LOOKAHEAD=0 and on, fresh caches each
10. readme      README command 1 on a fresh clone, as README.md has it (the install part, the
                `dsbisect run` part, what each venv and op build cost; fresh env and pip caches),
                then the warm cpu_smoke points (`--case cpu_smoke --rerun`)

    Every row says the load average (1 min) when it was measured: the machine may be shared.

    --gpu: launch, hang and concurrency on the GPUs of this machine (NCCL between the ranks;
    concurrency with one GPU per point).  The toy venvs then take the deepspeed launcher from a
    wheelhouse given with --find-links (offline machines), pinned by --gpu-pins.

Figures are printed, never asserted.  The toy package comes from the test helpers
(tests/toypkg.py); the env benchmark downloads its pins from the index once.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import toypkg  # noqa: E402

from dsbisect.envs import facts  # noqa: E402
from dsbisect.envs.cache import MARKER, disk_usage  # noqa: E402
from dsbisect.envs.venvs import EnvManager  # noqa: E402
from dsbisect.core.model import BaseMode, EnvOptions, IndexOptions, Point  # noqa: E402

PY = sys.executable
DSBISECT = [PY, "-m", "dsbisect"]
ENV_PINS = ("deepspeed==0.19.8", "transformers==4.46.3", "accelerate==1.1.1")
ENV_PINS_2 = ("deepspeed==0.19.8", "transformers==4.45.2", "accelerate==1.1.1")
rows: list[tuple[str, str, str, str]] = []  # benchmark, measure, dsbisect, baseline / goal
GPU: dict = {}  # set by --gpu: {"pins": [...], "links": [...], "compat": [...]}


def say(*args) -> None:
    print(time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def timed(fn, *a, **kw) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*a, **kw)
    return time.perf_counter() - t0, out


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


# -------------------------------------------------------------------- 1. env


def bench_env(work: Path) -> None:
    say("== env: wheelhouses")
    layered_wh, full_wh = work / "wh-layered", work / "wh-full"
    cache = work / "prefetch-cache"
    matrix = _pins_matrix(work)
    sh([*DSBISECT, "prefetch", str(matrix), "--dest", str(layered_wh), "--cache-dir", str(cache)], check=True)
    full_wh.mkdir(exist_ok=True)
    for w in layered_wh.glob("deepspeed-*.whl"):  # the sdist built once, as a user's wheelhouse would hold it
        shutil.copy2(w, full_wh)
    sh([PY, "-m", "pip", "download", "-q", "-d", str(full_wh), "--find-links", str(full_wh), "torch==2.13.0",
        *ENV_PINS], check=True)
    idx_l = IndexOptions(offline=True, find_links=(str(layered_wh),))
    idx_f = IndexOptions(offline=True, find_links=(str(full_wh),))
    point, point2 = Point(versions=_versions(ENV_PINS)), Point(versions=_versions(ENV_PINS_2))
    iso = Point(versions=_versions(ENV_PINS), pins=("torch==2.13.0",))
    results = {}
    for mode, idx, p in (("layered", idx_l, point), ("isolated", idx_f, iso)):
        root = work / f"root-{mode}"
        os.environ["UV_CACHE_DIR"] = str(root / "uv")  # empty: cold
        mgr = EnvManager(root, EnvOptions(base=BaseMode(mode)), idx)
        cold, env = timed(mgr.ensure, p)
        shutil.rmtree(env.path)
        mgr2 = EnvManager(root, EnvOptions(base=BaseMode(mode)), idx)  # same uv cache, no venv: warm build
        warm, env = timed(mgr2.ensure, p)
        reuse, _ = timed(mgr2.ensure, p)
        results[mode] = (cold, warm, reuse, disk_usage(env.path))
        if mode == "layered":
            before = disk_usage(root)
            extra, _ = timed(mgr2.ensure, point2)
            results["extra"] = (disk_usage(root) - before, extra)
        del os.environ["UV_CACHE_DIR"]
    base_t, base_disk = _baseline_env(work, full_wh)
    lc, lw, lr, ld = results["layered"]
    ic, iw, ir, idisk = results["isolated"]
    rows.append(("env", "layered point, cold uv cache", f"{lc:.1f} s", f"pip: {base_t:.1f} s ({base_t / lc:.0f}x)"))
    rows.append(("env", "layered point, warm uv cache", f"{lw:.2f} s", f"pip: {base_t:.1f} s ({base_t / lw:.0f}x); goal <= 1 s, >= 20x"))
    rows.append(("env", "reuse of a built point", f"{lr * 1000:.0f} ms", "—"))
    rows.append(("env", "isolated point (torch too), cold", f"{ic:.1f} s", f"pip: {base_t:.1f} s ({base_t / ic:.1f}x)"))
    rows.append(("env", "isolated point (torch too), warm", f"{iw:.2f} s", f"pip: {base_t:.1f} s ({base_t / iw:.0f}x)"))
    rows.append(("env", "disk: layered / isolated / pip venv", f"{ld / 1e6:.0f} MB / {idisk / 1e6:.0f} MB",
                 f"{base_disk / 1e6:.0f} MB"))
    grow, t2 = results["extra"]
    rows.append(("env", "disk per extra layered point (other transformers)", f"{grow / 1e6:.0f} MB in {t2:.1f} s",
                 "goal <= 150 MB"))


def _pins_matrix(work: Path) -> Path:
    (work / "s.py").write_text("pass\n")
    m = work / "pins.yaml"
    axes = ", ".join(f'{r.split("==")[0]}: ["{r.split("==")[1]}"]' for r in ENV_PINS)
    axes2 = ", ".join(f'{r.split("==")[0]}: ["{r.split("==")[1]}"]' for r in ENV_PINS_2)
    m.write_text(f"cases:\n  a:\n    script: s.py\n    axes: {{{axes}}}\n  b:\n    script: s.py\n    axes: {{{axes2}}}\n")
    return m


def _versions(pins) -> tuple:
    return tuple(tuple(p.split("==")) for p in pins)


def _baseline_env(work: Path, wheelhouse: Path) -> tuple[float, int]:
    venv = work / "by-hand"
    t0 = time.perf_counter()
    sh([PY, "-m", "venv", str(venv)], check=True)
    sh([str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", str(wheelhouse),
        "torch==2.13.0", *ENV_PINS], check=True)
    return time.perf_counter() - t0, disk_usage(venv)


# ------------------------------------------------------------------ toy helpers


def _toy_project(work: Path, releases: dict[str, str], dist: str, collective: float, nproc: int = 2) -> tuple[Path, Path]:
    house = toypkg.build_wheelhouse(work / f"wh-{dist}", releases, dist=dist)
    proj = work / f"proj-{dist}"
    proj.mkdir(exist_ok=True)
    toypkg.write_repro(proj)
    versions = ", ".join(f'"{v}"' for v in releases)
    accel = "cpu"
    if GPU:
        accel = "cuda"
        accel += f"\n  pins: {json.dumps(GPU['pins'])}\n  compat: {json.dumps(GPU['compat'])}"
    (proj / "matrix.yaml").write_text(
        f"defaults:\n  collective_timeout: {collective}\n  timeout: 600\n  accelerator: {accel}\n  nproc: {nproc}\n"
        f"  env: {{OMP_NUM_THREADS: \"1\"}}\ncases:\n  toy:\n    script: toy_repro.py\n"
        f"    axes:\n      {dist}: [{versions}]\n")
    return proj, house


def _dsb(proj: Path, house: Path, cache: Path, *args: str, limit: float = 400,
         env: dict | None = None) -> subprocess.CompletedProcess:
    """One dsbisect command; past ``limit`` it gets Ctrl-C, so that it stops its runs itself."""
    links = [a for d in GPU.get("links", ()) for a in ("--find-links", d)]
    cmd = [*DSBISECT, *args, "--offline", "--find-links", str(house), *links, "--cache-dir", str(_cache(cache)), "-q"]
    proc = subprocess.Popen(cmd, cwd=proj, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate()
        say(f"dsbisect {' '.join(args)}: stopped after {limit:g} s")
    res = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if res.returncode not in (0, 1):
        say(res.stdout[-2000:], res.stderr[-2000:])
    return res


def _cache(cache: Path) -> Path:
    """The env root a benchmark's dsbisect uses: on GPUs one for all (the deepspeed layer is unpacked once)."""
    return cache.parent / "cache-gpu" if GPU else cache


def _env_of(cache: Path, dist: str) -> Path:
    """The point venv (under the env root of ``cache``) that holds ``dist``."""
    for marker in sorted(_cache(cache).glob(f"envs/*/{MARKER}")):
        if any(r.startswith(f"{dist}==") for r in json.loads(marker.read_text())["spec"]["requirements"]):
            return marker.parent
    raise SystemExit(f"no venv of {dist} under {_cache(cache)}")


def _where() -> str:
    return f"{len(facts.gpus())} GPUs, NCCL" if GPU else "2 CPU ranks"


# ----------------------------------------------------------------- 2. launch


def bench_launch(work: Path) -> None:
    say("== launch overhead")
    ranks = GPU.get("ranks", 2)
    proj, house = _toy_project(work, {"1.0.0": "ok"}, "dsb-bench-launch", 30, nproc=ranks)
    cache = work / "cache-launch"
    _dsb(proj, house, cache, "run", "matrix.yaml")  # builds the venv, caches the import check
    ours, bare = [], []
    env_dir = _env_of(cache, "dsb-bench-launch")
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    if GPU:  # as a user would by hand: the same shims, the GPUs visible
        env = dict({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, OMP_NUM_THREADS="1",
                   DSBISECT_COMPAT=",".join(GPU["compat"]))
    for _ in range(3):
        t, res = timed(_dsb, proj, house, cache, "run", "matrix.yaml", "--rerun")
        if res.returncode != 0:
            raise SystemExit(f"launch benchmark: the toy run did not pass: {res.stdout[-500:]}")
        ours.append(t)
        t, res = timed(sh, [str(env_dir / "bin" / "python"), "-m", "deepspeed.launcher.runner", "--num_gpus", str(ranks),
                            "--master_port", "29641", "toy_repro.py"], cwd=proj, env=env)
        if res.returncode != 0:
            raise SystemExit(f"launch benchmark: the bare launcher failed: {res.stderr[-500:]}")
        bare.append(t)
    o, b = statistics.median(ours), statistics.median(bare)
    rows.append(("launch", f"one passing toy run, {ranks} rank(s), {_where()} (median of 3)", f"{o:.1f} s",
                 f"bare launcher {b:.1f} s: +{o - b:.1f} s ({(o - b) / b * 100:.0f}%); goal <= 5% or <= 2 s"))


# ------------------------------------------------------------------- 3. hang


def bench_hang(work: Path) -> None:
    say("== hang verdict latency")
    for timeout in (30, 60):
        proj, house = _toy_project(work, {"1.0.0": "skip"}, f"dsb-bench-hang{timeout}", timeout)
        cache = work / "cache-hang"
        _dsb(proj, house, cache, "run", "matrix.yaml")
        db = sqlite3.connect(proj / ".dsbisect" / "dsbisect.sqlite3")
        run_dir, finished, evidence = db.execute("SELECT run_dir, finished, evidence FROM runs").fetchone()
        stamp = toypkg.deadlock_time(Path(run_dir))
        latency = finished - stamp
        stacks = len(json.loads(evidence).get("files", []))
        rows.append(("hang", f"collective timeout {timeout} s ({'NCCL, ' + _where() if GPU else 'gloo, CPU'})", f"{latency:.1f} s to HANG, {stacks} stack files",
                     f"goal <= {timeout + 15} s; by hand: NCCL watchdog default 1800 s"))


# ----------------------------------------------------------------- 4. bisect


def bench_bisect(work: Path) -> None:
    say("== bisect over 16 releases")
    releases = {f"1.{i}.0": ("ok" if i < 9 else "skip") for i in range(16)}
    proj, house = _toy_project(work, releases, "dsb-bench-bisect", 10)
    cache = work / "cache-bisect"
    t, res = timed(_dsb, proj, house, cache, "bisect", "dsb-bench-bisect", "1.0.0", "1.15.0", "--case", "toy",
                   "--format", "json")
    out = json.loads(res.stdout)
    runs = sum(s["runs"] for s in out["steps"])
    limit = math.ceil(math.log2(16)) + 2
    rows.append(("bisect", f"16 toy releases, first bad {out['first_bad']}", f"{runs} runs, {t:.0f} s wall",
                 f"limit ceil(log2 16)+2 = {limit} runs; by hand: {runs} venvs + a 1800 s watchdog per hang"))


# ------------------------------------------------------------- 5. concurrency


def bench_concurrency(work: Path) -> None:
    say("== concurrency")
    releases = {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "skip", "1.3.0": "skip"}
    # On GPUs, one GPU per point (n=1: no peer to skip a collective), two points on two GPUs.
    n = 1 if GPU else 2
    if GPU:
        releases = {"1.0.0": "ok", "1.1.0": "ok"}
    proj, house = _toy_project(work, releases, "dsb-bench-conc", 10, nproc=n)
    cache = work / "cache-conc"
    _dsb(proj, house, cache, "run", "matrix.yaml")  # venvs built, so only running is timed
    t1, _ = timed(_dsb, proj, house, cache, "run", "matrix.yaml", "--rerun", "--jobs", "1")
    t2, _ = timed(_dsb, proj, house, cache, "run", "matrix.yaml", "--rerun", "--jobs", "2")
    cores, g = os.cpu_count(), len(facts.gpus())
    what = "all pass" if GPU else "2 hang"
    rows.append(("concurrency", f"P={len(releases)} points ({what}), n={n} rank(s), G={g} GPUs, {cores} cores", f"--jobs 2: {t2:.0f} s",
                 f"--jobs 1: {t1:.0f} s ({t1 / t2:.2f}x)"))


# ------------------------------------------------- 6. accelerate: against the peers


TASK_GOOD, TASK_BAD, TASK_ANSWER = "0.20.3", "1.0.0", "0.28.0"
TASK_PINS = ("setuptools<81",)  # accelerate < 0.28 imports pkg_resources, gone from setuptools 81
TASK_LINE = "from accelerate.utils import is_tpu_available"  # removed in accelerate 0.28.0


def bench_accelerate(work: Path) -> None:
    say("== accelerate: per-point cost against the peers")
    proj = work / "proj-accelerate"
    proj.mkdir(exist_ok=True)
    (proj / "tpu.py").write_text(TASK_LINE + "\n")
    pins = json.dumps(list(TASK_PINS))
    (proj / "matrix.yaml").write_text(
        f"defaults: {{nproc: 1, accelerator: cpu, timeout: 300, pins: {pins}}}\n"
        f"axes: {{accelerate: [\"{TASK_GOOD}\", \"{TASK_BAD}\"]}}\ncases:\n"
        "  tpu: {script: tpu.py}\n"
        # as before: the deepspeed launcher's processes, and the import check in a process of its own
        "  tpu_before: {script: tpu.py, env: {DSBISECT_DIRECT: \"0\", DSBISECT_CHECK_IMPORTS: \"0\"}}\n")
    versions = sh([*DSBISECT, "versions", "accelerate", TASK_GOOD, TASK_BAD], check=True).stdout.split()
    say(f"{len(versions)} releases: {' '.join(versions)}")
    for label, case, jobs in (("--jobs 2", "tpu", "2"), ("--jobs 1", "tpu", "1"),
                              ("as before (launcher chain + import check subprocess), --jobs 1", "tpu_before", "1")):
        fresh = Path(tempfile.mkdtemp(prefix="acc-", dir=work))
        before = load()
        t, res = timed(sh, [*DSBISECT, "bisect", "accelerate", TASK_GOOD, TASK_BAD, "--case", case, "--regress-on",
                            "fail", "--jobs", jobs, "--cache-dir", str(fresh / "cache"), "--store", str(fresh / "store"),
                            "--format", "json", "-q"], cwd=proj)
        try:
            out = json.loads(res.stdout)
        except ValueError:
            say(res.stdout[-2000:], res.stderr[-2000:])
            raise SystemExit(f"accelerate benchmark: dsbisect {label} gave no report") from None
        runs = sum(s["runs"] for s in out["steps"])
        right = "right" if out["first_bad"] == TASK_ANSWER else f"WRONG ({out['first_bad']})"
        ran = [s["seconds"] for s in out["steps"] if s.get("seconds")]
        rows.append(("accelerate", f"dsbisect {label}, fresh caches", f"{t:.1f} s ({runs} points, {right})",
                     f"run {min(ran):.1f}-{max(ran):.1f} s per point; {before} -> {load()}; goal <= 20 s, >= 2x the best peer"))
        TASK_TIMES[f"dsbisect {label}"] = t
    peers = {}
    uv = shutil.which("uv") or str(Path(PY).parent / "uv")
    torch_req, links = _torch_requirement()
    uv_cache = work / "uv-peer-cache"
    warm = work / "uv-warm"  # the uv loop's cache holds torch already, as a uv user's would
    sh([uv, "venv", "-q", str(warm), "--python", PY], check=True)
    sh([uv, "pip", "install", "-q", "--python", str(warm / "bin" / "python"), torch_req, *links],
       env=dict(os.environ, UV_CACHE_DIR=str(uv_cache)), check=True)

    def uv_step(version: str) -> bool:
        d = work / f"uv-{version}"
        env = dict(os.environ, UV_CACHE_DIR=str(uv_cache))
        sh([uv, "venv", "-q", str(d), "--python", PY], env=env, check=True)
        sh([uv, "pip", "install", "-q", "--python", str(d / "bin" / "python"), f"accelerate=={version}", *TASK_PINS,
            torch_req, *links], env=env, check=True)
        return sh([str(d / "bin" / "python"), "-c", TASK_LINE]).returncode != 0

    def pip_step(version: str) -> bool:
        d = work / f"pip-{version}"
        sh([PY, "-m", "venv", str(d)], check=True)
        sh([str(d / "bin" / "pip"), "install", "-q", f"accelerate=={version}", *TASK_PINS, torch_req, *links],
           check=True)
        return sh([str(d / "bin" / "python"), "-c", TASK_LINE]).returncode != 0

    for name, step in (("uv loop (uv venv + uv pip install + python -c)", uv_step),
                       ("pip loop (python -m venv + pip install + python -c)", pip_step)):
        before = load()
        t, (first_bad, probes) = timed(_plain_bisect, versions, step)
        right = "right" if first_bad == TASK_ANSWER else f"WRONG ({first_bad})"
        rows.append(("accelerate", f"{name}, plain bisection", f"{t:.1f} s ({probes} points, {right})",
                     f"{t / probes:.1f} s per point; the ends are taken as given; {before} -> {load()}"))
        peers[name] = t
    peers |= _pypi_version_bisect(uv_step)
    best_name, best = min(peers.items(), key=lambda kv: kv[1])
    for label in ("dsbisect --jobs 2", "dsbisect --jobs 1"):
        t = TASK_TIMES[label]
        met = "met" if t <= 20 and best / t >= 2 else "not met"
        rows.append(("accelerate", f"goal: {label} <= 20 s and >= 2x the best peer",
                     f"{best / t:.2f}x the {best_name.split(' (')[0]}", f"{met} ({t:.1f} s against {best:.1f} s)"))


TASK_TIMES: dict[str, float] = {}


def _torch_requirement() -> tuple[str, list[str]]:
    """The base environment's torch, and the wheelhouses pip is told to look in (where it lies)."""
    from importlib.metadata import version

    links = [a for d in os.environ.get("PIP_FIND_LINKS", "").split() for a in ("--find-links", d)]
    return f"torch=={version('torch')}", links


def _plain_bisect(versions: list[str], is_bad) -> tuple[str, int]:
    """git bisect's way: the first is good and the last bad, as the user says; halve until they meet."""
    lo, hi, probes = 0, len(versions) - 1, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probes += 1
        if is_bad(versions[mid]):
            hi = mid
        else:
            lo = mid
    return versions[hi], probes


def _pypi_version_bisect(step) -> dict[str, float]:
    """pypi-version-bisect (a library: find_affected_range(package, check_fn)), where importable."""
    try:
        from pypi_version_bisect import find_affected_range
    except ImportError:
        rows.append(("accelerate", "pypi-version-bisect", "not installed here: row skipped", "—"))
        return {}
    before = load()
    t, out = timed(find_affected_range, "accelerate", step)
    first = out.get("first_affected") if isinstance(out, dict) else None
    rows.append(("accelerate", "pypi-version-bisect (the uv step as its check_fn)",
                 f"{t:.1f} s ({out.get('checked_count', '?')} points, first affected {first})",
                 f"its own search of the whole history; {before} -> {load()}"))
    return {"pypi-version-bisect": t}


# ------------------------------------------------------------- 7. early hang


def bench_early(work: Path) -> None:
    say("== early deadlock verdict against the collective timeout")
    for label, collective, extra in (("early verdict", 300, ()), ("--no-early-hang", 30, ("--no-early-hang",))):
        proj, house = _toy_project(work, {"1.0.0": "skip"}, f"dsb-bench-early{collective}", collective)
        cache = work / "cache-early"
        before = load()
        _dsb(proj, house, cache, "run", "matrix.yaml", *extra)
        db = sqlite3.connect(proj / ".dsbisect" / "dsbisect.sqlite3")
        run_dir, finished, reason = db.execute("SELECT run_dir, finished, reason FROM runs").fetchone()
        latency = finished - toypkg.deadlock_time(Path(run_dir))
        rows.append(("early", f"toy deadlock, gloo, CPU, collective timeout {collective} s, {label}",
                     f"{latency:.1f} s from DEADLOCK-AT to the stored HANG",
                     f"{reason[:70]}; goal <= 20 s at 300 s; {before}"))


# -------------------------------------------------------------- 8. battery


def bench_battery(work: Path) -> None:
    say("== false-hang battery (tests/forensics/test_early_hang.py)")

    runs = false = 0
    notes = []
    # the big all_reduce needs 12 bytes per element of free memory (two ranks' fp16 tensors, thrice);
    # a smaller one ends before the first look, and the test (rightly) says it proved nothing
    cap = os.environ.get("DSBISECT_TEST_BIG_CAP") or str(1 << 30)
    for secs, select in (("45", "computing or loading or large"), ("40", "checkpoint")):
        before = load()
        res = sh([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_early_hang.py"),
                  "-k", f"({select}) and not nccl", "-m", "slow and not gpu", "-rA"], cwd=ROOT,
                 env=dict(os.environ, DSBISECT_TEST_BATTERY_S=secs, DSBISECT_TEST_BIG_CAP=cap))
        passed = len(re.findall(r"^PASSED ", res.stdout, re.MULTILINE))
        skipped = len(re.findall(r"^SKIPPED ", res.stdout, re.MULTILINE))
        failed = re.findall(r"^FAILED (\S+)", res.stdout, re.MULTILINE)
        runs += passed + len(failed)
        false += len(failed) if "deadlock proven" in res.stdout else 0  # a failure that is not a proof: a note
        notes.append(f"{secs} s: {passed} passed, {len(failed)} failed, {skipped} skipped ({before})")
        notes += [f"big all_reduce: {m}" for m in re.findall(r"all_reduces of \d+ fp16 elements took \S+ s",
                                                              res.stdout)]
        if failed and "deadlock proven" not in res.stdout:
            say(res.stdout[-3000:])
    rows.append(("battery", "slow but progressing runs (compute, loading, one big all_reduce at 45 s; checkpoint at 40 s)",
                 f"{runs} runs, {false} false hangs", "; ".join(notes) + "; goal 0 false hangs"))


# ------------------------------------------------------------- 9. look-ahead


def bench_lookahead(work: Path) -> None:
    say("== look-ahead: the 16-release bisection with and without")
    releases = {f"1.{i}.0": ("ok" if i < 9 else "skip") for i in range(16)}
    times = {}
    for mode in ("0", "1"):
        proj, house = _toy_project(work, releases, f"dsb-bench-ahead{mode}", 10)
        cache = work / f"cache-ahead{mode}"
        before = load()
        t, res = timed(_dsb, proj, house, cache, "bisect", f"dsb-bench-ahead{mode}", "1.0.0", "1.15.0", "--case", "toy",
                       "--format", "json", env={"DSBISECT_LOOKAHEAD": mode})
        out = json.loads(res.stdout)
        times[mode] = (t, out["first_bad"], sum(s["runs"] for s in out["steps"]), before)
    (off, _, r0, l0), (on, fb1, r1, l1) = times["0"], times["1"]
    rows.append(("lookahead", f"16 toy releases (first bad {fb1}), fresh env cache each",
                 f"on: {on:.0f} s ({r1} runs; {l1})", f"off: {off:.0f} s ({r0} runs; {l0}): saves {off - on:.0f} s"))


# --------------------------------------------------------------- 10. readme


def readme_command_1() -> tuple[str, str]:
    """README command 1 as the README has it (the first line of its first bash block), split into
    the install part and the ``dsbisect run`` part, so each is timed on its own."""
    block = re.findall(r"^```bash\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M)[0]
    line = next(ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#"))
    install, sep, run = line.partition(" && .venv/bin/dsbisect run ")
    if not sep:
        raise SystemExit(f"readme benchmark: README command 1 does not end in `.venv/bin/dsbisect run`: {line}")
    return install, ".venv/bin/dsbisect run " + run


def _readme_phases(xdg: Path) -> str:
    """What the cache says each point cost: its venv's build (a DeepSpeed wheel built inside it) and
    the just-in-time op builds (each built once, shared by the venvs with the same key)."""
    root = xdg / "dsbisect"
    envs = []
    for marker in sorted((root / "envs").glob(f"*/{MARKER}")):
        data = json.loads(marker.read_text())
        envs.append(f"{' '.join(data['spec']['requirements'])} {data['seconds']:.0f} s")
    ops = [json.loads(m.read_text()) for m in sorted((root / "ops").glob("*/dsbisect-op.json"))]
    built = ", ".join(f"{o['name']} {o['seconds']:.0f} s" for o in ops) or "none shared"
    return f"venvs: {'; '.join(envs)}; op builds: {built}"


def _readme_runs(res: subprocess.CompletedProcess) -> list[dict]:
    out = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
    return [r for r in out.get("runs", []) if r["case"] == "cpu_smoke"]


def bench_readme(work: Path) -> None:
    say("== README command 1 on a fresh clone")
    clone = work / "clone"
    sh(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    xdg = work / "xdg-cache"
    env = dict(os.environ, XDG_CACHE_HOME=str(xdg))  # a fresh env cache (and pip cache), as a new user has
    env.pop("VIRTUAL_ENV", None)
    install, run = readme_command_1()
    before = load()
    t_pip, res = timed(sh, ["bash", "-c", install], cwd=clone, env=env)
    if res.returncode != 0:
        raise SystemExit(f"readme benchmark: the install failed: {res.stderr[-2000:]}")
    mid = load()
    t_run, res = timed(sh, ["bash", "-c", run + " --format json"], cwd=clone, env=env)
    after = load()
    smoke = ", ".join(f"{r['point'].split()[-1]} {r['outcome']} {r['seconds']:.0f} s" for r in _readme_runs(res))
    total = t_pip + t_run
    rows.append(("readme", "command 1 on a fresh clone (fresh env and pip caches)",
                 f"{total:.0f} s: install {t_pip:.0f} s ({before}) + dsbisect run {t_run:.0f} s ({mid})",
                 f"goal <= 120 s: {'met' if total <= 120 else 'not met'}; cpu_smoke runs {smoke}; "
                 f"{_readme_phases(xdg)}; {after} at the end"))
    ops_before = sorted(p.name for p in (xdg / "dsbisect" / "ops").glob("*"))
    before = load()
    t, res = timed(sh, ["bash", "-c", run.replace("matrix.yaml", "matrix.yaml --case cpu_smoke --rerun --format json", 1)],
                   cwd=clone, env=env)
    per = [r["seconds"] for r in _readme_runs(res) if r["outcome"] != "skip"]
    built = "no op built" if sorted(p.name for p in (xdg / "dsbisect" / "ops").glob("*")) == ops_before else "an op was built"
    rows.append(("readme", "warm cpu_smoke point, --rerun (2 points)",
                 f"{t:.0f} s; per point {', '.join(f'{s:.1f}' for s in per)} s",
                 f"goal <= 15 s per point: {'met' if per and max(per) <= 15 else 'not met'}; {built}; "
                 f"{before} -> {load()}"))
    last = next((r for r in reversed(_readme_runs(res)) if r["outcome"] == "pass"), None)
    if last is not None:
        rows.append(("readme", f"the bare deepspeed launcher, same job and venv ({last['point']})",
                     _bare_launcher(clone, _run_venv(Path(last["run_dir"]))), "by hand: what a warm point costs without dsbisect"))
    # The same warm point with a DeepSpeed that does not import torch._inductor at import (0.19.6+:
    # DeepSpeed <= 0.19.5 torch.compile()s three functions of deepspeed.moe.sharded_moe as it is
    # imported, 8 CPU-s in each of the launcher chain's four interpreters on torch 2.13).
    newer = run.replace("matrix.yaml", "matrix.yaml --case cpu_smoke --versions deepspeed=0.19.8 --format json", 1)
    t_cold, res = timed(sh, ["bash", "-c", newer], cwd=clone, env=env)
    before = load()
    t_warm, res = timed(sh, ["bash", "-c", newer + " --rerun"], cwd=clone, env=env)
    per = [r["seconds"] for r in _readme_runs(res) if r["outcome"] != "skip"]
    rows.append(("readme", "warm cpu_smoke point, --versions deepspeed=0.19.8 --rerun",
                 f"{t_warm:.0f} s; the point {', '.join(f'{s:.1f}' for s in per)} s",
                 f"goal <= 15 s per point: {'met' if per and max(per) <= 15 else 'not met'}; its first run "
                 f"(venv and op build) {t_cold:.0f} s; {before} -> {load()}"))
    done = _readme_runs(res)
    if done and done[-1]["outcome"] == "pass":
        rows.append(("readme", "the bare deepspeed launcher, same job and venv (deepspeed 0.19.8)",
                     _bare_launcher(clone, _run_venv(Path(done[-1]["run_dir"]))), "by hand"))
    # The same two warm points with no launcher process (launcher: direct, README "matrix.yaml"):
    # the bundled case keeps the deepspeed launcher, the main path; this is what the option saves.
    text = (clone / "matrix.yaml").read_text()
    (clone / "matrix-direct.yaml").write_text(text.replace("    accelerator: cpu\n", "    accelerator: cpu\n    launcher: direct\n", 1))
    direct = run.replace("matrix.yaml", "matrix-direct.yaml --case cpu_smoke --format json", 1)
    sh(["bash", "-c", direct], cwd=clone, env=env)  # its first runs: the same venvs, the op already built
    before = load()
    t, res = timed(sh, ["bash", "-c", direct + " --rerun"], cwd=clone, env=env)
    per = [f"{r['point'].split()[-1]} {r['outcome']} {r['seconds']:.1f}" for r in _readme_runs(res)]
    rows.append(("readme", "warm cpu_smoke points under launcher: direct, --rerun (2 points)",
                 f"{t:.0f} s; per point {', '.join(per)} s", f"no launcher process; {before} -> {load()}"))


def _run_venv(run_dir: Path) -> Path:
    """The point venv a run's launcher line ran in (DeepSpeed's runner logs its command)."""
    found = re.search(r"cmd = (\S+)/bin/python", (run_dir / "launcher.log").read_text())
    if not found:
        raise SystemExit(f"readme benchmark: no launch command in {run_dir / 'launcher.log'}")
    return Path(found.group(1))


def _bare_launcher(clone: Path, venv: Path, times: int = 2) -> str:
    """``deepspeed --num_gpus 2 repro_scripts/cpu_smoke.py`` in ``venv`` as a user would run it
    on the CPU (its op already built there), ``times`` times: the seconds of each run."""
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", DS_ACCELERATOR="cpu",
               CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", TORCH_EXTENSIONS_DIR=str(venv / "torch_extensions"))
    env.pop("VIRTUAL_ENV", None)
    seconds = []
    for _ in range(times):
        t, res = timed(sh, ["deepspeed", "--num_gpus", "2", "repro_scripts/cpu_smoke.py"], cwd=clone, env=env)
        if res.returncode != 0 or res.stdout.count(": ok") + res.stderr.count(": ok") < 2:
            return f"failed (exit {res.returncode}): {(res.stdout + res.stderr)[-300:]}"
        seconds.append(t)
    return f"{', '.join(f'{s:.1f}' for s in seconds)} s ({load()})"


# ---------------------------------------------------------------------- main


BENCHES = {"env": bench_env, "launch": bench_launch, "hang": bench_hang, "bisect": bench_bisect,
           "concurrency": bench_concurrency, "accelerate": bench_accelerate, "early": bench_early,
           "battery": bench_battery, "lookahead": bench_lookahead, "readme": bench_readme}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(BENCHES))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--gpu", action="store_true", help="launch, hang, concurrency on this machine's GPUs")
    ap.add_argument("--find-links", action="append", default=[], help="wheelhouse with the deepspeed launcher")
    ap.add_argument("--gpu-pins", default="deepspeed==0.12.4,pydantic<2")
    ap.add_argument("--gpu-compat", default="torch-elastic-socket,numpy-bufsize")
    args = ap.parse_args()
    if args.gpu:
        gpus = len(facts.gpus())
        if gpus < 1:
            raise SystemExit("--gpu: this machine has no GPU")
        GPU.update(pins=args.gpu_pins.split(","), links=[str(Path(d).resolve()) for d in args.find_links],
                   compat=[c for c in args.gpu_compat.split(",") if c], ranks=min(2, gpus))
        if args.only == ",".join(BENCHES):
            args.only = "launch,hang,concurrency" if gpus >= 2 else "launch"
        if gpus < 2 and set(args.only.split(",")) - {"launch"}:
            raise SystemExit("--gpu: hang and concurrency need 2 GPUs (NCCL between two ranks); this machine has 1")
    with tempfile.TemporaryDirectory(prefix="dsbisect-bench-") as tmp:
        for name in args.only.split(","):
            BENCHES[name](Path(tmp))
            say("\n".join(" | ".join(r) for r in rows))
            if args.out:  # what is measured is kept if a later benchmark is cut short
                args.out.write_text(render())
    table = render()
    print(table)
    if args.out:
        args.out.write_text(table)


def render() -> str:
    g = facts.gpus()
    gpus = f"{len(g)}x {g[0]}" if g else "no GPU"
    head = (f"Measured {time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, "
            f"{platform.machine()}, Python {platform.python_version()}, {gpus}; {load()} at the end.\n\n")
    lines = ["| benchmark | measure | dsbisect | baseline / goal |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
