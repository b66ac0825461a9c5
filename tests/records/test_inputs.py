"""What a run ran, and when a recorded run may stand for a new one (``dsbisect.inputs``): pure."""

from __future__ import annotations

import resource
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsbisect.envs.base import torch_cuda
from dsbisect.records.inputs import (
    MISSING,
    UNKNOWN,
    Dist,
    Inputs,
    Interpreter,
    Present,
    differences,
    env_digests,
    incomplete,
    same_inputs,
    stale_reasons,
    compared,
    volatile,
    why_line,
)
from dsbisect.records.traces import file_sha, imported_files

PY = Interpreter("/opt/py/bin/python", "3.11.7", "2.13.0+cpu", "")
BASE = Inputs((("/r/helper.py", "aa"), ("/r/x.py", "bb")), (("MY_FIX", "11"), ("PATH", "22")), PY)


def _with(**changes) -> Inputs:
    fields = {"files": BASE.files, "env": BASE.env, "interpreter": BASE.interpreter} | changes
    return Inputs(**fields)


@pytest.mark.parametrize("now, reasons", [
    (BASE, ()),
    (_with(files=(("/r/helper.py", "cc"), ("/r/x.py", "bb"))), ("helper.py changed",)),
    (_with(files=(("/r/helper.py", MISSING), ("/r/x.py", "bb"))), ("helper.py is gone",)),
    (_with(files=BASE.files + (("/r/cfg.json", "dd"),)), ("cfg.json named now",)),
    (_with(env=(("MY_FIX", "99"), ("PATH", "22"))), ("MY_FIX changed",)),
    (_with(env=(("PATH", "22"),)), ("MY_FIX unset",)),
    (_with(env=BASE.env + (("NCCL_P2P_DISABLE", "33"),)), ("NCCL_P2P_DISABLE set",)),
    (_with(interpreter=Interpreter("/opt/py312/bin/python", "3.12.1", "2.13.0+cpu", "")),
     ("python changed (3.11.7 -> 3.12.1)",)),
    (_with(interpreter=Interpreter("/tmp/v/bin/python", "3.11.7", "2.13.0+cpu", "")),
     ("python changed (/opt/py/bin/python -> /tmp/v/bin/python)",)),
    (_with(interpreter=Interpreter(PY.executable, PY.python, "2.12.0+cu121", "12.1")),
     ("torch changed (2.13.0+cpu -> 2.12.0+cu121)", "CUDA changed (none -> 12.1)")),
    (_with(accelerator="cpu"), ()),  # where an executor's node decides, not compared
    # Not known before the venv is built: not compared.
    (_with(interpreter=Interpreter(PY.executable, PY.python, None, None)), ()),
])
def test_differences_name_what_changed(now, reasons):
    assert differences(BASE, now) == reasons
    assert same_inputs(BASE, now) == (reasons in ((), ("cfg.json named now",)))  # files both record


def test_the_accelerator_is_compared_where_both_are_known():
    on_gpu, on_cpu = _with(accelerator="cuda"), _with(accelerator="cpu")
    assert differences(on_gpu, on_cpu) == ("accelerator changed (cuda -> cpu)",)
    assert differences(on_gpu, _with(accelerator="cuda")) == ()


def test_the_why_line_names_the_run_and_at_most_four_reasons():
    assert why_line(4, ("helper.py changed",)) == "recorded run 4 is for other inputs: helper.py changed"
    assert why_line(4, tuple(f"V{i} set" for i in range(6))).endswith("V3 set and 2 more")


@pytest.mark.parametrize("name, expected", [
    ("PWD", True), ("OLDPWD", True), ("SHLVL", True), ("_", True), ("TERM", True), ("TERM_PROGRAM", True),
    ("SSH_AUTH_SOCK", True), ("DISPLAY", True), ("XDG_RUNTIME_DIR", True), ("SLURM_JOB_ID", True),
    ("MASTER_PORT", True), ("DSBISECT_RUN_DIR", True), ("CUDA_VISIBLE_DEVICES", True),
    ("MY_FIX", False), ("PATH", False), ("LD_LIBRARY_PATH", False), ("NCCL_DEBUG", False),
    ("HF_TOKEN", False), ("OMP_NUM_THREADS", False), ("TERMINATOR", True),
])
def test_volatile_variables(name, expected):
    assert volatile(name) is expected


def test_environment_values_are_keyed_digests_never_the_values():
    env = {"MY_DB_PASS": "hunter2", "PWD": "/home/u", "MY_FIX": "1"}
    one, other = env_digests(env, b"k" * 32), env_digests(env, b"j" * 32)
    assert [n for n, _ in one] == ["MY_DB_PASS", "MY_FIX"]  # volatile PWD left out
    assert "hunter2" not in repr(one) and one != other  # another store's key: other digests
    assert env_digests(env, b"k" * 32) == one


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["MY_FIX", "PATH", "PWD", "SLURM_JOB_ID", "A"]), st.text(max_size=3)),
       st.dictionaries(st.sampled_from(["MY_FIX", "PATH", "PWD", "SLURM_JOB_ID", "A"]), st.text(max_size=3)))
