"""matrix.yaml (or the command line) -> Cases and Points.

Pydantic validates the file once, here; everything after this module sees the frozen
dataclasses of ``model``.  The schema is documented in docs/reference/matrix.md.  The
command line's settings are checked by the same functions (pins, multi-node options).
"""

from __future__ import annotations

import itertools
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from dsbisect.core import files
from dsbisect.core.command import CommandKind, options_of, read_hostfile
from dsbisect.core.errors import InputError, MatrixError
from dsbisect.core.redact import mask_args, redact
from dsbisect.launch.launchers import nodes_problem
from dsbisect.core.model import (
    DEFAULT_BUILD_PINS,
    Accelerator,
    BaseMode,
    Case,
    EnvOptions,
    GpuOverride,
    Launcher,
    LauncherBackend,
    Nodes,
    Point,
    SlurmSettings,
)


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

    def select(self, names: list[str] | None) -> list[Case]:
        return [self.case(n) for n in names] if names else list(self.cases)

    def only_case(self, name: str | None) -> Case:
        """``--case NAME``, or the matrix's one case when it has only one."""
        if name:
            return self.case(name)
        if len(self.cases) == 1:
            return self.cases[0]
        raise InputError(f"{self.path.name} has {len(self.cases)} cases: pick one with --case (or use --script)")


# ------------------------------------------------------------------- the schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_env(env: dict[str, str] | None) -> dict[str, str] | None:
    for name in env or {}:
        if not name or "=" in name:
            raise ValueError(f"{name!r} is not a variable name (a name is not empty and holds no '=')")
    return env


Env = Annotated[dict[str, str], AfterValidator(_check_env)]


class _GpuOverride(_Strict):
    args: list[str] = []
    env: Env = {}


class _Slurm(_Strict):
    partition: str | None = None
    time: int | None = Field(default=None, ge=1)
    gpus: int | None = Field(default=None, ge=0)
    args: list[str] | None = None


class _Settings(_Strict):
    hostfile: str | None = None
    num_nodes: int | None = Field(default=None, ge=1)
    launcher_backend: LauncherBackend | None = None
    master_addr: str | None = None
    include: str | None = None
    exclude: str | None = None
    slurm: _Slurm | None = None
    args: list[str] | None = None
    env: Env | None = None
    nproc: int | None = Field(default=None, ge=1, le=1024)
    accelerator: Accelerator | None = None
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    collective_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    idle_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    launcher: Launcher | None = None
    launcher_args: list[str] | None = None
    compat: list[str] | None = None
    pins: list[str] | None = None

    @field_validator("pins")
    @classmethod
    def _pins(cls, v: list[str] | None) -> list[str] | None:
        for p in v or []:
            problem = requirement_problem(p)
            if problem:
                raise ValueError(f"{p!r} is not a requirement ({problem})")
        return v

    @field_validator("compat")
    @classmethod
    def _compat(cls, v: list[str] | None) -> list[str] | None:
        from dsbisect.core.compat import SHIMS

        for name in v or []:
            if name not in SHIMS:
                raise ValueError(f"unknown compat shim {name!r} (known: {', '.join(sorted(SHIMS))})")
        return v


class _Defaults(_Settings):
    python: str | None = None
    base: BaseMode = BaseMode.AUTO
    build_pins: list[str] | None = None
    build_with_torch: list[str] | None = None


def _check_axes(axes: dict[str, list[str]]) -> dict[str, list[str]]:
    for pkg, versions in axes.items():
        _check_versions(pkg, versions)
    return axes


Axes = Annotated[dict[str, list[str]], AfterValidator(_check_axes)]


