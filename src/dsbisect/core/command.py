"""A user's command line, read the way its launcher would read it.

``parse`` sorts a line into one of six forms (``CommandKind``): a ``deepspeed``,
``torchrun`` (or ``python -m torch.distributed.run|launch``), ``accelerate launch`` or ``srun`` line; a
Python script (``python -u x.py …``, ``x.py …``) to run under the case's launcher; or any other
executable, run as it is, whose exit code is the verdict.  For a launcher line it separates the
launcher's options from the script and the script's arguments exactly where the launcher's
argparse parser would (the first positional is the script, everything after it is the
script's), and reads from them the ranks per node and the nodes.  ``with_options`` then adds
what dsbisect needs without touching what the user gave.

Pure: no subprocesses, no environment variables (torchrun's ``PET_*`` defaults are not read),
and no I/O but reading the files the line names to find its world size (an accelerate config,
a DeepSpeed hostfile) and asking which of its arguments are files.
"""

from __future__ import annotations

import enum
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from dsbisect.core import files
from dsbisect.core.errors import InputError


class CommandKind(enum.Enum):
    """Which of the six forms a command line has."""

    DEEPSPEED = "deepspeed"
    TORCHRUN = "torchrun"  # torchrun, python -m torch.distributed.run, python -m torch.distributed.launch
    ACCELERATE = "accelerate"  # accelerate launch
    SRUN = "srun"  # srun [options] program …: Slurm's tasks are the ranks
    SCRIPT = "script"  # a Python file, to run under the case's launcher with --nproc
    EXECUTABLE = "executable"  # anything else, run as it is: its exit code is the verdict


LAUNCHERS = (CommandKind.DEEPSPEED, CommandKind.TORCHRUN, CommandKind.ACCELERATE, CommandKind.SRUN)


@dataclass(frozen=True)
class Command:
    """One parsed command line.

    ``prefix`` is what starts the launcher or interpreter (``("deepspeed",)``,
    ``("python", "-m", "torch.distributed.run")``, ``("accelerate", "launch")``,
    ``("python", "-u")``); ``launcher_args`` the user's launcher options as given (a ``--`` that
    ends them is left out); ``target`` the first positional as given: the script, or the module
    (``--module``/``-m``, then ``module`` is set and ``script`` is None) or program
    (``--no_python``, or the executable itself) it names.  ``options`` are the launcher options
    read, as (canonical name, value or None for a flag).  ``nproc`` is ranks per node and
    ``nnodes`` nodes, None where the line leaves them to the machine.  ``files`` are the
    existing files the line names, in order of appearance, each once.  ``distributed_type`` is
    an ``accelerate launch`` line's ``--config_file``'s (``MULTI_GPU``, ``DEEPSPEED``, ``NO``…).
    """

    argv: tuple[str, ...]
    kind: CommandKind
    launcher_args: tuple[str, ...] = ()
    script: Path | None = None
    script_args: tuple[str, ...] = ()
    nproc: int | None = None
    nnodes: int | None = None
    files: tuple[Path, ...] = ()
    prefix: tuple[str, ...] = ()
    target: str = ""
    module: str | None = None
    options: tuple[tuple[str, str | None], ...] = ()
    distributed_type: str | None = None

    def has_option(self, name: str) -> bool:
        """Whether the user gave launcher option ``name``, under any spelling the launcher accepts."""
        key = self._canonical(name)
        return any(n == key for n, _ in self.options)

    def option(self, name: str) -> str | None:
        """The value the launcher uses for option ``name`` (the last one given), or None."""
        key = self._canonical(name)
        values = [v for n, v in self.options if n == key]
        return values[-1] if values else None

    def _canonical(self, name: str) -> str:
        grammar = _GRAMMARS.get(self.kind)
        return grammar.canonical(name) if grammar else name


