"""What a run ran, beyond its case key: the rule for when a recorded run may be reused.

A case key (``Case.key``) covers the script's content, the matrix settings and the point's
requirements.  A recorded pass, fail or hang is reused only when, besides, what the run used
is the same now (``Inputs``, stored with every run as ``RunFacts.fingerprint``), and only what
it used: what it resolved and read, not how the shell that started dsbisect was set up.

- **files**: each file the run used from outside its venv, the interpreter and the caches,
  with its SHA-256: the script and the files its command line names (digested as the run
  starts; one the run changes or makes is its output and is left out), and what the start-up
  hook saw in every interpreter of the run (``traces``): the local modules imported (the
  repro's ``helper.py``, a sibling package, an editable install), every file opened for
  reading (a data file by a fixed path, a config an environment variable names, what
  ``np.load``/``torch.load`` open, in a rank or any Python process under it: a
  ``subprocess`` child, a DataLoader worker), and the files a child that records nothing
  itself was given (``cat data.txt``).  A file the run wrote, or made before reading it, is an
  output; one changed while the run ran gets a digest no file has (never reused).
- **folders**: each folder the run's code listed (``glob``, ``os.walk``), as the digest of
  its names: a data folder that gains a file is a change.
- **distributions**: each distribution the ranks imported a module of, with its version and
  the folder it came from, wherever that is: the point venv, the base a layered venv adds, a
  ``--target`` folder.  A package of the base that is not a pin but changed version is a change.
- **programs**: each program the run started by name, as what its ``PATH`` resolved it to:
  the file's digest (and, in a virtual environment's ``bin/``, that environment).  ``PATH``
  itself is not compared: activating a venv, or a new terminal, changes the string and not
  what a run resolves (``gcc`` now found elsewhere is a change).
- **environment**: every other variable that reaches the ranks, except the volatile ones below
  (the shell, the terminal, the prompt, the locale, the session, the allocation), each value
  as a keyed digest (HMAC-SHA256 with the store's own key, ``<store>/inputs.key``): never
  stored raw, and a digest pasted with a report cannot be tested against guessed secrets.
- **interpreter**: the base python's executable and version, torch's version and its CUDA
  (a field not known before the venv is built is not compared), and where the ranks ran (cpu
  or cuda; not compared for an executor's runs, whose node decides).

``Present`` is what a run of the point would use now, made once per point (``Reuse.present``)
with the answers every recorded run asks (their files' digests now, their programs resolved
now...); ``stale_reasons`` compares one record with it, without I/O.  A run whose record is
capped (more than the hook keeps) or that was recorded before this record (no
``fingerprint``, or format 1: no files read, distributions or programs) is not reused: nothing
says all it used, and a wrong verdict costs more than one more run.  A run marked by hand
(``dsbisect mark``) is the user's word and is always kept.

Pure: the digests are made by ``traces``.  On disk the record keeps its shape: the new parts
are entries of ``files`` with a prefix no path has (``dist:``, ``program:``, ``listing:``,
``capped:``), so the ``--format json`` contract is unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

FORMAT = 2  # 2: files read, folders listed, distributions, programs; PATH by what it resolves
MISSING = "missing"
CHANGED_DURING_RUN = "changed-during-run"  # the digest of a file that changed while the run ran: no file has it
UNKNOWN = ""  # a version not known now (its venv is not built): not compared
PSEUDO = ("/proc/", "/sys/", "/dev/")  # the machine's state: a listing of them is no input

# Variables that never decide whether a recorded run is reused: they change from one shell,
# terminal, login, job or dsbisect invocation to the next without changing what the repro does.
VOLATILE_NAMES = frozenset({
    "PWD", "OLDPWD", "SHLVL", "_", "LINES", "COLUMNS", "DISPLAY", "WINDOWID", "WINDOW", "STY", "MAIL", "MAILPATH", "PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT", "RPROMPT", "PROMPT_COMMAND",
    "HISTFILE", "HISTSIZE", "HISTFILESIZE", "HISTCONTROL", "HISTTIMEFORMAT", "LS_COLORS", "LSCOLORS", "COLORTERM",
    "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "GPG_TTY", "DBUS_SESSION_BUS_ADDRESS", "INVOCATION_ID",
    "JOURNAL_STREAM", "KRB5CCNAME", "SECURITYSESSIONID", "MASTER_PORT", "MASTER_ADDR", "HOSTNAME",
    "LOGNAME_SESSION", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "RANDOM", "SECONDS",
    "PBS_JOBID", "PBS_JOBNAME", "LSB_JOBID", "JOB_ID", "UV_CACHE_DIR",
    # an activated venv or conda env: its prompt and bookkeeping (what it puts on PATH is judged by what resolves)
    "VIRTUAL_ENV_PROMPT", "VIRTUAL_ENV_DISABLE_PROMPT", "CONDA_PROMPT_MODIFIER", "CONDA_SHLVL", "CONDA_DEFAULT_ENV",
    "CONDA_EXE", "CONDA_PYTHON_EXE", "_CE_CONDA", "_CE_M",
    # an editor's or a notebook's terminal: helpers of its own session and version
    "GIT_ASKPASS", "BROWSER", "WSL_INTEROP", "Apple_PubSub_Socket_Render",
    # the locale of the terminal (ssh forwards the client's), the pager, the editor, the desktop session
    "LANG", "LANGUAGE", "MOTD_SHOWN", "LESS", "LESSOPEN", "LESSCLOSE", "PAGER", "MANPAGER", "MANPATH", "INFOPATH",
    "EDITOR", "VISUAL", "XAUTHORITY", "WAYLAND_DISPLAY", "SESSION_MANAGER", "GDMSESSION", "XMODIFIERS",
    "QT_IM_MODULE", "GTK_IM_MODULE", "CLUTTER_IM_MODULE", "SHELL_SESSION_ID", "INPUTRC",
    # a per-job temporary folder: what the run makes there is made during the run
    "TMPDIR", "TMP", "TEMP",
    # make's job server (a dsbisect run from a Makefile), environment modules' bookkeeping
    "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "LOADEDMODULES", "_LMFILES_", "MODULEPATH", "MODULESHOME",
})
VOLATILE_PREFIXES = (
    "TERM",  # TERM, TERM_PROGRAM, TERM_SESSION_ID, ...
    "SSH_", "XDG_", "DSBISECT_",  # dsbisect's own: run folder, case, collective timeout, its switches
    "SLURM_",  # the allocation: job and step ids, node lists, times (the hosts are facts of their own)
    # a CI job's bookkeeping: run and step ids, its output and summary files, its temp folder, its
    # tokens (a GitHub Actions step's GITHUB_OUTPUT is another file in every step: a store carried
    # from one job to the next would reuse nothing)
    "GITHUB_", "RUNNER_", "ACTIONS_",
    "PMI_", "PMIX_", "OMPI_COMM_", "KITTY_", "ITERM_", "VTE_", "WT_", "VSCODE_", "GNOME_", "DESKTOP_",
    "BASH_FUNC_", "LC_", "WEZTERM_", "ALACRITTY_", "KONSOLE_", "TORCHELASTIC_", "STARSHIP_", "POWERLINE_",
    "P9K_", "LMOD_", "__LMOD_", "__MODULES_", "ZSH_", "CONDA_PREFIX_", "DBUS_", "TMUX", "JPY_", "XPC_", "__CF",
)
RESOLVED_NAMES = frozenset({"PATH"})  # compared through what they resolve (programs), not as text


def volatile(name: str) -> bool:
    return name in VOLATILE_NAMES or name.startswith(VOLATILE_PREFIXES)


def compared(name: str) -> bool:
    """Whether a variable's value is compared as it is (neither volatile nor judged by what it resolves)."""
    return not volatile(name) and name not in RESOLVED_NAMES


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
class Dist:
    """A distribution a run imported from: its canonical name, version and folder."""

    name: str
    version: str  # UNKNOWN: not known now; MISSING: no longer there
    folder: str


