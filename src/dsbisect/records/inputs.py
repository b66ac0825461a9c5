"""What a run ran, beyond its case key: the rule for when a recorded run may be reused.

A case key (``Case.key``) covers the script's content, the matrix settings and the point's
requirements.  A recorded pass, fail or hang is reused only when, besides, what the run ran is
the same now (``Inputs``, stored with every run as ``RunFacts.fingerprint``):

- **files**: the local files the run imported or named, each with its SHA-256 (streamed, so a
  1.5 GB config costs time, never memory; one digest per file state and process):

  * the files the command line names: the script, and every argument (or ``--opt=VALUE``)
    that is an existing file, e.g. ``--deepspeed ds_config.json`` or a data file the script
    opens by a path in its args (digested as the run starts; one the run changes or makes,
    a log or a checkpoint, is its output and is left out);
  * the modules the run's interpreters actually imported from outside the interpreter and
    its site-packages (the repro's own ``helper.py``, a sibling package, an editable
    install), recorded by the start-up hook (``imports/pid<P>.json`` in the run folder).

  Not a scan of the script's folder: that folder may be a home directory or a monorepo (no
  bound is both safe and complete, and a bound reached silently is a wrong verdict), and it
  misses modules imported from elsewhere (``PYTHONPATH``, the working directory, an editable
  install).  What the ranks imported is exact.  Files the script opens by a fixed path that
  is on no command line are not seen: name them in the args, or use ``--rerun``.
- **environment**: every variable that reaches the ranks from dsbisect's environment and
  the case's ``env:`` — except the volatile ones below, which describe the shell, the
  terminal, the session or the allocation rather than the repro — each value as a keyed
  digest (HMAC-SHA256 with the store's own key, ``<store>/inputs.key``): never stored raw,
  and a digest pasted with a report cannot be tested against guessed secrets.
- **interpreter**: the base python's executable and version, torch's version and its CUDA
  (from the point venv, else the base it layers on; a field not known before the venv is
  built is not compared), and where the ranks ran (cpu or cuda: an ``auto`` case runs on the
  CPU where no GPU is visible, so ``CUDA_VISIBLE_DEVICES`` itself can stay volatile; not
  compared for an executor's runs, whose node decides).

When they differ the run is made again and the progress line says why ("recorded run 4 is
for other inputs: helper.py changed, MY_FIX set"); when the case key itself changed (the
script, a matrix ``env:`` value, a config a ``-- COMMAND`` line names), the latest run of the
case's point under its old key is compared the same way, to say what changed.  A run recorded before this record
existed (no ``fingerprint``) is not reused: nothing says what it ran, and a wrong verdict
costs more than one more run.  A run marked by hand (``dsbisect mark``) is the user's word and
is always kept.

Pure but for ``file_sha`` and ``imported_files`` (reading files) and the hook's format.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from dsbisect.core.files import read_small

# Variables that never decide whether a recorded run is reused: they change from one shell,
# terminal, login, job or dsbisect invocation to the next without changing what the repro does.
VOLATILE_NAMES = frozenset({
    "PWD", "OLDPWD", "SHLVL", "_", "LINES", "COLUMNS", "DISPLAY", "WINDOWID", "WINDOW", "STY", "TMUX",
    "TMUX_PANE", "MAIL", "MAILPATH", "PS1", "PS2", "PS4", "PROMPT_COMMAND", "HISTFILE", "HISTSIZE",
    "HISTFILESIZE", "HISTCONTROL", "LS_COLORS", "LSCOLORS", "COLORTERM", "NO_COLOR", "FORCE_COLOR",
    "CLICOLOR", "GPG_TTY", "DBUS_SESSION_BUS_ADDRESS", "INVOCATION_ID", "JOURNAL_STREAM", "KRB5CCNAME",
    "SECURITYSESSIONID", "MASTER_PORT", "MASTER_ADDR", "HOSTNAME", "LOGNAME_SESSION",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "RANDOM", "SECONDS",
    "PBS_JOBID", "PBS_JOBNAME", "LSB_JOBID", "JOB_ID", "UV_CACHE_DIR",
})
VOLATILE_PREFIXES = (
    "TERM",  # TERM, TERM_PROGRAM, TERM_SESSION_ID, ...
    "SSH_", "XDG_", "DSBISECT_",  # dsbisect's own: run folder, case, collective timeout, its switches
    "SLURM_",  # the allocation: job and step ids, node lists, times (the hosts are facts of their own)
    "PMI_", "PMIX_", "OMPI_COMM_", "KITTY_", "ITERM_", "VTE_", "WT_", "VSCODE_", "GNOME_", "DESKTOP_",
    "BASH_FUNC_", "LC_TERMINAL", "WEZTERM_", "ALACRITTY_", "KONSOLE_", "TORCHELASTIC_",
)


def volatile(name: str) -> bool:
    return name in VOLATILE_NAMES or name.startswith(VOLATILE_PREFIXES)


@dataclass(frozen=True)
class Interpreter:
    """The interpreter and base a run ran on; None: not known (not compared)."""

    executable: str
    python: str
    torch: str | None = None
    cuda: str | None = None  # "" for a torch without CUDA

    def to_json(self) -> dict:
        return {"executable": self.executable, "python": self.python, "torch": self.torch, "cuda": self.cuda}

    @classmethod
    def from_json(cls, d: Mapping) -> Interpreter:
        return cls(str(d.get("executable") or ""), str(d.get("python") or ""), d.get("torch"), d.get("cuda"))


@dataclass(frozen=True)
class Inputs:
    """What a run ran: files (path, digest), environment (name, keyed digest), interpreter."""

    files: tuple[tuple[str, str], ...]
    env: tuple[tuple[str, str], ...]
    interpreter: Interpreter
    accelerator: str = ""  # cpu or cuda; "" where another machine decides (an executor's node)
    added: str = ""  # what dsbisect added to the line that changes what runs (--multi_gpu); "" none

    def to_json(self) -> dict:
        # Pairs, not an object: ``"MY_DB_PASS": "<digest>"`` would read as a secret to a redactor
        # of JSON shapes, and a masked digest would never match again.
        return {"format": 1, "files": [list(f) for f in self.files], "env": [list(e) for e in self.env],
                "interpreter": self.interpreter.to_json(), "accelerator": self.accelerator, "added": self.added}

    @classmethod
    def from_json(cls, d: object) -> Inputs | None:
        """The record of a run's facts, or None when it has none (or a damaged one)."""
        if not isinstance(d, dict) or not isinstance(d.get("files"), list) or not isinstance(d.get("env"), list):
            return None
        try:
            files = tuple(sorted((str(p), str(h)) for p, h in d["files"]))
            env = tuple(sorted((str(k), str(v)) for k, v in d["env"]))
        except (TypeError, ValueError):
            return None
        return cls(files, env, Interpreter.from_json(d.get("interpreter") or {}), str(d.get("accelerator") or ""),
                   str(d.get("added") or ""))  # a record from before "added": dsbisect added nothing