def parse(argv: Sequence[str], cwd: Path) -> Command:
    """Read ``argv`` as its launcher would; paths are relative to ``cwd``. Raises ``InputError``."""
    argv = tuple(argv)
    if not argv or not argv[0].strip():
        raise InputError("empty command")
    launcher = _launcher(argv)
    if launcher:
        return _parse_launcher(argv, *launcher, cwd)
    if PYTHON.fullmatch(Path(argv[0]).name):
        return _parse_python(argv, cwd)
    if argv[0].endswith(".py"):
        return _script(argv, 0, cwd)
    return _executable(argv, cwd)


def with_options(cmd: Command, add: Mapping[str, str | None], inline: bool = False) -> tuple[str, ...]:
    """The launcher options to run ``cmd`` with: the user's, untouched and in order, then each
    of ``add`` that the user did not give under any spelling (a None value adds a flag;
    ``inline`` spells each as ``--name=value``, as getopt's optional values must be)."""
    if cmd.kind is CommandKind.EXECUTABLE:
        raise ValueError("an executable has no launcher options")
    extra = [_spell(name, value, inline) for name, value in add.items() if not cmd.has_option(name)]
    return cmd.launcher_args + tuple(token for pair in extra for token in pair)


def options_of(kind: CommandKind, args: Sequence[str]) -> Command:
    """``args`` read as launcher ``kind``'s options alone (a case's ``launcher_args``): they must
    all be options. Raises ``InputError``."""
    grammar = _GRAMMARS[kind]
    end, options = _read_options(tuple(args), grammar)
    if end < len(args):
        raise InputError(f"{grammar.launcher}: {args[end]!r} is not an option (launcher_args are options only)")
    return Command(tuple(args), kind, launcher_args=tuple(args), options=tuple(options))


def _spell(name: str, value: str | None, inline: bool = False) -> tuple[str, ...]:
    if value is None:
        return (name,)
    return (f"{name}={value}",) if inline or value.startswith("-") else (name, value)


# ---------------------------------------------------------------------- grammars


@dataclass(frozen=True)
class _Option:
    name: str  # canonical: the first long spelling
    arity: str  # "flag", "value", "int" or "optional" (a value only inline: --opt=VALUE)


@dataclass(frozen=True)
class _Grammar:
    """One launcher's options, as its argparse parser declares them (the union over releases)."""

    launcher: str
    spellings: Mapping[str, _Option]
    dashes: bool  # "-" and "_" are one inside long names (torchrun, accelerate)
    abbrev: bool  # argparse's unique-prefix abbreviations (allow_abbrev)

    def key(self, name: str) -> str:
        return "--" + name[2:].replace("-", "_") if self.dashes and name.startswith("--") else name

    def find(self, name: str) -> _Option | None:
        key = self.key(name)
        if key in self.spellings:
            return self.spellings[key]
        hits = {o for s, o in self.spellings.items() if s.startswith(key)} if self.abbrev and key[:2] == "--" else ()
        return next(iter(hits)) if len(hits) == 1 else None

    def canonical(self, name: str) -> str:
        found = self.find(name)
        return found.name if found else self.key(name)


def _grammar(launcher: str, flags: str, values: str, ints: str, dashes: bool, abbrev: bool,
             optional: str = "") -> _Grammar:
    """A grammar from space-separated option groups, a group's spellings joined by ``|``."""
    spellings: dict[str, _Option] = {}
    for arity, groups in (("flag", flags), ("value", values), ("int", ints), ("optional", optional)):
        for group in groups.split():
            names = group.split("|")
            spellings.update(dict.fromkeys(names, _Option(next(n for n in names if n[:2] == "--"), arity)))
    return _Grammar(launcher, spellings, dashes, abbrev)


_DEEPSPEED = _grammar(
    "deepspeed",
    flags="--module --no_python --no_local_rank --no_ssh --no_ssh_check --force_multi --save_pid "
          "--elastic_training --bind_cores_to_rank -q|--quiet",
    values="-H|--hostfile -i|--include -e|--exclude --master_addr --launcher --launcher_args "
           "--enable_each_rank_log --autotuning --bind_core_list --venv_script --log_level",
    ints="--num_gpus|--num_accelerators --num_nodes --master_port --node_rank --ssh_port "
         "--min_elastic_nodes --max_elastic_nodes",
    dashes=False, abbrev=True)

