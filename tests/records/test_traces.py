"""What a run used, read back (``records.traces``), and the start-up hook that records it
(``_hook/dsbisect_trace.py``) in a real interpreter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsbisect.records.inputs import CHANGED_DURING_RUN, MISSING
from dsbisect.records.traces import file_sha, listing_digest, read_trace, used_files, used_listings

HOOK_DIR = Path(__file__).resolve().parents[2] / "src" / "dsbisect" / "_hook"


def _state(path: Path) -> list:
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _listing(folder: Path, **kinds) -> Path:
    (folder / "imports").mkdir(exist_ok=True)
    (folder / "imports" / f"pid{len(list((folder / 'imports').iterdir())) + 1}.json").write_text(json.dumps(kinds))
    return folder / "imports"


def test_a_file_read_before_the_run_is_an_input_and_what_the_run_made_or_wrote_is_not(tmp_path):
    data, cfg, out = tmp_path / "data.txt", tmp_path / "cfg.json", tmp_path / "out.txt"
    data.write_text("a")
    cfg.write_text("{}")
    started = time.time_ns()
    out.write_text("made by the run")  # then read back
    seen = [_state(data), _state(cfg), _state(out)]
    imports = _listing(tmp_path, read=seen, wrote=[str(cfg)])  # cfg: read, then written by the run
    assert dict(used_files(read_trace(imports), started)) == {str(data): file_sha(data)}
    data.write_text("changed after it was read")  # by someone else: never matches again
    assert dict(used_files(read_trace(imports), started)) == {str(data): CHANGED_DURING_RUN}


def test_a_file_given_to_a_child_that_changed_is_its_output(tmp_path):
    src, dst = tmp_path / "src.txt", tmp_path / "dst.txt"
    src.write_text("a")
    dst.write_text("old")
    imports = _listing(tmp_path, given=[_state(src), _state(dst)])
    time.sleep(0.01)
    dst.write_text("new, longer")  # `cp src.txt dst.txt`
    assert dict(used_files(read_trace(imports), None)) == {str(src): file_sha(src)}


def test_a_listed_folder_is_the_digest_of_its_names_unless_the_run_changed_it(tmp_path):
    shards, ckpt = tmp_path / "shards", tmp_path / "ckpt"
    shards.mkdir()
    ckpt.mkdir()
    (shards / "0.json").write_text("{}")
    seen = [[str(d), d.stat().st_mtime_ns, d.stat().st_ctime_ns] for d in (shards, ckpt)]
    imports = _listing(tmp_path, listed=seen)
    time.sleep(0.01)
    (ckpt / "1.pt").write_text("")  # the run's checkpoint: an output folder
    assert dict(used_listings(read_trace(imports), None)) == {str(shards): listing_digest(shards)}
    before = listing_digest(shards)
    (shards / "1.json").write_text("{}")
    assert listing_digest(shards) != before and listing_digest(tmp_path / "nope") == MISSING


def test_damaged_listings_are_skipped_and_the_caps_are_kept(tmp_path):
    mod = tmp_path / "helper.py"
    mod.write_text("A = 1\n")
    imports = _listing(tmp_path, files=[[str(mod), mod.stat().st_size, mod.stat().st_mtime_ns], [1, 2]],
                       read="nope", programs=[["gcc", "/usr/bin/gcc"], ["x"]], capped=["read"])
    (imports / "pid9.json").write_text("not json")
    (imports / "pid8.json").write_text("[1, 2]")
    trace = read_trace(imports)
    assert [s.path for s in trace.modules] == [str(mod)] and trace.read == ()
    assert trace.programs == (("gcc", "/usr/bin/gcc"),) and trace.capped == ("read",)


# ------------------------------------------------------------------ the hook, in a real interpreter

SCRIPT = """\
import glob, multiprocessing, os, subprocess, sys
open(os.environ["DATA"]).read()
open("written.txt", "w").write("x")
open("written.txt").read()
glob.glob(os.path.join(os.environ["SHARDS"], "*"))
subprocess.run(["cat", "given.txt"], stdout=subprocess.DEVNULL, check=True)
os.system("dsbtool given2.txt > /dev/null")
def child():
    open("forked.txt").read()
    os._exit(0)  # no atexit in a fork child
p = multiprocessing.get_context("fork").Process(target=child)
p.start(); p.join()
import ctypes
libc = ctypes.CDLL(None)
libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
held = libc.fopen(b"native.txt", b"r")  # opened by C, held to the end: no open event
"""


@pytest.mark.slow
def test_the_hook_records_reads_writes_listings_children_and_programs(tmp_path):
    hook, run, work, tools = (tmp_path / n for n in ("hook", "run", "work", "tools"))
    for d in (hook, run, work, tools):
        d.mkdir()
    for name in ("dsbisect_hook.py", "dsbisect_trace.py"):
        shutil.copy(HOOK_DIR / name, hook / name)
    (hook / "sitecustomize.py").write_text("import dsbisect_hook\n")
    for name in ("data.txt", "given.txt", "given2.txt", "forked.txt", "native.txt"):
        (work / name).write_text(name)
    (work / "shards").mkdir()
    (tools / "dsbtool").write_text("#!/bin/sh\ncat \"$@\"\n")
    (tools / "dsbtool").chmod(0o755)
    (work / "x.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(hook), "DSBISECT_RUN_DIR": str(run), "DATA": str(work / "data.txt"),
           "SHARDS": str(work / "shards"), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run([sys.executable, "x.py"], cwd=work, env=env, check=True, timeout=60)

    trace = read_trace(run / "imports")
    read = {Path(s.path).name for s in trace.read}
    assert {"data.txt", "forked.txt", "native.txt", "x.py"} <= read
    assert "written.txt" in read  # read back: left out below
    assert str(work / "written.txt") in trace.wrote
    assert {Path(s.path).name for s in trace.given} >= {"given.txt", "given2.txt"}
    assert [s.path for s in trace.listed] == [str(work / "shards")]  # not the import system's listings
    assert dict(trace.programs)["dsbtool"] == str(tools / "dsbtool") and dict(trace.programs)["cat"]
    assert str(work / "x.py") in {s.path for s in trace.modules} and trace.capped == ()
    files = dict(used_files(trace, None))
    assert files[str(work / "data.txt")] == file_sha(work / "data.txt") and str(work / "written.txt") not in files
