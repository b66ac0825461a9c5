"""dsbisect's start-up hook for point venvs.

Installed into each point venv as ``dsbisect_hook.py`` with a ``dsbisect_hook.pth`` that
imports it, so it runs in every interpreter of the venv: the ``deepspeed`` launcher, the
ranks and their children.  Standard library only.  It does nothing unless dsbisect's
variables are set, and it never raises.

- ``DSBISECT_COMPAT=name,name``: compatibility shims for old releases on a new torch,
  applied right after the module they mend is imported.
- ``DSBISECT_RUN_DIR`` (any process of a run): asks the kernel to kill this process when
  its parent dies (``PR_SET_PDEATHSIG``), so that killing dsbisect (even with SIGKILL) takes
  the launcher, and the launcher's death takes the ranks, with it.
- ``DSBISECT_RUN_DIR`` (in a rank, i.e. with ``RANK`` set): registers faulthandler on
  ``DSBISECT_STACK_SIGNAL`` (default SIGUSR1) writing to
  ``<run dir>/stacks/rank<R>.pid<P>.txt``, so dsbisect can ask every rank for its Python
  stack without ptrace.  The file's existence tells dsbisect the handler is in place.
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
                except Exception as e:  # a shim must never take the process down
                    sys.stderr.write(f"dsbisect compat: {name}: {e}\n")

            def __getattr__(self, attr):
                return getattr(loader, attr)

        spec.loader = _Loader()
        return spec


def _install_shims(names):
    patches = {}
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


def _main():
    compat = [s for s in os.environ.get("DSBISECT_COMPAT", "").split(",") if s]
    if compat:
        _install_shims(compat)
    run_dir = os.environ.get("DSBISECT_RUN_DIR")
    if run_dir and sys.platform.startswith("linux") and os.environ.get("DSBISECT_PDEATHSIG", "1") == "1":
        _die_with_parent()
    rank = os.environ.get("RANK")
    if run_dir and rank is not None and os.path.isdir(run_dir):
        _register_stack_dump(run_dir, rank)


try:
    _main()
except Exception as e:  # never break an interpreter start
    sys.stderr.write(f"dsbisect hook: {e}\n")