_TORCHRUN = _grammar(
    "torchrun",
    flags="--standalone -m|--module --no_python --run_path --virtual_local_rank --use_env",
    values="--nnodes --nproc_per_node --rdzv_backend --rdzv_endpoint --rdzv_id --rdzv_conf --monitor_interval "
           "--start_method --event_log_handler --role --log_dir -r|--redirects -t|--tee --local_ranks_filter "
           "--duplicate_stdout_filters --duplicate_stderr_filters --master_addr --local_addr --logs_specs "
           "--numa_binding --signals_to_handle",
    ints="--max_restarts --node_rank --master_port --shutdown_timeout",
    dashes=True, abbrev=True)

_ACCELERATE = _grammar(
    "accelerate launch",
    flags="--cpu --debug --downcast_bf16 --dynamo_use_dynamic --dynamo_use_fullgraph "
          "--dynamo_use_regional_compilation --enable_cpu_affinity --fp16 --fp8_use_autocast_during_eval --ipex "
          "--ipex_enabled -m|--module --mps --multi_gpu --no_python --no_tpu_cluster -q|--quiet --same_network "
          "--tpu --tpu_cluster --tpu_use_sudo --use_deepspeed --use_fsdp --use_megatron_lm --use_mps_device "
          "--use_parallelism_config --use_tp --use_xpu --xpu_enabled",
    values="--config_file --mixed_precision --dynamo_backend --dynamo_mode --gpu_ids --main_process_ip "
           "-t|--tee --log_dir --role --rdzv_backend --rdzv_conf --monitor_interval --vm --env "
           "--main_training_function --aws_access_key_id --aws_secret_access_key --mpirun_hostfile --mpirun_ccl "
           "--deepspeed_config_file --zero_stage --offload_optimizer_device --offload_param_device "
           "--offload_optimizer_nvme_path --offload_param_nvme_path --gradient_accumulation_steps "
           "--gradient_clipping --zero3_init_flag --zero3_save_16bit_model --deepspeed_hostfile "
           "--deepspeed_exclusion_filter --deepspeed_inclusion_filter --deepspeed_multinode_launcher "
           "--deepspeed_moe_layer_cls_names --fsdp_version --fsdp_offload_params --fsdp_min_num_params "
           "--fsdp_sharding_strategy --fsdp_reshard_after_forward --fsdp_auto_wrap_policy "
           "--fsdp_transformer_layer_cls_to_wrap --fsdp_backward_prefetch --fsdp_backward_prefetch_policy "
           "--fsdp_state_dict_type --fsdp_forward_prefetch --fsdp_use_orig_params "
           "--fsdp_cpu_ram_efficient_loading --fsdp_sync_module_states --fsdp_activation_checkpointing "
           "--min_num_params --offload_params --sharding_strategy --transformer_layer_cls_to_wrap --tp_size "
           "--megatron_lm_tp_degree --megatron_lm_pp_degree --megatron_lm_num_micro_batches "
           "--megatron_lm_sequence_parallelism --megatron_lm_recompute_activations "
           "--megatron_lm_use_distributed_optimizer --megatron_lm_gradient_clipping "
           "--megatron_lm_use_custom_fsdp --megatron_lm_no_load_optim --megatron_lm_no_save_optim "
           "--megatron_lm_eod_mask_loss --megatron_lm_overlap_cpu_optimizer_d2h_h2d "
           "--megatron_lm_optimizer_cpu_offload --megatron_lm_use_precision_aware_optimizer "
           "--megatron_lm_decoder_last_pipeline_num_layers --megatron_lm_recompute_granularity "
           "--megatron_lm_recompute_method --megatron_lm_recompute_num_layers --megatron_lm_attention_backend "
           "--megatron_lm_expert_model_parallel_size --megatron_lm_context_parallel_size "
           "--megatron_lm_attention_dropout --megatron_lm_hidden_dropout "
           "--megatron_lm_attention_softmax_in_fp32 --megatron_lm_expert_tensor_parallel_size "
           "--megatron_lm_calculate_per_token_loss --megatron_lm_use_rotary_position_embeddings "
           "--fp8_backend --fp8_margin --fp8_interval --fp8_format --fp8_amax_history_len "
           "--fp8_amax_compute_algo --fp8_override_linear_precision --fp8_opt_level "
           "--fp8_enable_fsdp_float8_all_gather --fp8_pad_inner_dim --parallelism_config_dp_replicate_size "
           "--parallelism_config_dp_shard_size --parallelism_config_tp_size --parallelism_config_cp_size "
           "--parallelism_config_cp_backend --parallelism_config_cp_comm_strategy --parallelism_config_sp_size "
           "--parallelism_config_sp_backend --parallelism_config_sp_seq_length "
           "--parallelism_config_sp_seq_length_is_variable --parallelism_config_sp_attn_implementation",
    ints="--num_processes --num_machines --machine_rank --main_process_port --num_cpu_threads_per_process",
    dashes=True, abbrev=False)

