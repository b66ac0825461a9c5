"""A toy package of our own, built into real wheels whose versions really differ.

``dsb-toy`` (import name ``dsb_toy``) exposes ``step(dist)``, which a 2-rank repro calls
between ``init_process_group`` and a final barrier.  Each version does one of:

- ``ok``: an all_reduce on every rank, checked;
- ``skip``: rank 1 skips the all_reduce, so rank 0 waits in it: a distributed hang;
- ``raise``: rank 0 raises ValueError: a failure;
- ``import``: importing the module raises ImportError: untestable (skip);
- ``other``: rank 0 raises AttributeError: a failure unrelated to ``raise``'s;
- ``newline``: rank 0 raises a RuntimeError whose message begins with a newline;
- ``sleep``: rank 1 sleeps forever before any collective: a plain hang;
- ``flaky``: hangs like ``skip`` on a random draw (half the time), or on every second
  run when ``DSB_TOY_COUNTER`` names a counter file;
- ``flakyfail``: rank 0 raises ValueError now and then (``DSB_TOY_RATE``, default 0.5); when
  ``DSB_TOY_DRAWS`` names a folder, the n-th run of a version draws from (``DSB_TOY_SEED``,
  version, n), so that a test's flaky sequence is the same every time;
- ``broken``: requires a package that exists nowhere, so no venv can be built;
- ``daemon``: rank 1 double-forks a daemon that outlives it (escapes the process tree);
- ``segv``: rank 1 dies of SIGSEGV;
- ``exit125``: every rank exits 125 (git bisect's "cannot test");
- ``chatty``: rank 0 prints ``DSB_TOY_MB`` megabytes.

Wheels are written with zipfile (a wheel is a zip with a dist-info); no build backend.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

STEP = {
    "ok": """
def step(dist):
    import torch
    t = torch.ones(4, device=_device(dist))
    dist.all_reduce(t)
    assert float(t[0]) == dist.get_world_size(), t
""",
    "skip": """
def step(dist):
    import torch
    t = torch.ones(4, device=_device(dist))
    if dist.get_rank() != 1:
        import time
        print(f"rank {dist.get_rank()}: entering all_reduce", flush=True)
        print(f"DEADLOCK-AT {time.time()}", flush=True)  # for the hang-latency benchmark
        dist.all_reduce(t)  # rank 1 never joins: the job hangs here
""",
    "raise": """
def step(dist):
    if dist.get_rank() == 0:
        raise ValueError("dsb_toy: the loss went NaN")
""",
    # "raise" after five seconds: a point that lasts long enough for a heartbeat line on any machine.
    "slowraise": """
def step(dist):
    import time
    time.sleep(5)
    if dist.get_rank() == 0:
        raise ValueError("dsb_toy: the loss went NaN")
""",
    "import": """
raise ImportError("dsb_toy needs a newer torch than this one")
""",
    # A failure unrelated to the regression (the zoo's _cuda_setDevice of one accelerate commit).
    "other": """
def step(dist):
    if dist.get_rank() == 0:
        raise AttributeError("module 'torch._C' has no attribute '_cuda_setDevice'")
""",
    # Rank 0 fails with a message that begins with a newline (as torch's autograd errors do).
    "newline": """
def step(dist):
    if dist.get_rank() == 0:
        raise RuntimeError("\\n  \\nOutput 0 of SplitBackward0 is a view and is being modified inplace (step 7).")
""",
    "sleep": """
def step(dist):
    import time
    if dist.get_rank() == 1:
        while True:
            time.sleep(1)
""",
    "flaky": """
def step(dist):
    import os, torch
    counter = os.environ.get("DSB_TOY_COUNTER")
    if counter:  # deterministic for tests: every second run hangs
        n = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
        if dist.get_rank() == 0:
            open(counter, "w").write(str(n))
        draw = torch.tensor([n % 2 == 0], dtype=torch.int64, device=_device(dist))
    else:
        draw = torch.tensor([os.urandom(1)[0] % 2], dtype=torch.int64, device=_device(dist))
    dist.broadcast(draw, src=0)
    t = torch.ones(4, device=_device(dist))
    if int(draw) == 1 and dist.get_rank() == 1:
        return  # rank 1 skips the all_reduce this time
    dist.all_reduce(t)