class _Case(_Settings):
    script: str | None = None
    command: list[str] | None = None
    axes: Axes | None = None
    points: list[dict[str, str]] | None = None
    gpu: dict[str, _GpuOverride] = {}
    metric: str | None = None  # NAME[@stepN][@AGG]: the run grid shows its median per cell

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str | None) -> str | None:
        from dsbisect.core.metric import parse_name

        try:
            if v is not None:
                parse_name(v)
        except InputError as e:
            raise ValueError(str(e).removeprefix("--metric ")) from None
        return v

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
    if requirement_problem(pkg):
        raise ValueError(f"{pkg!r} is not a package name")
    if not versions:
        raise ValueError(f"axis {pkg!r} lists no versions")
    for ver in versions:
        try:
            Version(str(ver))
        except InvalidVersion:
            raise ValueError(f"{pkg}: {ver!r} is not a PEP 440 version") from None


def requirement_problem(text: str) -> str:
    """Why ``text`` is not a requirement ("" when it is one)."""
    try:
        Requirement(text)
    except InvalidRequirement as e:
        return str(e).splitlines()[0]
    return ""


def check_pins(pins: list[str], moving: str = "", flag: str = "--pin") -> tuple[str, ...]:
    """The command line's ``--pin`` requirements, normalised; ``moving`` may not be pinned."""
    out = []
    for p in pins:
        if requirement_problem(p):
            raise InputError(f"{flag} {p!r} is not a requirement (expected NAME==VERSION)")
        r = Requirement(p)
        if moving and canonicalize_name(r.name) == canonicalize_name(moving):
            raise InputError(f"{flag} {p}: {moving} is the package being bisected")
        out.append(str(r))
    return tuple(out)


# ----------------------------------------------------------------------- loading


