"""dsbisect's start-up hook for point venvs.

Installed into each point venv as ``dsbisect_hook.py`` with a ``dsbisect_hook.pth`` that
imports it, so it runs in every interpreter of the venv: the ``deepspeed`` launcher, the
ranks and their children.  Standard library only.  It does nothing unless dsbisect's
variables are set, and it never raises.

- ``DSBISECT_ENV_B64``: a multi-node run's variables whose values a remote shell would not
  pass through literally, as base64 JSON; set into ``os.environ`` before anything else.
- ``DSBISECT_COLLECTIVE_TIMEOUT=<s>``: the default timeout of torch's process groups and of
  ``deepspeed.init_distributed`` (a script that passes its own keeps it).
- ``DSBISECT_COMPAT=name,name``: compatibility shims for old releases on a new torch,
  applied right after the module they mend is imported.
- ``DSBISECT_OPS_DIR=<folder>``: ``torch.utils.cpp_extension.load`` shares finished builds of
  just-in-time ops (DeepSpeed's) between venvs, keyed by what they are built from
  (``dsbisect_ops.py``, installed beside this file).
- ``DSBISECT_RUN_DIR`` (any process of a run) or ``DSBISECT_DIE_WITH_PARENT=1`` (the separate
  import check and the precompile, which dsbisect runs itself): asks the kernel to kill this
  process when its parent dies (``PR_SET_PDEATHSIG``).  A fork child loses it and a non-Python
  child never has it: what keeps a run's whole tree is its guard (``dsbisect_guard.py``).
- ``DSBISECT_RUN_DIR`` (in a rank, i.e. with ``RANK`` set): registers faulthandler on
  ``DSBISECT_STACK_SIGNAL`` (default SIGUSR1) writing to
  ``<run dir>/stacks/rank<R>.pid<P>.txt``, so dsbisect can ask every rank for its Python
  stack without ptrace.  The file's existence tells dsbisect the handler is in place.
- ``DSBISECT_RANK_LOG=1`` with ``DSBISECT_RUN_DIR`` (in a rank, i.e. with ``RANK`` set; the
  launch line of a launcher that writes no per-rank logs of its own: ``accelerate launch``):
  the rank's stdout and stderr (file descriptors 1 and 2, so its children's too) go to
  ``<run dir>/ranks/rank<R>.log`` (appended), before anything else of the rank writes.  The
  variable becomes ``0`` in ``os.environ`` at once: a spawned helper that inherited RANK
  keeps the rank's log.
- ``DSBISECT_CHECK_IMPORTS=dist,dist`` with ``DSBISECT_RUN_DIR`` (the first interpreter of a
  run: the launcher, or the rank of a 1-rank run without one): the point's import check, made
  in the run instead of in an interpreter of its own.  The variable is taken out of
  ``os.environ`` at once, so no child checks again.  After the shims are in place, each
  distribution's top-level modules are imported (the code ``facts.check_code()`` runs), and
  ``<run dir>/import_check.json`` gets the versions, torch's CUDA and NCCL versions and the
  CUDA_HOME its extensions would build with (nothing here initializes CUDA: the rank's script
  may still fork or pick its devices), how long the check took, and ``"error"``.  When an
  import failed, the reason goes to stderr too and the process exits 125 (dsbisect records
  the point as a skip, "import check: ...").  With ``DSBISECT_CHECK_BYTECODE=1`` (taken out of
  ``os.environ`` too; set where the base's torch came without bytecode) Python may cache the
  bytecode of what the check imports, also under PYTHONDONTWRITEBYTECODE; the rest of the
  process writes none unless the user's environment lets it.
- ``DSBISECT_RUN_DIR`` (any process of a run; off with ``DSBISECT_WATCH_CUDA=0``): when
  ``torch.cuda`` initialises and fails (no driver, no device, a driver error), the error is
  written to ``<run dir>/machine/cuda.pid<P>.json`` before it raises on: dsbisect takes a run
  meant for GPUs that failed so for the machine's (a skip), not for the code's.
- ``DSBISECT_RUN_DIR`` (any process of a run; off with ``DSBISECT_TRACK_IMPORTS=0``): what
  this interpreter used from outside its venv -- the local modules it imported, the files it
  read and wrote, the folders it listed, the programs and files it gave its children, the
  top-level modules it took from site folders -- as ``<run dir>/imports/pid<P>.json``
  (``dsbisect_trace.py``, installed beside this file, has the format).  dsbisect digests them
  when the run ends: a recorded run is reused only while they are unchanged.
- ``DSBISECT_RUN_DIR`` (in a rank; off with ``DSBISECT_MEASURE=0``): the rank's peak RSS, its
  peak CUDA memory where it initialized CUDA, and the time of each optimizer step, written at
  its exit to ``<run dir>/measured/rank<R>.pid<P>.json`` (``dsbisect_measure.py``, installed
  beside this file, has the format); ``DSBISECT_METRICS`` names the JSON-lines file a script
  may write its own numbers to (dsbisect sets it; the hook leaves it alone).
- ``DSBISECT_RUN_DIR`` (in a rank; off with ``DSBISECT_FR_PROBE=0``): a daemon thread that
  answers dsbisect's flight-recorder requests for the early deadlock verdict.  Every 0.2 s
  it looks for ``<run dir>/fr/request.<n>`` (dsbisect numbers them 1, 2, ... and never
  deletes them); for the newest one it writes ``<run dir>/fr/rank<R>.<n>.json`` (through a
  ``.tmp`` and a rename), R being ``torch.distributed.get_rank()``.  It answers only in a
  process where ``torch.distributed`` is already imported and initialized (it never imports
  torch; a spawned helper that inherited RANK stays silent).  The answer holds the main
  thread's Python stack (``sys._current_frames``: c10d waits release the GIL, so this thread
  runs while the main thread is blocked in a collective) and the flight recorder's state
  from torch's in-process dump entry points, each that exists: the NCCL recorder
  (``_dump_nccl_trace_json``, else the pickle ``_dump_nccl_trace``, read with a data-only
  unpickler) and the generic one (``_dump_fr_trace_json``, else ``_dump_fr_trace``), each
  trimmed to its last 200 entries; ``"error"`` says why when none gave anything.

  Waits on the c10d store have no recorder entry; the answer's ``store_wait`` says what the
  main thread's innermost frame waits for, from its locals (``_store_wait``).  What torch
  gives here, as measured, is in docs/explanation/hangs.md ("What a rank can tell").
"""