# srun reads its options with getopt_long: unique prefixes of long names, no "-"/"_" folding;
# an option with an optional value ("opt") takes it only inline (--kill-on-bad-exit=1).
_SRUN = _grammar(
    "srun",
    flags="--overlap --overcommit|-O --label|-l --unbuffered|-u --quiet|-Q --verbose|-v --no-kill --disable-status|-X "
          "--contiguous --hold|-H --exact --whole --spread-job --use-min-nodes --test-only --multi-prog --pty "
          "--reboot --help|-h --usage --version|-V",
    values="--nodes|-N --partition|-p --time|-t --job-name|-J --output|-o --error|-e --input|-i --chdir|-D "
           "--nodelist|-w --exclude|-x --account|-A --qos|-q --constraint|-C --mem --mem-per-cpu --mem-per-gpu "
           "--gres --gpus|-G --gpus-per-node --gpus-per-task --gpus-per-socket --cpus-per-gpu --cpu-bind "
           "--mem-bind --distribution|-m --export --mpi --reservation --dependency|-d --time-min --begin "
           "--signal --network --comment --licenses|-L --gpu-bind --hint --cores-per-socket --sockets-per-node "
           "--threads-per-core --ntasks-per-socket --ntasks-per-core --ntasks-per-gpu --tres-per-task "
           "--container --prolog --epilog --task-prolog --task-epilog --open-mode --switches --wckey --cluster|-M "
           "--nodefile|-F --segment --mincpus --tmp --kill-command --wait|-W --cpus-per-task|-c",
    ints="--ntasks|-n --ntasks-per-node --relative|-r --jobid --het-group --nice",
    dashes=False, abbrev=True, optional="--kill-on-bad-exit|-K --exclusive --immediate|-I --propagate "
                                        "--cpu-freq --slurmd-debug --accel-bind")

_GRAMMARS = {CommandKind.DEEPSPEED: _DEEPSPEED, CommandKind.TORCHRUN: _TORCHRUN, CommandKind.ACCELERATE: _ACCELERATE,
             CommandKind.SRUN: _SRUN}

# Executables (by file name) and python -m modules that are launchers.
_EXECUTABLES = {"deepspeed": CommandKind.DEEPSPEED, "ds": CommandKind.DEEPSPEED, "torchrun": CommandKind.TORCHRUN,
                "accelerate-launch": CommandKind.ACCELERATE, "srun": CommandKind.SRUN}
_MODULES = {"torch.distributed.run": CommandKind.TORCHRUN, "torch.distributed.launch": CommandKind.TORCHRUN,
            "deepspeed.launcher.runner": CommandKind.DEEPSPEED, "accelerate.commands.launch": CommandKind.ACCELERATE}
PYTHON = re.compile(r"python[\d.]*")  # an interpreter's file name
_NUMBER = re.compile(r"-\d+(\.\d*)?")
_INT = re.compile(r"[-+]?\d+")