_DIST, _PROGRAM, _LISTING, _CAPPED = "dist:", "program:", "listing:", "capped:"


@dataclass(frozen=True)
class Inputs:
    """What a run used: files (path, digest), environment (name, keyed digest), interpreter,
    distributions, programs (name, identity), folders listed (path, digest of its names)."""

    files: tuple[tuple[str, str], ...]
    env: tuple[tuple[str, str], ...]
    interpreter: Interpreter
    accelerator: str = ""  # cpu or cuda; "" where another machine decides (an executor's node)
    added: str = ""  # what dsbisect added to the line that changes what runs (--multi_gpu); "" none
    dists: tuple[Dist, ...] = ()
    programs: tuple[tuple[str, str], ...] = ()
    listings: tuple[tuple[str, str], ...] = ()
    capped: tuple[str, ...] = ()  # what the hook had more of than it keeps: the record is incomplete
    format: int = FORMAT

    def to_json(self) -> dict:
        # Pairs, not an object: ``"MY_DB_PASS": "<digest>"`` would read as a secret to a redactor
        # of JSON shapes, and a masked digest would never match again.
        files = [*map(list, self.files), *([f"{_DIST}{d.name}:{d.folder}", d.version] for d in self.dists),
                 *([f"{_PROGRAM}{n}", i] for n, i in self.programs), *([f"{_LISTING}{p}", h] for p, h in self.listings),
                 *([f"{_CAPPED}{c}", ""] for c in self.capped)]
        return {"format": self.format, "files": files, "env": [list(e) for e in self.env],
                "interpreter": self.interpreter.to_json(), "accelerator": self.accelerator, "added": self.added}

    @classmethod
    def from_json(cls, d: object) -> Inputs | None:
        """The record of a run's facts, or None when it has none (or a damaged one)."""
        if not isinstance(d, dict) or not isinstance(d.get("files"), list) or not isinstance(d.get("env"), list):
            return None
        try:
            entries = sorted((str(p), str(h)) for p, h in d["files"])
            env = tuple(sorted((str(k), str(v)) for k, v in d["env"]))
            fmt = int(d.get("format") or 1)
        except (TypeError, ValueError):
            return None
        parts: dict[str, list] = {_DIST: [], _PROGRAM: [], _LISTING: [], _CAPPED: [], "": []}
        for key, value in entries:
            kind = next((k for k in (_DIST, _PROGRAM, _LISTING, _CAPPED) if key.startswith(k)), "")
            parts[kind].append((key[len(kind):], value))
        dists = tuple(Dist(k.partition(":")[0], v, k.partition(":")[2]) for k, v in parts[_DIST])  # no colon in a name
        return cls(tuple(parts[""]), env, Interpreter.from_json(d.get("interpreter") or {}),
                   str(d.get("accelerator") or ""), str(d.get("added") or ""),  # before "added": nothing added
                   dists, tuple(parts[_PROGRAM]),
                   tuple(parts[_LISTING]), tuple(k for k, _ in parts[_CAPPED]), fmt)


