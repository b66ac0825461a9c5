"""A just-in-time op is built once for every venv that would build it the same (issue 23 item 4).

Real builds: torch.utils.cpp_extension.load compiles a tiny C extension with the real compiler
and ninja, in real subprocesses started with dsbisect's hook, as a rank's interpreter is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dsbisect
from dsbisect._hook import dsbisect_ops

HOOK = Path(dsbisect.__file__).parent / "_hook"

SOURCE = """\
#include <Python.h>
#include "x86_64/value.h"
#include "extra.h"
static PyObject* answer(PyObject* self, PyObject* args) { return PyLong_FromLong(VALUE + EXTRA); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define STR2(a) #a
#define STR(a) STR2(a)
/* named by torch's TORCH_EXTENSION_NAME, as PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) does in DeepSpeed's ops */
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, STR(TORCH_EXTENSION_NAME), NULL, -1, methods};
PyMODINIT_FUNC CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&mod); }
"""

# What DeepSpeed's OpBuilder.jit_load does: torch's load with absolute paths into the venv.
LOAD = """\
import json, os, sys
sys.path.insert(0, os.environ["DSB_HOOK"])
import dsbisect_hook  # as the venv's .pth does: installs the wrap once torch's cpp_extension is imported
from torch.utils.cpp_extension import load
op = os.environ["DSB_OP"]
m = load(name="toyop", sources=[os.path.join(op, "comm", "toy.cpp")],
         extra_include_paths=[os.path.join(op, "includes")], extra_cflags=["-O1"], verbose=True)
print(json.dumps({"answer": m.answer(), "file": m.__file__}))
"""


def _op_tree(folder: Path, value: int = 40) -> Path:
    """An op's files as a package installs them: a source with a local header, an include folder."""
    (folder / "comm").mkdir(parents=True)
    (folder / "includes").mkdir()
    (folder / "comm" / "toy.cpp").write_text(SOURCE)
    (folder / "comm" / "x86_64").mkdir()  # a header below the source's folder, as DeepSpeed's shm.h
    (folder / "comm" / "x86_64" / "value.h").write_text(f"#define VALUE {value}\n")
    (folder / "includes" / "extra.h").write_text("#define EXTRA 2\n")
    return folder


def _load(op: Path, store: Path, ext: Path) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSBISECT_")}
    env |= {"DSB_HOOK": str(HOOK), "DSB_OP": str(op), "DSBISECT_OPS_DIR": str(store), "TORCH_EXTENSIONS_DIR": str(ext)}
    done = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


def test_the_key_is_the_files_and_flags_not_where_the_venv_is(tmp_path):
    a, b = _op_tree(tmp_path / "venv-a" / "csrc"), _op_tree(tmp_path / "venv-b" / "csrc")
    tools = {"torch": "2.13.0", "cxx": ["/usr/bin/g++", "g++ 12"]}

    def key(op: Path, flags=("-O2",), tools=tools) -> str:
        root, files = dsbisect_ops.op_files([op / "comm" / "toy.cpp"], [op / "includes"])
        assert root == str(op)
        return dsbisect_ops.op_key("toyop", root, files, [op / "comm" / "toy.cpp"], [op / "includes"],
                                   {"extra_cflags": [*flags, f"-I{op}/includes"]}, tools)

    assert dsbisect_ops.op_files([a / "comm" / "toy.cpp"], [a / "includes"])[1] == [
        "comm/toy.cpp", "comm/x86_64/value.h", "includes/extra.h"]  # the source, its local header, the include folder
    assert key(a) == key(b)  # same files, same flags: one build whatever the folder
    assert key(a, ("-O3",)) != key(a)  # a flag
    assert key(a, tools=tools | {"torch": "2.12.0"}) != key(a)  # torch
    assert key(a, tools=tools | {"cxx": ["/usr/bin/clang++", "clang 18"]}) != key(a)  # the compiler
    seen = {key(b)}
    for change in (lambda: (b / "includes" / "extra.h").write_text("#define EXTRA 3\n"),  # a header
                   lambda: (b / "comm" / "notes.txt").write_text("beside a source\n"),  # a file beside it
                   lambda: (b / "comm" / "arm64").mkdir() or (b / "comm" / "arm64" / "v.h").write_text("1\n")):  # below it
        change()
        assert key(b) not in seen
        seen.add(key(b))
    # a sibling folder whose name starts with the op's is not taken for it
    assert dsbisect_ops.relocate(f"-I{a}x/inc", str(a), "<op>") == f"-I{a}x/inc"
    assert dsbisect_ops.relocate([f"-I{a}/inc", str(a)], str(a), "<op>") == ["-I<op>/inc", "<op>"]


