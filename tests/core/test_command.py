"""Users' command lines, read as deepspeed, torchrun, accelerate launch and python read them."""

from __future__ import annotations

import shlex

import pytest

from dsbisect.core.command import Command, CommandKind, parse, with_options
from dsbisect.core.errors import InputError

DS, TR, ACC = CommandKind.DEEPSPEED, CommandKind.TORCHRUN, CommandKind.ACCELERATE
SCRIPT, EXE = CommandKind.SCRIPT, CommandKind.EXECUTABLE

FILES = {
    "train.py": "", "repro.py": "", "x.py": "", "run.sh": "", "ds_config.json": "{}",
    "hosts": "# three hosts\nn1 slots=4\nn2 slots=4\n\nn3 slots=2\n",
    "acc.yaml": "compute_environment: LOCAL_MACHINE\nnum_processes: 4\nnum_machines: 2\n",
    "acc.json": '{"num_processes": 2}', "bad.yaml": "num_processes: [", "list.yaml": "- 1\n",
    "badhosts": "n1 slots=4\nn2 four\n",
}


@pytest.fixture
def cwd(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "run.sh").chmod(0o755)  # ./run.sh runs only when it may be executed
    return tmp_path


def read(line: str, cwd) -> Command:
    return parse(shlex.split(line), cwd)