def env_digests(env: Mapping[str, str], key: bytes) -> tuple[tuple[str, str], ...]:
    """The compared variables of ``env``, each value as a keyed digest (16 hex digits)."""
    return tuple(sorted((name, hmac.new(key, value.encode("utf-8", "surrogatepass"), hashlib.sha256)
                         .hexdigest()[:16]) for name, value in env.items() if compared(name)))


@dataclass(frozen=True)
class Present:
    """What a run of a point would use now, with the answers recorded runs ask of it: the
    digests now of the files they list, their programs resolved now, the versions now of
    their distributions (``(name, folder)`` -> version), the folders' names now."""

    inputs: Inputs  # its named files, environment, interpreter, accelerator, added
    files: Mapping[str, str] = field(default_factory=dict)
    programs: Mapping[str, str] = field(default_factory=dict)
    dists: Mapping[tuple[str, str], str] = field(default_factory=dict)
    listings: Mapping[str, str] = field(default_factory=dict)

    def seen_by(self, recorded: Inputs) -> Inputs:
        """This present in ``recorded``'s terms: what it would use of what ``recorded`` lists."""
        return replace(
            self.inputs,
            files=tuple((p, self.files.get(p, MISSING)) for p, _ in recorded.files),
            dists=tuple(replace(d, version=self.dists.get((d.name, d.folder), UNKNOWN)) for d in recorded.dists),
            programs=tuple((n, self.programs.get(n, MISSING)) for n, _ in recorded.programs),
            listings=tuple((p, self.listings.get(p, MISSING)) for p, _ in recorded.listings))


def asked(records: list[Inputs]) -> tuple[set[str], set[str], set[tuple[str, str]], set[str]]:
    """What ``records`` ask of the present: (files, programs, (distribution, folder), folders)."""
    return ({p for r in records for p, _ in r.files}, {n for r in records for n, _ in r.programs},
            {(d.name, d.folder) for r in records for d in r.dists}, {p for r in records for p, _ in r.listings})