""",
    "flakyfail": """
def step(dist):
    import hashlib, os, random
    folder = os.environ.get("DSB_TOY_DRAWS")
    if folder:  # deterministic for tests: the n-th run of this version
        path = os.path.join(folder, __version__)
        n = (int(open(path).read()) if os.path.exists(path) else 0) + 1
        open(path, "w").write(str(n))
        key = f"{os.environ.get('DSB_TOY_SEED', '0')}:{__version__}:{n}".encode()
        draw = int(hashlib.sha256(key).hexdigest()[:8], 16) / 2**32
    else:
        draw = random.random()
    if dist.get_rank() == 0 and draw < float(os.environ.get("DSB_TOY_RATE", "0.5")):
        raise ValueError("dsb_toy: the loss went NaN (now and then)")
""",
    "broken": """
def step(dist):
    pass
""",
    # Rank 1 leaves a daemon behind (fork, setsid, fork): it escapes the launcher's process tree.
    "daemon": """
def step(dist):
    import os, time
    if dist.get_rank() == 1 and os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    dist.barrier()
""",
    # Rank 1 dies of a segmentation fault; rank 0 then fails on the broken connection.
    "segv": """
def step(dist):
    import ctypes, time
    if dist.get_rank() == 1:
        time.sleep(1)
        ctypes.string_at(0)
    dist.barrier()
""",
    # Every rank says "cannot test this" as git bisect run understands it.
    "exit125": """
def step(dist):
    import sys
    print("dsb_toy: this version cannot be tested here", flush=True)
    sys.exit(125)
""",
    # Rank 0 prints DSB_TOY_MB megabytes of output, then all is well.
    "chatty": """
def step(dist):
    import os, sys
    if dist.get_rank() == 0:
        line = "x" * 1023 + "\\n"
        for _ in range(int(os.environ.get("DSB_TOY_MB", "50")) * 1024):
            sys.stdout.write(line)
        sys.stdout.flush()
    dist.barrier()
""",
    # Numbers (issue 38): each rank holds DSB_TOY_HOLD_MB (default 0) megabytes more on "ram", and
    # 256 MB more on "ram256"; "loss1"/"loss2" report loss 1.5/1.75 at step 5 in the DSBISECT_METRICS
    # file and on a printed line; "cuda256" allocates 256 MB more CUDA memory than "ok" does.
    # DSB_TOY_FAIL_ONCE="<version>:<marker file>": that version's first "ram" run fails (rank 0
    # exits 3 and leaves the marker), as a run may once on a loaded machine.
    "ram": """
def step(dist):
    import os
    version, _, marker = os.environ.get("DSB_TOY_FAIL_ONCE", "").partition(":")
    if version == __version__ and dist.get_rank() == 0 and not os.path.exists(marker):
        open(marker, "w").close()
        raise SystemExit(3)
    held = bytearray(int(os.environ.get("DSB_TOY_HOLD_MB", "0")) << 20)
    held[::4096] = b"x" * len(held[::4096])
    dist.barrier()
""",
    "ram256": """
def step(dist):
    held = bytearray(256 << 20)
    held[::4096] = b"x" * len(held[::4096])
    dist.barrier()
""",
    "loss1": """
LOSS = 1.5
""" + "STEP_LOSS",
    "loss2": """
LOSS = 1.75
""" + "STEP_LOSS",
    # "slow": every rank computes for DSB_TOY_SLEEP wall seconds (default 12) before the barrier:
    # a longer run, busy (no rank waits in a collective, none looks idle).
    "slow": """