# ---------------------------------------------------------------- the five forms


def _launcher(argv: tuple[str, ...]) -> tuple[CommandKind, int] | None:
    """The launcher an executable line starts, and where its options begin."""
    name = Path(argv[0]).name
    if name == "accelerate" and argv[1:2] == ("launch",):
        return CommandKind.ACCELERATE, 2
    return (_EXECUTABLES[name], 1) if name in _EXECUTABLES else None


def _parse_python(argv: tuple[str, ...], cwd: Path) -> Command:
    """``python [options] script.py …``, ``python -m LAUNCHER …``; ``-c``, other modules: executables."""
    start, switch, value = _interpreter_options(argv)
    if switch == "m" and value in _MODULES:
        return _parse_launcher(argv, _MODULES[value], start, cwd)
    if switch:
        return _executable(argv, cwd)
    if start == len(argv):
        raise InputError(f"{argv[0]}: no script to run")
    return _script(argv, start, cwd)


def _interpreter_options(argv: tuple[str, ...]) -> tuple[int, str | None, str | None]:
    """Where python's own options end, and the ``-m``/``-c`` that ended them, with its value."""
    i = 1
    while i < len(argv) and _is_option(argv[i]):
        token, i = argv[i], i + 1
        letters = "" if token[:2] == "--" else token[1:]  # -u, -OO, -um MODULE, -Wignore, -X dev
        at = next((j for j, letter in enumerate(letters) if letter in "WXmc"), None)
        if at is None:
            continue
        value = letters[at + 1:]
        if not value:
            if i == len(argv):
                raise InputError(f"{argv[0]}: {token} needs a value")
            value, i = argv[i], i + 1
        if letters[at] in "mc":
            return i, letters[at], value
    return i, None, None


def _script(argv: tuple[str, ...], start: int, cwd: Path) -> Command:
    return Command(argv, CommandKind.SCRIPT, script=_existing_script(argv[start], cwd, argv[0]),
                   script_args=argv[start + 1:], files=named_files(argv[start:], cwd), prefix=argv[:start],
                   target=argv[start])


def _executable(argv: tuple[str, ...], cwd: Path) -> Command:
    if "/" not in argv[0] and (cwd / argv[0]).is_file() and shutil.which(argv[0]) is None:
        # exec looks for a bare name on PATH, never in the working folder: it would not start
        hint = (" (a matrix: `run` takes it as its MATRIX, `bisect` as --matrix with --case NAME)"
                if Path(argv[0]).suffix in (".yaml", ".yml") else "")
        raise InputError(f"{argv[0]}: a file here, not a program on PATH: give ./{argv[0]} to run it{hint}")
    if "/" in argv[0] and not (cwd / argv[0]).exists():
        raise InputError(f"{argv[0]}: no such file (relative to {cwd})")
    if "/" in argv[0] and ((cwd / argv[0]).is_dir() or not os.access(cwd / argv[0], os.X_OK)):
        raise InputError(f"{argv[0]}: not an executable file (chmod +x it, or run it with its interpreter)")
    return Command(argv, CommandKind.EXECUTABLE, script_args=argv[1:], files=named_files(argv, cwd), target=argv[0])


def _parse_launcher(argv: tuple[str, ...], kind: CommandKind, start: int, cwd: Path) -> Command:
    grammar = _GRAMMARS[kind]
    tokens = argv[start:]
    end, options = _read_options(tokens, grammar)
    rest = tokens[end + 1:] if tokens[end:end + 1] == ("--",) else tokens[end:]
    if not rest:
        raise InputError(f"{grammar.launcher}: no script after its options")
    given = dict(options)  # the last of a repeated option wins, as in argparse
    module = rest[0] if "--module" in given else None
    if kind is CommandKind.SRUN:  # the program: python x.py … names its script
        try:
            script = parse(rest, cwd).script
        except InputError as e:
            raise InputError(f"srun: {e}") from None
    else:
        script = None if module or "--no_python" in given else _existing_script(rest[0], cwd, grammar.launcher)
    nproc, nnodes = _WORLD[kind](given, cwd)
    values = tuple(v for _, v in options if v)
    mode = _accelerate_mode(given, cwd) if kind is CommandKind.ACCELERATE else None
    return Command(argv, kind, launcher_args=tokens[:end], script=script, script_args=rest[1:], nproc=nproc,
                   nnodes=nnodes, files=named_files(tokens[:end] + values + rest, cwd), prefix=argv[:start],
                   target=rest[0], module=module, options=tuple(options), distributed_type=mode)