def test_the_toolchain_is_the_compiler_not_the_ninja_of_dsbisects_environment(tmp_path, monkeypatch):
    """Two environments dsbisect was installed in (a second clone, its own venv and ninja) key the
    same op alike; another compiler does not."""
    pytest.importorskip("torch")

    def ninja_at(folder: Path) -> str:
        folder.mkdir(parents=True)
        (folder / "ninja").write_text("#!/bin/sh\necho 1.13.2\n")
        (folder / "ninja").chmod(0o755)
        return f"{folder}{os.pathsep}{os.environ['PATH']}"

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", ninja_at(tmp_path / "clone-a" / ".venv" / "bin"))
    first = dsbisect_ops.toolchain()
    monkeypatch.setenv("PATH", ninja_at(tmp_path / "clone-b" / ".venv" / "bin"))
    assert dsbisect_ops.toolchain() == first
    cc = tmp_path / "other-cc" / "c++"
    cc.parent.mkdir()
    cc.write_text("#!/bin/sh\necho 'clang version 18.1.8'\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CXX", str(cc))
    assert dsbisect_ops.toolchain()["cxx"] == [str(cc), "clang version 18.1.8"] != first["cxx"]


def test_files_spread_over_the_disk_are_not_shared(tmp_path):
    op = _op_tree(tmp_path / "csrc")
    with pytest.raises(dsbisect_ops.NotShared):
        dsbisect_ops.op_files([op / "comm" / "toy.cpp"], ["/usr"])  # the common folder would be /
    with pytest.raises(dsbisect_ops.NotShared):
        dsbisect_ops.op_files([op / "comm" / "missing.cpp"], [])
    # an include folder that is not there (DeepSpeed's csrc/cpu/includes) adds no file and no venv path
    root, files = dsbisect_ops.op_files([op / "comm" / "toy.cpp"], [op / "nothere"])
    assert root == str(op) and "includes/extra.h" not in files


def test_a_shared_build_is_claimed_in_the_run_s_folder_while_it_lasts(tmp_path, monkeypatch):
    """While a rank makes (or waits for) a shared build, <run dir>/ops-building/<name>.<pid> says so
    (dsbisect's progress reads this run's claims, not the shared folder other jobs build in); the
    claim is gone once the load returns, built or failed."""
    op, store, run_dir = _op_tree(tmp_path / "csrc"), tmp_path / "ops", tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("DSBISECT_RUN_DIR", str(run_dir))
    claim = run_dir / "ops-building" / f"toyop.{os.getpid()}"
    seen: list[bool] = []

    def torch_load(name, sources, build_directory, **kwargs):  # stands in for torch's build
        seen.append(claim.is_file())
        (Path(build_directory) / f"{name}.so").write_bytes(b"")
        return "the module"

    load = dsbisect_ops.shared(torch_load, str(store))
    assert load("toyop", [str(op / "comm" / "toy.cpp")], extra_include_paths=[str(op / "includes")]) == "the module"
    assert seen == [True] and not claim.exists()

    def broken(name, sources, build_directory=None, **kwargs):
        seen.append(claim.is_file())
        raise RuntimeError("the compiler failed")

    with pytest.raises(RuntimeError):  # the shared build fails, then torch's own load (the same here) does
        dsbisect_ops.shared(broken, str(store))("toyop", [str(op / "comm" / "toy.cpp")],
                                                extra_cflags=["-O3"], extra_include_paths=[str(op / "includes")])
    assert seen[1] is True and not claim.exists()


@pytest.mark.slow
def test_two_venvs_with_the_same_op_share_one_build_and_a_changed_one_gets_its_own(tmp_path):
    store = tmp_path / "ops"
    first, log1 = _load(_op_tree(tmp_path / "venv-a" / "deepspeed"), store, tmp_path / "venv-a" / "ext")
    assert first["answer"] == 42 and "building the shared build" in log1, log1
    [built] = [d for d in store.iterdir() if d.is_dir()]
    library = built / "build" / "toyop.so"
    stamp = library.stat().st_mtime_ns, (built / "build" / ".ninja_log").stat().st_mtime_ns

    second, log2 = _load(_op_tree(tmp_path / "venv-b" / "deepspeed"), store, tmp_path / "venv-b" / "ext")
    assert second["answer"] == 42 and "loading the shared build" in log2, log2
    assert "-o toyop.so" in log1 and "-o toyop" not in log2  # ninja's link step: the first load only
    assert second["file"] == str(library)  # nothing compiled, nothing re-run
    assert (library.stat().st_mtime_ns, (built / "build" / ".ninja_log").stat().st_mtime_ns) == stamp
    assert not (tmp_path / "venv-b" / "ext").exists()  # no build of its own in the venv either
    assert json.loads((built / dsbisect_ops.MARKER).read_text())["built_from"] == str(tmp_path / "venv-a" / "deepspeed")

    third, log3 = _load(_op_tree(tmp_path / "venv-c" / "deepspeed", value=50), store, tmp_path / "venv-c" / "ext")
    assert third["answer"] == 52 and "building the shared build" in log3, log3
    assert len([d for d in store.iterdir() if d.is_dir()]) == 2
    assert not [d for d in store.iterdir() if d.name.endswith(".tmp")]