import os
import sys


def _socket_with_port():
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("localhost", 0))
    s.listen(0)
    return s


def _mend_elastic_api(mod):
    if not hasattr(mod, "_get_socket_with_port"):
        mod._get_socket_with_port = _socket_with_port
    if not hasattr(mod, "log"):
        import logging

        mod.log = logging.getLogger(mod.__name__)


def _mend_numpy(mod):
    if not hasattr(mod, "BUFSIZE"):
        mod.BUFSIZE = 8192


_SHIMS = {
    "torch-elastic-socket": ("torch.distributed.elastic.agent.server.api", _mend_elastic_api),
    "numpy-bufsize": ("numpy", _mend_numpy),
}


class _AfterImport:
    """A meta-path finder that runs a function on a module right after it is executed."""

    def __init__(self, patches):
        self.patches = patches
        self.busy = set()

    def find_spec(self, name, path=None, target=None):
        if name not in self.patches or name in self.busy:
            return None
        import importlib.util

        self.busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, patch = spec.loader, self.patches[name]

        class _Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                try:
                    patch(module)
                except Exception as e:  # noqa: BLE001 - a shim must never take the process down
                    sys.stderr.write(f"dsbisect compat: {name}: {e}\n")

            def __getattr__(self, attr):
                return getattr(loader, attr)

        spec.loader = _Loader()
        return spec


def _timeout_patches(seconds):
    """The default timeouts of torch's process groups and of deepspeed.init_distributed, set to
    the run's collective timeout, so a user's own script that never passes a timeout still hangs
    for at most that long in a collective (an explicit timeout of the script is left alone)."""
    import datetime

    value = datetime.timedelta(seconds=seconds)

    def torch_constants(mod):
        for name in ("default_pg_timeout", "default_pg_nccl_timeout"):
            if hasattr(mod, name):
                setattr(mod, name, value)

    def deepspeed_constants(mod):
        if hasattr(mod, "default_pg_timeout"):
            mod.default_pg_timeout = value

    return {"torch.distributed.constants": torch_constants, "deepspeed.constants": deepspeed_constants}