def step(dist):
    import os, time
    end = time.time() + float(os.environ.get("DSB_TOY_SLEEP", "12"))
    while time.time() < end:
        sum(range(10000))
    dist.barrier()
""",
    "cuda256": """
def step(dist):
    import torch
    t = torch.ones(4, device=_device(dist))
    extra = torch.empty(256 << 20, dtype=torch.uint8, device=_device(dist))
    dist.all_reduce(t)
    del extra
""",
}
STEP_LOSS = """
def step(dist):
    import json, os
    for n in range(1, 6):
        loss = LOSS + 0.1 * (5 - n)
        with open(os.environ["DSBISECT_METRICS"], "a") as f:
            f.write(json.dumps({"step": n, "loss": loss, "rank": dist.get_rank()}) + "\\n")
        print(f"step {n} loss {loss:.4f}", flush=True)
    dist.barrier()
"""
STEP["loss1"] = STEP["loss1"].replace("STEP_LOSS", STEP_LOSS)
STEP["loss2"] = STEP["loss2"].replace("STEP_LOSS", STEP_LOSS)

DEVICE = """
def _device(dist):
    import torch
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
"""

REPRO = """\
import datetime, os, sys
import torch
import torch.distributed as dist
import dsb_toy

timeout = float(os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT", "30"))
nccl = os.environ.get("DS_ACCELERATOR") != "cpu" and torch.cuda.is_available()
if nccl:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
# The ranks meet (env://) and connect (gloo's full mesh waits out the group's timeout) within a
# limit that only bounds a failure: on a loaded machine one rank can be a minute late, importing
# torch.  Once connected, the collectives get the case's timeout.
meet = datetime.timedelta(seconds=600)
store, rank, world = next(dist.rendezvous("env://", timeout=meet))
dist.init_process_group("nccl" if nccl else "gloo", store=store, rank=rank, world_size=world, timeout=meet)
dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=timeout))
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: dsb_toy {dsb_toy.__version__}", flush=True)
dsb_toy.step(dist)
dist.barrier()
dist.destroy_process_group()
print("done", flush=True)
"""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(out: Path, version: str, behaviour: str, dist: str = "dsb-toy", module: str = "dsb_toy",
                requires: tuple[str, ...] = (), extra: dict[str, bytes] | None = None) -> Path:
    """Write ``<dist>-<version>-py3-none-any.whl`` into ``out``.

    Every toy distribution provides the same module, ``dsb_toy``, which the repro imports,
    unless ``module`` names another (a stand-in for a real package's top-level module).
    ``requires``: its dependencies (``Requires-Dist``), which uv resolves as a real package's;
    ``extra``: more files of the wheel (path -> content)."""
    mod = module
    info = f"{dist.replace('-', '_')}-{version}.dist-info"
    deps = (*requires, *(("dsb-nonexistent-dependency>=99",) if behaviour == "broken" else ()))
    requires = "".join(f"Requires-Dist: {r}\n" for r in deps)
    files = {
        f"{mod}/__init__.py": f'__version__ = "{version}"\nBEHAVIOUR = "{behaviour}"\n{DEVICE}{STEP[behaviour]}'.encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n{requires}"
                             "Summary: dsbisect's toy package\n").encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: dsbisect-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": f"{mod}\n".encode(),
    } | (extra or {})
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def build_wheelhouse(out: Path, releases: dict[str, str], dist: str = "dsb-toy") -> Path:
    for version, behaviour in releases.items():
        build_wheel(out, version, behaviour, dist)
    return out


def write_repro(folder: Path, name: str = "toy_repro.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(REPRO)
    return path


def deadlock_time(run_dir: Path) -> float:
    """When rank 0 of a "skip" toy entered the collective that rank 1 never joins (its own stamp)."""
    for log in (Path(run_dir) / "ranks").glob("*rank0.log"):
        for line in log.read_text().splitlines():
            if line.startswith("DEADLOCK-AT "):
                return float(line.split()[1])
    raise RuntimeError(f"no deadlock stamp in {run_dir}")