def env_digests(env: Mapping[str, str], key: bytes) -> tuple[tuple[str, str], ...]:
    """The non-volatile variables of ``env``, each value as a keyed digest (16 hex digits)."""
    return tuple(sorted((name, hmac.new(key, value.encode("utf-8", "surrogatepass"), hashlib.sha256)
                         .hexdigest()[:16]) for name, value in env.items() if not volatile(name)))


def differences(recorded: Inputs, now: Inputs) -> tuple[str, ...]:
    """Why ``recorded`` is not what would run now, one short phrase each ("helper.py changed",
    "MY_FIX set", "python changed (3.11.7 -> 3.12.1)"); () when it is the same.  ``now.files``
    holds the current digests of (at least) the paths ``recorded`` names."""
    out = [*_file_changes(recorded.files, now.files), *_env_changes(dict(recorded.env), dict(now.env))]
    out += _interpreter_changes(recorded.interpreter, now.interpreter)
    if recorded.accelerator and now.accelerator and recorded.accelerator != now.accelerator:
        out.append(f"accelerator changed ({recorded.accelerator} -> {now.accelerator})")
    elif now.accelerator and recorded.added != now.added:  # accelerate's 1 process then, N now
        out.append(f"dsbisect now adds {now.added} to the line" if now.added
                   else f"dsbisect no longer adds {recorded.added} to the line")
    return tuple(out)