def _watch_cuda_init(run_dir):
    """A patch of ``torch.cuda`` (applied once it is imported) that notes a failed CUDA
    initialisation in ``<run dir>/machine/cuda.pid<P>.json`` before it raises on: the error, the
    rank, the devices the process was given.  ``_lazy_init`` is what torch.cuda's calls and the
    C++ side's lazy init (``torch.zeros(device="cuda")``) go through."""

    def patch(mod):
        real = getattr(mod, "_lazy_init", None)
        if real is None or getattr(real, "_dsbisect_watch", False):
            return

        def _lazy_init(*args, **kwargs):
            try:
                return real(*args, **kwargs)
            except BaseException as e:
                _note_cuda_failure(run_dir, e)
                raise

        _lazy_init._dsbisect_watch = True
        mod._lazy_init = _lazy_init

    return patch


def _note_cuda_failure(run_dir, error):
    import json

    try:
        folder = os.path.join(run_dir, "machine")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"cuda.pid{os.getpid()}.json")
        text = f"{type(error).__name__}: {error}".splitlines()[0][:400] if str(error) else type(error).__name__
        note = {"error": text, "rank": os.environ.get("RANK"), "pid": os.getpid(),
                "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        with open(path + ".tmp", "w") as f:
            json.dump(note, f)
        os.replace(path + ".tmp", path)
    except OSError:  # the failure raises on all the same
        pass


def _share_ops(mod):
    import dsbisect_ops  # installed beside this file

    dsbisect_ops.patch(mod)


def _install_shims(names, extra=None):
    patches = dict(extra or {})
    for n in names:
        if n in _SHIMS:
            module, fn = _SHIMS[n]
            patches[module] = fn
    if not patches:
        return
    for module, fn in patches.items():
        if module in sys.modules:
            fn(sys.modules[module])
    sys.meta_path.insert(0, _AfterImport(patches))


def _register_stack_dump(run_dir, rank):
    import faulthandler
    import signal

    signame = os.environ.get("DSBISECT_STACK_SIGNAL", "SIGUSR1")
    signum = getattr(signal, signame, signal.SIGUSR1)
    folder = os.path.join(run_dir, "stacks")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank{rank}.pid{os.getpid()}.txt")
    # Ignored first: faulthandler puts back the handler it found when the interpreter
    # finalizes, and a stack request that lands then (a rank on its way out) must not kill
    # a run that passed.
    signal.signal(signum, signal.SIG_IGN)
    f = open(path + ".tmp", "w")  # noqa: SIM115 - kept open for the life of the process
    faulthandler.register(signum, file=f, all_threads=True, chain=False)
    os.rename(path + ".tmp", path)  # the file's name tells dsbisect the handler is in place
    _keep.append(f)


_keep = []


def _rank_log(run_dir, rank):
    """Send this rank's stdout and stderr to ``ranks/rank<R>.log`` of the run folder."""
    os.environ["DSBISECT_RANK_LOG"] = "0"  # its children write to the same descriptors already
    if not rank.isdigit():
        return
    folder = os.path.join(run_dir, "ranks")
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _die_with_parent():
    """PR_SET_PDEATHSIG: SIGKILL this process when the thread that started it ends."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return
    if os.getppid() == 1:  # the parent died before the request took effect
        os._exit(1)


_FR_FAMILIES = (  # (family, JSON entry point, pickle entry point), per recorder
    ("nccl", "_dump_nccl_trace_json", "_dump_nccl_trace"),
    ("fr", "_dump_fr_trace_json", "_dump_fr_trace"),
)
_FR_KEEP = 200  # newest entries kept per dump
_FR_FIELDS = ("record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id",
              "profiling_name", "input_sizes", "output_sizes", "state", "retired", "is_p2p", "time_created_ns",
              "time_discovered_started_ns", "time_discovered_completed_ns", "timeout_ms")


def _start_fr_probe(run_dir):
    import threading

    t = threading.Thread(target=_fr_probe_loop, args=(os.path.join(run_dir, "fr"),),
                         name="dsbisect-fr-probe", daemon=True)
    t.start()


def _fr_probe_loop(folder):
    import time

    answered = 0
    while True:
        try:
            time.sleep(0.2)
            newest = answered
            while os.path.exists(os.path.join(folder, f"request.{newest + 1}")):
                newest += 1
            if newest > answered:
                try:
                    done = _fr_answer(folder, newest)
                except Exception:  # noqa: BLE001 - the probe must never disturb the rank
                    done = True  # tried: a failing dump is not asked again for this request
                if done:
                    answered = newest
        except Exception:  # noqa: BLE001, S110 - the probe must never disturb the rank
            pass


def _fr_answer(folder, n):
    """Write this rank's answer to request ``n``; False when this process is no rank (yet)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return False
        rank = dist.get_rank()
    except Exception:  # noqa: BLE001 - whatever torch raises, this is no rank to answer for
        return False
    import json
    import time

    import threading

    frame = sys._current_frames().get(threading.main_thread().ident)  # one look: the stack and its wait agree
    out = {"n": n, "rank": rank, "pid": os.getpid(), "time": time.time(), "stack": _main_stack(frame)}
    try:
        wait = _store_wait(dist, frame)
    except Exception as e:  # noqa: BLE001 - reported in the answer
        wait = {"error": f"{type(e).__name__}: {e}"}
    if wait:
        out["store_wait"] = wait
    try:
        out["world_size"] = dist.get_world_size()
        out["backend"] = str(dist.get_backend())
    except Exception as e:  # noqa: BLE001 - reported in the answer
        out["error"] = f"world size: {type(e).__name__}: {e}"
    dumps, errors = _fr_dumps(sys.modules.get("torch._C._distributed_c10d"))
    out["dumps"] = dumps
    if errors:
        out["dump_errors"] = errors
    if not dumps:
        out["error"] = "; ".join(errors) or "no flight-recorder dump entry point in this torch"
    path = os.path.join(folder, f"rank{rank}.{n}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, default=str)
    os.replace(tmp, path)
    return True


def _main_stack(frame):
    """The main thread's Python frames from ``frame`` (its innermost), innermost first: [file, function, line]."""
    frames = []
    while frame is not None and len(frames) < 80:
        frames.append([frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno])
        frame = frame.f_back
    return frames


_C10D = os.path.join("torch", "distributed", "distributed_c10d.py")
_ELASTIC_STORE = os.path.join("torch", "distributed", "elastic", "utils", "store.py")
_STORE_WAITS = {  # (file, function) of the innermost frame of a wait on the c10d store -> form
    (_C10D, "_new_process_group_helper"): "new_group",
    (_C10D, "_store_based_barrier"): "store_barrier",
    (_C10D, "monitored_barrier"): "monitored_barrier",
    (_ELASTIC_STORE, "barrier"): "elastic_barrier",
    (_ELASTIC_STORE, "get_all"): "elastic_barrier",
}


def _store_wait(dist, frame):
    """What the main thread waits for on the c10d store, read from its innermost frame's locals:
    a process group's construction (gloo's connection rendezvous, NCCL's eager init), the store
    barrier of ``init_process_group``/``new_group``, ``monitored_barrier``, torch.distributed.elastic's
    store barrier.  {"form", "key", "ranks" (global ranks that must come, [] unknown), "count",
    "joined" (the barrier's counter, read through a clone of the store), "function"}; None when
    the main thread (``frame``: its innermost frame) is in none of them."""
    if frame is None:
        return None
    name = os.path.normpath(frame.f_code.co_filename)
    form = next((f for (file, fn), f in _STORE_WAITS.items()
                 if frame.f_code.co_name == fn and name.endswith(file)), None)
    if form is None:
        return None
    loc = frame.f_locals
    out = {"form": form, "function": frame.f_code.co_name, "key": "", "ranks": [], "count": None, "joined": None}
    if form == "new_group":
        out["key"] = f"pg:{loc.get('group_name')}"
        out["ranks"] = [int(r) for r in loc.get("global_ranks_in_group") or []]
        if loc.get("split_from") is not None:  # ncclCommSplit of the world's communicator: every rank takes part
            out["ranks"] = list(range(dist.get_world_size()))
    elif form == "monitored_barrier":
        group = loc.get("group_to_use")
        if group is not None:
            out["key"] = f"monitored_barrier:{getattr(group, 'group_name', '')}"
            out["ranks"] = [int(r) for r in dist.get_process_group_ranks(group)]
    else:
        key = loc.get("store_key") if form == "store_barrier" else loc.get("key_prefix")
        count = loc.get("rendezvous_count") if form == "store_barrier" else loc.get("world_size")
        out["key"], out["count"] = str(key or ""), count if isinstance(count, int) else None
        if out["count"] == dist.get_world_size():
            out["ranks"] = list(range(out["count"]))
        if form == "store_barrier" and key:
            out["joined"] = _store_count(loc.get("store"), key)
    return out


def _store_count(store, key):
    """The counter ``key`` of the store, through a new connection (the rank's own client is busy in
    its wait); None where the store cannot be cloned."""
    clone = getattr(store, "clone", None)
    if clone is None:
        return None
    try:
        return int(clone().add(key, 0))
    except Exception:  # noqa: BLE001 - a fact left out
        return None


def _fr_dumps(c10d):
    """Each recorder's state as a plain dict, and what failed."""
    dumps, errors = [], []
    if c10d is None:
        return dumps, ["torch._C._distributed_c10d is not loaded"]
    for family, json_name, pickle_name in _FR_FAMILIES:
        for name in (json_name, pickle_name):
            fn = getattr(c10d, name, None)
            if fn is None:
                continue
            try:
                data = _fr_call(fn, name == json_name)
            except Exception as e:  # noqa: BLE001 - reported in the answer
                errors.append(f"{name}: {type(e).__name__}: {e}")
                continue
            if not isinstance(data, dict):
                errors.append(f"{name}: not a dict")
                continue
            entries = data.get("entries") or []
            dumps.append({
                "family": family, "via": name, "version": data.get("version"),
                "pg_status": data.get("pg_status") or {}, "pg_config": data.get("pg_config") or {},
                "entries": [{k: e[k] for k in _FR_FIELDS if k in e} for e in entries[-_FR_KEEP:]
                            if isinstance(e, dict)],
            })
            break
    return dumps, errors


def _fr_call(fn, is_json):
    import json

    if is_json:
        try:
            raw = fn(includeCollectives=True, onlyActive=False)
        except TypeError:  # older signature
            raw = fn()
        return json.loads(raw)
    try:
        raw = fn(includeCollectives=True, includeStackTraces=False, onlyActive=False)
    except TypeError:
        raw = fn()
    return _plain(_unpickle_data(raw))


def _unpickle_data(raw):
    """Plain containers and scalars only: every class or function lookup is refused."""
    import io
    import pickle

    class DataOnly(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"refused to load {module}.{name}")

    return DataOnly(io.BytesIO(raw)).load()


def _plain(value):
    """Bytes keys and values as text, tuples as lists: what JSON holds."""
    if isinstance(value, dict):
        return {(k.decode("utf-8", "replace") if isinstance(k, bytes) else k): _plain(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _top_modules(dist):
    """The importable top-level modules of a distribution (top_level.txt, else its RECORD)."""
    names = (dist.read_text("top_level.txt") or "").split()
    if not names:
        names = sorted({f.parts[0].removesuffix(".py") for f in (dist.files or [])
                        if f.parts and not f.parts[0].endswith((".dist-info", ".data", ".pth"))
                        and f.parts[0] not in ("..", "bin")})
    return [n for n in names if n.isidentifier() and not n.startswith("_") and n not in ("tests", "test")]


def _import_error(wanted):
    """Import every top-level module of each distribution in ``wanted``; the first failure, or ""."""
    import importlib
    import importlib.metadata as md

    for name in wanted:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            return f"{name} is not installed"
        for mod in _top_modules(dist):
            try:
                importlib.import_module(mod)
            except BaseException as e:  # noqa: BLE001 - SystemExit of a package counts as a failure too
                last = f"{type(e).__name__}: {e}".splitlines()[0][:400] if str(e) else type(e).__name__
                return f"import {mod} ({name}) failed: {last}"
    return ""


def _venv_facts(wanted, gpus):
    """What the venv of this interpreter is: its python, package versions, the first import of
    ``wanted`` that fails, torch's CUDA and NCCL, the toolkit torch builds extensions with; with
    ``gpus`` the GPUs' names too (that initializes CUDA: never inside a run).  The one import
    check: the hook's inside a run, and (its text taken by ``facts``) the separate check and
    every node's check run it."""
    import importlib.metadata as md

    out = {"python": sys.version.split()[0], "versions": {}, "error": _import_error(wanted)}
    for name in ["torch", "deepspeed", "transformers", "accelerate", "numpy", "pydantic", *wanted]:
        try:
            out["versions"][name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except BaseException as e:  # noqa: BLE001 - reported
            out["error"] = out["error"] or f"import torch failed: {type(e).__name__}: {e}"
            return out
    out["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    if gpus and torch.cuda.is_available():
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if out.get("cuda"):  # without initializing CUDA: ncclGetVersion, and where nvcc would be looked for
        try:
            out["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001, S110 - a fact left out
            pass
        try:
            from torch.utils.cpp_extension import CUDA_HOME

            out["cuda_home"] = CUDA_HOME or ""
        except BaseException:  # noqa: BLE001
            out["cuda_home"] = ""
    return out


def _check_imports(run_dir, wanted, bytecode=False):
    """The point's import check, in this process (see the module's docstring)."""
    import json
    import time

    t0 = time.monotonic()
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = before and not bytecode  # the check's imports only, then as it was
    try:
        out = _venv_facts(wanted, False) | {"where": "run", "pid": os.getpid()}
    finally:
        sys.dont_write_bytecode = before
    out["seconds"] = round(time.monotonic() - t0, 3)
    path = os.path.join(run_dir, "import_check.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, default=str)
    os.replace(tmp, path)
    if out["error"]:
        sys.stderr.write(f"dsbisect: import check: {out['error']}\n")
        sys.stderr.flush()
        os._exit(125)


def _start_trace(run_dir):
    """What this interpreter uses from outside its venv (``dsbisect_trace.py``, beside this file;
    a copy of this hook without it, as some tests make, records nothing)."""
    try:
        import dsbisect_trace
    except ModuleNotFoundError:
        return
    dsbisect_trace.start(run_dir)


def _measure(run_dir, rank):
    """The rank's own figures for the run (``dsbisect_measure.py``, beside this file): started in
    a process with ``RANK`` set, unless ``DSBISECT_MEASURE=0``; the module, or None."""
    if not run_dir or rank is None or not os.path.isdir(run_dir) or os.environ.get("DSBISECT_MEASURE", "1") == "0":
        return None
    try:
        import dsbisect_measure
    except ModuleNotFoundError:  # a copy of this hook without it, as some tests make
        return None
    dsbisect_measure.start(run_dir, rank)
    return dsbisect_measure


def _decode_env():
    """Variables that reached this node base64-encoded (see multinode.write_env_file)."""
    import base64
    import json

    os.environ.update(json.loads(base64.b64decode(os.environ.pop("DSBISECT_ENV_B64"))))


def _main():
    if "DSBISECT_ENV_B64" in os.environ:
        _decode_env()
    check = os.environ.pop("DSBISECT_CHECK_IMPORTS", None)  # the first interpreter checks, no child again
    bytecode = os.environ.pop("DSBISECT_CHECK_BYTECODE", None) == "1"
    compat = [s for s in os.environ.get("DSBISECT_COMPAT", "").split(",") if s]
    timeout = os.environ.get("DSBISECT_COLLECTIVE_TIMEOUT")
    extra = _timeout_patches(float(timeout)) if timeout else {}
    if os.environ.get("DSBISECT_OPS_DIR"):  # just-in-time ops shared between venvs (dsbisect_ops.py)
        extra["torch.utils.cpp_extension"] = _share_ops
    run_dir = os.environ.get("DSBISECT_RUN_DIR")
    measure = _measure(run_dir, os.environ.get("RANK"))
    if measure is not None:
        extra["torch.optim.optimizer"] = measure.watch_steps
    if run_dir and os.environ.get("DSBISECT_WATCH_CUDA", "1") != "0":  # a failed CUDA init is the machine's
        extra["torch.cuda"] = _watch_cuda_init(run_dir)
    if compat or extra:
        _install_shims(compat, extra)
    mortal = run_dir or os.environ.get("DSBISECT_DIE_WITH_PARENT") == "1"  # the separate import check
    if mortal and sys.platform.startswith("linux") and os.environ.get("DSBISECT_PDEATHSIG", "1") == "1":
        _die_with_parent()
    if run_dir and os.path.isdir(run_dir) and os.environ.get("DSBISECT_TRACK_IMPORTS", "1") != "0":
        _start_trace(run_dir)
    rank = os.environ.get("RANK")
    if run_dir and rank is not None and os.path.isdir(run_dir):
        if os.environ.get("DSBISECT_RANK_LOG") == "1":
            try:
                _rank_log(run_dir, rank)
            except OSError as e:  # the output stays where it was; the stack dump still registers
                sys.stderr.write(f"dsbisect hook: no rank log: {e}\n")
        _register_stack_dump(run_dir, rank)
        if os.environ.get("DSBISECT_FR_PROBE", "1") != "0":
            _start_fr_probe(run_dir)
    if check not in (None, "", "0") and run_dir and os.path.isdir(run_dir):  # "0": checked apart
        _check_imports(run_dir, [w for w in check.split(",") if w], bytecode)


try:
    _main()
except Exception as e:  # noqa: BLE001 - never break an interpreter start
    sys.stderr.write(f"dsbisect hook: {e}\n")