def _existing_script(name: str, cwd: Path, who: str) -> Path:
    path = cwd / name
    if not name.strip() or not path.is_file():
        raise InputError(f"{who}: script {path} does not exist")
    return path


def named_files(tokens: Sequence[str], cwd: Path) -> tuple[Path, ...]:
    """The existing files ``tokens`` name (also as the VALUE of ``--opt=VALUE``), in order, each once."""
    found: dict[Path, None] = {}
    for token in tokens:
        for name in (token, token.partition("=")[2] if token[:1] == "-" else ""):
            path = cwd / name
            if name and _is_file(path):
                found[path] = None
    return tuple(found)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, or with a NUL, is no file
        return False


# ------------------------------------------------------------- launcher options


def _read_options(tokens: Sequence[str], g: _Grammar) -> tuple[int, list[tuple[str, str | None]]]:
    """Where the launcher's options end in ``tokens`` (at the first positional or ``--``), and
    the options read, as (canonical name, value or None for a flag)."""
    read: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens) and _is_option(tokens[i]) and tokens[i] != "--":
        name, value, i = _read_option(tokens, i, g)
        read.append((name, value))
    return i, read


def _read_option(tokens: Sequence[str], i: int, g: _Grammar) -> tuple[str, str | None, int]:
    """The option at ``tokens[i]``: canonical name, value (None for a flag), the index after it."""
    name, inline = _split(tokens[i], g)
    option = g.find(name)
    if option is None:
        return _unknown(tokens, i, g, name, inline)
    if option.arity == "optional":
        return option.name, inline, i + 1
    if option.arity == "flag":
        if inline is not None:
            raise InputError(f"{g.launcher}: {name} takes no value")
        return option.name, None, i + 1
    if inline is None and (i + 1 == len(tokens) or _is_option(tokens[i + 1])):
        raise InputError(f"{g.launcher}: {name} needs a value")
    value = tokens[i + 1] if inline is None else inline
    if option.arity == "int" and not _INT.fullmatch(value):
        raise InputError(f"{g.launcher}: {name} needs an integer, not {value!r}")
    return option.name, value, i + 1 + (inline is None)


def _split(token: str, g: _Grammar) -> tuple[str, str | None]:
    """An option token's name and inline value: ``--opt=VALUE``, or ``-HVALUE`` for a short option with a value."""
    if token[:2] != "--" and len(token) > 2:
        short = g.find(token[:2])
        if short and short.arity != "flag":
            return token[:2], token[2:].removeprefix("=")
    name, eq, value = token.partition("=")
    return name, value if eq else None


def _unknown(tokens: Sequence[str], i: int, g: _Grammar, name: str, inline: str | None) -> tuple[str, str | None, int]:
    """An option the grammar lacks (a newer or older release's): ``--opt=VALUE`` is clear, and a
    bare one is a flag when another option or a ``.py`` file follows; anything else is ambiguous."""
    following = tokens[i + 1] if i + 1 < len(tokens) else ""
    if inline is None and not (_is_option(following) or following.endswith(".py")):
        raise InputError(f"{g.launcher}: unknown option {name} (write {name}=VALUE if it takes a value)")
    return g.key(name), inline, i + 1


def _is_option(token: str) -> bool:
    """As argparse sees it: a token that starts with ``-``, but not ``-`` alone or a negative number."""
    return token[:1] == "-" and token != "-" and not _NUMBER.fullmatch(token)


# ------------------------------------------------------------ ranks and nodes


