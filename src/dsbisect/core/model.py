"""The values every module shares: frozen dataclasses and enums.  No I/O, no pydantic.

``matrix`` builds ``Case``s and ``Point``s from matrix.yaml (or the command line);
everything after it passes these around.  Closed sets are enums; a key (of a point, a
case, a venv) is ``digest`` of a JSON-able description, computed one way everywhere.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from dsbisect.core.redact import HIDDEN, mask_args, secret_name, mask_text

if TYPE_CHECKING:
    from dsbisect.core.command import Command

E = TypeVar("E", bound=enum.Enum)


def digest(obj: object) -> str:
    """The 16-hex-digit key of a JSON-able value (sorted keys, compact separators)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def read_enum(cls: type[E], value: object, default: E) -> E:
    """A recorded enum value, or ``default`` for one this version does not know (an odd record)."""
    try:
        return cls(value)
    except (ValueError, TypeError):
        return default


def read_int(value: object, default: int = 0) -> int:
    """A recorded count or id (a bool or any other value is not one: ``default``)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def read_ints(value: object) -> tuple[int, ...]:
    """A recorded list of ids, without what is not one."""
    return tuple(i for i in value if read_int(i, -1) >= 0) if isinstance(value, (list, tuple)) else ()


# ------------------------------------------------------------------- closed sets


class Outcome(enum.Enum):
    """What one run did."""

    PASS = "pass"
    FAIL = "fail"
    HANG = "hang"
    SKIP = "skip"  # could not be tested: env build, import, not enough GPUs, exit 125

    @property
    def rank(self) -> int:
        """The worst-outcome order (0 the worst): what stands for several runs of one point."""
        return WORST_FIRST.index(self)


# A hang is worse than a failure, a failure than a pass; a skip says the least (it tested nothing).
WORST_FIRST = (Outcome.HANG, Outcome.FAIL, Outcome.PASS, Outcome.SKIP)


def worst(outcomes) -> Outcome:
    """The outcome that stands for ``outcomes`` (None, a run still going, is passed over); SKIP when none."""
    return min((o for o in outcomes if o is not None), key=lambda o: o.rank, default=Outcome.SKIP)


class Verdict(enum.Enum):
    """What one run (or one point's runs) means for a bisection."""

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


class RegressOn(enum.Enum):
    AUTO = "auto"  # what the bad end shows (with --find-fix: the broken end): a hang or a failure
    HANG = "hang"
    FAIL = "fail"
    ANY = "any"


class Accelerator(str, enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"
    AUTO = "auto"  # cuda when the machine has nproc GPUs


class Launcher(str, enum.Enum):
    """The launcher a script case runs under (``launchers.LINES`` has a line for each)."""

    DEEPSPEED = "deepspeed"
    TORCHRUN = "torchrun"
    SRUN = "srun"  # srun --ntasks NPROC inside a Slurm allocation
    DIRECT = "direct"  # dsbisect starts the ranks itself, as torchrun would, with no launcher process


class LauncherBackend(str, enum.Enum):
    """The deepspeed launcher's multi-node back ends (its ``--launcher``)."""

    PDSH = "pdsh"
    OPENMPI = "openmpi"
    MVAPICH = "mvapich"
    MPICH = "mpich"
    IMPI = "impi"
    SLURM = "slurm"


class BaseMode(str, enum.Enum):
    """How point venvs relate to the environment they are made from."""

    AUTO = "auto"  # layered when that python has torch
    LAYERED = "layered"
    ISOLATED = "isolated"


class RunStatus(enum.Enum):
    RUNNING = "running"
    DONE = "done"
    INTERRUPTED = "interrupted"


class Stage(enum.Enum):
    """Where in a bisection a point was tested."""

    RELEASE = "release"
    COMMIT = "commit"
    CONFIRM = "confirm"
    PROVE = "prove"  # the first bad release with the culprit commit reverted
    ENV = "env"  # a trial of an environment bisection: the good environment with some changes applied


class Answer(enum.Enum):
    """A bisection's verdict; it also decides the exit code."""

    FOUND = "found"
    AMBIGUOUS = "ambiguous"  # untestable points leave several candidates
    NOT_REPRODUCED = "not-reproduced"  # the bad (or fixed) end does not behave as declared
    GOOD_END_BAD = "good-end-bad"  # the good (or broken) end does not behave as declared
    UNTESTABLE = "untestable"  # an end could not be tested at all
    UNCONFIRMED = "unconfirmed"  # --confirm runs disagreed with the answer
    UNFINISHED = "unfinished"  # --max-runs / --deadline ran out: the range narrowed so far, to go on from

    @property
    def exit_code(self) -> int:
        if self is Answer.UNFINISHED:
            return UNFINISHED_EXIT
        return 0 if self in (Answer.FOUND, Answer.AMBIGUOUS) else 1


# sysexits' EX_TEMPFAIL: not an answer yet, not a failure; the same command (and store) goes on
UNFINISHED_EXIT = 75


# ------------------------------------------------------------------------ points


@dataclass(frozen=True)
class GitSource:
    """A package installed from one commit of a local clone instead of a release."""

    package: str
    repo: str
    commit: str
    describe: str = ""
    subject: str = ""
    # The revert proof's variant: ``commit`` with the commit ``reverted`` reverted on top of it,
    # whose tree (an object the scratch worktree wrote into the clone) is ``tree``.  The key is
    # (commit, reverted); ``tree`` is how to build it, derived from the two, not part of the key.
    reverted: str = ""
    tree: str = ""

    @property
    def short(self) -> str:
        return f"{self.commit[:10]}-{self.reverted[:10]}" if self.reverted else self.commit[:10]

    @property
    def ident(self) -> str:
        """What is built, as a file name: the commit, or "<commit>-revert-<reverted>"."""
        return f"{self.commit}-revert-{self.reverted}" if self.reverted else self.commit


def _pin_name(pin: str) -> str | None:
    """A pin's canonical name; None for text that is no requirement (a damaged record's: shown as it is)."""
    try:
        return canonicalize_name(Requirement(pin).name)
    except InvalidRequirement:
        return None


@dataclass(frozen=True)
class Point:
    """One set of versions to test: the moving packages plus the pins held fixed."""

    versions: tuple[tuple[str, str], ...]
    pins: tuple[str, ...] = ()
    source: GitSource | None = None
    name: str = field(default="", compare=False)  # what progress lines call it (an environment trial); not stored
    variant: str = ""  # the settings a trial applies (envdiff.settings): not installed, but another trial; not stored

    def requirements(self) -> tuple[str, ...]:
        moved = {canonicalize_name(n) for n, _ in self.versions}
        if self.source:
            moved.add(canonicalize_name(self.source.package))
        held = tuple(p for p in self.pins if _pin_name(p) not in moved)
        exact = tuple(f"{n}=={v}" for n, v in self.versions if not self._is_source(n))
        return held + exact

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = [f"{n} {v}" for n, v in self.versions if not self._is_source(n)]
        if self.source:
            parts.insert(0, f"{self.source.package} @{self.source.short}")
        return ", ".join(parts) or "(no versions)"

    def _is_source(self, name: str) -> bool:
        return bool(self.source) and canonicalize_name(name) == canonicalize_name(self.source.package)

    def version_of(self, package: str) -> str | None:
        for n, v in self.versions:
            if canonicalize_name(n) == canonicalize_name(package):
                return v
        return None

    def to_json(self, with_repo: bool = False) -> dict:
        """JSON for the store (without the clone's path: a point is the same from any clone)
        or, ``with_repo``, for a Slurm job that must build the commit."""
        out: dict = {"versions": [list(v) for v in self.versions], "pins": list(self.pins)}
        if self.source:
            src = self.source
            out["source"] = {"package": src.package, "commit": src.commit, "describe": src.describe,
                             "subject": src.subject} | ({"repo": src.repo} if with_repo else {})
            if src.reverted:
                out["source"] |= {"reverted": src.reverted, "tree": src.tree}
        return out

    @classmethod
    def from_json(cls, data: dict) -> Point:
        src = data.get("source")
        return cls(
            versions=tuple((n, v) for n, v in data["versions"]),
            pins=tuple(data.get("pins", ())),
            source=GitSource(**({"repo": ""} | src)) if src else None,
        )

    @property
    def key(self) -> str:
        """Identity of what gets installed: the full requirement set and the commit, if any.

        A point of a matrix grid and the same point reached by a bisection (where some of
        its versions are ``--pin``s) share a key, so their runs are reused across commands.
        """
        # a credential in a URL pin is not what gets installed: masked, so the key holds no secret
        # (not even as a digest) and a rotated one keeps it
        reqs = sorted(mask_text(str(Requirement(r))) for r in self.requirements())
        reverted = {"reverted": self.source.reverted} if self.source and self.source.reverted else {}
        variant = {"variant": self.variant} if self.variant else {}  # only then: every other key stays as it was
        return digest({"requirements": reqs, "source": self.source.commit if self.source else None} | reverted | variant)


# ------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class GpuOverride:
    """Case settings that apply when the GPU's name contains ``match`` (e.g. "H200")."""

    match: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SlurmSettings:
    """Per-case Slurm job settings (``slurm:`` in matrix.yaml); the CLI's options win."""

    partition: str | None = None
    time: int | None = None  # minutes
    gpus: int | None = None  # per node
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Nodes:
    """Multi-node settings, passed to the deepspeed launcher (nproc is then ranks per node)."""

    hostfile: Path | None = None
    hostfile_digest: str | None = None  # of the hostfile's content when the case was made
    num_nodes: int | None = None
    backend: LauncherBackend | None = None
    master_addr: str | None = None
    include: str | None = None
    exclude: str | None = None

    @property
    def multi(self) -> bool:
        """True when the launcher's hostfile mode is in use (the run spans hosts or slots it names)."""
        return self.hostfile is not None or bool(self.include or self.exclude)

    def key_fields(self) -> dict:
        fields = {"hostfile": str(self.hostfile) if self.hostfile else None, "num_nodes": self.num_nodes,
                  "launcher_backend": self.backend.value if self.backend else None,
                  "master_addr": self.master_addr, "include": self.include, "exclude": self.exclude}
        return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True)
class Case:
    """A repro and how to run it: script, ranks, launcher, timeouts, environment, points."""

    name: str
    script: Path
    script_digest: str  # of the script's content when the case was made (see matrix.file_digest)
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    nproc: int = 2
    accelerator: Accelerator = Accelerator.AUTO
    timeout: float = 1800.0
    collective_timeout: float = 60.0
    idle_timeout: float | None = None
    launcher: Launcher = Launcher.DEEPSPEED
    launcher_args: tuple[str, ...] = ()
    compat: tuple[str, ...] = ()
    pins: tuple[str, ...] = ()
    points: tuple[Point, ...] = ()
    gpu_overrides: tuple[GpuOverride, ...] = ()
    nodes: Nodes = Nodes()
    slurm: SlurmSettings = SlurmSettings()
    command: Command | None = None  # a launcher line or executable run as the user gave it, parsed once (not script + launcher)
    cwd: Path | None = None  # where it runs, its relative paths being from there (None: the run folder)
    inputs: tuple[tuple[str, str], ...] = ()  # (path, digest) of the files the command line names
    early_hang: bool = True  # prove a deadlock before the collective timeout (not part of the key)
    line: tuple[str, ...] = ()  # a `-- python x.py` case's command line as given (shown with its runs; not in the key)
    metric: str | None = None  # matrix `metric: NAME[@stepN][@AGG]`: shown in the run grid's cells (not in the key)

    def for_gpu(self, gpu_name: str | None) -> Case:
        """The case with the overrides for this GPU model applied (calibration)."""
        for o in self.gpu_overrides:
            if gpu_name and o.match.lower() in gpu_name.lower():
                return replace(self, args=self.args + o.args, env=self.env + o.env)
        return self

    def with_timeouts(self, timeout: float | None = None, collective: float | None = None,
                      idle: float | None = None) -> Case:
        """The case with the command line's timeouts, where given."""
        changes = {k: v for k, v in (("timeout", timeout), ("collective_timeout", collective),
                                     ("idle_timeout", idle)) if v is not None}
        return replace(self, **changes) if changes else self

    @property
    def key(self) -> str:
        """What makes two runs of this case comparable: script content and settings."""
        fields = {
            "script": self.script_digest,
            # a token's value is not the repro: masked, so a rotated token (or a replayed log's ***) keeps the key
            "args": mask_args(self.args),
            "env": [[k, HIDDEN if secret_name(k) else v] for k, v in self.env],
            "nproc": self.nproc,
            "accelerator": self.accelerator.value,
            "timeout": self.timeout,
            "collective_timeout": self.collective_timeout,
            "idle_timeout": self.idle_timeout,
            "launcher": self.launcher.value,
            "launcher_args": list(self.launcher_args),
            "compat": list(self.compat),
        }
        if self.command:  # only for those, so that script cases keep the keys their runs were recorded under
            fields["command"] = mask_args(self.command.argv)
        if self.inputs:
            fields["inputs"] = [list(i) for i in self.inputs]
        nodes = self.nodes.key_fields()
        if nodes:  # only then, so that single-node keys (and their recorded runs) stay as they were
            fields["multinode"] = nodes | {"hostfile": self.nodes.hostfile_digest if self.nodes.hostfile else None}
        return digest(fields)

    def to_json(self) -> dict:
        """Everything but the points (a Slurm job gets its one point apart)."""
        n = self.nodes
        return {
            "name": self.name, "script": str(self.script), "script_digest": self.script_digest,
            "args": list(self.args), "env": [list(e) for e in self.env], "nproc": self.nproc,
            "accelerator": self.accelerator.value, "timeout": self.timeout,
            "collective_timeout": self.collective_timeout, "idle_timeout": self.idle_timeout,
            "launcher": self.launcher.value, "launcher_args": list(self.launcher_args),
            "compat": list(self.compat), "pins": list(self.pins),
            "gpu_overrides": [{"match": o.match, "args": list(o.args), "env": [list(e) for e in o.env]}
                              for o in self.gpu_overrides],
            "nodes": {"hostfile": str(n.hostfile) if n.hostfile else None, "hostfile_digest": n.hostfile_digest,
                      "num_nodes": n.num_nodes, "backend": n.backend.value if n.backend else None,
                      "master_addr": n.master_addr, "include": n.include, "exclude": n.exclude},
            "slurm": {"partition": self.slurm.partition, "time": self.slurm.time, "gpus": self.slurm.gpus,
                      "args": list(self.slurm.args)},
            "command": list(self.command.argv) if self.command else [], "cwd": str(self.cwd) if self.cwd else None,
            "inputs": [list(i) for i in self.inputs],
            "early_hang": self.early_hang,
            "line": list(self.line),
        }

    @classmethod
    def from_json(cls, d: dict) -> Case:
        """The case ``to_json`` wrote; its command line is parsed again (from its ``cwd``)."""
        from dsbisect.core.command import parse  # here, not at the top: model stays on the lowest floors (command is on them too)

        n = d["nodes"]
        cwd = Path(d["cwd"]) if d.get("cwd") else None
        return cls(
            name=d["name"], script=Path(d["script"]), script_digest=d["script_digest"], args=tuple(d["args"]),
            env=_pairs(d["env"]), nproc=d["nproc"], accelerator=Accelerator(d["accelerator"]),
            timeout=d["timeout"], collective_timeout=d["collective_timeout"], idle_timeout=d["idle_timeout"],
            launcher=Launcher(d["launcher"]), launcher_args=tuple(d["launcher_args"]),
            compat=tuple(d["compat"]), pins=tuple(d["pins"]),
            gpu_overrides=tuple(GpuOverride(o["match"], tuple(o["args"]), _pairs(o["env"]))
                                for o in d["gpu_overrides"]),
            nodes=Nodes(hostfile=Path(n["hostfile"]) if n["hostfile"] else None,
                        hostfile_digest=n["hostfile_digest"], num_nodes=n["num_nodes"],
                        backend=LauncherBackend(n["backend"]) if n["backend"] else None,
                        master_addr=n["master_addr"], include=n["include"], exclude=n["exclude"]),
            slurm=SlurmSettings(**{**d["slurm"], "args": tuple(d["slurm"]["args"])}),
            command=parse(d["command"], cwd or Path.cwd()) if d.get("command") else None, cwd=cwd,
            inputs=_pairs(d.get("inputs", ())),
            early_hang=d.get("early_hang", True),
            line=tuple(d.get("line", ())),
        )


def _pairs(items) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in items)