class _UniqueKeys(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (YAML itself keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load(path: Path) -> Matrix:
    """Parse and validate ``path``; any problem is one MatrixError line naming the key."""
    path = Path(path)
    if not _is_file(path):
        raise MatrixError(f"{path}: no such matrix file")
    try:
        text = files.read_small(path).decode("utf-8")
    except OSError as e:
        raise MatrixError(f"{path.name}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise MatrixError(f"{path.name}: not UTF-8 text (byte {e.start}); a matrix is a YAML file") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise MatrixError(f"{path.name}:{where}: not valid YAML ({problem})") from None
    if not isinstance(raw, dict):
        raise MatrixError(f"{path.name}: expected a mapping with a 'cases' key")
    nul = _nul_at(raw)
    if nul is not None:  # no argument, variable or path can hold one: exec would fail mid-run
        raise MatrixError(f"{path.name}: {'.'.join(nul)}: holds a NUL byte, which no argument, variable or "
                          "path can hold")
    try:
        model = _Matrix.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        msg = " ".join(err["msg"].removeprefix("Value error, ").split())
        raise MatrixError(f"{path.name}: {loc}: {msg}") from None
    return _to_matrix(path.resolve(), model)


def _nul_at(value, loc: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Where in the parsed YAML a text (key or value) holds a NUL byte, or None."""
    if isinstance(value, str):
        return loc if "\0" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        here = (*loc, str(k))
        if isinstance(k, str) and "\0" in k:
            return here
        found = _nul_at(v, here)
        if found is not None:
            return found
    return None


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


def _first(*values):
    """The first that is set: the case's setting, else the defaults', ..., else the last."""
    return next((v for v in values[:-1] if v is not None), values[-1])


def _to_case(path: Path, name: str, c: _Case, d: _Defaults, axes: Axes | None) -> Case:
    where = f"{path.name}: cases.{name}"
    if (c.script is None) == (c.command is None):
        raise MatrixError(f"{where}: give either 'script' or 'command'")
    if c.command is not None:
        base = command_case(c.command, path.parent, where=f"{where}.command")
        script = base.script
    else:
        base = None
        script = path.parent / c.script
        if not _is_file(script):
            raise MatrixError(f"{where}.script: {_short(c.script)} does not exist")
        script = script.resolve()
    if c.axes is not None and c.points is not None:
        raise MatrixError(f"{where}: give either 'axes' or 'points', not both")
    pins = tuple(d.pins or ()) + tuple(c.pins or ())
    points = _points(c, axes, pins, where)
    hostfile = _first(c.hostfile, d.hostfile, None)
    case = Case(
        name=name,
        script=script,
        script_digest=file_digest(script),
        args=base.args if base else tuple(_first(c.args, d.args, [])),
        env=tuple(sorted((dict(d.env or {}) | dict(c.env or {})).items())),
        nproc=_first(base.nproc if base and base.command else None, c.nproc, d.nproc, 2),
        accelerator=_first(c.accelerator, d.accelerator, Accelerator.AUTO),
        timeout=float(_first(c.timeout, d.timeout, 1800.0)),
        collective_timeout=float(_first(c.collective_timeout, d.collective_timeout, 60.0)),
        idle_timeout=_first(c.idle_timeout, d.idle_timeout, None),
        launcher=_first(c.launcher, d.launcher, Launcher.DEEPSPEED),
        launcher_args=tuple(_first(c.launcher_args, d.launcher_args, [])),
        compat=tuple(_first(c.compat, d.compat, [])),
        pins=pins,
        points=points,
        gpu_overrides=tuple(GpuOverride(match=k, args=tuple(o.args), env=tuple(sorted(o.env.items())))
                            for k, o in c.gpu.items()),
        slurm=_slurm(c.slurm, d.slurm),
        command=base.command if base else None,
        cwd=base.cwd if base else None,
        inputs=base.inputs if base else (),
        metric=c.metric,
    )
    _check_launcher_args(case, where)
    return with_nodes(case, where, hostfile=(path.parent / hostfile).resolve() if hostfile else None,
                      num_nodes=_first(c.num_nodes, d.num_nodes, None),
                      backend=_first(c.launcher_backend, d.launcher_backend, None),
                      master_addr=_first(c.master_addr, d.master_addr, None),
                      include=_first(c.include, d.include, None), exclude=_first(c.exclude, d.exclude, None))


def _check_launcher_args(case: Case, where: str) -> None:
    """srun's options are read when the case is made (its line adds to them when it runs);
    ``launcher: direct`` has no launcher to give options to."""
    if case.launcher is Launcher.DIRECT and case.launcher_args and not case.command:
        raise MatrixError(f"{where}.launcher_args: launcher: direct starts the ranks itself and takes no "
                          "launcher options (use torchrun or deepspeed for them)")
    if case.launcher is Launcher.SRUN and not case.command:
        try:
            options_of(CommandKind.SRUN, case.launcher_args)
        except InputError as e:
            raise MatrixError(f"{where}.launcher_args: {e}") from None


def _points(c: _Case, axes: Axes | None, pins: tuple[str, ...], where: str) -> tuple[Point, ...]:
    if c.points is not None:
        return tuple(Point(versions=tuple((k, str(v)) for k, v in p.items()), pins=pins) for p in c.points)
    use = c.axes if c.axes is not None else axes
    if not use:
        raise MatrixError(f"{where}: no axes or points (and no top-level axes)")
    names = list(use)
    return tuple(Point(versions=tuple(zip(names, (str(v) for v in combo))), pins=pins)
                 for combo in itertools.product(*(use[n] for n in names)))


def _slurm(c: _Slurm | None, d: _Slurm | None) -> SlurmSettings:
    c, d = c or _Slurm(), d or _Slurm()
    return SlurmSettings(partition=_first(c.partition, d.partition, None), time=_first(c.time, d.time, None),
                         gpus=_first(c.gpus, d.gpus, None), args=tuple(_first(c.args, d.args, [])))


def with_nodes(case: Case, where: str, **given) -> Case:
    """The case with the multi-node settings ``given`` (those not None), checked as the
    deepspeed launcher will take them; a MatrixError names ``where``."""
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return case
    nodes = replace(case.nodes, **given)
    if "hostfile" in given:
        nodes = replace(nodes, hostfile_digest=file_digest(nodes.hostfile) if _is_file(nodes.hostfile) else None)
        if _is_file(nodes.hostfile) and nodes.hostfile.stat().st_size > files.TEXT_LIMIT:
            big = files.too_large(nodes.hostfile, nodes.hostfile.stat().st_size, files.TEXT_LIMIT)
            raise MatrixError(f"{where}: hostfile {nodes.hostfile}: {big.strerror}")
    problem = _nodes_problem(nodes, case.launcher)
    if problem:
        raise MatrixError(f"{where}: {problem}")
    return replace(case, nodes=nodes)


def _nodes_problem(n: Nodes, launcher: Launcher) -> str:
    """``launchers.nodes_problem``, then the hostfile: there, and read as the deepspeed launcher reads it."""
    problem = nodes_problem(n, launcher)
    if problem or n.hostfile is None:
        return problem
    if not _is_file(n.hostfile):
        return f"hostfile: {_short(str(n.hostfile))} does not exist"
    try:
        read_hostfile(n.hostfile)
    except InputError as e:
        return str(e).removeprefix("deepspeed: ")
    return ""


def script_case(script: Path, nproc: int, accelerator: Accelerator = Accelerator.AUTO) -> Case:
    """A case for ``--script FILE`` (no matrix entry)."""
    script = Path(script)
    if not _is_file(script):
        raise MatrixError(f"{_short(str(script))}: no such script")
    return Case(name=script.stem, script=script.resolve(), script_digest=file_digest(script), nproc=nproc,
                accelerator=accelerator)


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for names the system refuses (too long, NUL bytes)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def _short(text: str, n: int = 120) -> str:
    return text if len(text) <= n else f"{text[:n]}… ({len(text)} characters)"


def command_case(argv: list[str] | tuple[str, ...], cwd: Path, name: str | None = None, nproc: int | None = None,
                 accelerator: Accelerator = Accelerator.AUTO, where: str = "command") -> Case:
    """A case for the user's own command line (``-- COMMAND`` or a matrix ``command:``).

    ``python x.py args`` (or ``x.py args``) becomes a script case: run as given, one process and no
    launcher, as ``git bisect run`` would run it, unless ``nproc`` (> 1) asks for that many ranks
    under the case's launcher (``how_it_runs`` says which, before anything runs); a launcher line (deepspeed, torchrun, accelerate launch) or any other
    executable is kept as it is, to run from ``cwd``.  The files the line names are recorded
    with their digests: a changed config is a different case.
    """
    from dsbisect.core.command import parse

    try:
        cmd = parse(list(argv), cwd)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    inputs = tuple((str(p), file_digest(p)) for p in cmd.files)
    if cmd.kind is CommandKind.SCRIPT:
        script = cmd.script.resolve()
        return Case(name=name or script.stem, script=script, script_digest=file_digest(script),
                    args=tuple(cmd.script_args), nproc=nproc or 1, accelerator=accelerator, cwd=cwd.resolve(),
                    inputs=inputs, line=tuple(argv))
    target = cmd.script or cwd / cmd.target
    script = target.resolve() if _is_file(target) else Path(cmd.target)
    return Case(name=name or _command_name(cmd), script=script,
                script_digest=file_digest(script) if _is_file(script) else "none",
                nproc=cmd.nproc or nproc or 1, accelerator=accelerator, command=cmd, cwd=cwd.resolve(),
                inputs=inputs)


def how_it_runs(case: Case) -> str:
    """How a ``-- python x.py`` line runs, said in the first lines of output ("" for any other
    case): one process as given (the default), or --nproc ranks under a launcher."""
    if not case.line or case.command is not None:
        return ""
    line = redact(shlex.join(mask_args(case.line)))  # a --hub_token's value is no one's business
    if case.nproc == 1:
        return (f"{line} runs as given: one process, no launcher (as git bisect run would run it); "
                f"--nproc N runs N ranks of it under the {case.launcher.value} launcher")
    return (f"{line} runs as {case.nproc} ranks (--nproc {case.nproc}) under the {case.launcher.value} launcher; "
            "without --nproc it runs once, as given")


def command_points(argv: list[str], cwd: Path, versions: list[str], pins: list[str], nproc: int | None,
                   accelerator: Accelerator) -> Case:
    """``dsbisect run --versions PKG=V1,V2 --pin REQ -- COMMAND``: the command's case, with a point
    per combination of the versions (one point of the pins alone without --versions)."""
    if not argv:
        raise InputError("--versions and --pin run your own command: give it after --")
    held = check_pins(pins)
    axes = versions_axes(versions)
    names = list(axes)
    points = tuple(Point(versions=tuple(zip(names, combo)), pins=held)
                   for combo in itertools.product(*(axes[n] for n in names))) or (Point(versions=(), pins=held),)
    return replace(command_case(argv, cwd, nproc=nproc, accelerator=accelerator), pins=held, points=points)


def versions_axes(versions: list[str]) -> dict[str, list[str]]:
    """``--versions PKG=V1,V2`` (repeatable) as axes: package -> its versions, in the order given."""
    axes: dict[str, list[str]] = {}
    for spec in versions:
        name, _, listed = spec.partition("=")
        chosen = [v.strip() for v in listed.split(",") if v.strip()]
        if not name.strip() or not chosen:
            raise InputError(f"--versions {spec!r}: expected PACKAGE=V1,V2,...")
        try:
            _check_versions(name.strip(), chosen)
        except ValueError as e:
            raise InputError(f"--versions {spec!r}: {e}") from None
        axes[name.strip()] = chosen
    return axes


def narrowed(cases: list[Case], versions: list[str], pins: list[str]) -> list[Case]:
    """``dsbisect run MATRIX --versions PKG=V1,V2 --pin REQ``: the matrix's cases at these versions
    of PKG instead of their own (its other axes as they are), holding REQ besides their pins. A
    case that does not move PKG, or a pin of a package a case moves, is bad input."""
    axes = {canonicalize_name(k): (k, v) for k, v in versions_axes(versions).items()}
    held = check_pins(pins)
    out = []
    for c in cases:
        moved = {canonicalize_name(n) for p in c.points for n, _ in p.versions}
        for key, (given, _) in axes.items():
            if key not in moved:
                raise InputError(f"--versions {given}=...: case {c.name!r} does not move {given} "
                                 f"(its axes: {', '.join(sorted(moved)) or 'none'}); pick cases with --case")
        for p in held:
            if canonicalize_name(Requirement(p).name) in moved:
                raise InputError(f"--pin {p}: case {c.name!r} moves {Requirement(p).name} (give --versions instead)")
        points: dict[Point, None] = {}
        for p in c.points:
            for combo in itertools.product(*(vs for _, vs in axes.values())):
                chosen = dict(zip(axes, combo))
                points[replace(p, versions=tuple((n, chosen.get(canonicalize_name(n), v)) for n, v in p.versions),
                               pins=_pinned_over(p.pins, held))] = None
        out.append(replace(c, points=tuple(points), pins=_pinned_over(c.pins, held)))
    return out


def _pinned_over(pins: tuple[str, ...], held: tuple[str, ...]) -> tuple[str, ...]:
    """``pins`` with each of ``held`` in place of a pin of the same package (a --pin overrides)."""
    names = {canonicalize_name(Requirement(h).name) for h in held}
    return tuple(p for p in pins if canonicalize_name(Requirement(p).name) not in names) + held


def _command_name(cmd) -> str:
    """A case name for a command line: its script's or program's stem."""
    return Path(cmd.script or cmd.module or cmd.target).stem or "command"


def file_digest(path: Path) -> str:
    """The digest of a file's content, read as a stream (any size costs 1 MB)."""
    try:
        return files.digest(path)
    except OSError:
        return "missing"
