"""bisect --good-config/--bad-config, --good-vars/--bad-vars, --good-command: which setting breaks
a job, found by the same level-1 search as a package, run for real.

The jobs are small scripts whose behaviour depends on a config key, an environment variable and a
launcher flag (torchrun's --nproc_per_node: the job fails with two ranks), run as real processes;
one rank, no launcher, except where the flag is the launcher's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import offline

import toypkg

JOB = """\
import json, os, sys
import yaml
path = sys.argv[sys.argv.index("--config") + 1]
cfg = yaml.safe_load(open(path)) if path.endswith(".yaml") else json.load(open(path))
z = cfg.get("zero_optimization", {})
off = z.get("offload_optimizer", {})
if off.get("device") == "nvme" and "nvme_path" not in off:
    print("nvme offload needs nvme_path: this config cannot run", flush=True)
    sys.exit(125)  # the job rejects it: untestable
if z.get("overlap_comm") and z.get("contiguous_gradients"):
    sys.exit("overlap_comm with contiguous_gradients: the gradients are wrong")
if os.environ.get("TOY_P2P_DISABLE") == "1":
    sys.exit("TOY_P2P_DISABLE=1: the ranks cannot talk")
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    sys.exit("two ranks: the job breaks")
print("fine", flush=True)
"""

GOOD_YAML = """\
# a DeepSpeed-like config, as a user keeps it
train_batch_size: 8   # the batch
zero_optimization:
  stage: 2
  overlap_comm: false   # overlap the reduction
  contiguous_gradients: false
  reduce_bucket_size: 500000000
gradient_clipping: 1.0
"""

BAD_YAML = """\
train_batch_size: 16
zero_optimization:
  stage: 2
  overlap_comm: true
  contiguous_gradients: true
  reduce_bucket_size: 200000000
  offload_optimizer:
    device: nvme
    nvme_path: /local_nvme