def same_inputs(a: Inputs, b: Inputs) -> bool:
    """Whether two runs ran the same: no difference but in files one of them does not record
    (a run may import a module another did not)."""
    shared = set(dict(a.files)) & set(dict(b.files))

    def kept(x: Inputs) -> Inputs:
        return replace(x, files=tuple(f for f in x.files if f[0] in shared))

    return not differences(kept(a), kept(b))


def _file_changes(before: tuple[tuple[str, str], ...], now: tuple[tuple[str, str], ...]) -> list[str]:
    then, current = dict(before), dict(now)
    out = []
    for path in sorted(set(then) | set(current)):
        old, new = then.get(path), current.get(path)
        if old == new:
            continue
        name = Path(path).name
        if new is None:
            out.append(f"{name} no longer named")
        elif old is None:
            out.append(f"{name} named now")
        else:
            out.append(f"{name} is gone" if new == MISSING else f"{name} changed")
    return out


def _env_changes(then: dict[str, str], now: dict[str, str]) -> list[str]:
    out = []
    for name in sorted(set(then) | set(now)):
        if then.get(name) == now.get(name):
            continue
        out.append(f"{name} set" if name not in then else f"{name} unset" if name not in now else f"{name} changed")
    return out


def _interpreter_changes(then: Interpreter, now: Interpreter) -> list[str]:
    out = []
    if then.python and now.python and then.python != now.python:
        out.append(f"python changed ({then.python} -> {now.python})")
    elif then.executable and now.executable and then.executable != now.executable:
        out.append(f"python changed ({then.executable} -> {now.executable})")
    for what, a, b in (("torch", then.torch, now.torch), ("CUDA", then.cuda, now.cuda)):
        if a is not None and b is not None and a != b:
            out.append(f"{what} changed ({a or 'none'} -> {b or 'none'})")
    return out


def why_line(run_id: int, reasons: tuple[str, ...], most: int = 4) -> str:
    """``recorded run 4 is for other inputs: helper.py changed, MY_FIX set``."""
    shown = ", ".join(reasons[:most]) + (f" and {len(reasons) - most} more" if len(reasons) > most else "")
    return f"recorded run {run_id} is for other inputs: {shown}"


# --------------------------------------------------------------------------- files

MISSING = "missing"
CHANGED_DURING_RUN = "changed-during-run"  # the digest of a file that changed while the run ran: no file has it
_CHUNK = 1 << 20


def file_sha(path: str | Path) -> str:
    """The file's SHA-256 (16 hex digits), read in 1 MiB chunks; ``MISSING`` when it cannot be
    read.  A file is read once per process and state (size, mtime, inode, ctime)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return MISSING
    return _sha(str(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


@functools.lru_cache(maxsize=4096)
def _sha(path: str, size: int, mtime_ns: int, ino: int, ctime_ns: int) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    except OSError:
        return MISSING
    return h.hexdigest()[:16]


def digests(paths: Iterable[str | Path]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({str(p): file_sha(p) for p in paths}.items()))


MAX_IMPORTED = 4000  # local modules kept from the hook's lists of one run


def imported_files(folder: Path) -> tuple[tuple[str, str], ...]:
    """The local modules the run's interpreters imported (the hook's ``pid<P>.json`` files in
    ``folder``), each with its digest now; a file that changed after it was imported (its size
    or mtime differs from the hook's) gets a digest no file has, so the run is never reused."""
    seen: dict[str, str] = {}
    for listing in sorted(folder.glob("pid*.json")) if folder.is_dir() else []:
        try:
            entries = json.loads(read_small(listing)).get("files", [])
        except (OSError, ValueError, AttributeError):
            continue
        for entry in entries if isinstance(entries, list) else []:
            if len(seen) >= MAX_IMPORTED:
                break
            if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str):
                seen.setdefault(entry[0], _digest_if_unchanged(*entry))
    return tuple(sorted(seen.items()))


def _digest_if_unchanged(path: str, size: object, mtime_ns: object) -> str:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return MISSING
    if st.st_size != size or st.st_mtime_ns != mtime_ns:
        return CHANGED_DURING_RUN
    return file_sha(path)
