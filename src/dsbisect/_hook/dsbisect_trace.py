"""What a run's interpreter used from outside its venv: the start-up hook's record of inputs.

Installed beside ``dsbisect_hook.py`` in each point venv; standard library only; the hook
calls ``start(run_dir)`` in every interpreter of a run (``DSBISECT_RUN_DIR`` set; off with
``DSBISECT_TRACK_IMPORTS=0``).  It keeps, for this process, and writes to
``<run dir>/imports/pid<P>.json`` (whole, through a ``.tmp`` and a rename, by a daemon thread
within 0.5 s of something new, at exit, before an ``exec``, and at ``os._exit`` of a fork child,
which runs no ``atexit``: a DataLoader worker, a ``multiprocessing`` child):

- ``files``: ``[path, size, mtime_ns]`` of each local module imported (a module whose file
  is outside the venv, the standard library, every ``site-packages``/``dist-packages``, the
  run folder and the caches (``~/.cache``, ``~/.triton``, torch's extensions and inductor's): the repro's ``helper.py``, a sibling package, an editable
  install), and of the script (``sys.argv[0]``);
- ``read``: ``[path, size, mtime_ns, ctime_ns]`` of each regular file opened for reading (an
  ``open`` audit event: ``open()``, ``os.open``, what ``np.load``, ``torch.load``,
  ``json.load`` of a path open), outside the same folders and ``/proc``, ``/sys``, ``/dev``,
  bytecode left out; the path as opened, made absolute (a symbolic link is followed when
  dsbisect digests it, so a link pointed elsewhere reads as a change), its state when first
  opened; also each regular file native code maps without execute permission or holds open for
  reading when the record is written (a safetensors file, ``np.memmap``, an HDF5 file: code
  that opens, reads and closes a file between two looks is not seen), outside the system's
  folders (``/usr/lib``, ``/etc``...);
- ``wrote``: the paths opened for writing (``w``, ``a``, ``x``, ``+``; ``O_WRONLY``,
  ``O_RDWR``, ``O_CREAT``...): the run's outputs;
- ``given``: ``[path, size, mtime_ns, ctime_ns]`` of the existing files a child process was
  given (its program, when named by a path, and each argument, or ``--opt=VALUE``'s value,
  that is a file), for children that record nothing themselves (``cat data.txt``, a shell);
- ``listed``: ``[folder, mtime_ns, ctime_ns]`` of each folder listed (``os.listdir``,
  ``os.scandir``: ``glob``, ``os.walk``, ``pathlib``), except by the import system
  (``importlib``, ``pkgutil``, ``site``...), which lists every folder on ``sys.path``;
- ``programs``: ``[name, resolved path or ""]`` for each program a child was started with by
  name (``subprocess``, ``os.system``, ``os.exec*p``, ``os.posix_spawnp``; a shell line's
  commands), resolved along the ``PATH`` the child got;
- ``modules``: ``[top-level module, its folder]`` for each top-level module imported from a
  ``site-packages``/``dist-packages`` folder, wherever that is (the point venv, the base a
  layered venv adds, a ``--target`` install): dsbisect names their distributions;
- ``capped``: what had more entries than are kept (``files``, ``read``...: 4000 each); a run
  whose record is capped is never reused.

Cheap: one audit hook, which returns at once for events it does not watch; a path is looked
at once (a ``stat``, a ``realpath`` only outside the skipped prefixes).  It never raises: an
exception in an audit hook would fail the operation it audits.
"""

import os
import sys
import threading

MAX = 4000  # entries of one kind kept per process; more: "capped"
_PSEUDO = ("/proc/", "/sys/", "/dev/")
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_WATCHED = frozenset({"open", "os.listdir", "os.scandir", "subprocess.Popen", "os.system", "os.exec",
                      "os.posix_spawn"})
_IMPORTERS = ("importlib", "_frozen_importlib", "pkgutil", "site", "zipimport", "pkg_resources", "setuptools",
              "_distutils_hack", "importlib_metadata", "importlib_resources")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_SHELL_BREAKS = frozenset({";", "&&", "||", "|", "&", "(", "((", "|&", ";;"})
