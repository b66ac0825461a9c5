"""What dsbisect measures in a rank with no change to the script (issue 38): the start-up hook's
numbers of one process.

Installed beside ``dsbisect_hook.py`` in each point venv; standard library only; the hook calls
``start(run_dir, rank)`` in every process of a run that has ``RANK`` set (off with
``DSBISECT_MEASURE=0``), and hands ``watch_steps`` the module ``torch.optim.optimizer`` right
after it is imported.  At the process's normal exit (``atexit``: a rank killed by a signal, or
one that leaves through ``os._exit``, records nothing; nor does a fork child, a DataLoader
worker) it writes ``<run dir>/measured/rank<R>.pid<P>.json`` (through a ``.tmp`` and a rename):

- ``peak_rss``: the process's own peak resident set, bytes: Linux's ``VmHWM`` (the high-water
  mark of this program's memory since its ``exec``), else ``getrusage``'s ``ru_maxrss``.  Not
  ``ru_maxrss`` on Linux: a process started through ``vfork``/``posix_spawn`` (Python's
  ``subprocess.Popen``, as torchrun starts its ranks) or ``fork`` then ``exec`` inherits there
  the peak its parent had reached, so every rank would read at least its launcher's peak;
- ``peak_gpu_mem`` and ``peak_gpu_reserved``: where the process initialized CUDA, the caching
  allocator's peak allocated and reserved bytes on its current device
  (``torch.cuda.max_memory_allocated``/``max_memory_reserved``); absent otherwise;
- ``step_times``: ``[step, seconds]`` for each optimizer step after the first, the time since the
  one before (a global post-hook on ``torch.optim.Optimizer.step``: DeepSpeed's and accelerate's
  wrappers step a torch optimizer inside); only the first optimizer that steps is timed, so two
  optimizers stepped in one iteration do not halve the figure; at most ``MAX_STEPS``.

It never raises: a measurement that fails is left out.
"""

import os
import sys

MAX_STEPS = 100_000
_state = {"optimizer": None, "last": None, "steps": 0, "times": []}


def start(run_dir, rank):
    """Measure this process for the run in ``run_dir`` as rank ``rank`` (a string of digits)."""
    import atexit

    if not rank.isdigit():
        return
    atexit.register(_write, run_dir, int(rank), os.getpid())


def watch_steps(mod):
    """Time the optimizer's steps (``mod``: ``torch.optim.optimizer``, just imported)."""
    register = getattr(mod, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(_stepped)


def _stepped(optimizer, args, kwargs):
    import time

    try:
        now = time.perf_counter()
        if _state["optimizer"] is None:
            _state["optimizer"] = id(optimizer)
        if id(optimizer) != _state["optimizer"]:
            return
        _state["steps"] += 1
        if _state["last"] is not None and len(_state["times"]) < MAX_STEPS:
            _state["times"].append([_state["steps"], round(now - _state["last"], 6)])
        _state["last"] = now
    except Exception:  # noqa: BLE001, S110 - a step must never fail for a measurement
        pass


def _gpu_peaks():
    torch = sys.modules.get("torch")
    try:
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return {}
        device = cuda.current_device()
        return {"peak_gpu_mem": int(cuda.max_memory_allocated(device)),
                "peak_gpu_reserved": int(cuda.max_memory_reserved(device)), "gpu_device": int(device)}
    except Exception:  # noqa: BLE001 - a fact left out
        return {}


def _high_water():
    """This program's peak resident set since its exec, bytes (``VmHWM``); None where the system
    does not say (no ``/proc``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    value, unit = line.split()[1:3]
                    return int(value) * {"kB": 1024, "mB": 1 << 20}.get(unit, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _write(run_dir, rank, pid):
    if os.getpid() != pid:  # a fork child that exits normally: not this rank's figures
        return
    try:
        import json
        import resource

        out = {"rank": rank, "pid": pid, "steps": _state["steps"]}
        out["peak_rss"] = _high_water()
        if out["peak_rss"] is None:
            scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
            out["peak_rss"] = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale
        out |= _gpu_peaks()
        out["step_times"] = _state["times"]
        folder = os.path.join(run_dir, "measured")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"rank{rank}.pid{pid}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(path + ".tmp", path)
    except Exception:  # noqa: BLE001, S110 - the run's exit must never fail for a measurement
        pass