def _deepspeed_world(given: Mapping[str, str | None], cwd: Path) -> tuple[int | None, int | None]:
    """DeepSpeed's resource pool: the hostfile (or this machine), filtered by ``--include`` or
    ``--exclude``, then the first ``--num_nodes`` hosts with ``--num_gpus`` slots each."""
    gpus, nodes = (int(given.get(k) or -1) for k in ("--num_gpus", "--num_nodes"))
    include, exclude = given.get("--include") or "", given.get("--exclude") or ""
    if include and exclude:
        raise InputError("deepspeed: --include and --exclude cannot be combined")
    if (include or exclude) and max(gpus, nodes) >= 0:
        raise InputError("deepspeed: --num_gpus/--num_nodes cannot be combined with --include/--exclude")
    pool = _hostfile(given.get("--hostfile"), cwd)
    slots = _filtered(pool or {}, include, exclude) if pool or include else [None] * max(nodes, 1)
    slots = slots[:nodes] if nodes > 0 else slots
    slots = [gpus] * len(slots) if gpus > 0 else slots
    return (slots[0] if len(set(slots)) == 1 else None), len(slots)


def _filtered(pool: Mapping[str, int], include: str, exclude: str) -> list[int | None]:
    """Slots per host after ``--include`` (hosts it names) or ``--exclude`` (hosts or slots it removes)."""
    if include:
        return [len(ids) if ids else pool.get(host) for host, ids in _node_specs(include).items()]
    gone = _node_specs(exclude) if exclude else {}
    return [n - len(gone.get(host, ())) for host, n in pool.items() if host not in gone or gone[host]]


def _node_specs(text: str) -> dict[str, set[int]]:
    """``NAME[:SLOT[,SLOT…]][@…]`` as host → slot ids (empty: all of the host's slots)."""
    specs: dict[str, set[int]] = {}
    for part in text.split("@"):
        host, _, ids = part.partition(":")
        if not host or (ids and not all(_INT.fullmatch(s) for s in ids.split(","))):
            raise InputError(f"deepspeed: bad node spec {part!r} in {text!r} (expected NAME[:SLOT[,SLOT...]])")
        specs[host] = specs.get(host, set()) | ({int(s) for s in ids.split(",")} if ids else set())
    return specs


def _hostfile(name: str | None, cwd: Path) -> dict[str, int] | None:
    """The hostfile's hosts and slots; None without one (DeepSpeed then uses this machine)."""
    path = cwd / name if name else None
    if path is None or not _is_file(path):
        return None
    return read_hostfile(path)


def read_hostfile(path: Path) -> dict[str, int]:
    """``parse_hostfile`` of the file at ``path``. Raises ``InputError``."""
    try:
        text = files.read_small_text(path, errors="replace")
    except OSError as e:
        raise InputError(f"deepspeed: hostfile {path}: {e.strerror or e}") from None
    return parse_hostfile(text, f"deepspeed: hostfile {path}")


_HOST_LINE = re.compile(r"(\S+)\s+slots=(\d+)")


def parse_hostfile(text: str, where: str) -> dict[str, int]:
    """A DeepSpeed hostfile as its launcher reads it: host -> slots, in order.  A line is
    ``HOST slots=N`` (whatever follows is not read: ``n1 slots=2 # spare`` is n1's 2 slots);
    blank lines and lines that start with ``#`` are skipped (a ``#`` inside a host name is part
    of it); any other line, a host named twice, or no host at all is an ``InputError`` that
    begins with ``where``."""
    pool: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _HOST_LINE.match(line)
        if not match:
            raise InputError(f"{where}: bad line {line!r} (expected 'HOST slots=N')")
        if match[1] in pool:
            raise InputError(f"{where}: host {match[1]} is named twice")
        pool[match[1]] = int(match[2])
    if not pool:
        raise InputError(f"{where} names no host")
    return pool