gradient_clipping: 1.0
"""

TOKEN = "hf_" + "Z" * 6 + "settingsSecretToken1234"  # a made-up Hugging Face token


def _job(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "ok.yaml").write_text(GOOD_YAML)
    (tmp_path / "broken.yaml").write_text(BAD_YAML)


def _bisect(cli, tmp_path, cache_dir, *words, code=0):
    res = cli("bisect", "--store", str(tmp_path / "store"), "--cache-dir", str(cache_dir), "-q",
              "--format", "json", "--regress-on", "fail", *words, cwd=tmp_path)
    assert res.exit_code == code, res.output
    return json.loads(res.stdout), res


def _culprits(out: dict) -> list[str]:
    return out["env_diff"]["culprits"]


def _ends(out: dict) -> list[str]:
    return [e["label"] for e in out["env_diff"]["ends"]]


@pytest.mark.slow
def test_two_config_keys_that_only_break_together_around_a_rejected_key(tmp_path, cli, cache_dir):
    """overlap_comm and contiguous_gradients break only together; offload_optimizer.device nvme
    without its nvme_path is rejected by the job (exit 125: untestable) and stepped around."""
    _job(tmp_path)
    command = ["--", "python", "job.py", "--config", "broken.yaml"]
    out, _ = _bisect(cli, tmp_path, cache_dir, "--good-config", "ok.yaml", "--bad-config", "broken.yaml", *command)
    names = [c["name"] for c in out["env_diff"]["changes"]]
    assert names == ["train_batch_size", "zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients",
                     "zero_optimization.reduce_bucket_size", "zero_optimization.offload_optimizer.device",
                     "zero_optimization.offload_optimizer.nvme_path"]
    assert {c["setting"] for c in out["env_diff"]["changes"]} == {"config"}
    assert out["verdict"] == "found" and out["env_diff"]["exact"]
    assert _culprits(out) == ["zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients"]
    assert out["message"].startswith("6 changes; culprits (only together): config zero_optimization.overlap_comm "
                                     "false -> true and config zero_optimization.contiguous_gradients false -> true (")
    assert out["releases"] == [] and out["not_bisected"] == []
    # the ends are named by what differs: two configs, not two environments
    assert _ends(out) == ["good config", "bad config"]
    assert out["every_cause"]["verified"].startswith("the bad config with these 2 changes reverted passes")
    outcomes = [t["outcome"] for t in out["env_diff"]["trials"]]
    assert "fail" in outcomes and "pass" in outcomes
    # each trial's config is the good file with some keys replaced: its comments kept
    written = sorted((cache_dir / "settings").glob("*/broken.yaml"))
    assert written and all("# a DeepSpeed-like config" in p.read_text() for p in written)
    ran = {i for s in out["steps"] for i in s["run_ids"]}
    again, _ = _bisect(cli, tmp_path, cache_dir, "--good-config", "ok.yaml", "--bad-config", "broken.yaml", *command)
    assert _culprits(again) == _culprits(out) and {i for s in again["steps"] for i in s["run_ids"]} == ran
    # dsbisect log: no mark line (it would mark the command as given with each trial's verdict, good
    # and bad alike); each run a comment naming its trial, and a replay records nothing false
    log = cli("log", "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert log.exit_code == 0, log.output
    assert not [x for x in log.stdout.splitlines() if x.startswith("dsbisect mark")], log.stdout
    # the ends may run in either order (ids as the store gave them): each named by its own run
    good, bad = out["env_diff"]["ends"]
    assert good["run_ids"] and bad["run_ids"], out["env_diff"]["ends"]
    for i in good["run_ids"]:
        assert f"# run {i}: pass, a trial of settings: good config" in log.stdout, log.stdout
    for i in bad["run_ids"]:
        assert f"# run {i}: fail, a trial of settings: bad config" in log.stdout, log.stdout
    (tmp_path / "bisect.log").write_text(log.stdout)
    replayed = cli("replay", "bisect.log", "--store", str(tmp_path / "new"), cwd=tmp_path)
    assert replayed.exit_code == 0 and "0 mark(s) recorded" in replayed.stderr, replayed.output


@pytest.mark.slow
def test_a_rejected_key_is_stepped_around(tmp_path, cli, cache_dir):
    """JSON configs: the offload device goes to nvme and its nvme_path is added (fine together,
    rejected apart: exit 125, untestable); overlap_comm on is the culprit."""
    _job(tmp_path)
    zero = {"offload_optimizer": {"device": "cpu"}, "overlap_comm": False, "contiguous_gradients": True}
    (tmp_path / "ok.json").write_text(json.dumps({"zero_optimization": zero, "steps": 1}, indent=4))
    zero = {"offload_optimizer": {"device": "nvme", "nvme_path": "/x"}, "overlap_comm": True,
            "contiguous_gradients": True}
    (tmp_path / "broken.json").write_text(json.dumps({"zero_optimization": zero, "steps": 2}, indent=4))
    out, _ = _bisect(cli, tmp_path, cache_dir, "--good-config", "ok.json", "--bad-config", "broken.json",
                     "--", "python", "job.py", "--config", "broken.json")
    assert [c["name"] for c in out["env_diff"]["changes"]] == [
        "zero_optimization.offload_optimizer.device", "zero_optimization.overlap_comm", "steps",
        "zero_optimization.offload_optimizer.nvme_path"]
    assert _culprits(out) == ["zero_optimization.overlap_comm"] and out["verdict"] == "found"
    trials = out["env_diff"]["trials"]
    assert any(t["outcome"] == "skip" for t in trials), trials  # a trial with the device but not its path


@pytest.mark.slow
def test_an_environment_variable_and_no_token_kept_anywhere(tmp_path, cli, cache_dir):
    """Two `env` dumps that differ in the shell's variables, a rotated token and the culprit: the
    culprit is named; the tokens are in no report and no file of the store."""
    _job(tmp_path)
    shutil.copy(tmp_path / "ok.yaml", tmp_path / "broken.yaml")
    common = "LANG=C.UTF-8\nOMP_NUM_THREADS=1\n"
    (tmp_path / "good.env").write_text(f"PWD=/a\nSHLVL=1\nHF_TOKEN={TOKEN}\n{common}TOY_OTHER=1\n")
    (tmp_path / "bad.env").write_text(f"PWD=/b\nSHLVL=2\nHF_TOKEN={TOKEN[::-1]}\n{common}TOY_P2P_DISABLE=1\n"
                                      f"TOY_OTHER=2\nWANDB_API_KEY={TOKEN.upper()}\n")
    out, res = _bisect(cli, tmp_path, cache_dir, "--good-vars", "good.env", "--bad-vars", "bad.env",
                       "-o", "report.md", "--", "python", "job.py", "--config", "broken.yaml")
    assert _culprits(out) == ["TOY_P2P_DISABLE"]
    assert out["message"].startswith("4 changes; culprit env TOY_P2P_DISABLE (unset) -> 1 (")
    assert _ends(out) == ["good vars", "bad vars"]
    shown = {c["name"]: c["describe"] for c in out["env_diff"]["changes"]}
    assert shown["HF_TOKEN"] == "env HF_TOKEN *** -> ***" and "PWD" not in shown
    html = cli("report", "--store", str(tmp_path / "store"), "--format", "html", "-o", "report.html", cwd=tmp_path)
    assert html.exit_code == 0, html.output
    assert "culprit env TOY_P2P_DISABLE (unset) -&gt; 1" in (tmp_path / "report.html").read_text()
    assert "culprit env TOY_P2P_DISABLE (unset) -> 1" in (tmp_path / "report.md").read_text()
    assert ">good vars</text>" in (tmp_path / "report.html").read_text()  # the ladder's end, by name
    table = cli("report", "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert "culprit env TOY_P2P_DISABLE (unset) -> 1" in table.stdout, table.stdout
    for secret in (TOKEN, TOKEN[::-1], TOKEN.upper()):
        assert secret not in res.output
        for path in [*(tmp_path / "store").rglob("*"), tmp_path / "report.md", tmp_path / "report.html"]:
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_a_launcher_flag_under_torchrun(tmp_path, cli, cache_dir):
    """torchrun --nproc_per_node 1 works, 2 breaks the job; --max-restarts differs too, innocently."""
    _job(tmp_path)
    shutil.copy(tmp_path / "ok.yaml", tmp_path / "broken.yaml")
    good = "torchrun --nproc_per_node=1 --max-restarts=0 job.py --config broken.yaml"
    out, _ = _bisect(cli, tmp_path, cache_dir, "--good-command", good, "--accelerator", "cpu",
                     "--", "torchrun", "--nproc_per_node=2", "--max-restarts=1", "job.py", "--config", "broken.yaml")
    assert _culprits(out) == ["--nproc_per_node"]
    assert out["message"].startswith("2 changes; culprit flag --nproc_per_node 1 -> 2 (")
    assert _ends(out) == ["good command", "bad command"]


@pytest.mark.slow
def test_packages_and_settings_in_one_search(tmp_path, cli, cache_dir):
    """A toy package changes (innocent) beside the config: the key is the culprit, found by one search."""
    wh = tmp_path / "wh"
    for v in ("1.0", "2.0"):
        toypkg.build_wheel(wh, v, "ok", dist="dsb-sm-a", module="dsb_sm_a")
    (tmp_path / "good.txt").write_text("dsb-sm-a==1.0\n")
    (tmp_path / "bad.txt").write_text("dsb-sm-a==2.0\n")
    _job(tmp_path)
    (tmp_path / "ok.yaml").write_text(GOOD_YAML.replace("contiguous_gradients: false", "contiguous_gradients: true"))
    (tmp_path / "broken.yaml").write_text(GOOD_YAML.replace("overlap_comm: false", "overlap_comm: true")
                                          .replace("contiguous_gradients: false", "contiguous_gradients: true"))
    out, _ = _bisect(cli, tmp_path, cache_dir, "--good-env", "good.txt", "--bad-env", "bad.txt",
                     "--good-config", "ok.yaml", "--bad-config", "broken.yaml", *offline(wh),
                     "--", "python", "job.py", "--config", "broken.yaml")
    kinds = [(c["name"], c.get("setting")) for c in out["env_diff"]["changes"]]
    assert kinds == [("dsb-sm-a", None), ("zero_optimization.overlap_comm", "config")]
    assert _culprits(out) == ["zero_optimization.overlap_comm"] and out["releases"] == []
    assert _ends(out) == ["good env", "bad env"]  # a package differs: environments, as before


@pytest.mark.parametrize("words, expected", [
    (["--good-config", "ok.yaml", "--bad-config", "gone.yaml"], "gone.yaml: no such file"),
    (["--good-config", "ok.yaml", "--bad-config", "bad.json"], "configs of different formats"),
    (["--good-config", "ok.yaml", "--bad-config", "torn.yaml"], "torn.yaml:3: not valid YAML"),
    (["--good-config", "ok.yaml"], "--good-config and --bad-config go together"),
    (["--good-vars", "good.env", "--bad-vars", "gone.env"], "gone.env: no such file"),
    (["--good-config", "ok.yaml", "--bad-config", "other.yaml"], "the command line does not name"),
    (["--good-vars", "good.env", "--bad-vars", "good.env", "--metric", "loss", "--worse-if", "higher by 1%"],
     "--metric does not go with --good-config, --good-vars or --good-command yet"),
])
def test_bad_settings_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, words, expected):
    _job(tmp_path)
    (tmp_path / "bad.json").write_text("{}")
    (tmp_path / "torn.yaml").write_text("a: 1\nb: [2\n")
    (tmp_path / "other.yaml").write_text("a: 1\n")
    (tmp_path / "good.env").write_text("A=1\n")
    res = cli("bisect", *words, "--store", str(tmp_path / "store"), "--cache-dir", str(tmp_path / "cache"),
              "--", "python", "job.py", "--config", "broken.yaml", cwd=tmp_path)
    assert res.exit_code == 2, res.output
    assert expected in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / "cache").exists()