# line → kind, nproc, nnodes, script, script_args, launcher_args, files
FORMS = [
    ("deepspeed --num_gpus 8 train.py --deepspeed ds_config.json --model_name_or_path m --bf16",
     DS, 8, 1, "train.py", ("--deepspeed", "ds_config.json", "--model_name_or_path", "m", "--bf16"),
     ("--num_gpus", "8"), ("train.py", "ds_config.json")),
    ("deepspeed --num_gpus=2 --master_port=29600 train.py",
     DS, 2, 1, "train.py", (), ("--num_gpus=2", "--master_port=29600"), ("train.py",)),
    ("deepspeed train.py", DS, None, 1, "train.py", (), (), ("train.py",)),
    ("ds --num_accelerators 4 train.py", DS, 4, 1, "train.py", (), ("--num_accelerators", "4"), ("train.py",)),
    ("deepspeed --num_gpu 2 train.py --lr 1", DS, 2, 1, "train.py", ("--lr", "1"), ("--num_gpu", "2"), ("train.py",)),
    ("deepspeed --include localhost:0,1 train.py", DS, 2, 1, "train.py", (), ("--include", "localhost:0,1"),
     ("train.py",)),
    ('deepspeed --hostfile hosts --include "n1:0,1@n2" train.py',
     DS, None, 2, "train.py", (), ("--hostfile", "hosts", "--include", "n1:0,1@n2"), ("hosts", "train.py")),
    ("deepspeed --hostfile hosts -i n1:0,1@n2:2,3 train.py",
     DS, 2, 2, "train.py", (), ("--hostfile", "hosts", "-i", "n1:0,1@n2:2,3"), ("hosts", "train.py")),
    ("deepspeed --hostfile=hosts --num_nodes 2 --num_gpus 2 train.py",
     DS, 2, 2, "train.py", (), ("--hostfile=hosts", "--num_nodes", "2", "--num_gpus", "2"), ("hosts", "train.py")),
    ("deepspeed -H hosts --exclude n3 train.py",
     DS, 4, 2, "train.py", (), ("-H", "hosts", "--exclude", "n3"), ("hosts", "train.py")),
    ("deepspeed -Hhosts -e n2:0 train.py", DS, None, 3, "train.py", (), ("-Hhosts", "-e", "n2:0"), ("hosts", "train.py")),
    ("deepspeed --hostfile hosts train.py", DS, None, 3, "train.py", (), ("--hostfile", "hosts"), ("hosts", "train.py")),
    ("deepspeed --hostfile missing --num_gpus 2 train.py",  # deepspeed warns and runs here
     DS, 2, 1, "train.py", (), ("--hostfile", "missing", "--num_gpus", "2"), ("train.py",)),
    ("deepspeed --num_gpus 2 --master_port -1 -- train.py",
     DS, 2, 1, "train.py", (), ("--num_gpus", "2", "--master_port", "-1"), ("train.py",)),
    ("deepspeed --module --num_gpus 2 pkg.train --x 1", DS, 2, 1, None, ("--x", "1"), ("--module", "--num_gpus", "2"), ()),
    ("deepspeed --no_python --num_gpus 2 bash run.sh", DS, 2, 1, None, ("run.sh",), ("--no_python", "--num_gpus", "2"),
     ("run.sh",)),
    ("deepspeed --future_flag --future_opt=3 train.py", DS, None, 1, "train.py", (),
     ("--future_flag", "--future_opt=3"), ("train.py",)),
    ("python -m deepspeed.launcher.runner --num_gpus 2 train.py", DS, 2, 1, "train.py", (), ("--num_gpus", "2"),
     ("train.py",)),
    ("torchrun --nproc-per-node 2 repro.py --steps 200",
     TR, 2, 1, "repro.py", ("--steps", "200"), ("--nproc-per-node", "2"), ("repro.py",)),
    ("torchrun --nproc_per_node=2 --nnodes 1 --rdzv-backend c10d repro.py",
     TR, 2, 1, "repro.py", (), ("--nproc_per_node=2", "--nnodes", "1", "--rdzv-backend", "c10d"), ("repro.py",)),
    ("torchrun --standalone --nproc-per-node gpu repro.py",
     TR, None, 1, "repro.py", (), ("--standalone", "--nproc-per-node", "gpu"), ("repro.py",)),
    ("torchrun repro.py", TR, 1, 1, "repro.py", (), (), ("repro.py",)),
    ("torchrun --nnodes 2:4 --nproc-per-node 8 repro.py",
     TR, 8, None, "repro.py", (), ("--nnodes", "2:4", "--nproc-per-node", "8"), ("repro.py",)),
    ("torchrun --nnodes=2 --node-rank 0 --master-addr h0 --nproc_per_node 4 repro.py", TR, 4, 2, "repro.py", (),
     ("--nnodes=2", "--node-rank", "0", "--master-addr", "h0", "--nproc_per_node", "4"), ("repro.py",)),
    ("python -m torch.distributed.run --nproc_per_node 4 x.py", TR, 4, 1, "x.py", (), ("--nproc_per_node", "4"),
     ("x.py",)),
    ("python3 -u -m torch.distributed.launch --use-env --nproc_per_node 4 x.py --local-rank 0",
     TR, 4, 1, "x.py", ("--local-rank", "0"), ("--use-env", "--nproc_per_node", "4"), ("x.py",)),
    ("torchrun -m --nproc-per-node 2 pkg.train", TR, 2, 1, None, (), ("-m", "--nproc-per-node", "2"), ()),
    ("torchrun --no-python --nproc-per-node 2 ./run.sh a", TR, 2, 1, None, ("a",), ("--no-python", "--nproc-per-node", "2"),
     ("run.sh",)),
    ("accelerate launch --config_file acc.yaml train.py --lr 1e-4",
     ACC, 2, 2, "train.py", ("--lr", "1e-4"), ("--config_file", "acc.yaml"), ("acc.yaml", "train.py")),
    ("accelerate launch --config_file acc.yaml --num_processes 8 train.py",
     ACC, 4, 2, "train.py", (), ("--config_file", "acc.yaml", "--num_processes", "8"), ("acc.yaml", "train.py")),
    ("accelerate launch --config-file=acc.json train.py", ACC, 2, 1, "train.py", (), ("--config-file=acc.json",),
     ("acc.json", "train.py")),
    ("accelerate launch --multi_gpu --num-processes 2 --mixed_precision bf16 train.py",
     ACC, 2, 1, "train.py", (), ("--multi_gpu", "--num-processes", "2", "--mixed_precision", "bf16"), ("train.py",)),
    ("accelerate launch --num_machines 2 --num_processes 16 --machine_rank 0 train.py", ACC, 8, 2, "train.py", (),
     ("--num_machines", "2", "--num_processes", "16", "--machine_rank", "0"), ("train.py",)),
    ("accelerate launch train.py", ACC, None, 1, "train.py", (), (), ("train.py",)),
    ("python -m accelerate.commands.launch --num_processes 2 train.py", ACC, 2, 1, "train.py", (),
     ("--num_processes", "2"), ("train.py",)),
    ("python train.py --deepspeed=ds_config.json", SCRIPT, None, None, "train.py", ("--deepspeed=ds_config.json",), (),
     ("train.py", "ds_config.json")),
    ("python -u train.py a", SCRIPT, None, None, "train.py", ("a",), (), ("train.py",)),
    ("/usr/bin/python3.11 -X dev -Wignore train.py", SCRIPT, None, None, "train.py", (), (), ("train.py",)),
    ("train.py --steps 3 --cfg ds_config.json --again ds_config.json", SCRIPT, None, None, "train.py",
     ("--steps", "3", "--cfg", "ds_config.json", "--again", "ds_config.json"), (), ("train.py", "ds_config.json")),
    ("./run.sh a pkg", EXE, None, None, None, ("a", "pkg"), (), ("run.sh",)),
    ("bash run.sh", EXE, None, None, None, ("run.sh",), (), ("run.sh",)),
    ("make test", EXE, None, None, None, ("test",), (), ()),
    ("python -m pytest -q x.py", EXE, None, None, None, ("-m", "pytest", "-q", "x.py"), (), ("x.py",)),
    ("python -c 'import deepspeed'", EXE, None, None, None, ("-c", "import deepspeed"), (), ()),
    ("accelerate env", EXE, None, None, None, ("env",), (), ()),
]