_KINDS = ("files", "read", "wrote", "given", "listed", "programs", "modules")


class Trace:
    """This process's record (see the module's docstring) and where it goes."""

    def __init__(self, run_dir):
        self.folder = os.path.join(run_dir, "imports")
        self.skip = _foreign_roots(run_dir)
        self.kinds = {k: {} for k in _KINDS}
        self.capped = set()
        self.seen_modules = set()
        self.ignored = set()  # paths native code holds that are no inputs: looked at once
        self.n_modules = -1
        self.changes = 0
        self.written = 0
        self.lock = threading.Lock()
        self.thread_pid = os.getpid()

    def add(self, kind, key, value):
        if self.thread_pid != os.getpid():  # a fork child's first note: a thread of its own
            self.thread_pid = os.getpid()
            try:
                _start_thread(self)
            except RuntimeError:  # at interpreter shutdown: the exit's flush writes it
                pass
        entries = self.kinds[kind]
        if key in entries:
            return
        if len(entries) >= MAX:
            self.capped.add(kind)
            return
        entries[key] = value
        self.changes += 1

    def foreign(self, path):
        """Whether ``path`` (absolute) belongs to the interpreter, a venv, the run or a cache."""
        if path.startswith(self.skip) or _pseudo(path):
            return True
        real = os.path.realpath(path)
        parts = real.split(os.sep)
        return real.startswith(self.skip) or "site-packages" in parts or "dist-packages" in parts

    def in_fork_child(self):
        """A fork child: a lock of its own (the parent's may have been held), and a flush at
        ``os._exit``, the way such children end (no ``atexit`` runs); its thread is started when
        it first notes something (threads are not forked; a ``preexec_fn`` child must start none)."""
        self.lock = threading.Lock()
        real_exit = os._exit

        def _exit(code):
            try:
                self.flush()
            except Exception:  # noqa: BLE001, S110
                pass
            real_exit(code)

        os._exit = _exit

    def flush(self):
        """Write the record when something is new (one writer at a time; never waits long)."""
        if not self.lock.acquire(timeout=5):
            return
        try:
            if len(sys.modules) != self.n_modules:
                self.n_modules = len(sys.modules)
                _scan_modules(self)
            _scan_native(self)
            if self.changes != self.written:
                self.written = self.changes
                _write(self)
        finally:
            self.lock.release()


def start(run_dir):
    """Keep this process's record for the run in ``run_dir``."""
    import atexit

    trace = Trace(run_dir)
    atexit.register(trace.flush)
    os.register_at_fork(after_in_child=trace.in_fork_child)
    sys.addaudithook(_audit_hook(trace))
    _start_thread(trace)


def _start_thread(trace):
    t = threading.Thread(target=_loop, args=(trace,), name="dsbisect-imports", daemon=True)
    t.start()


def _loop(trace):
    import time

    while True:
        try:
            time.sleep(0.5)
            trace.flush()
        except Exception:  # noqa: BLE001, S110 - the record must never disturb the process
            pass


def _foreign_roots(run_dir):
    """Folders whose files are not the repro's: the venv's, the standard library's, the run's,
    the build caches'.  Not the base interpreter's whole prefix: for a system python that is
    ``/usr`` or ``/usr/local``, where data may live (its site folders are skipped by name)."""
    home = os.path.expanduser("~")
    roots = {sys.prefix, sys.exec_prefix, os.path.dirname(os.__file__), run_dir,
             *(os.path.join(home, d) for d in (".cache", ".triton", ".nv"))}  # ~/.nv: CUDA's kernel cache
    for name in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "PYTHONPYCACHEPREFIX", "DSBISECT_OPS_DIR",
                 "TORCHINDUCTOR_CACHE_DIR"):
        if os.environ.get(name):
            roots.add(os.environ[name])
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots if r)


# ------------------------------------------------------------------ audit events


