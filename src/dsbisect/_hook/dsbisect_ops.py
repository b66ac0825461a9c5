"""Just-in-time ops built once and shared by every point venv that would build them the same.

Installed beside ``dsbisect_hook.py`` in each point venv; standard library only, and importing
it does nothing.  With ``DSBISECT_OPS_DIR`` set (dsbisect sets it for every run, to the env
root's ``ops/``), the hook wraps ``torch.utils.cpp_extension.load`` -- what DeepSpeed's
``OpBuilder.jit_load`` calls, e.g. for the CPU ``deepspeed_shm_comm`` op under
``DS_ACCELERATOR=cpu`` -- right after that module is imported.

A load is keyed by the digest of what the build reads and how (``op_key``): the contents of
the op's files as installed in the venv (each source, the files in and below each source's
folder -- its local headers --, every file under each include path), its flags with the venv's folder taken
out, and the toolchain (Python, torch's version and build, the C++ compiler's and ninja's path
and version, the CPU's flags for ``-march=native``).  Venvs whose key is the same get one build:

- ``<ops>/<name>-<key>/`` (finished: ``dsbisect-op.json`` in it) holds the op's files copied
  (``src/``) and torch's build of them (``build/<name>.so``); a load imports that library and
  compiles nothing.
- Otherwise, under an exclusive ``flock`` on ``<ops>/<name>-<key>.lock`` (the kernel drops it
  when the holder dies: no stale lock), the files are copied into ``<name>-<key>.tmp/src/``,
  torch builds them there (the paths in ninja's commands are the copy's, the same for every
  venv with this key), the marker is written and the folder renamed into place.  A peer that
  waited on the lock finds the finished folder and imports it.
- Anything this cannot handle (``build_directory`` given, a non-module or standalone build,
  positional flags, files spread over a whole disk) or a shared build that fails goes to
  torch's own ``load`` unchanged: the op is then built in the venv as before (one line on
  stderr says why, for a failed shared build).
"""

import fcntl
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

FORMAT = 1
MARKER = "dsbisect-op.json"
MAX_FILES = 4000  # an op's own files; more means the common folder is not the op's
MAX_BYTES = 64 << 20
SHARED_KWARGS = {"extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths",
                 "verbose", "with_cuda", "with_sycl", "keep_intermediates", "is_python_module", "is_standalone",
                 "build_directory"}
BUILD_ENV = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "ROCM_HOME",
             "PYTORCH_ROCM_ARCH", "TORCH_DONT_CHECK_COMPILER_ABI")


class NotShared(Exception):
    """This load is left to torch as it is."""


def op_files(sources, include_paths):
    """(root, files): the folder that holds all of an op's files, and those files relative to it:
    each source, every file in and below each source's folder (its local headers, e.g. DeepSpeed's
    ``comm/x86_64/shm.h``), every file under each include path.  An include path that does not
    exist (DeepSpeed names ``csrc/cpu/includes``, which its wheels lack) adds no file."""
    srcs = [os.path.abspath(s) for s in sources]
    incs = [os.path.abspath(p) for p in include_paths]
    if not srcs or not all(os.path.isfile(s) for s in srcs):
        raise NotShared("a source is missing")
    root = os.path.commonpath([os.path.dirname(s) for s in srcs] + incs)
    if root.count(os.sep) < 2:
        raise NotShared(f"the op's files share no folder of their own ({root})")
    found = set(srcs)
    for folder in {os.path.dirname(s) for s in srcs} | {p for p in incs if os.path.isdir(p)}:
        for dirpath, _, names in os.walk(folder):
            found.update(os.path.join(dirpath, n) for n in names)
            if len(found) > MAX_FILES:
                raise NotShared(f"more than {MAX_FILES} files under {root}: too many to copy")
    if sum(os.path.getsize(f) for f in found) > MAX_BYTES:
        raise NotShared(f"{len(found)} files under {root}: too large to copy")
    return root, sorted(os.path.relpath(f, root) for f in found)


