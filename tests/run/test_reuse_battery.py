"""Reuse that matches what ran, both ways (issues 35 and 36): real runs of small scripts.

Stale: a recorded verdict is not reused once something the run used changed -- a file it read
by a fixed path (through a symlink, ``np.load``, ``torch.load``, a variable that names it, a
Python child, a ``cat`` child, ``os.system``, a fork child that ends with ``os._exit``, native
code that holds it open or maps it), a
folder it listed, a distribution of the layered base that is no pin, a program its ``PATH``
resolves.  Needless: what did not change is reused -- after activating dsbisect's venv, in a
new terminal (other session, locale and prompt variables), after ``cd`` and back, with what
the run itself wrote and read back, with another folder on ``PATH`` that resolves nothing the
run started.  Each script's verdict depends on the input that changes, so a reused run would
be a wrong verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import offline, write_matrix
import toypkg

pytestmark = pytest.mark.slow

DIST = "dsb-reuse3"  # a name of its own: uv takes find-links files as immutable


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("reuse3-wheels"), {"1.0.0": "ok"}, dist=DIST)


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def _runs(cli, project, house, cache_dir, extra=()):
    """``dsbisect run -- python x.py`` at dsb-reuse3 1.0.0, one rank: (the runs' JSON, stderr)."""
    res = cli("run", "--versions", f"{DIST}=1.0.0", "--nproc", "1", "--accelerator", "cpu",
              *offline(house, cache_dir), "--format", "json", *extra, "--", "python", "x.py", cwd=project)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["runs"], res.stderr


def _run(cli, project, house, cache_dir, extra=()):
    """The one run of ``_runs``, and stderr."""
    (run,), err = _runs(cli, project, house, cache_dir, extra)
    return run, err


def _reused(run: dict, stderr: str, first: dict) -> bool:
    return run["id"] == first["id"] and f"(run {first['id']}, recorded)" in stderr


def _script(project: Path, body: str, **values) -> None:
    consts = "".join(f"{k} = {v!r}\n" for k, v in values.items())
    (project / "x.py").write_text(f"import os, subprocess, sys\n{consts}{body}\nsys.exit(0 if ok else 1)\n")


def _text(path: Path, good: bool) -> None:
    path.write_text("ok\n" if good else "bad\n")


def _npy(path: Path, good: bool) -> None:
    import numpy as np

    with open(path, "wb") as f:  # np.save would add .npy to a name without it
        np.save(f, np.array([1 if good else 0]))


def _pt(path: Path, good: bool) -> None:
    import torch

    torch.save(torch.tensor([1 if good else 0]), path)


FORK = """\
import multiprocessing
def child():
    os._exit(0 if open(DATA).read().strip() == "ok" else 1)  # as a fork child ends: no atexit
p = multiprocessing.get_context("fork").Process(target=child)
p.start(); p.join()
ok = p.exitcode == 0"""

NATIVE_OPEN = """\
import ctypes
libc = ctypes.CDLL(None)
libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
libc.fread.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
f = libc.fopen(DATA.encode(), b"r")  # opened by C and held, as an HDF5 reader does: no open event
buf = ctypes.create_string_buffer(2)
libc.fread(buf, 1, 2, f)
ok = buf.raw == b'ok'"""

NATIVE_MAP = """\
import ctypes
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = libc.open(DATA.encode(), os.O_RDONLY)  # mapped by C and closed, as safetensors does
addr = libc.mmap(None, 2, 1, 2, fd, 0)  # PROT_READ, MAP_PRIVATE
libc.close(fd)
ok = ctypes.string_at(addr, 2) == b'ok'"""

# form -> (file name, writer, script body reading DATA)
FORMS = {
    "a fixed path": ("data.txt", _text, 'ok = open(DATA).read().strip() == "ok"'),
    "np.load": ("data.npy", _npy, "import numpy as np\nok = int(np.load(DATA)[0]) == 1"),
    "torch.load": ("data.pt", _pt, "import torch\nok = int(torch.load(DATA)[0]) == 1"),
    "a variable that names it": ("cfg.txt", _text, 'ok = open(os.environ["DSB_CFG"]).read().strip() == "ok"'),
    "a Python child": ("data.txt", _text, "ok = subprocess.run([sys.executable, '-c', "
                                          "f'import sys; sys.exit(open({DATA!r}).read().strip() != \"ok\")']"
                                          ").returncode == 0"),
    "a cat child": ("data.txt", _text, 'ok = subprocess.run(["cat", DATA], capture_output=True, text=True)'
                                       '.stdout.strip() == "ok"'),
    "os.system": ("data.txt", _text, 'ok = os.system(f"grep -q ok {DATA}") == 0'),
    "a fork child": ("data.txt", _text, FORK),
    "native code holding it open": ("data.h5", _text, NATIVE_OPEN),
    "native code mapping it": ("model.safetensors", _text, NATIVE_MAP),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_a_changed_file_the_run_reads_runs_again(form, cli, project, house, cache_dir, monkeypatch):
    name, write, body = FORMS[form]
    data = project.parent / "elsewhere" / name  # named on no command line, outside the project
    data.parent.mkdir()
    write(data, True)
    monkeypatch.setenv("DSB_CFG", str(data))  # the variable never changes; the file it names does
    _script(project, body, DATA=str(data))
    first, err = _run(cli, project, house, cache_dir)
    assert first["outcome"] == "pass", (first["reason"], err)
    again, err = _run(cli, project, house, cache_dir)
    assert _reused(again, err, first), err

    write(data, False)
    changed, err = _run(cli, project, house, cache_dir)
    assert changed["id"] != first["id"] and changed["outcome"] == "fail", err
    assert f"recorded run {first['id']} is for other inputs: {name} changed; running it again" in err, err
    last, err = _run(cli, project, house, cache_dir)
    assert _reused(last, err, changed), err


def test_a_symlink_pointed_at_another_file_runs_again(cli, project, house, cache_dir):
    folder = project.parent / "data"
    folder.mkdir()
    _text(folder / "a.txt", True)
    _text(folder / "b.txt", False)
    (folder / "current.txt").symlink_to("a.txt")
    _script(project, 'ok = open(DATA).read().strip() == "ok"', DATA=str(folder / "current.txt"))
    first, _ = _run(cli, project, house, cache_dir)
    assert first["outcome"] == "pass"
    (folder / "current.txt").unlink()
    (folder / "current.txt").symlink_to("b.txt")  # neither file changed: the link did
    moved, err = _run(cli, project, house, cache_dir)
    assert moved["outcome"] == "fail" and f"run {first['id']} is for other inputs: current.txt changed" in err, err


def test_a_folder_the_run_lists_that_gains_a_file_runs_again(cli, project, house, cache_dir, monkeypatch):
    folder = project.parent / "shards"
    folder.mkdir()
    (folder / "0.json").write_text("{}")
    monkeypatch.setenv("DSB_DATA_DIR", str(folder))  # a variable that names a folder
    _script(project, 'import glob\nok = len(glob.glob(os.path.join(os.environ["DSB_DATA_DIR"], "*.json"))) == 1')
    first, _ = _run(cli, project, house, cache_dir)
    assert first["outcome"] == "pass"
    again, err = _run(cli, project, house, cache_dir)
    assert _reused(again, err, first), err
    (folder / "1.json").write_text("{}")
    grown, err = _run(cli, project, house, cache_dir)
    assert grown["outcome"] == "fail" and f"run {first['id']} is for other inputs: shards/ has other files" in err


def test_what_the_run_writes_and_reads_back_is_no_input(cli, project, house, cache_dir):
    """Outputs are not inputs: a file written then read, a log appended to, a temporary file, a
    checkpoint folder made and listed, a file a child was given and wrote."""
    _script(project, """\
import glob, json, tempfile
json.dump({"step": 1}, open("state.json", "w"))
ok = json.load(open("state.json"))["step"] == 1
open("train.log", "a").write("ran\\n")
with tempfile.NamedTemporaryFile("w+", suffix=".txt") as t:
    t.write("x"); t.flush(); ok = ok and open(t.name).read() == "x"
os.makedirs("ckpt", exist_ok=True)
open(os.path.join("ckpt", f"{len(glob.glob('ckpt/*'))}.pt"), "w").write("w")
subprocess.run(["cp", "state.json", "copy.json"], check=True)""")
    first, _ = _run(cli, project, house, cache_dir)
    assert first["outcome"] == "pass", first["reason"]
    again, err = _run(cli, project, house, cache_dir)
    assert _reused(again, err, first), err
    assert (project / "train.log").read_text() == "ran\n"  # it ran once


# ------------------------------------------------------------------ distributions


@pytest.fixture(scope="module")
def base_house(tmp_path_factory):
    out = tmp_path_factory.mktemp("base-wheels")
    for version, behaviour in (("1.0.0", "ok"), ("2.0.0", "raise")):
        toypkg.build_wheel(out, version, behaviour, dist="dsb-basepkg", module="dsb_basepkg")
    return out


@pytest.fixture
def layered_base(tmp_path, base_house):
    """A base environment of its own (torch from dsbisect's venv, through a .pth), holding
    dsb-basepkg, which the point venvs layer on and no point pins: (python, install(version))."""
    from dsbisect.envs.uv import uv_bin

    folder = tmp_path / "base"
    subprocess.run([uv_bin(), "venv", str(folder), "--python", sys.executable, "--offline", "-q"], check=True)
    (site,) = folder.glob("lib/python3*/site-packages")
    import torch

    (site / "dsb_parent.pth").write_text(str(Path(torch.__file__).parents[1]) + "\n")
    python = folder / "bin" / "python"

    def install(version: str) -> None:
        subprocess.run([uv_bin(), "pip", "install", "--python", str(python), "--offline", "--no-index",
                        "--find-links", str(base_house), "-q", f"dsb-basepkg=={version}"], check=True)

    install("1.0.0")
    return python, install


def test_a_distribution_of_the_base_that_changed_version_runs_again(cli, project, house, cache_dir, layered_base):
    python, install = layered_base
    _script(project, 'import dsb_basepkg\nok = dsb_basepkg.BEHAVIOUR == "ok"')
    extra = ("--python", str(python), "--base", "layered")
    first, err = _run(cli, project, house, cache_dir, extra)
    assert first["outcome"] == "pass", (first["reason"], err)

    install("2.0.0")  # not a pin of any point: the case key is the same
    changed, err = _run(cli, project, house, cache_dir, extra)
    assert changed["outcome"] == "fail", err
    assert f"recorded run {first['id']} is for other inputs: dsb-basepkg changed (1.0.0 -> 2.0.0)" in err, err
    recorded = dict(map(tuple, first["environment"]["fingerprint"]["files"]))
    assert [v for k, v in recorded.items() if k.startswith("dist:dsb-basepkg:")] == ["1.0.0"], recorded
    install("1.0.0")
    back, err = _run(cli, project, house, cache_dir, extra)
    assert _reused(back, err, first), err


# ------------------------------------------------------------------ PATH


def _tool(folder: Path, says: str) -> Path:
    folder.mkdir(exist_ok=True)
    tool = folder / "dsbtool"
    tool.write_text(f"#!/bin/sh\necho {says}\n")
    tool.chmod(0o755)
    return folder


def test_path_counts_by_the_programs_it_resolves(cli, project, house, cache_dir, monkeypatch):
    good, bad = _tool(project.parent / "good", "ok"), _tool(project.parent / "bad", "bad")
    same = project.parent / "same"
    same.mkdir()
    shutil.copy2(good / "dsbtool", same / "dsbtool")
    unrelated = project.parent / "unrelated"
    unrelated.mkdir()
    (unrelated / "othertool").write_text("#!/bin/sh\n")
    (unrelated / "othertool").chmod(0o755)
    plain = os.environ["PATH"]
    _script(project, 'ok = subprocess.run(["dsbtool"], capture_output=True, text=True).stdout.strip() == "ok"')

    monkeypatch.setenv("PATH", f"{good}:{plain}")
    first, _ = _run(cli, project, house, cache_dir)
    assert first["outcome"] == "pass"
    for path in (f"{unrelated}:{good}:{plain}", f"{same}:{plain}", f"{good}:{plain}:{unrelated}"):
        monkeypatch.setenv("PATH", path)  # another PATH, the same dsbtool
        again, err = _run(cli, project, house, cache_dir)
        assert _reused(again, err, first), (path, err)

    monkeypatch.setenv("PATH", f"{bad}:{good}:{plain}")
    other, err = _run(cli, project, house, cache_dir)
    assert other["outcome"] == "fail" and f"run {first['id']} is for other inputs: dsbtool changed" in err, err


# ------------------------------------------------------------------ a new user's shell


def _shell_env(**changes: str) -> dict[str, str]:
    """This environment as a login shell has it, without dsbisect's venv on PATH."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV", "COV_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", os.defpath).split(os.pathsep) if p != venv_bin)
    return env | changes


def _dsbisect(line: str, folder: Path, env: dict[str, str]) -> dict:
    done = subprocess.run(["bash", "-c", line], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    return run


def test_activating_the_venv_a_new_terminal_and_cd_reuse_the_run(tmp_path, wheelhouse, cache_dir):
    """The README's two forms, in real shells: ``.venv/bin/dsbisect`` and, in a new terminal
    (another session, locale, prompt, temporary folder), ``source .venv/bin/activate`` after a
    ``cd`` elsewhere and back: the 2-rank run is made once."""
    folder = tmp_path / "toy"
    write_matrix(folder, ["1.0.0"])
    args = " ".join(["run", "matrix.yaml", *offline(wheelhouse, cache_dir), "--format", "json"])
    venv = Path(sys.prefix)
    first = _dsbisect(f"{venv / 'bin' / 'dsbisect'} {args}", folder,
                      _shell_env(TERM="xterm-256color", SHLVL="1", LANG="C.UTF-8", TERM_SESSION_ID="a1"))
    assert first["outcome"] == "pass", first["reason"]
    tmp = tmp_path / "tmp-of-another-job"
    tmp.mkdir()
    activated = _dsbisect(
        f"cd / && cd - >/dev/null && source {venv / 'bin' / 'activate'} && cd .. && cd toy && dsbisect {args}",
        folder, _shell_env(TERM="screen", SHLVL="3", LANG="en_US.UTF-8", LC_ALL="C.UTF-8", TERM_SESSION_ID="b2",
                           SSH_TTY="/dev/pts/7", SSH_CONNECTION="10.0.0.2 50000 10.0.0.1 22", WINDOWID="4242",
                           TMPDIR=str(tmp), PS1="(x) $ ", MOTD_SHOWN="pam", COLORTERM="truecolor"))
    assert activated["id"] == first["id"], activated


# ------------------------------------------------------------------ issue 35


def test_what_would_run_now_is_made_once_per_point(cli, project, house, cache_dir, monkeypatch):
    """A point with three recorded runs: one look at the interpreter, the files and the
    environment for the three, not one per run."""
    from dsbisect.run.reuse import Reuse

    _script(project, "ok = True")
    made, _ = _runs(cli, project, house, cache_dir, ("--repeat", "3"))
    calls = []
    real = Reuse.interpreter

    def counted(self, *args, **kw):
        calls.append(args)
        return real(self, *args, **kw)

    monkeypatch.setattr(Reuse, "interpreter", counted)
    again, err = _runs(cli, project, house, cache_dir, ("--repeat", "3"))
    assert [r["id"] for r in again] == [r["id"] for r in made] and err.count(", recorded)") == 3, err
    assert len(calls) == 1, calls


def test_a_record_of_the_first_format_runs_again_once(cli, project, house, cache_dir):
    """A run recorded before files read, distributions and programs were (format 1) cannot say
    what it read: it runs again once, saying so, and the new record is reused."""
    import sqlite3

    _script(project, "ok = True")
    first, _ = _run(cli, project, house, cache_dir)
    with sqlite3.connect(project / ".dsbisect" / "dsbisect.sqlite3") as db:  # as an older dsbisect recorded it
        facts = json.loads(db.execute("SELECT facts FROM runs WHERE id=?", (first["id"],)).fetchone()[0])
        fingerprint = facts["fingerprint"]
        fingerprint.pop("format")
        fingerprint["files"] = [f for f in fingerprint["files"] if f[0].startswith("/")]
        db.execute("UPDATE runs SET facts=? WHERE id=?", (json.dumps(facts), first["id"]))
    again, err = _run(cli, project, house, cache_dir)
    assert again["id"] != first["id"]
    assert f"recorded run {first['id']} cannot be compared: made by an older dsbisect" in err, err
    last, err = _run(cli, project, house, cache_dir)
    assert _reused(last, err, again), err


def test_a_secret_in_a_path_the_run_read_is_not_stored(cli, project, house, cache_dir, monkeypatch):
    """The files a run read are kept by path: a path that holds a secret's value is masked in
    the record and in the hook's lists, as every value of a secret-looking variable is."""
    token = "hf_" + "Q" * 34
    monkeypatch.setenv("HF_TOKEN", token)
    cached = project.parent / f"cache-{token}.json"
    cached.write_text("{}")
    _script(project, 'ok = open(os.path.join(DIR, "cache-" + os.environ["HF_TOKEN"] + ".json")).read() == "{}"',
            DIR=str(project.parent))
    first, _ = _run(cli, project, house, cache_dir)
    assert first["outcome"] == "pass", first["reason"]
    store = project / ".dsbisect"
    leaks = [p for p in store.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    assert leaks == [] and token not in json.dumps(first)
    again, err = _run(cli, project, house, cache_dir)
    assert _reused(again, err, first), err