def _audit_hook(trace):
    watched = _WATCHED

    def hook(event, args):
        if event in watched:
            try:
                _on_event(trace, event, args)
            except Exception:  # noqa: BLE001, S110 - an audit hook that raises fails the operation
                pass

    return hook


def _on_event(trace, event, args):
    if event == "open":
        _on_open(trace, args[0], args[2] if len(args) > 2 else 0)
    elif event in ("os.listdir", "os.scandir"):
        caller = sys._getframe(2)  # _on_event <- hook <- the caller of os.listdir
        _on_listing(trace, args[0] if args else None, caller)
    elif event == "subprocess.Popen":
        _on_spawn(trace, args[0], args[1], args[2], args[3])
    elif event == "os.system":
        _on_shell_line(trace, _text(args[0]), os.getcwd(), None)
    else:  # os.exec (path, args, env), os.posix_spawn (path, argv, env)
        _on_spawn(trace, args[0], args[1], None, args[2])
        if event == "os.exec":  # this image ends here: no atexit
            trace.flush()


def _text(value):
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return os.fsdecode(value)
    if hasattr(value, "__fspath__"):
        return _text(os.fspath(value))
    return None


def _on_open(trace, path, flags):
    path = _text(path)
    if not path:
        return
    full = os.path.abspath(path)
    if isinstance(flags, int) and flags & _WRITES:
        if not full.startswith(trace.skip) and not _pseudo(full):
            trace.add("wrote", full, full)
        return
    if full in trace.kinds["read"] or "__pycache__" in full or full.endswith(".pyc") or trace.foreign(full):
        return
    state = _state(full)
    if state is not None:
        trace.add("read", full, state)


def _pseudo(path):
    """Whether ``path`` is in (or is) /proc, /sys or /dev: the machine's state, not a run's input
    (DeepSpeed's launcher lists /proc, through psutil, to stop its ranks when one fails)."""
    return (path + "/").startswith(_PSEUDO)