def relocate(value, root, to):
    """``value`` (a flag, a path, a list or dict of them) with the folder ``root`` written as ``to``."""
    if isinstance(value, dict):
        return {k: relocate(v, root, to) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [relocate(v, root, to) for v in value]
    if isinstance(value, str):  # the folder itself or below it, not a sibling whose name it starts
        return re.sub(re.escape(root) + r"(?=/|$|[\s:;,=\"'])", lambda m: to, value)
    return value


def op_key(name, root, files, sources, include_paths, flags, tools):
    """The digest of one build: the op's name, its files' contents (relative names), its sources,
    include paths and flags with ``root`` written as ``<op>``, and the toolchain ``tools``."""
    h = hashlib.sha256()
    plan = {"format": FORMAT, "name": name, "tools": tools, "flags": relocate(flags, root, "<op>"),
            "sources": relocate([os.path.abspath(s) for s in sources], root, "<op>"),
            "include_paths": relocate([os.path.abspath(p) for p in include_paths], root, "<op>")}
    h.update(json.dumps(plan, sort_keys=True).encode())
    for rel in files:
        with open(os.path.join(root, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:24]


def _tool(name):
    """A program's real path and the first line of its ``--version``, or None where it is missing."""
    found = shutil.which(name)
    if not found:
        return None
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    return [os.path.realpath(found), (out.strip().splitlines() or [""])[0]]


def _cpu():
    """The first ``flags`` line of /proc/cpuinfo, digested (DeepSpeed's CPU ops use -march=native)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith(("flags", "Features"))), "")
    except OSError:
        line = ""
    return [platform.machine(), hashlib.sha256(line.encode()).hexdigest()[:16]]


def toolchain():
    """What a build of the same files depends on besides them (torch must be imported): the
    interpreter, torch's build, the compiler (its path and version), the CPU and the build
    variables. Not ninja: it only drives the compiler (the .so is the same whichever ninja ran
    it), and a finished build is loaded without it. Keyed by its path, the ninja a rank found
    first (for a command line, each point venv's own: DeepSpeed depends on ninja) made every
    venv's key its own (seen: a bisection of a command line compiled the shm op in each of its
    five points where three had the sources of another)."""
    import sysconfig

    import torch

    return {"python": sys.version, "soabi": sysconfig.get_config_var("SOABI"), "torch": torch.__version__,
            "torch_git": getattr(torch.version, "git_version", None), "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None), "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 0)),
            "cxx": _tool(os.environ.get("CXX") or "c++"), "cpu": _cpu(),
            "env": {k: os.environ.get(k) for k in BUILD_ENV if os.environ.get(k)}}


def _import(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _say(verbose, text):
    if verbose:
        sys.stderr.write(f"dsbisect ops: {text}\n")
        sys.stderr.flush()


def _plan(name, sources, args, kwargs):
    """(root, files, key, sources, include paths, the other flags) of a load that can be shared."""
    if args or set(kwargs) - SHARED_KWARGS or kwargs.get("build_directory") is not None \
            or kwargs.get("is_python_module", True) is not True or kwargs.get("is_standalone", False):
        raise NotShared("a load this cannot share")
    sources = [sources] if isinstance(sources, str) else list(sources)
    includes = list(kwargs.get("extra_include_paths") or [])
    root, files = op_files(sources, includes)
    flags = {k: kwargs.get(k) for k in ("extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags",
                                         "with_cuda", "with_sycl") if kwargs.get(k) is not None}
    key = op_key(name, root, files, sources, includes, flags, toolchain())
    return root, files, key, sources, includes, flags


def _build(original, name, plan, folder, kwargs):
    """Copy the op's files into ``folder``/src and have torch build them in ``folder``/build."""
    root, files, key, sources, includes, flags = plan
    src, build = os.path.join(folder, "src"), os.path.join(folder, "build")
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        shutil.copy2(os.path.join(root, rel), os.path.join(src, rel))
    os.makedirs(build)
    t0 = time.monotonic()
    module = original(name, relocate([os.path.abspath(s) for s in sources], root, src),
                      **{**{k: kwargs[k] for k in ("verbose", "keep_intermediates") if k in kwargs},
                         **relocate(flags, root, src),
                         "extra_include_paths": relocate([os.path.abspath(p) for p in includes], root, src),
                         "build_directory": build})
    if not os.path.isfile(os.path.join(build, name + ".so")):  # torch renamed it (name_v1: reloaded in this process)
        raise RuntimeError(f"torch built no {name}.so")
    with open(os.path.join(folder, MARKER), "w") as f:
        json.dump({"format": FORMAT, "name": name, "key": key, "files": files, "built_from": root,
                   "seconds": round(time.monotonic() - t0, 3), "created": time.time()}, f)
    return module


CLAIMS = "ops-building"  # in the run's folder: dsbisect's phases.look_claims reads it


class _Claim:
    """``<run dir>/ops-building/<name>.<pid>`` while this process waits for or makes the shared
    build of ``name``: how dsbisect tells that *this* run compiles (another job's build in the
    shared folder is not this run's).  Nothing without ``DSBISECT_RUN_DIR``; never fails a load."""

    def __init__(self, name):
        run = os.environ.get("DSBISECT_RUN_DIR")
        self.path = os.path.join(run, CLAIMS, f"{name}.{os.getpid()}") if run else None

    def __enter__(self):
        if self.path:
            try:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                open(self.path, "w").close()
            except OSError:
                self.path = None
        return self

    def __exit__(self, *exc):
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _build_shared(original, name, plan, final, kwargs):
    """Under the lock of ``final``: import it if a peer finished it meanwhile, else build it
    in ``final``.tmp and rename that into place."""
    with _Claim(name):
        return _build_locked(original, name, plan, final, kwargs)


def _build_locked(original, name, plan, final, kwargs):
    verbose = bool(kwargs.get("verbose"))
    os.makedirs(os.path.dirname(final), exist_ok=True)
    with open(final + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if this process dies
        if os.path.isfile(os.path.join(final, MARKER)):  # a peer built it while this one waited
            _say(verbose, f"{name}: loading the shared build {os.path.basename(final)} (built while waiting)")
            return _import(name, os.path.join(final, "build", name + ".so"))
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)  # a killed build's leftovers
        try:
            _say(verbose, f"{name}: building the shared build {os.path.basename(final)}")
            module = _build(original, name, plan, tmp, kwargs)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return module


def shared(original, store):
    """``torch.utils.cpp_extension.load`` that shares finished builds under ``store``."""

    def load(name, sources, *args, **kwargs):
        verbose = bool(kwargs.get("verbose"))
        try:
            plan = _plan(name, sources, args, kwargs)
        except (NotShared, OSError, ImportError) as e:
            _say(verbose, f"{name}: built in the venv ({e})")
            return original(name, sources, *args, **kwargs)
        final = os.path.join(store, f"{name}-{plan[2]}")
        library = os.path.join(final, "build", name + ".so")
        try:
            if os.path.isfile(os.path.join(final, MARKER)):
                _say(verbose, f"{name}: loading the shared build {os.path.basename(final)} (no compile)")
                return _import(name, library)
            return _build_shared(original, name, plan, final, kwargs)
        except (RuntimeError, OSError, subprocess.SubprocessError, ImportError) as e:
            sys.stderr.write(f"dsbisect ops: {name}: no shared build ({str(e)[:200]}); building in the venv\n")
        return original(name, sources, *args, **kwargs)

    load.__wrapped__ = original
    return load


def patch(module):
    """Wrap ``module.load`` (``module`` is ``torch.utils.cpp_extension``) once."""
    store = os.environ.get("DSBISECT_OPS_DIR")
    if store and not hasattr(module.load, "__wrapped__") and sys.platform.startswith("linux"):
        module.load = shared(module.load, store)
