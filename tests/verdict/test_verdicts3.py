"""Issue 36, wrong verdicts: words and a quiet spell are never a HANG; idle is not silence.

Real 2-rank toy jobs (tests/toypkg.py) through ``dsbisect run`` and ``dsbisect bisect``.  No
test depends on speed: a rank that must stay quiet longer than dsbisect takes to look waits for
that look to have happened (an event: the early verdict's rounds log a round, or the idle look
signals the rank's faulthandler), then goes on.  Before the fix each of these runs ended as a
HANG at that look; the outer limits (wall timeout, collective timeout) are far beyond a pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import toypkg
from conftest import offline, write_matrix

pytestmark = pytest.mark.slow

# rank 0: the words, then it waits until dsbisect logged a round of its early look that began
# after the words (its requests numbered past every request made before them) and proved nothing.
# A helper thread watches for that and sets an Event; the main thread, the one dsbisect looks at,
# stays in one call (its stack still) until then.  Before the fix no round began while the words
# were weighed, and the grace ended the run as a hang.
_AFTER_A_LOOK = '''
def _after_a_look():
    import os, re, threading, time
    fr = os.path.join(os.environ["DSBISECT_RUN_DIR"], "fr")
    log = os.path.join(fr, "rounds.log")
    def text():
        return open(log).read() if os.path.exists(log) else ""
    names = os.listdir(fr) if os.path.isdir(fr) else []
    made = [int(n[8:]) for n in names if re.fullmatch(r"request[.][0-9]+", n)]
    made += [int(n) for n in re.findall(r"requests? ([0-9]+)", text())]
    before = max(made, default=0)
    looked = threading.Event()
    def watch():
        while not any(int(a) > before for a in re.findall(r"requests ([0-9]+)[+][0-9]+: no proof", text())):
            time.sleep(0.2)
        looked.set()
    threading.Thread(target=watch, daemon=True).start()
    return looked
'''
STEPS = {
    # (a) a storage client's retry line (gloo's words), a quiet wait in one call, then on: a pass
    "retryline": _AFTER_A_LOOK + '''
def step(dist):
    import torch
    if dist.get_rank() == 0:
        looked = _after_a_look()
        print("storage: Timed out waiting 30000ms for recv operation to complete; retrying in 20 s", flush=True)
        looked.wait()
    t = torch.ones(4)
    dist.all_reduce(t)
    assert float(t[0]) == 2, t
''',
    # (b) gloo's words, then CPU-busy in C calls on one line (no Python frame below it): a pass
    "busyline": _AFTER_A_LOOK + '''
def step(dist):
    import random, torch
    if dist.get_rank() == 0:
        looked = _after_a_look()
        data = [random.random() for _ in range(300000)]
        print("[c10d] ProcessGroupGloo: collective operation timeout hit after 30000 ms; falling back", flush=True)
        while not looked.is_set(): sorted(data)
    t = torch.ones(4)
    dist.all_reduce(t)
''',
    # (2) silent, CPU-busy in a one-line loop until dsbisect's idle look (its faulthandler signal)
    "spin": '''
def step(dist):
    import glob, os, torch
    if dist.get_rank() == 0:
        mine = os.path.join(os.environ["DSBISECT_RUN_DIR"], "stacks", f"rank0.pid{os.getpid()}.txt")
        while not (os.path.exists(mine) and os.path.getsize(mine)): pass
        print("rank 0 went on after the idle look", flush=True)
    t = torch.ones(4)
    dist.all_reduce(t)
''',
}


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    toypkg.STEP.update(STEPS)
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("verdicts3-wheels"), {
        "1.0.0": "ok", "1.1.0": "retryline", "1.2.0": "retryline", "1.3.0": "skip", "1.4.0": "skip",
        "2.0.0": "busyline", "3.0.0": "spin"}, dist="dsb-verdicts")


def _run(folder: Path, house: Path, cache_dir: Path, version: str, *extra: str) -> dict:
    write_matrix(folder, [version], package="dsb-verdicts", collective_timeout=120, timeout=400)
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
           "--format", "json", *extra]
    out = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = json.loads(out.stdout)["runs"]
    return run


def _logs(run: dict) -> str:
    return "\n".join(p.read_text() for p in Path(run["run_dir"]).rglob("*.log"))


def test_a_retry_line_then_a_quiet_wait_is_a_pass(tmp_path, cache_dir, house):
    """(a) before: HANG 5 s after the line (the grace), the rank asleep; after: pass."""
    run = _run(tmp_path, house, cache_dir, "1.1.0")
    assert run["outcome"] == "pass", (run, _logs(run)[-3000:])
    assert "Timed out waiting 30000ms" in _logs(run) and "no proof" in _logs(run)


def test_the_words_then_a_busy_c_call_is_not_a_hang(tmp_path, cache_dir, house):
    """(b) before: HANG (no output, the stack still); after: pass (the rank used CPU)."""
    run = _run(tmp_path, house, cache_dir, "2.0.0")
    assert run["outcome"] == "pass", (run, _logs(run)[-3000:])


def test_a_silent_rank_burning_cpu_is_not_idle(tmp_path, cache_dir, house):
    """(2) ``--idle-timeout 6``: before, HANG at the first idle look (no output, a still stack);
    after: the rank used CPU outside any collective, so it is busy; the run passes."""
    run = _run(tmp_path, house, cache_dir, "3.0.0", "--idle-timeout", "6")
    assert run["outcome"] == "pass", (run, _logs(run)[-3000:])
    assert "went on after the idle look" in _logs(run)


def test_any_failure_answers_the_deadlock_not_the_first_printing_release(tmp_path, cache_dir, house, cli):
    """(c) 1.1.0 and 1.2.0 print the retry line and pass; the deadlock starts at 1.3.0.  Before:
    the printing releases were hangs and ``--any-failure`` answered 1.1.0."""
    write_matrix(tmp_path, ["1.0.0"], package="dsb-verdicts", collective_timeout=120, timeout=400)
    res = cli("bisect", "dsb-verdicts", "1.0.0", "1.4.0", "--case", "toy", *offline(house, cache_dir),
              "--any-failure", "-q", "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.2.0", "1.3.0"), out