def _state(path):
    """[path, size, mtime_ns, ctime_ns] of a regular file, else None."""
    import stat

    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return [path, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _on_listing(trace, path, caller):
    name = caller.f_globals.get("__name__", "") if caller is not None else ""
    if name.startswith(_IMPORTERS):
        return
    path = "." if path is None else _text(path)
    if path is None:  # a file descriptor
        return
    full = os.path.abspath(path or ".")
    if full in trace.kinds["listed"] or trace.foreign(full):
        return
    try:
        st = os.stat(full)
    except (OSError, ValueError):
        return
    trace.add("listed", full, [full, st.st_mtime_ns, st.st_ctime_ns])


def _on_spawn(trace, program, argv, cwd, env):
    where = os.path.abspath(_text(cwd) or ".")
    args = [_text(a) for a in argv] if isinstance(argv, (list, tuple)) else [_text(argv)]
    args = [a for a in args if a is not None]
    program = _text(program) or (args[0] if args else None)
    if not program:
        return
    if os.path.basename(program) in _SHELLS and len(args) > 2 and args[1] == "-c":
        _on_program(trace, program, where, env)
        _on_shell_line(trace, args[2], where, env)
        return
    _on_program(trace, program, where, env)
    _on_given(trace, args[1:], where)


def _on_shell_line(trace, line, cwd, env):
    """The commands of a shell line (the first word of each) and the files its words name."""
    import shlex

    if not line:
        return
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:
        words = line.split()
    first = True
    for w in words:
        if w in _SHELL_BREAKS:
            first = True
        elif first and "=" not in w:  # NAME=value before a command is an assignment
            _on_program(trace, w, cwd, env)
            first = False
        elif not first:
            _on_given(trace, [w], cwd)


def _on_program(trace, program, cwd, env):
    if os.sep in program:
        _on_given(trace, [program], cwd)
        return
    if program in trace.kinds["programs"]:
        return
    path = None
    if env is not None:
        path = env.get("PATH", env.get(b"PATH")) if hasattr(env, "get") else None
    path = _text(path) if path is not None else os.environ.get("PATH", os.defpath)
    trace.add("programs", program, [program, _which(program, path or "")])


def _which(name, path):
    for folder in path.split(os.pathsep):
        candidate = os.path.abspath(os.path.join(folder or ".", name))
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return ""


def _on_given(trace, words, cwd):
    for word in words[:200]:
        for name in (word, word.partition("=")[2] if word[:1] == "-" else ""):
            if not name:
                continue
            full = os.path.abspath(os.path.join(cwd, name))
            if full in trace.kinds["given"] or trace.foreign(full):
                continue
            state = _state(full)
            if state is not None:
                trace.add("given", full, state)


# ------------------------------------------------------------------ modules


def _scan_modules(trace):
    """The local modules and the top-level modules from site folders imported since the last look."""
    seen = trace.seen_modules
    # The script by its argv too: __main__ loses its __file__ when the script ends with an error.
    script = sys.argv[0] if sys.argv and str(sys.argv[0]).endswith(".py") else None
    found = [(None, None, script)] + [(name, m, getattr(m, "__file__", None))
                                      for name, m in list(sys.modules.items()) if name not in seen]
    for name, module, path in found:
        if name is not None and (name != "__main__" or path):
            seen.add(name)
        if isinstance(path, str):
            _note_local(trace, path)
        if name is not None and "." not in name and module is not None:
            _note_site_module(trace, name, module, path)


def _note_local(trace, path):
    """Add ``path`` as [real path, size, mtime_ns] when it is the repro's own file."""
    if path.startswith(trace.skip):  # the common case (the venv's, the base's), without a realpath
        return
    real = os.path.realpath(path)
    if real in trace.kinds["files"] or trace.foreign(real):
        return
    try:
        st = os.stat(real)
    except OSError:
        return
    trace.add("files", real, [real, st.st_size, st.st_mtime_ns])


def _note_site_module(trace, name, module, path):
    """[name, folder] of a top-level module imported from a site-packages/dist-packages folder."""
    if isinstance(path, str):
        folder = os.path.dirname(path)
        if os.path.basename(path).startswith("__init__."):
            folder = os.path.dirname(folder)
    else:  # a namespace package: its first portion's folder
        portions = list(getattr(module, "__path__", None) or ())
        if not portions or not isinstance(portions[0], str):
            return
        folder = os.path.dirname(portions[0])
    real = os.path.realpath(folder)
    parts = real.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        trace.add("modules", name, [name, real])


_SYSTEM = ("/usr/lib/", "/lib/", "/lib64/", "/usr/share/", "/etc/", "/var/", "/run/")  # the loader's, the locale's


def _scan_native(trace):
    """Files that native code holds, which no ``open`` event shows: mapped without execute
    permission (a safetensors file, a memory-mapped array: libraries have an executable
    mapping) or open for reading (an HDF5 file), outside the system's folders."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    libraries, mapped = set(), set()
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            (libraries if "x" in parts[1] else mapped).add(parts[5])
    for path in mapped - libraries:
        _note_native(trace, path)
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return
    for fd in fds:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if path.startswith("/") and path not in trace.kinds["read"] and path not in trace.ignored:
            _note_native(trace, path, fd)


def _note_native(trace, path, fd=None):
    if path in trace.kinds["read"] or path in trace.ignored:
        return
    if path.endswith(" (deleted)") or path.startswith(_SYSTEM) or path in trace.kinds["wrote"] or \
            trace.foreign(path) or (fd is not None and not _read_only(fd)):
        trace.ignored.add(path)
        return
    state = _state(path)
    if state is None:
        trace.ignored.add(path)
    else:
        trace.add("read", path, state)


def _read_only(fd):
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            flags = next((ln.split()[1] for ln in f if ln.startswith("flags:")), "0")
    except (OSError, IndexError):
        return False
    return int(flags, 8) & 3 == os.O_RDONLY


def _write(trace):
    import json

    record = {kind: sorted(v for v in trace.kinds[kind].values()) for kind in _KINDS}
    record["capped"] = sorted(trace.capped)
    os.makedirs(trace.folder, exist_ok=True)
    path = os.path.join(trace.folder, f"pid{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)