@pytest.mark.parametrize("line, kind, nproc, nnodes, script, script_args, launcher_args, files", FORMS,
                         ids=[f[0] for f in FORMS])
def test_forms(cwd, line, kind, nproc, nnodes, script, script_args, launcher_args, files):
    cmd = read(line, cwd)
    assert cmd.argv == tuple(shlex.split(line)) and cmd.kind is kind
    assert (cmd.nproc, cmd.nnodes) == (nproc, nnodes)
    assert cmd.script == (cwd / script if script else None)
    assert cmd.script_args == script_args and cmd.launcher_args == launcher_args
    assert cmd.files == tuple(cwd / f for f in files)


def test_prefix_target_and_module_say_how_to_start_it_again(cwd):
    cmd = read("python3 -um torch.distributed.launch --nproc_per_node 2 x.py", cwd)
    assert cmd.prefix == ("python3", "-um", "torch.distributed.launch") and cmd.target == "x.py"
    assert read("accelerate launch -m pkg.train", cwd).module == "pkg.train"
    assert read("deepspeed --module pkg.train", cwd).target == "pkg.train"
    assert read("python -u train.py", cwd).prefix == ("python", "-u")
    assert read("make test", cwd).target == "make"


def test_files_are_absolute_paths_and_existing_files_only(cwd, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "cfg.json"
    outside.write_text("{}")
    cmd = read(f"python train.py --cfg {outside} --out pkg --missing none.json ./train.py", cwd)
    assert cmd.files == (cwd / "train.py", outside)


BAD = [
    ("", "empty command"),
    ("deepspeed", "deepspeed: no script after its options"),
    ("deepspeed --num_gpus 2", "deepspeed: no script after its options"),
    ("deepspeed --num_gpus 2 missing.py", "deepspeed: script"),
    ("python missing.py", "python: script"),
    ("missing.py --x", "missing.py: script"),
    ("./missing.sh", "./missing.sh: no such file"),
    ("python", "python: no script to run"),
    ("python -m", "python: -m needs a value"),
    ("deepspeed --num_gpus abc train.py", "deepspeed: --num_gpus needs an integer, not 'abc'"),
    ("deepspeed train.py --num_gpus", None),  # the script's option: fine
    ("deepspeed --num_gpus", "deepspeed: --num_gpus needs a value"),
    ("deepspeed --hostfile --num_gpus 2 train.py", "deepspeed: --hostfile needs a value"),
    ("deepspeed --module=yes train.py", "deepspeed: --module takes no value"),
    ("deepspeed --mystery value train.py", "deepspeed: unknown option --mystery (write --mystery=VALUE"),
    ("deepspeed --num_nodes 2 --hostfile hosts --include n1:0,1@n2 train.py",
     "deepspeed: --num_gpus/--num_nodes cannot be combined with --include/--exclude"),
    ("deepspeed -i n1 -e n2 train.py", "deepspeed: --include and --exclude cannot be combined"),
    ("deepspeed --include n1:a train.py", "deepspeed: bad node spec 'n1:a'"),
    ("deepspeed --hostfile badhosts train.py", "bad line 'n2 four' (expected 'HOST slots=N')"),
    ("torchrun --nnodes x repro.py", "torchrun: --nnodes needs N or MIN:MAX, not 'x'"),
    ("torchrun --master-port=abc repro.py", "torchrun: --master-port needs an integer"),
    ("torchrun --nproc-per-node", "torchrun: --nproc-per-node needs a value"),
    ("accelerate launch --num_processes two train.py", "accelerate launch: --num_processes needs an integer"),
    ("accelerate launch --config_file missing.yaml train.py", "missing.yaml: No such file or directory"),
    ("accelerate launch --config_file bad.yaml train.py", "bad.yaml is not YAML: "),
    ("accelerate launch --config_file list.yaml train.py", "list.yaml is not a mapping"),
]


@pytest.mark.parametrize("line, message", BAD, ids=[b[0] or "(empty)" for b in BAD])
def test_bad_input_is_one_line(cwd, line, message):
    if message is None:
        assert read(line, cwd).script_args == ("--num_gpus",)
        return
    with pytest.raises(InputError) as e:
        read(line, cwd)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_options_are_found_under_every_spelling(cwd):
    ds = read("deepspeed -H hosts --num_gpus 2 --num_gpus=4 --num_nodes 1 train.py", cwd)
    assert ds.has_option("--hostfile") and ds.has_option("-H") and ds.has_option("--num_accelerators")
    assert ds.option("--num_gpus") == "4" and ds.nproc == 4 and not ds.has_option("--master_port")
    assert not ds.has_option("--num-gpus")  # deepspeed has no dashed spellings
    tr = read("torchrun --nproc_per_node 2 --master-port=29600 --standalone repro.py", cwd)
    assert tr.has_option("--nproc-per-node") and tr.option("--master_port") == "29600" and tr.has_option("--standalone")
    assert tr.option("--standalone") is None and tr.option("--rdzv-id") is None
    acc = read("accelerate launch --num-processes 2 train.py", cwd)
    assert acc.has_option("--num_processes") and not acc.has_option("--num_proc")  # accelerate: no abbreviations


def test_with_options_keeps_the_users_and_adds_the_missing(cwd):
    add = {"--master_port": "29555", "--enable_each_rank_log": "/run/ranks"}
    ds = read("deepspeed --num_gpus 2 --master_port 29600 train.py", cwd)
    assert with_options(ds, add) == ("--num_gpus", "2", "--master_port", "29600", "--enable_each_rank_log", "/run/ranks")
    assert with_options(read("deepspeed train.py", cwd), add) == ("--master_port", "29555",
                                                                  "--enable_each_rank_log", "/run/ranks")
    tr = read("torchrun --master-port 29600 --nproc-per-node 2 repro.py", cwd)
    assert with_options(tr, {"--master_port": "1", "--log-dir": "/logs", "--standalone": None}) == (
        "--master-port", "29600", "--nproc-per-node", "2", "--log-dir", "/logs", "--standalone")
    assert with_options(read("torchrun --master_port=29600 repro.py", cwd), {"--master-port": "1"}) == (
        "--master_port=29600",)
    assert with_options(read("deepspeed -Hhosts train.py", cwd), {"--hostfile": "other"}) == ("-Hhosts",)


def test_with_options_by_kind(cwd):
    assert with_options(read("python train.py", cwd), {"--nproc-per-node": "2"}) == ("--nproc-per-node", "2")
    with pytest.raises(ValueError):
        with_options(read("bash run.sh", cwd), {"--master_port": "1"})
    tr = read("python -m torch.distributed.run --nproc-per-node 2 -- repro.py --steps 3", cwd)
    assert tr.prefix + with_options(tr, {"--master-port": "29555", "--max-restarts": "-1"}) == (
        "python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29555",
        "--max-restarts=-1")
    assert (tr.target, *tr.script_args) == ("repro.py", "--steps", "3")