@pytest.mark.slow
def test_concurrent_first_loads_build_once_and_both_load_it(tmp_path):
    store = tmp_path / "ops"
    ops = [_op_tree(tmp_path / f"venv-{i}" / "deepspeed") for i in range(3)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSBISECT_")} | {
        "DSB_HOOK": str(HOOK), "DSBISECT_OPS_DIR": str(store)}
    procs = [subprocess.Popen([sys.executable, "-c", LOAD], env=env | {"DSB_OP": str(op),
                              "TORCH_EXTENSIONS_DIR": str(op.parent / "ext")},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for op in ops]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sum("building the shared build" in o for o in outs) == 1, outs
    assert all(json.loads(o.strip().splitlines()[-1])["answer"] == 42 for o in outs)
    assert len([d for d in store.iterdir() if d.is_dir()]) == 1


@pytest.mark.slow
def test_a_build_that_cannot_be_shared_is_built_in_the_venv(tmp_path):
    """A header reached outside the op's files (``../``) fails in the copy: the venv builds it."""
    op = _op_tree(tmp_path / "venv-a" / "pkg" / "csrc")
    (op.parent / "outside.h").write_text("#define OUTSIDE 0\n")
    (op / "comm" / "toy.cpp").write_text('#include "../../outside.h"\n' + SOURCE)
    out, log = _load(op, tmp_path / "ops", tmp_path / "venv-a" / "ext")
    assert out["answer"] == 42 and "no shared build" in log, log
    assert list((tmp_path / "venv-a" / "ext" / "toyop").glob("toyop*.so"))  # torch names a retry toyop_v1
    assert not [d for d in (tmp_path / "ops").iterdir() if d.is_dir()]


# A point's script that loads an op from files installed in its venv (as DeepSpeed's are).
POINT = """\
import json, os, sys
from pathlib import Path
op = Path(sys.prefix) / "opsrc"
for rel, text in json.loads(os.environ["DSB_FILES"]).items():
    (op / rel).parent.mkdir(parents=True, exist_ok=True)
    (op / rel).write_text(text)
from torch.utils.cpp_extension import load
m = load(name="toyop_point", sources=[str(op / "comm" / "toy.cpp")], extra_include_paths=[str(op / "includes")],
         verbose=True)
print("answer", m.answer(), flush=True)
"""


@pytest.mark.slow
def test_two_points_of_a_run_share_the_op_their_venvs_hold(tmp_path, cli, cache_dir, wheelhouse, monkeypatch):
    """Through dsbisect: two point venvs (two toy releases) hold the same op files; the first
    point's run builds it under the cache's ops/, the second's loads that build."""
    tree = _op_tree(tmp_path / "op", value=os.getpid() % 1000)  # a key of this test alone (the cache is the session's)
    files = {str(p.relative_to(tree)): p.read_text() for p in tree.rglob("*") if p.is_file()}
    (tmp_path / "point.py").write_text(POINT)
    monkeypatch.setenv("DSB_FILES", json.dumps(files))
    res = cli("run", "--versions", "dsb-toy=1.0.0,1.1.0", "--accelerator", "cpu", "--offline", "--find-links",
              str(wheelhouse), "--cache-dir", str(cache_dir), "--nproc", "1", "--rerun", "--", "python", "point.py",
              cwd=tmp_path)
    assert res.exit_code == 0, res.output
    text = [p.read_text() for p in (tmp_path / ".dsbisect" / "runs").rglob("ranks/*")]
    assert len(text) == 2 and all(f"answer {os.getpid() % 1000 + 2}" in t for t in text), text
    [built_log] = [t for t in text if "building the shared build" in t]  # the points may run at once: either first
    [loaded_log] = [t for t in text if "loading the shared build" in t]
    assert "-o toyop_point.so" in built_log and "-o toyop_point" not in loaded_log  # ninja's link step: one build
    [built] = [d for d in (cache_dir / "ops").glob("toyop_point-*") if d.is_dir()]
    first_venv = json.loads((built / dsbisect_ops.MARKER).read_text())["built_from"]
    assert first_venv.startswith(str(cache_dir / "envs")) and first_venv.endswith("opsrc")
