"""Manual marks, a bisection's log and its replay, and ``bisect --manual``."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import toypkg
from conftest import make_case, offline, write_matrix

from dsbisect.bisect.bisection import Bisection
from dsbisect.core.errors import InputError
from dsbisect.core.model import Accelerator, GitSource, IndexOptions, Outcome, Point, Verdict
from dsbisect.records.results import Request
from dsbisect.store.store import Store
from dsbisect.records.bisections import AskedFor, BisectionStatus


def _runs(store: Path) -> list[dict]:
    """The run records (run.json) of a store, in id order."""
    return [json.loads(p.read_text()) for p in sorted((store / "runs").glob("*/run.json"))]


def _folders(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "runs").iterdir()) if (store / "runs").is_dir() else []


# ---------------------------------------------------------------------- mark


def test_mark_records_a_real_run_that_every_report_shows_as_manual(tmp_path, cli):
    (tmp_path / "rep.py").write_text("print('hi')\n")
    res = cli("mark", "bad", "dsb-toy==1.3.0", "--script", "rep.py", "--note", "hang at step 812 on 64 GPUs",
              cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert "run 1: rep · dsb-toy 1.3.0 marked bad by hand" in res.stderr
    res = cli("mark", "good", "dsb-toy==1.0.0", "dsb-toy==1.1.0", "--script", "rep.py", cwd=tmp_path)
    assert res.exit_code == 0, res.output

    runs = _runs(tmp_path / ".dsbisect")
    assert [(r["id"], r["outcome"], r["point"]["versions"]) for r in runs] == [
        (1, "fail", [["dsb-toy", "1.3.0"]]), (2, "pass", [["dsb-toy", "1.0.0"]]), (3, "pass", [["dsb-toy", "1.1.0"]])]
    bad = runs[0]
    assert bad["status"] == "done" and bad["evidence"] == {"manual": "bad", "note": "hang at step 812 on 64 GPUs"}
    assert bad["reason"] == "marked bad by hand: hang at step 812 on 64 GPUs"
    assert runs[1]["evidence"] == {"manual": "good", "note": ""} and runs[1]["reason"] == "marked good by hand"
    store = Store(tmp_path / ".dsbisect", readonly=True)
    assert [r.outcome for r in store.runs()] == [Outcome.FAIL, Outcome.PASS, Outcome.PASS]

    table = cli("report", cwd=tmp_path)
    assert "#1 rep · dsb-toy 1.3.0: FAIL (marked by hand: hang at step 812 on 64 GPUs)" in table.stdout
    assert "#2 rep · dsb-toy 1.0.0: PASS (marked by hand)" in table.stdout
    assert "host: not recorded" not in table.stdout
    md = cli("report", "--format", "markdown", cwd=tmp_path).stdout
    assert "- #3 rep · dsb-toy 1.1.0: PASS (marked by hand)" in md and "host: not recorded" not in md
    data = json.loads(cli("report", "--format", "json", cwd=tmp_path).stdout)
    assert {r["id"]: r["manual"] for r in data["runs"]} == {1: "bad", 2: "good", 3: "good"}
    shown = cli("show", "1", cwd=tmp_path).stdout
    assert "FAIL (marked by hand)" in shown and "bad by hand: hang at step 812 on 64 GPUs" in shown


def test_a_skip_mark_is_outcome_skip_and_is_kept(tmp_path, cli):
    (tmp_path / "rep.py").write_text("pass\n")
    assert cli("mark", "skip", "dsb-toy==1.2.0", "--script", "rep.py", cwd=tmp_path).exit_code == 0
    (run,) = _runs(tmp_path / ".dsbisect")
    assert run["outcome"] == "skip" and run["evidence"]["manual"] == "skip"

    # The runner reuses it (recorded skips are otherwise tried again): nothing is run.
    from dsbisect.run.executor import Delegated
    from dsbisect.run.runner import Runner

    class NoRuns(Delegated):
        def __init__(self, site):
            self.site = site

        def run_once(self, *a):
            raise AssertionError("a marked skip was run again")

    case = make_case(tmp_path, "rep", "pass\n")
    runner = Runner(store=Store(tmp_path / ".dsbisect"), envs=None, place=NoRuns)
    point = Point(versions=(("dsb-toy", "1.2.0"),))
    (found,) = runner.runs(case, point, want=2)
    assert found.outcome is Outcome.SKIP and found.manual.mark is Verdict.SKIP


def test_marked_points_are_the_bisections_points(tmp_path):
    """A mark is keyed exactly as the bisection keys its release and commit points, so a later
    bisection of the case reuses it (the slow test below does so for real)."""
    from dsbisect.bisect.marks import points_for, release_point

    from dsbisect.run.runner import Runner

    case = replace(make_case(tmp_path, "c"), pins=("pydantic<2", "transformers==4.39.2"))
    req = Request("deepspeed", "0.12.2", "0.12.4", case, pins=("accelerate==0.28.0", "pydantic<2"))
    bis = Bisection(Runner(store=Store(tmp_path / "s"), envs=None), IndexOptions(), req)
    assert bis.points.pins == ("pydantic<2", "transformers==4.39.2", "accelerate==0.28.0")
    for v in ("0.12.2", "0.12.3", "0.12.4"):
        assert release_point(case, "deepspeed", v, req.pins) == bis.points.release(v)
    (p,) = points_for(case, [("deepspeed", "0.12.3")], req.pins)
    assert p == bis.points.release("0.12.3")
    # deepspeed==0.12.3 transformers==4.39.2 as one point is the same point as a pin of transformers.
    (both,) = points_for(case, [("deepspeed", "0.12.3"), ("transformers", "4.39.2")], ("accelerate==0.28.0",))
    assert both.key == bis.points.release("0.12.3").key
    # Several versions of one package: one point each; of two packages: every combination.
    assert len(points_for(case, [("deepspeed", "0.12.2"), ("deepspeed", "0.12.3")], ())) == 2
    assert len(points_for(case, [("deepspeed", "1"), ("deepspeed", "2"), ("accelerate", "3")], ())) == 2

    from dsbisect.envs.gitrepo import Commit

    commit = Commit("a" * 40, "Fix it", "v0.12.3-4-gaaaaaaa")
    src = GitSource("deepspeed", "", commit.hash)
    (marked,) = points_for(case, [("deepspeed", "0.12.4")], req.pins, src)
    clone = GitSource("deepspeed", "/clone", commit.hash, commit.describe, commit.subject)
    assert marked.key == bis.points.commit(clone, "0.12.4").key


def test_a_commit_is_marked_by_its_hash(tmp_path, cli):
    from conftest import git

    repo = tmp_path / "clone"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Rank 1 skips the all_reduce")
    full = git(repo, "rev-parse", "HEAD").strip()
    (tmp_path / "rep.py").write_text("pass\n")
    res = cli("mark", "bad", "dsb-toy==1.1.0", "--commit", full[:8], "--git-repo", "clone", "--script", "rep.py",
              cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert cli("mark", "good", "dsb-toy==1.1.0", "--commit", full.upper(), "--script", "rep.py",
               cwd=tmp_path).exit_code == 0
    bad, good = _runs(tmp_path / ".dsbisect")
    assert bad["point"]["source"] == {"package": "dsb-toy", "commit": full, "describe": full[:7],
                                      "subject": "Rank 1 skips the all_reduce"}
    assert good["point"]["source"]["commit"] == full and bad["point_key"] == good["point_key"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["mark", "maybe", "x==1.0", "--script", "rep.py"], "'maybe' is not one of"),
        (["mark", "bad", "--script", "rep.py"], "give the point to mark as PACKAGE==VERSION"),
        (["mark", "bad", "x==1.0", "x==1.0", "--script", "rep.py"], "x==1.0 is given twice"),
        (["mark", "bad", "x==one", "--script", "rep.py"], "'one' is not a PEP 440 version"),
        (["mark", "bad", "x==1.0", "--script", "missing.py"], "missing.py: no such script"),
        (["mark", "bad", "x==1.0", "--case", "ghost"], "no case named 'ghost'"),
        (["mark", "bad", "x==1.0", "--script", "rep.py", "--pin", "x==2.0"], "x is the point's own package"),
        (["mark", "bad", "x==1.0", "--script", "rep.py", "--pin", "y>>1"], "is not a requirement"),
        (["mark", "bad", "x==1.0", "--script", "rep.py", "--commit", "abc1234"], "give the full hash"),
        (["mark", "bad", "x==1.0", "--script", "rep.py", "--commit", "xyz"], "expected a commit hash"),
        (["mark", "bad", "x==1.0", "x==2.0", "--script", "rep.py", "--commit", "a" * 40], "--commit marks one commit"),
        (["mark", "bad", "x==1.0", "--script", "rep.py", "--git-repo", "."], "give --commit HASH too"),
        (["mark", "bad", "x==1.0", "--script", "rep.py", "--collective-timeout", "0"], "--collective-timeout 0"),
        (["mark", "bad", "x==1.0", "--case", "toy", "--", "python", "rep.py"], "give one of --case, --script"),
        (["log"], "no dsbisect store in"),
        (["replay", "nowhere.log"], "nowhere.log: cannot be read"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, args, expected):
    write_matrix(tmp_path, ["1.0.0"])
    (tmp_path / "rep.py").write_text("pass\n")
    res = cli(*args, cwd=tmp_path)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], res.output
    assert not (tmp_path / ".dsbisect").exists()


# ------------------------------------------------------------------------ log


def _bisect_context(*argv: str):
    import typer

    from dsbisect.cli import app

    command = typer.main.get_command(app).commands["bisect"]
    return command.make_context("bisect", list(argv))


def test_the_bisect_command_line_is_kept_canonical():
    from dsbisect.bisect.marks import case_args, invocation

    ctx = _bisect_context("deepspeed", "0.12.2", "0.12.4", "--case", "seed", "-q", "--pin", "a==1",
                          "--collective-timeout", "3", "--offline", "--find-links", "wh", "-j", "2",
                          "--no-verify-commit-ends", "--format", "json", "--pin", "b==2")
    argv = invocation(ctx)
    assert argv == ["deepspeed", "0.12.2", "0.12.4", "--case=seed", "--pin=a==1", "--pin=b==2",
                    "--no-verify-commit-ends", "--collective-timeout=3.0", "--offline", "--find-links=wh",
                    "--jobs=2"]
    assert case_args(argv) == ["--case=seed", "--pin=a==1", "--pin=b==2", "--collective-timeout=3.0"]
    ctx = _bisect_context("dsb-toy", "auto", "latest", "--nproc", "4", "--", "python", "x.py", "--steps", "3")
    argv = invocation(ctx)
    assert argv == ["dsb-toy", "auto", "latest", "--nproc=4", "--", "python", "x.py", "--steps", "3"]
    assert case_args(argv) == ["--nproc=4", "--", "python", "x.py", "--steps", "3"]


def _toy_bisection(store: Store, case, argv: list[str]) -> None:
    """A finished bisection of dsb-toy 1.0.0..1.3.0 in ``store``: runs recorded as a real one would."""
    from dsbisect.bisect.marks import record

    def run(version: str, outcome: Outcome, reason: str = "", signature: str = "") -> int:
        p = Point(versions=(("dsb-toy", version),))
        rid = store.start_run(case.name, case.key, p, None, 1)
        store.finish_run(rid, outcome, 0 if outcome is Outcome.PASS else 1, 4.25, reason=reason,
                         signature=signature)
        return rid

    a = run("1.0.0", Outcome.PASS)
    b = run("1.3.0", Outcome.HANG, "gloo recv timeout", "rank 0 in ALLREDUCE\nat SeqNum 3")
    c = run("1.1.0", Outcome.FAIL, "ValueError: an unrelated crash")  # skip under --regress-on hang
    d = record(store, case, Point(versions=(("dsb-toy", "1.2.0"),)), "bad", "hang on 64 GPUs # node 7").id
    steps = [{"stage": "release", "version": v, "commit": None, "verdict": verdict, "run_ids": [i]}
             for v, verdict, i in (("1.0.0", "good", a), ("1.3.0", "bad", b), ("1.1.0", "skip", c),
                                   ("1.2.0", "bad", d))]
    steps.append({"stage": "confirm", "version": "1.2.0", "commit": None, "verdict": "bad", "run_ids": [d]})
    store.save_bisection("0123456789abcdef", "dsb-toy", "1.0.0", "1.3.0",
                         AskedFor.from_json({"case": case.name, "pins": [], "regress_on": "hang", "find_fix": False,
                                             "repeat": 1, "signature": None, "argv": argv, "cwd": "/somewhere"}),
                         BisectionStatus.DONE, {"verdict": "ambiguous", "last_good": "1.0.0", "first_bad": "1.2.0", "steps": steps})


def test_log_writes_one_mark_line_per_run_that_parses_back(tmp_path, cli):
    from dsbisect.bisect.marks import parse_log

    (tmp_path / "rep.py").write_text("pass\n")
    from dsbisect.run.matrix import script_case

    case = script_case(tmp_path / "rep.py", 2)
    store = Store(tmp_path / ".dsbisect")
    _toy_bisection(store, case, ["dsb-toy", "1.0.0", "1.3.0", "--script=rep.py", "--collective-timeout=3.0",
                                 "--offline", "--find-links=wh"])
    store.close()
    res = cli("log", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "# dsbisect log of bisection 0123456789abcdef: dsb-toy 1.0.0 → 1.3.0 (done: ambiguous)"
    assert lines[1] == ("# dsbisect bisect dsb-toy 1.0.0 1.3.0 --script=rep.py --collective-timeout=3.0 "
                        "--offline --find-links=wh")
    marks = [ln for ln in lines if not ln.startswith("#")]
    assert marks == [
        "dsbisect mark good dsb-toy==1.0.0 --script=rep.py --collective-timeout=3.0  # run 1: pass 4.2 s",
        ("dsbisect mark bad dsb-toy==1.3.0 --script=rep.py --collective-timeout=3.0  "
        "# run 2: hang 4.2 s: rank 0 in ALLREDUCE at SeqNum 3"),
        ("dsbisect mark skip dsb-toy==1.1.0 --script=rep.py --collective-timeout=3.0  "
        "# run 3: fail 4.2 s: ValueError: an unrelated crash"),
        ("dsbisect mark bad dsb-toy==1.2.0 '--note=hang on 64 GPUs # node 7' --script=rep.py "
        "--collective-timeout=3.0  # run 4: marked bad by hand"),
    ]  # run 4 once, though the confirm step used it again
    assert cli("log", "0123", cwd=tmp_path).stdout == res.stdout
    miss = cli("log", "ffff", cwd=tmp_path)
    assert miss.exit_code == 2 and "no bisection with a key starting 'ffff'" in miss.stderr

    parsed = parse_log(res.stdout, "x.log")
    assert [ln.number for ln in parsed] == [6, 7, 8, 9]
    assert parsed[3].args == ["bad", "dsb-toy==1.2.0", "--note=hang on 64 GPUs # node 7", "--script=rep.py",
                              "--collective-timeout=3.0"]
    assert parsed[3].comment == "run 4: marked bad by hand"
    assert parsed[1].comment == "run 2: hang 4.2 s: rank 0 in ALLREDUCE at SeqNum 3"
    with pytest.raises(InputError, match=r"x.log:2: not a 'dsbisect mark' line"):
        parse_log("# header\ndsbisect bisect a 1 2\n", "x.log")


@pytest.mark.parametrize("secret_arg", [
    "--pin=dsb-extra@https://ci:hunter2@wheels.example/dsb_extra-1.0-py3-none-any.whl",
    "--index-url=https://__token__:hunter2@pypi.example/simple",
    "--extra-index-url=https://ci:hunter2@[::1]:8080/simple"])
def test_log_masks_a_credential_in_a_pin_or_url_and_keeps_requirements_whole(tmp_path, cli, secret_arg):
    """What ``log`` prints of the bisect command and of each run is redacted, and ``==`` of a
    requirement is not taken for an assignment (``pydantic==1.10.13`` stays as it is)."""
    (tmp_path / "rep.py").write_text("pass\n")
    from dsbisect.run.matrix import script_case

    case = script_case(tmp_path / "rep.py", 2)
    store = Store(tmp_path / ".dsbisect")
    _toy_bisection(store, case, ["dsb-toy", "1.0.0", "1.3.0", "--script=rep.py", "--pin=pydantic==1.10.13",
                                 secret_arg, "--offline"])
    store.close()
    res = cli("log", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert "hunter2" not in res.stdout and "***" in res.stdout.splitlines()[1]
    assert "--pin=pydantic==1.10.13" in res.stdout.splitlines()[1]
    assert "dsbisect mark good dsb-toy==1.0.0 --script=rep.py --pin=pydantic==1.10.13" in res.stdout


def test_replay_records_every_mark_once_and_checks_every_line_first(tmp_path, cli):
    (tmp_path / "rep.py").write_text("pass\n")
    log = tmp_path / "a.log"
    log.write_text("# a log\n"
                   "dsbisect mark good dsb-toy==1.0.0 --script=rep.py  # run 1: pass 4.2 s\n"
                   "\n"
                   "mark bad dsb-toy==1.3.0 --script rep.py --note 'seen by hand'  # run 2: hang\n"
                   "dsbisect mark bad dsb-toy==1.1.0 dsb-toy==1.2.0 --script=rep.py\n")
    bad = tmp_path / "bad.log"
    bad.write_text(log.read_text() + "dsbisect mark bad dsb-toy==1.4.0 --script=rep.py --nproc=zero\n")
    res = cli("replay", "bad.log", "--store", "other", cwd=tmp_path)
    assert res.exit_code == 2 and "bad.log:6: Invalid value for '--nproc'" in res.stderr, res.output
    assert not (tmp_path / "other").exists()

    res = cli("replay", "a.log", "--store", "other", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert "4 mark(s) recorded in" in res.stderr
    runs = _runs(tmp_path / "other")
    assert [(r["point"]["versions"][0][1], r["evidence"]["manual"]) for r in runs] == [
        ("1.0.0", "good"), ("1.3.0", "bad"), ("1.1.0", "bad"), ("1.2.0", "bad")]
    assert runs[0]["reason"] == "marked good by hand: run 1: pass 4.2 s"  # the comment, for a note
    assert runs[1]["reason"] == "marked bad by hand: seen by hand"
    assert runs[0]["evidence"]["replayed"] == "a.log:2"
    again = cli("replay", "a.log", "--store", "other", cwd=tmp_path)
    assert again.exit_code == 0 and "0 mark(s) recorded" in again.stderr and "4 already there" in again.stderr
    assert len(_runs(tmp_path / "other")) == 4


# ---------------------------------------------------------------- --manual


@dataclass
class _Env:
    path: Path
    key: str = "envkey"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


class _Envs:
    def __init__(self, root: Path):
        self.root = root
        self.built: list[Point] = []

    def ensure(self, point: Point) -> _Env:
        from dsbisect.core.errors import EnvBuildError

        if point.version_of("dsb-toy") == "9.9.9":
            raise EnvBuildError("no dsb-toy 9.9.9 in the wheelhouse")
        self.built.append(point)
        return _Env(self.root / point.key)


def test_manual_executor_says_how_to_run_and_records_the_answer(tmp_path):
    from functools import partial

    from dsbisect.bisect.marks import ManualExecutor, manual_target
    from dsbisect.run.executor import RunSpec
    from dsbisect.run.runner import Runner

    answers = iter(["dunno", "B", "good"])
    said: list[str] = []
    asked: list[str] = []

    def ask(text: str) -> str:
        asked.append(text)
        return next(answers)

    case = replace(make_case(tmp_path, "c", nproc=2), accelerator=Accelerator.CPU, env=(("OMP_NUM_THREADS", "1"),),
                   collective_timeout=3.0)
    runner = Runner(store=Store(tmp_path / "s"), envs=_Envs(tmp_path / "envs"),
                    place=partial(ManualExecutor, ask=ask, say=said.append))
    ex = runner.executor
    p = Point(versions=(("dsb-toy", "1.3.0"),))
    run = runner.run_once(case, p)
    assert run.outcome is Outcome.FAIL and run.manual.mark is Verdict.BAD and run.env_key == "envkey"
    assert asked == ["dsb-toy 1.3.0: good, bad or skip [g/b/s]"] * 2
    assert "  answer good, bad or skip (g, b, s)" in said
    venv = tmp_path / "envs" / p.key
    assert f"  venv      {venv}" in said
    assert f"  activate  source {venv / 'bin' / 'activate'}" in said
    run = manual_target(tmp_path / "s", case, p, venv / "bin" / "python").run
    assert f"  logs      {run.path}" in said
    assert (f"  run       mkdir -p {run.ranks} && cd {run.path} && env DS_ACCELERATOR=cpu CUDA_VISIBLE_DEVICES= "
            f"DSBISECT_RUN_DIR={run.path} DSBISECT_COLLECTIVE_TIMEOUT=3 DSBISECT_CASE=c TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
            f"TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_DEBUG_INFO_TEMP_FILE={run.fr_prefix} "
            f"TORCH_FR_DUMP_TEMP_FILE={run.fr_prefix} OMP_NUM_THREADS=1 {venv}/bin/python -u -m deepspeed.launcher.runner "
            f"--num_gpus 2 --master_port 29500 --enable_each_rank_log={run.ranks} {case.script}") in said, said
    assert runner.run_once(case, Point(versions=(("dsb-toy", "1.0.0"),))).outcome is Outcome.PASS
    # A venv that cannot be built is untestable, as a run here would be; nobody is asked.
    skipped = runner.run_once(case, Point(versions=(("dsb-toy", "9.9.9"),)))
    assert skipped.outcome is Outcome.SKIP and "no dsb-toy 9.9.9" in skipped.reason and skipped.manual is None
    assert ex.slots(case) and len(ex.slots(case)) == 1
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(KeyboardInterrupt):
        ex.run_once(RunSpec(case, p), cancel)


def test_manual_executor_prints_the_users_own_command_as_the_runner_runs_it(tmp_path):
    from dsbisect.bisect.marks import instructions, manual_target
    from dsbisect.run.matrix import command_case

    (tmp_path / "train.py").write_text("pass\n")
    case = command_case(["deepspeed", "--num_gpus", "8", "train.py", "--bf16"], tmp_path)
    point = Point(versions=(("deepspeed", "0.12.4"),))
    target = manual_target(tmp_path / "st", case, point, tmp_path / "v" / "bin" / "python")
    lines = instructions(case, point, tmp_path / "v", Accelerator.CUDA, target)
    ranks = target.run.ranks
    assert target.run.path.parent == tmp_path / "st" / "manual" and lines[3] == f"  logs      {target.run.path}"
    assert lines[-1].startswith(f"  run       mkdir -p {ranks} && cd {tmp_path.resolve()} && env DSBISECT_RUN_DIR=")
    assert lines[-1].endswith(f"TORCH_FR_DUMP_TEMP_FILE={target.run.fr_prefix} {tmp_path}/v/bin/python -u -m "
                              f"deepspeed.launcher.runner --num_gpus 8 --master_port 29500 --enable_each_rank_log "
                              f"{ranks} train.py --bf16")


# ------------------------------------------------------------------- slow: for real


def _house(tmp_path_factory, name: str, behaviour: dict[str, str]) -> Path:
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp(name), behaviour, dist="dsb-toy")


@pytest.mark.slow
def test_a_bisection_takes_marks_as_runs_and_runs_nothing(tmp_path, cli, cache_dir, wheelhouse):
    write_matrix(tmp_path, ["1.0.0"], collective_timeout=3)
    for mark, version in (("good", "1.0.0"), ("good", "1.1.0"), ("bad", "1.2.0"), ("bad", "1.3.0")):
        res = cli("mark", mark, f"dsb-toy=={version}", "--case", "toy", "--note", "on the cluster", cwd=tmp_path)
        assert res.exit_code == 0, res.output
    res = cli("bisect", "dsb-toy", "1.0.0", "1.3.0", "--case", "toy", *offline(wheelhouse, cache_dir),
              "-q", "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.1.0", "1.2.0")  # 1.2.0 really passes
    assert all(s["manual"] for s in out["steps"]) and len(_folders(tmp_path / ".dsbisect")) == 4
    table = cli("bisect", "dsb-toy", "1.0.0", "1.3.0", "--case", "toy", *offline(wheelhouse, cache_dir),
                "-q", cwd=tmp_path).stdout
    assert "FAIL (marked by hand)" in table and "marked bad by hand: on the cluster" in table


@pytest.mark.slow
def test_log_and_replay_rebuild_a_real_bisection_elsewhere(tmp_path_factory, tmp_path, cli, cache_dir, wheelhouse):
    write_matrix(tmp_path, ["1.0.0"], collective_timeout=3)
    bisect = ["bisect", "dsb-toy", "1.1.0", "1.3.0", "--case", "toy", "--offline", "--cache-dir", str(cache_dir),
              "-q", "--format", "json"]
    res = cli(*bisect, "--find-links", str(wheelhouse), cwd=tmp_path)
    assert res.exit_code == 0, res.output
    first = json.loads(res.stdout)
    assert (first["last_good"], first["first_bad"]) == ("1.2.0", "1.3.0")

    log = cli("log", cwd=tmp_path)
    assert log.exit_code == 0, log.output
    (tmp_path / "bisect.log").write_text(log.stdout)
    marks = [ln for ln in log.stdout.splitlines() if not ln.startswith("#")]
    assert len(marks) == 3 and marks[1].startswith("dsbisect mark bad dsb-toy==1.3.0 --case=toy ")
    assert "# run 2: hang" in marks[1]
    assert f"# dsbisect bisect dsb-toy 1.1.0 1.3.0 --case=toy --offline --find-links={wheelhouse}" in log.stdout

    res = cli("replay", "bisect.log", "--store", "elsewhere", cwd=tmp_path)
    assert res.exit_code == 0 and "3 mark(s) recorded" in res.stderr, res.output
    # The same bisection with a wheelhouse whose releases would all fail now: nothing runs, same answer.
    failing = _house(tmp_path_factory, "dsb-fails", {"1.1.0": "raise", "1.2.0": "raise", "1.3.0": "raise"})
    res = cli(*bisect, "--find-links", str(failing), "--store", "elsewhere", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    again = json.loads(res.stdout)
    assert (again["verdict"], again["last_good"], again["first_bad"]) == ("found", "1.2.0", "1.3.0")
    assert [s["verdict"] for s in again["steps"]] == [s["verdict"] for s in first["steps"]]
    assert len(_folders(tmp_path / "elsewhere")) == 3  # no new run


def _answering(cwd: Path, args: list[str], answers: str):
    """The CLI in-process with ``answers`` on its stdin."""
    import os

    from typer.testing import CliRunner

    from dsbisect.cli import app

    old = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, args, input=answers, catch_exceptions=False,
                                  env={"COLUMNS": "220", "NO_COLOR": "1", "TERM": "dumb"})
    finally:
        os.chdir(old)


@pytest.mark.slow
def test_bisect_manual_asks_at_each_point(tmp_path, cli, cache_dir, wheelhouse):
    write_matrix(tmp_path, ["1.0.0"], collective_timeout=3, launcher="deepspeed")  # its line is asserted
    args = ["bisect", "dsb-toy", "1.0.0", "1.3.0", "--case", "toy", "--manual", *offline(wheelhouse, cache_dir),
            "-q", "--format", "json"]
    # The ends (1.0.0, 1.3.0), then 1.1.0 (skipped: "maybe" is asked again), then 1.2.0.
    res = _answering(tmp_path, args, "good\nbad\nmaybe\ns\ng\n")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout[res.stdout.index("{"):])  # click's test runner echoes the answers on stdout
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.2.0", "1.3.0")
    assert [(s["version"], s["verdict"]) for s in out["steps"]] == [
        ("1.0.0", "good"), ("1.3.0", "bad"), ("1.1.0", "skip"), ("1.2.0", "good")]
    assert res.stderr.count("good, bad or skip [g/b/s]") == 5 and "activate  source " in res.stderr
    assert "/bin/python -u -m deepspeed.launcher.runner --num_gpus 2 --master_port 29500 --enable_each_rank_log=" in res.stderr
    runs = _runs(tmp_path / ".dsbisect")
    assert [r["evidence"]["manual"] for r in runs] == ["good", "bad", "skip", "good"]
    assert all(r["env_key"] for r in runs)
    # Again: every answer is in the store; nothing is asked (no input at all).
    res = cli(*args, cwd=tmp_path)
    assert res.exit_code == 0 and json.loads(res.stdout)["first_bad"] == "1.3.0"
    assert "good, bad or skip" not in res.stderr and len(_runs(tmp_path / ".dsbisect")) == 4
    assert [Verdict(s["verdict"]) for s in json.loads(res.stdout)["steps"]][-1] is Verdict.GOOD