# ------------------------------------------------------------------ environments

DEFAULT_BUILD_PINS = ("setuptools<75", "wheel", "pip")


@dataclass(frozen=True)
class EnvOptions:
    """How point venvs are built; from matrix ``defaults`` and the CLI."""

    python: str | None = None
    base: BaseMode = BaseMode.AUTO
    build_pins: tuple[str, ...] = DEFAULT_BUILD_PINS
    build_with_torch: tuple[str, ...] = ("deepspeed",)

    def to_json(self) -> dict:
        return {"python": self.python, "base": self.base.value, "build_pins": list(self.build_pins),
                "build_with_torch": list(self.build_with_torch)}

    @classmethod
    def from_json(cls, d: dict) -> EnvOptions:
        return cls(d["python"], BaseMode(d["base"]), tuple(d["build_pins"]), tuple(d["build_with_torch"]))


class IndexStrategy(str, enum.Enum):
    """uv's --index-strategy: how it picks a version when several indexes have the package."""

    FIRST_INDEX = "first-index"  # uv's default
    UNSAFE_FIRST_MATCH = "unsafe-first-match"
    UNSAFE_BEST_MATCH = "unsafe-best-match"  # pip's way: the best version of any index


@dataclass(frozen=True)
class IndexOptions:
    """Where packages come from: ``--offline``, ``--find-links``, ``--index-url``."""

    offline: bool = False
    find_links: tuple[str, ...] = ()
    index_url: str | None = None  # None: PyPI
    extra_index_urls: tuple[str, ...] = ()
    strategy: IndexStrategy | None = None  # uv's --index-strategy (None: uv's default, first-index)
    origin: str = ""  # where these settings came from, one line for reports (credentials hidden)
    # what of the user's pip/uv settings could not be passed on, and the files read (said once the
    # input is checked; not stored, not compared)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def uv_args(self) -> list[str]:
        args: list[str] = []
        if self.offline:
            args += ["--offline", "--no-index"]
        else:
            if self.index_url:
                args += ["--index-url", self.index_url]
            for url in self.extra_index_urls:
                args += ["--extra-index-url", url]
            if self.strategy:
                args += ["--index-strategy", self.strategy.value]
        for d in self.find_links:
            args += ["--find-links", d]
        return args

    def pip_args(self) -> list[str]:
        args: list[str] = []
        if self.offline:
            args.append("--no-index")
        elif self.index_url:
            args += ["--index-url", self.index_url]
        for url in () if self.offline else self.extra_index_urls:
            args += ["--extra-index-url", url]
        for d in self.find_links:
            args += ["--find-links", d]
        return args

    def to_json(self) -> dict:
        return {"offline": self.offline, "find_links": list(self.find_links), "index_url": self.index_url,
                "extra_index_urls": list(self.extra_index_urls), "strategy": self.strategy.value if self.strategy else None, "origin": self.origin}

    @classmethod
    def from_json(cls, d: dict) -> IndexOptions:
        return cls(d["offline"], tuple(d["find_links"]), d["index_url"], tuple(d["extra_index_urls"]),
                   IndexStrategy(d["strategy"]) if d.get("strategy") else None, d.get("origin", ""))


def check_wanted(point: Point) -> list[str]:
    """The distributions an import check imports: the point's moving packages, then torch."""
    wanted = [n for n, _ in point.versions]
    if point.source:
        wanted.append(point.source.package)
    return [n for n in dict.fromkeys(wanted) if canonicalize_name(n) != "torch"] + ["torch"]