def test_equal_environments_and_only_they_give_no_reason(a, b):
    key = b"k" * 32
    then, now = _with(env=env_digests(a, key)), _with(env=env_digests(b, key))
    same = {k: v for k, v in a.items() if compared(k)} == {k: v for k, v in b.items() if compared(k)}
    assert (differences(then, now) == ()) is same


def test_the_record_round_trips_and_a_damaged_one_reads_as_none():
    assert Inputs.from_json(BASE.to_json()) == BASE
    for damaged in (None, [], "x", {"files": "nope", "env": []}, {"files": [[1]], "env": []}, {"files": []},
                    {"files": [], "env": [["A"]]}, {"files": [], "env": {"A": "b"}}):
        assert Inputs.from_json(damaged) is None


def test_files_are_hashed_in_chunks_with_bounded_memory(tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:  # 96 MiB, sparse: costs no disk (read whole, RSS would grow by it)
        f.truncate(96 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    digest = file_sha(big)
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert len(digest) == 16 and grew_kib < 32 << 10, grew_kib
    assert file_sha(tmp_path / "nope") == MISSING


def test_a_file_changed_since_the_hook_saw_it_never_matches(tmp_path):
    mod = tmp_path / "helper.py"
    mod.write_text("A = 1\n")
    st_ = mod.stat()
    (tmp_path / "imports").mkdir()
    (tmp_path / "imports" / "pid1.json").write_text(
        f'{{"files": [["{mod}", {st_.st_size}, {st_.st_mtime_ns}], ["{tmp_path / "gone.py"}", 1, 1]]}}')
    (tmp_path / "imports" / "pid2.json").write_text("not json")
    assert dict(imported_files(tmp_path / "imports")) == {str(mod): file_sha(mod), str(tmp_path / "gone.py"): MISSING}
    mod.write_text("A = 22\n")
    assert dict(imported_files(tmp_path / "imports"))[str(mod)] == "changed-during-run"


@pytest.mark.parametrize("text, cuda", [
    ("cuda: Optional[str] = '12.1'\n", "12.1"),
    ("__version__ = '2.1.0'\ncuda = '11.8'\n", "11.8"),
    ("cuda: Optional[str] = None\n", ""),
    ("nothing here\n", None),
])
def test_torch_cuda_is_read_without_importing_torch(tmp_path, text, cuda):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(text)
    assert torch_cuda([tmp_path / "elsewhere", tmp_path]) == cuda


def test_a_jobs_record_gets_the_submitters_environment_digests(tmp_path, monkeypatch):
    """A Slurm job's store has a key of its own: its record is re-keyed with the main store's
    digests of what the submitter gave the job, so that the main store can reuse it."""
    from conftest import make_case

    from dsbisect.records.run import RunFacts
    from dsbisect.run.reuse import Reuse, rank_environment
    from dsbisect.store.store import Store

    monkeypatch.setenv("MY_FIX", "1")
    main, job = Store(tmp_path / "main"), Store(tmp_path / "job")
    assert main.inputs_key() != job.inputs_key() and main.inputs_key() == Store(tmp_path / "main").inputs_key()
    case = make_case(tmp_path, "c")
    made = _with(env=env_digests(rank_environment(case), job.inputs_key())).to_json()
    adopted = Reuse(main, None).adopt(case, RunFacts.of(fingerprint=made, python="3.11.7"))
    assert adopted.python == "3.11.7"
    assert Inputs.from_json(dict(adopted.fingerprint)).env == env_digests(rank_environment(case), main.inputs_key())
    alone = RunFacts.of(python="3.11.7")
    assert Reuse(main, None).adopt(case, alone) == alone  # nothing to re-key


def test_what_dsbisect_adds_to_a_line_is_an_input():
    """A run of `accelerate launch --num_processes 2` recorded before dsbisect added --multi_gpu
    on CPU ran one process: it must not stand for the two-rank run made now."""
    old = Inputs.from_json({k: v for k, v in _with(accelerator="cpu").to_json().items() if k != "added"})
    assert old is not None and old.added == ""  # a record from before the field: nothing added
    now = _with(accelerator="cpu", added="--multi_gpu")
    assert differences(old, now) == ("dsbisect now adds --multi_gpu to the line",)
    assert differences(now, _with(accelerator="cpu")) == ("dsbisect no longer adds --multi_gpu to the line",)
    assert Inputs.from_json(now.to_json()) == now and not differences(now, now)
    assert not same_inputs(old, now)
    assert not differences(old, _with(added="--multi_gpu"))  # another machine decides: not compared


def test_the_options_dsbisect_adds_that_change_what_runs(tmp_path):
    import shlex

    from dsbisect.run import matrix
    from dsbisect.launch.launchers import added_options

    (tmp_path / "train.py").write_text("pass\n")
    acc = matrix.command_case(shlex.split("accelerate launch --num_processes 2 train.py"), tmp_path)
    assert added_options(acc, cuda=False) == "--multi_gpu" and added_options(acc, cuda=True) == ""
    for line in ("accelerate launch --multi_gpu --num_processes 2 train.py", "deepspeed --num_gpus 2 train.py",
                 "torchrun --nproc-per-node 2 train.py"):
        assert added_options(matrix.command_case(shlex.split(line), tmp_path), cuda=False) == "", line


# ------------------------------------------------------------------ issue 36: what the run used

def _used(**changes) -> Inputs:
    """BASE with the parts the start-up hook adds: a data file read, a distribution, a program, a folder."""
    fields = {"files": tuple(sorted(BASE.files + (("/d/train.bin", "ee"),))), "dists": (Dist("numpy", "1.26.4", "/b/site"),),
              "programs": (("gcc", "g1"),), "listings": (("/d/shards", "l1"),)} | changes
    return _with(**fields)


def _present(**answers) -> Present:
    """What a run would use now, answering what ``_used()`` asks: all as recorded unless given."""
    rec = _used()
    fields = {"files": dict(rec.files), "programs": dict(rec.programs),
              "dists": {(d.name, d.folder): d.version for d in rec.dists}, "listings": dict(rec.listings)}
    return Present(BASE, **(fields | answers))


@pytest.mark.parametrize("now, reasons", [
    (_present(), ()),
    (_present(files={**dict(_used().files), "/d/train.bin": "ff"}), ("train.bin changed",)),
    (_present(dists={("numpy", "/b/site"): "2.0.0"}), ("numpy changed (1.26.4 -> 2.0.0)",)),
    (_present(dists={("numpy", "/b/site"): MISSING}), ("numpy is gone",)),
    (_present(dists={("numpy", "/b/site"): UNKNOWN}), ()),  # its venv is not built: not known, not compared
    (_present(programs={"gcc": "g2"}), ("gcc changed",)),
    (_present(programs={"gcc": MISSING}), ("gcc not found now",)),
    (_present(listings={"/d/shards": "l2"}), ("shards/ has other files",)),
    (_present(listings={"/d/shards": MISSING}), ("shards/ is gone",)),
    (_present(files={}), tuple(f"{Path(p).name} is gone" for p, _ in sorted(_used().files))),  # not answered
])
def test_a_record_is_compared_with_the_present_in_its_own_terms(now, reasons):
    assert stale_reasons(_used(), now) == reasons


def test_a_program_not_found_then_and_found_now_is_a_change():
    assert stale_reasons(_used(programs=(("nvcc", MISSING),)), _present(programs={"nvcc": "n1"})) == ("nvcc found now",)


def test_the_new_parts_travel_in_the_records_files_as_pairs_of_text():
    """The --format json contract pins ``files`` as lists of strings: the new parts are entries
    with a prefix no path has, and read back the same."""
    rec = _used(capped=("read",))
    data = rec.to_json()
    assert set(data) == {"format", "files", "env", "interpreter", "accelerator", "added"} and data["format"] == 2
    assert all(isinstance(e, list) and all(isinstance(x, str) for x in e) for e in data["files"])
    assert ["dist:numpy:/b/site", "1.26.4"] in data["files"] and ["program:gcc", "g1"] in data["files"]
    assert Inputs.from_json(data) == rec
    assert incomplete(rec) and not incomplete(_used())


def test_a_record_of_the_first_format_is_read_and_said_incomplete():
    old = {"files": [["/r/x.py", "bb"]], "env": [["PATH", "22"], ["MY_FIX", "11"]],
           "interpreter": PY.to_json(), "accelerator": "cpu"}  # no "format": before it had one
    rec = Inputs.from_json(old)
    assert rec is not None and rec.format == 1 and rec.files == (("/r/x.py", "bb"),)
    assert "older dsbisect" in incomplete(rec)
    # Compared with a record of today (the grid's variants), PATH is no difference: today's rule.
    assert differences(rec, replace(rec, env=(("MY_FIX", "11"),), format=2)) == ()


@pytest.mark.parametrize("name", ["PATH", "VIRTUAL_ENV_PROMPT", "CONDA_PROMPT_MODIFIER", "LANG", "LC_ALL", "LC_CTYPE",
                                  "TMPDIR", "MOTD_SHOWN", "PS1", "LMOD_FAMILY_COMPILER", "LOADEDMODULES", "MAKEFLAGS"])
def test_the_path_and_what_a_shell_session_sets_are_not_compared_as_text(name):
    assert not compared(name)
    assert env_digests({name: "a", "MY_FIX": "1"}, b"k" * 32)[0][0] == "MY_FIX"


@pytest.mark.parametrize("name", ["LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_HOME", "MY_DATA_DIR", "NCCL_DEBUG", "CC"])
def test_variables_that_name_what_runs_are_compared(name):
    assert compared(name)
