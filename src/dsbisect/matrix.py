"""matrix.yaml -> Cases and Points.

Pydantic validates the file once, here; everything after this module sees frozen
dataclasses.  The schema is documented in README.md ("matrix.yaml").
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import MatrixError

LAUNCHERS = ("deepspeed", "torchrun")
ACCELERATORS = ("cpu", "cuda", "auto")
DEFAULT_BUILD_PINS = ("setuptools<75", "wheel", "pip")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class GitSource:
    """A package installed from one commit of a local clone instead of a release."""

    package: str
    repo: str
    commit: str
    describe: str = ""
    subject: str = ""

    @property
    def short(self) -> str:
        return self.commit[:10]


@dataclass(frozen=True)
class Point:
    """One set of versions to test: the moving packages plus the pins held fixed."""

    versions: tuple[tuple[str, str], ...]
    pins: tuple[str, ...] = ()
    source: GitSource | None = None

    def requirements(self) -> tuple[str, ...]:
        moved = {canonicalize_name(n) for n, _ in self.versions}
        if self.source:
            moved.add(canonicalize_name(self.source.package))
        held = tuple(p for p in self.pins if canonicalize_name(Requirement(p).name) not in moved)
        exact = tuple(
            f"{n}=={v}"
            for n, v in self.versions
            if not (self.source and canonicalize_name(n) == canonicalize_name(self.source.package))
        )
        return held + exact

    @property
    def label(self) -> str:
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

    def to_json(self) -> dict:
        out: dict = {"versions": [list(v) for v in self.versions], "pins": list(self.pins)}
        if self.source:
            out["source"] = {
                "package": self.source.package,
                "commit": self.source.commit,
                "describe": self.source.describe,
                "subject": self.source.subject,
            }
        return out

    @classmethod
    def from_json(cls, data: dict) -> Point:
        src = data.get("source")
        return cls(
            versions=tuple((n, v) for n, v in data["versions"]),
            pins=tuple(data.get("pins", ())),
            source=GitSource(repo="", **src) if src else None,
        )

    @property
    def key(self) -> str:
        """Identity of what gets installed: the full requirement set and the commit, if any.

        A point of a matrix grid and the same point reached by a bisection (where some of
        its versions are ``--pin``s) share a key, so their runs are reused across commands.
        """
        reqs = sorted(str(Requirement(r)) for r in self.requirements())
        return _digest({"requirements": reqs, "source": self.source.commit if self.source else None})


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
class Case:
    name: str
    script: Path
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    nproc: int = 2
    accelerator: str = "auto"
    timeout: float = 1800.0
    collective_timeout: float = 60.0
    idle_timeout: float | None = None
    launcher: str = "deepspeed"
    launcher_args: tuple[str, ...] = ()
    compat: tuple[str, ...] = ()
    pins: tuple[str, ...] = ()
    points: tuple[Point, ...] = ()
    gpu_overrides: tuple[GpuOverride, ...] = ()
    # Multi-node, passed to the deepspeed launcher (nproc is then the ranks per node).
    hostfile: Path | None = None
    num_nodes: int | None = None
    launcher_backend: str | None = None  # pdsh | openmpi | mvapich | mpich | impi | slurm
    master_addr: str | None = None
    include: str | None = None
    exclude: str | None = None
    slurm: SlurmSettings = SlurmSettings()

    def for_gpu(self, gpu_name: str | None) -> Case:
        """The case with the overrides for this GPU model applied (calibration)."""
        for o in self.gpu_overrides:
            if gpu_name and o.match.lower() in gpu_name.lower():
                return replace(self, args=self.args + o.args, env=self.env + o.env)
        return self

    def with_points(self, points: tuple[Point, ...]) -> Case:
        return replace(self, points=points)

    @property
    def key(self) -> str:
        """What makes two runs of this case comparable: script content and settings."""
        fields = {
            "script": _file_digest(self.script),
            "args": list(self.args),
            "env": [list(e) for e in self.env],
            "nproc": self.nproc,
            "accelerator": self.accelerator,
            "timeout": self.timeout,
            "collective_timeout": self.collective_timeout,
            "idle_timeout": self.idle_timeout,
            "launcher": self.launcher,
            "launcher_args": list(self.launcher_args),
            "compat": list(self.compat),
        }
        nodes = {k: v for k, v in self._multinode().items() if v is not None}
        if nodes:  # only then, so that single-node keys (and their recorded runs) stay as they were
            fields["multinode"] = nodes | {"hostfile": _file_digest(self.hostfile) if self.hostfile else None}
        return _digest(fields)

    def _multinode(self) -> dict:
        return {"hostfile": str(self.hostfile) if self.hostfile else None, "num_nodes": self.num_nodes,
                "launcher_backend": self.launcher_backend, "master_addr": self.master_addr,
                "include": self.include, "exclude": self.exclude}

    @property
    def needs_cuda(self) -> bool:
        return self.accelerator == "cuda"

    def to_json(self) -> dict:
        """Everything but the points (a Slurm job gets its one point apart)."""
        return {
            "name": self.name, "script": str(self.script), "args": list(self.args),
            "env": [list(e) for e in self.env], "nproc": self.nproc, "accelerator": self.accelerator,
            "timeout": self.timeout, "collective_timeout": self.collective_timeout,
            "idle_timeout": self.idle_timeout, "launcher": self.launcher,
            "launcher_args": list(self.launcher_args), "compat": list(self.compat), "pins": list(self.pins),
            "gpu_overrides": [{"match": o.match, "args": list(o.args), "env": [list(e) for e in o.env]}
                              for o in self.gpu_overrides],
            **self._multinode(),
            "slurm": {"partition": self.slurm.partition, "time": self.slurm.time, "gpus": self.slurm.gpus,
                      "args": list(self.slurm.args)},
        }

    @classmethod
    def from_json(cls, d: dict) -> Case:
        return cls(
            name=d["name"], script=Path(d["script"]), args=tuple(d["args"]), env=_pairs(d["env"]),
            nproc=d["nproc"], accelerator=d["accelerator"], timeout=d["timeout"],
            collective_timeout=d["collective_timeout"], idle_timeout=d["idle_timeout"], launcher=d["launcher"],
            launcher_args=tuple(d["launcher_args"]), compat=tuple(d["compat"]), pins=tuple(d["pins"]),
            gpu_overrides=tuple(GpuOverride(o["match"], tuple(o["args"]), _pairs(o["env"])) for o in d["gpu_overrides"]),
            hostfile=Path(d["hostfile"]) if d.get("hostfile") else None, num_nodes=d.get("num_nodes"),
            launcher_backend=d.get("launcher_backend"), master_addr=d.get("master_addr"),
            include=d.get("include"), exclude=d.get("exclude"),
            slurm=SlurmSettings(**{**d.get("slurm", {}), "args": tuple(d.get("slurm", {}).get("args", ()))}),
        )


@dataclass(frozen=True)
class EnvOptions:
    """How point venvs are built; from matrix ``defaults`` and the CLI."""

    python: str | None = None
    base: str = "auto"
    build_pins: tuple[str, ...] = DEFAULT_BUILD_PINS
    build_with_torch: tuple[str, ...] = ("deepspeed",)


@dataclass(frozen=True)
class Matrix:
    path: Path
    cases: tuple[Case, ...]
    env: EnvOptions = field(default_factory=EnvOptions)

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.cases)
        raise MatrixError(f"no case named {name!r} in {self.path.name} (cases: {known})")


# ------------------------------------------------------------------- the schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _GpuOverride(_Strict):
    args: list[str] = []
    env: dict[str, str] = {}


class _Slurm(_Strict):
    partition: str | None = None
    time: int | None = Field(default=None, ge=1)
    gpus: int | None = Field(default=None, ge=0)
    args: list[str] | None = None


LAUNCHER_BACKENDS = ("pdsh", "openmpi", "mvapich", "mpich", "impi", "slurm")


class _Settings(_Strict):
    hostfile: str | None = None
    num_nodes: int | None = Field(default=None, ge=1)
    launcher_backend: Literal[LAUNCHER_BACKENDS] | None = None
    master_addr: str | None = None
    include: str | None = None
    exclude: str | None = None
    slurm: _Slurm | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    nproc: int | None = Field(default=None, ge=1, le=1024)
    accelerator: Literal["cpu", "cuda", "auto"] | None = None
    timeout: float | None = Field(default=None, gt=0)
    collective_timeout: float | None = Field(default=None, gt=0)
    idle_timeout: float | None = Field(default=None, gt=0)
    launcher: Literal["deepspeed", "torchrun"] | None = None
    launcher_args: list[str] | None = None
    compat: list[str] | None = None
    pins: list[str] | None = None

    @field_validator("pins")
    @classmethod
    def _pins(cls, v: list[str] | None) -> list[str] | None:
        for p in v or []:
            try:
                Requirement(p)
            except InvalidRequirement as e:
                raise ValueError(f"{p!r} is not a requirement ({str(e).splitlines()[0]})") from None
        return v

    @field_validator("compat")
    @classmethod
    def _compat(cls, v: list[str] | None) -> list[str] | None:
        from .compat import SHIMS

        for name in v or []:
            if name not in SHIMS:
                raise ValueError(f"unknown compat shim {name!r} (known: {', '.join(sorted(SHIMS))})")
        return v


class _Defaults(_Settings):
    python: str | None = None
    base: Literal["auto", "layered", "isolated"] = "auto"
    build_pins: list[str] | None = None
    build_with_torch: list[str] | None = None


def _check_axes(axes: dict[str, list[str]]) -> dict[str, list[str]]:
    for pkg, versions in axes.items():
        _check_versions(pkg, versions)
    return axes


Axes = Annotated[dict[str, list[str]], AfterValidator(_check_axes)]


class _Case(_Settings):
    script: str
    axes: Axes | None = None
    points: list[dict[str, str]] | None = None
    gpu: dict[str, _GpuOverride] = {}

    @field_validator("points")
    @classmethod
    def _points(cls, v: list[dict[str, str]] | None) -> list[dict[str, str]] | None:
        if v is not None and not v:
            raise ValueError("must list at least one point")
        for p in v or []:
            for pkg, ver in p.items():
                _check_versions(pkg, [ver])
        return v


class _Matrix(_Strict):
    version: Literal[1] = 1
    defaults: _Defaults = _Defaults()
    axes: Axes | None = None
    cases: dict[str, _Case]

    @field_validator("cases")
    @classmethod
    def _cases(cls, v: dict[str, _Case]) -> dict[str, _Case]:
        if not v:
            raise ValueError("must define at least one case")
        return v


def _check_versions(pkg: str, versions: list[str]) -> None:
    try:
        Requirement(pkg)
    except InvalidRequirement:
        raise ValueError(f"{pkg!r} is not a package name") from None
    if not versions:
        raise ValueError(f"axis {pkg!r} lists no versions")
    for ver in versions:
        try:
            Version(str(ver))
        except InvalidVersion:
            raise ValueError(f"{pkg}: {ver!r} is not a PEP 440 version") from None


# ----------------------------------------------------------------------- loading


def load(path: Path) -> Matrix:
    """Parse and validate ``path``; any problem is one MatrixError line naming the key."""
    path = Path(path)
    if not path.is_file():
        raise MatrixError(f"{path}: no such matrix file")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise MatrixError(f"{path.name}:{where}: not valid YAML ({problem})") from None
    if not isinstance(raw, dict):
        raise MatrixError(f"{path.name}: expected a mapping with a 'cases' key")
    try:
        model = _Matrix.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        msg = " ".join(err["msg"].removeprefix("Value error, ").split())
        raise MatrixError(f"{path.name}: {loc}: {msg}") from None
    return _to_matrix(path.resolve(), model)


def _to_matrix(path: Path, m: _Matrix) -> Matrix:
    d = m.defaults
    env = EnvOptions(
        python=d.python,
        base=d.base,
        build_pins=tuple(d.build_pins) if d.build_pins is not None else DEFAULT_BUILD_PINS,
        build_with_torch=tuple(d.build_with_torch) if d.build_with_torch is not None else ("deepspeed",),
    )
    cases = tuple(_to_case(path, name, c, d, m.axes) for name, c in m.cases.items())
    return Matrix(path=path, cases=cases, env=env)


def _pick(case_value, default_value, fallback):
    if case_value is not None:
        return case_value
    if default_value is not None:
        return default_value
    return fallback


def _to_case(path: Path, name: str, c: _Case, d: _Defaults, axes: Axes | None) -> Case:
    script = (path.parent / c.script).resolve()
    if not script.is_file():
        raise MatrixError(f"{path.name}: cases.{name}.script: {c.script} does not exist")
    if c.axes is not None and c.points is not None:
        raise MatrixError(f"{path.name}: cases.{name}: give either 'axes' or 'points', not both")
    pins = tuple(d.pins or ()) + tuple(c.pins or ())
    if c.points is not None:
        points = tuple(
            Point(versions=tuple((k, str(v)) for k, v in p.items()), pins=pins) for p in c.points
        )
    else:
        use = c.axes if c.axes is not None else axes
        if not use:
            raise MatrixError(f"{path.name}: cases.{name}: no axes or points (and no top-level axes)")
        names = list(use)
        points = tuple(
            Point(versions=tuple(zip(names, (str(v) for v in combo))), pins=pins)
            for combo in itertools.product(*(use[n] for n in names))
        )
    env = dict(d.env or {}) | dict(c.env or {})
    case = Case(
        name=name,
        script=script,
        args=tuple(_pick(c.args, d.args, [])),
        env=tuple(sorted(env.items())),
        nproc=_pick(c.nproc, d.nproc, 2),
        accelerator=_pick(c.accelerator, d.accelerator, "auto"),
        timeout=float(_pick(c.timeout, d.timeout, 1800.0)),
        collective_timeout=float(_pick(c.collective_timeout, d.collective_timeout, 60.0)),
        idle_timeout=_pick(c.idle_timeout, d.idle_timeout, None),
        launcher=_pick(c.launcher, d.launcher, "deepspeed"),
        launcher_args=tuple(_pick(c.launcher_args, d.launcher_args, [])),
        compat=tuple(_pick(c.compat, d.compat, [])),
        pins=pins,
        points=points,
        gpu_overrides=tuple(
            GpuOverride(match=k, args=tuple(o.args), env=tuple(sorted(o.env.items())))
            for k, o in c.gpu.items()
        ),
        hostfile=(path.parent / hf).resolve() if (hf := _pick(c.hostfile, d.hostfile, None)) else None,
        num_nodes=_pick(c.num_nodes, d.num_nodes, None),
        launcher_backend=_pick(c.launcher_backend, d.launcher_backend, None),
        master_addr=_pick(c.master_addr, d.master_addr, None),
        include=_pick(c.include, d.include, None),
        exclude=_pick(c.exclude, d.exclude, None),
        slurm=_slurm(c.slurm, d.slurm),
    )
    check_multinode(case, f"{path.name}: cases.{name}")
    return case


def _slurm(c: _Slurm | None, d: _Slurm | None) -> SlurmSettings:
    c, d = c or _Slurm(), d or _Slurm()
    return SlurmSettings(partition=_pick(c.partition, d.partition, None), time=_pick(c.time, d.time, None),
                         gpus=_pick(c.gpus, d.gpus, None), args=tuple(_pick(c.args, d.args, [])))


def check_multinode(case: Case, where: str) -> None:
    """The multi-node settings as the deepspeed launcher will take them, or a MatrixError."""
    problem = ""
    uses_hostfile = case.num_nodes is not None or case.launcher_backend or case.master_addr
    if (uses_hostfile or case.hostfile or case.include or case.exclude) and case.launcher != "deepspeed":
        problem = "hostfile, include, exclude, num_nodes, launcher_backend and master_addr need launcher: deepspeed"
    elif case.hostfile is not None and not case.hostfile.is_file():
        problem = f"hostfile: {case.hostfile} does not exist"
    elif uses_hostfile and case.hostfile is None:
        problem = "num_nodes, launcher_backend and master_addr need a hostfile"
    elif case.include and case.exclude:
        problem = "give include or exclude, not both"
    elif case.num_nodes is not None and (case.include or case.exclude):
        problem = "num_nodes cannot be combined with include/exclude (the deepspeed launcher refuses it)"
    if problem:
        raise MatrixError(f"{where}: {problem}")


def script_case(script: Path, nproc: int, **settings) -> Case:
    """A case for ``--script FILE`` (no matrix entry)."""
    script = Path(script)
    if not script.is_file():
        raise MatrixError(f"{script}: no such script")
    return Case(name=script.stem, script=script.resolve(), nproc=nproc, **settings)


# ------------------------------------------------------------------------ hashes


def _pairs(items) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in items)


def _digest(obj) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "missing"
