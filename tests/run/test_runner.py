"""runner: the run pipeline (launch line, supervised launch, verdict and evidence, record) on
real toy runs: real venvs, a real launcher or a real single rank, a real SQLite store."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from conftest import live_pids, make_case

from dsbisect.envs.venvs import EnvManager
from dsbisect.forensics.stuck import analyze
from dsbisect.core.model import IndexOptions, Outcome, Point
from dsbisect.core.rundir import RunDir
from dsbisect.run.executor import RunSpec, Site, Slot
from dsbisect.run.launched import Job
from dsbisect.run.local import LocalExecutor
from dsbisect.run.memory import GateToken
from dsbisect.store.store import Store

pytestmark = pytest.mark.slow  # real venvs and ranks


def test_one_rank_goes_through_every_step_and_gives_its_port_back(tmp_path, wheelhouse, cache_dir):
    """A 1-rank case: its launch line is the venv's python as rank 0 of 1 on a port held for the
    run; the import check is the run's own; the record has the verdict and the facts."""
    envs = EnvManager(cache_dir, index=IndexOptions(offline=True, find_links=(str(wheelhouse),)))
    store = Store(tmp_path / "store")
    local = LocalExecutor(Site(store, envs))
    case = make_case(tmp_path, "one", "import dsb_toy\nprint('rank ran', dsb_toy.__name__)\n", nproc=1,
                     timeout=120, env=(("OMP_NUM_THREADS", "1"),))
    point = Point((("dsb-toy", "1.0.0"),))
    cancel = threading.Event()
    record = local._claim(case, point, 1, cancel)
    job = Job(record, case, point, envs.ensure(point), local.accelerator(case), Slot(), GateToken(), cancel)
    line = local._launch_line(job, checks=True)
    assert line.direct and local._ports == {line.port}
    assert str(job.env.python) in line.spec.argv and line.spec.env["RANK"] == "0"
    assert line.spec.env["MASTER_PORT"] == str(line.port) and line.spec.env["DSBISECT_CHECK_IMPORTS"]
    ran = local._supervise(job, line)
    assert local._ports == set()  # given back
    assert ran.result.exit_code == 0 and not ran.result.timed_out and ran.result.proof is None
    assert ran.result.pids and not live_pids(ran.result.pids)
    assert "rank ran dsb_toy" in RunDir(Path(record.run_dir)).rank_log(0).read_text()
    done = local.run_once(RunSpec(case, point, attempt=2), cancel)  # the whole pipeline: a run, a port of its own
    assert done.id != record.id and done.outcome is Outcome.PASS and done.signature == ""
    assert done.facts.accelerator == "cpu" and done.facts.version("dsb-toy") == "1.0.0"
    assert store.run(done.id).outcome is Outcome.PASS and local._ports == set()


def test_an_early_deadlock_is_stored_with_the_proofs_waits_and_the_stacks_code(toy_deadlock):
    """The proof comes back typed (LaunchResult.proof): the stored reason is its text, the
    signature its waits and then, from the stacks, the code they wait from; nothing is cut
    back out of either text. (The run is the session's ``toy_deadlock``.)"""
    run = toy_deadlock.run
    assert run["outcome"] == "hang"
    proof = json.loads((Path(run["run_dir"]) / "fr" / "proof.json").read_text())
    assert run["reason"] == proof["text"]
    record = Store(toy_deadlock.store).run(run["id"])
    sig = analyze(Path(run["run_dir"]))
    assert sig is not None and sig.stack, sig
    where = record.signature.removesuffix(f" — {sig.stack}")
    assert where != record.signature and where.startswith("rank 0 waits in ALLREDUCE #"), record.signature
    assert proof["text"].startswith(f"deadlock proven at {proof['at']:.1f} s: {where} — "), (proof, where)
    assert "toy_repro.py:" in sig.stack or "dsb_toy" in sig.stack, sig.stack