def incomplete(recorded: Inputs) -> str:
    """Why ``recorded`` cannot say all its run used ("" when it can)."""
    if recorded.format < FORMAT:
        return ("made by an older dsbisect, which did not record the files its processes read, the packages "
                "they imported or the programs they ran")
    if recorded.capped:
        return f"its processes used more than dsbisect records ({', '.join(recorded.capped)}): not all is known"
    return ""


def stale_reasons(recorded: Inputs, now: Present) -> tuple[str, ...]:
    """Why ``recorded`` is not what would run now (``differences`` with ``now`` in its terms)."""
    return differences(recorded, now.seen_by(recorded))


def differences(recorded: Inputs, now: Inputs) -> tuple[str, ...]:
    """Why ``recorded`` is not what ``now`` runs, one short phrase each ("helper.py changed",
    "MY_FIX set", "python changed (3.11.7 -> 3.12.1)", "numpy changed (1.26.4 -> 2.0.0)");
    () when it is the same."""
    out = [*_file_changes(recorded.files, now.files), *_env_changes(recorded.env, now.env)]
    out += _dist_changes(recorded.dists, now.dists) + _program_changes(recorded.programs, now.programs)
    out += _listing_changes(recorded.listings, now.listings)
    out += _interpreter_changes(recorded.interpreter, now.interpreter)
    if recorded.accelerator and now.accelerator and recorded.accelerator != now.accelerator:
        out.append(f"accelerator changed ({recorded.accelerator} -> {now.accelerator})")
    elif now.accelerator and recorded.added != now.added:  # accelerate's 1 process then, N now
        out.append(f"dsbisect now adds {now.added} to the line" if now.added
                   else f"dsbisect no longer adds {recorded.added} to the line")
    return tuple(out)


def same_inputs(a: Inputs, b: Inputs) -> bool:
    """Whether two runs ran the same: no difference but in what one of them does not record
    (a run may import a module, read a file or start a program another did not)."""
    def kept(x: Inputs, other: Inputs) -> Inputs:
        files, programs = set(dict(other.files)), set(dict(other.programs))
        return replace(x, files=tuple(f for f in x.files if f[0] in files),
                       dists=tuple(d for d in x.dists if d.name in {o.name for o in other.dists}),
                       programs=tuple(p for p in x.programs if p[0] in programs),
                       listings=tuple(f for f in x.listings if f[0] in set(dict(other.listings))))

    return not differences(kept(a, b), kept(b, a))


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


def _env_changes(before: tuple[tuple[str, str], ...], current: tuple[tuple[str, str], ...]) -> list[str]:
    then = {k: v for k, v in before if compared(k)}  # a record made under an older rule: today's names
    now = {k: v for k, v in current if compared(k)}
    out = []
    for name in sorted(set(then) | set(now)):
        if then.get(name) == now.get(name):
            continue
        out.append(f"{name} set" if name not in then else f"{name} unset" if name not in now else f"{name} changed")
    return out


def _dist_changes(before: tuple[Dist, ...], current: tuple[Dist, ...]) -> list[str]:
    now = {d.name: d.version for d in current}
    out = []
    for d in before:
        new = now.get(d.name, UNKNOWN)
        if UNKNOWN in (d.version, new) or new == d.version:
            continue
        out.append(f"{d.name} is gone" if new == MISSING else f"{d.name} changed ({d.version} -> {new})")
    return out


def _program_changes(before: tuple[tuple[str, str], ...], current: tuple[tuple[str, str], ...]) -> list[str]:
    now = dict(current)
    out = []
    for name, identity in before:
        new = now.get(name)
        if new is None or new == identity:
            continue
        out.append(f"{name} not found now" if new == MISSING else f"{name} found now" if identity == MISSING
                   else f"{name} changed")
    return out


def _listing_changes(before: tuple[tuple[str, str], ...], current: tuple[tuple[str, str], ...]) -> list[str]:
    now = dict(current)
    out = []
    for path, names in before:
        if (path + "/").startswith(PSEUDO):  # recorded before the hook left them out: never an input
            continue
        new = now.get(path)
        if new is not None and new != names:
            out.append(f"{Path(path).name}/ is gone" if new == MISSING else f"{Path(path).name}/ has other files")
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