def _torchrun_world(given: Mapping[str, str | None], cwd: Path) -> tuple[int | None, int | None]:
    """``--nproc-per-node`` (default 1; None for gpu/cpu/auto…) and ``--nnodes`` (default 1;
    ``--standalone`` is 1; MIN:MAX is None unless MIN == MAX)."""
    nproc = given.get("--nproc_per_node") or "1"
    spec = "1" if "--standalone" in given else given.get("--nnodes") or "1"
    low, _, high = spec.partition(":")
    if not _INT.fullmatch(low) or (high and not _INT.fullmatch(high)):
        raise InputError(f"torchrun: --nnodes needs N or MIN:MAX, not {spec!r}")
    nnodes = int(low) if not high or int(high) == int(low) else None
    return (int(nproc) if _INT.fullmatch(nproc) else None), nnodes


def _accelerate_world(given: Mapping[str, str | None], cwd: Path) -> tuple[int | None, int | None]:
    """``--num_processes`` (all machines together) and ``--num_machines``, or else the
    ``--config_file``'s; machines default to 1. Accelerate's default config is not read."""
    config = _accelerate_config(given.get("--config_file"), cwd)
    processes = _positive(given.get("--num_processes")) or _positive(config.get("num_processes"))
    machines = _positive(given.get("--num_machines")) or _positive(config.get("num_machines")) or 1
    if "--cpu" in given and (processes or 1) > 1 and "--mpirun_hostfile" not in given:
        # accelerate's --cpu runs the script once (its simple launcher), in every release: the
        # processes asked for would never start, and a bisection of one rank tests something else
        raise InputError(f"accelerate launch: --cpu starts one process, not the {processes} of --num_processes "
                         "(without --mpirun_hostfile); leave --cpu out (on CPU dsbisect adds --multi_gpu, "
                         "which starts them) or ask for --num_processes 1")
    return (processes // machines if processes else None), machines


def _accelerate_mode(given: Mapping[str, str | None], cwd: Path) -> str | None:
    """The ``distributed_type`` of an ``accelerate launch`` line's ``--config_file`` (None without one)."""
    value = _accelerate_config(given.get("--config_file"), cwd).get("distributed_type")
    return str(value).upper() if value is not None else None


def _accelerate_config(name: str | None, cwd: Path) -> dict:
    if name is None:
        return {}
    path = cwd / name
    try:
        data = yaml.safe_load(files.read_small_text(path))
    except UnicodeDecodeError:
        raise InputError(f"accelerate launch: config file {path} is not UTF-8 text") from None
    except OSError as e:
        raise InputError(f"accelerate launch: config file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise InputError(f"accelerate launch: config file {path} is not YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise InputError(f"accelerate launch: config file {path} is not a mapping")
    return data


def _positive(value: object) -> int | None:
    number = int(value) if isinstance(value, int) or (isinstance(value, str) and _INT.fullmatch(value)) else 0
    return number if number > 0 else None


def _srun_world(given: Mapping[str, str | None], cwd: Path) -> tuple[int | None, int | None]:
    """``--ntasks-per-node``, else ``--ntasks`` over the nodes; ``--nodes`` N (MIN-MAX: None unless
    MIN == MAX), 1 without it (inside a larger allocation srun spreads over all of its nodes)."""
    spec = given.get("--nodes") or "1"
    low, _, high = spec.partition("-")
    if not _INT.fullmatch(low) or (high and not _INT.fullmatch(high)):
        raise InputError(f"srun: --nodes needs N or MIN-MAX, not {spec!r}")
    nnodes = int(low) if not high or int(high) == int(low) else None
    per_node = _positive(given.get("--ntasks-per-node"))
    tasks = _positive(given.get("--ntasks"))
    if per_node is None and tasks is not None and nnodes:
        per_node = tasks // nnodes if tasks % nnodes == 0 else None
    return per_node if per_node or given.get("--ntasks") else 1, nnodes


_WORLD = {CommandKind.DEEPSPEED: _deepspeed_world, CommandKind.TORCHRUN: _torchrun_world,
          CommandKind.ACCELERATE: _accelerate_world, CommandKind.SRUN: _srun_world}
