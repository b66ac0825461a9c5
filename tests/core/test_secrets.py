"""Secrets never reach what dsbisect shows or keeps: by value, by shape, by known format.

The goal test plants secrets in the environment, on the command line, in a config file the
command names and in an index URL, runs a script that prints them in many shapes and fails
with the password in its exception, and then greps every output and every file written under
the store and the cache for each planted value.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

import toypkg
from dsbisect.core import redact as R

HIDDEN = "***"


@pytest.mark.parametrize("name", [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "MY_DB_PASS",
    "PASSWORD", "db_password", "hubToken", "apiKey", "api-key", "x-api-key", "Authorization", "COMET_API_KEY",
    "SLACK_WEBHOOK_SECRET", "hub_token", "token", "passwd", "PRIVATE_KEY", "API_KEY_VALUE", "client_secret"])
def test_secret_looking_names(name):
    assert R.secret_name(name)


@pytest.mark.parametrize("name", [
    "KEYBOARD", "MONKEY", "TOKENIZERS_PARALLELISM", "SSH_AUTH_SOCK", "KeyError", "pad_token_id", "eos_token",
    "bos_token", "max_tokens", "PWD", "OLDPWD", "env_key", "case_key", "key", "PATH", "PASSES", "AUTHOR",
    "TOKENS", "HOTKEYS", "sort_key", "secretary", "passage", "OMP_NUM_THREADS"])
def test_names_that_only_look_alike(name):
    assert not R.secret_name(name)


V = "Zq8vLr2pX7"  # a value no format rule knows: only the shape can hide it


@pytest.mark.parametrize("text", [
    f"{{'HF_TOKEN': '{V}', 'x': 1}}", f'{{"api_key": "{V}"}}', f"api_key: {V}", f"HF_TOKEN = '{V}'",
    f"--hub_token {V}", f"--hub-token={V}", f"--api_key {V} --lr 1", f"--password '{V}'", f"Authorization: Bearer {V}",
    f"authorization: Basic {V}==", f"curl -H 'Authorization: token {V}'", f"password: {V}", f"DB_PASS={V}",
    f"https://user:{V}@pypi.example/simple", f"export WANDB_API_KEY=\"{V}\"", f"os.environ['HF_TOKEN'] = '{V}'",
    f"hubToken={V}", f"comet.api_key = {V}", f"[auth]\npassword = {V}\n", f"x = Bearer {V}"])
def test_secret_shapes_are_masked(text):
    out = R.redact(text)
    assert V not in out and HIDDEN in out


@pytest.mark.parametrize("token", [
    "hf_" + "a1B2" * 9, "ghp_" + "Xy9" * 12, "gho_" + "Q" * 36, "github_pat_11ABCDEFG0" + "x" * 40,
    "sk-" + "Ab3" * 16, "sk-proj-" + "Zz9_" * 10, "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "xoxb-1234567890-abcdefghij", "glpat-" + "x1Y2" * 5])
def test_known_token_formats_are_masked_anywhere(token):
    assert token not in R.redact(f"loaded {token} ok") and R.redact(f"loaded {token} ok").startswith("loaded ***")


@pytest.mark.parametrize("text", [
    "tokenizers==0.15.2, huggingface-hub>=0.20, accelerate!=1.0", "KeyError: 'model.layers.0'",
    "TOKENIZERS_PARALLELISM=false", "at 12:30:11 rank 0: NCCL timeout", "pad_token_id=0 eos_token: </s>",
    "disk-usage 40 GB", "key: 3fa9c0, env_key=ab12cd", "https://pypi.org/simple", "MASTER_ADDR=10.0.0.1"])
def test_ordinary_text_is_left_alone(text):
    assert R.redact(text) == text


def test_values_are_masked_wherever_they_appear_in_every_quoting(monkeypatch):
    pw = 'p"w\\ord-9f3a'
    monkeypatch.setenv("MY_DB_PASS", pw)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "falsey-value")  # not a secret: not masked
    for shown in (f"could not connect with {pw}", json.dumps({"e": f"x {pw}"}), repr([pw])):
        assert pw not in R.redact(shown) and json.dumps(pw)[1:-1] not in R.redact(shown) \
            and repr(pw)[1:-1] not in R.redact(shown)
    assert R.redact("falsey-value") == "falsey-value"
    found = R.secret_values({"HF_TOKEN": "abcdef12", "X_URL": "https://u:idxpass1@h/s", "TOKENIZERS_PARALLELISM": "true"},
                          ["python", "x.py", "--hub_token", "hubval12", "--api-key=apival12", "--password", "-v",
                           "WANDB_API_KEY=wandbval1"])
    assert {"abcdef12", "idxpass1", "hubval12", "apival12", "wandbval1"} <= found and "true" not in found \
        and "-v" not in found


@pytest.mark.parametrize("name, text", [
    ("ds_config.json", '{\n  "train_batch_size": 8,\n  "comet": {"enabled": true, "api_key": "CMT-a9"},\n'
                       '  "hub_token": "HUB-b7", "password": 12345678\n}\n'),
    ("config.yaml", "model: gpt2\ncomet:\n  api_key: CMT-a9\nhub_token: 'HUB-b7'\npassword: 12345678\n"),
    ("pyproject.toml", '[tool.x]\napi_key = "CMT-a9"\nhub_token="HUB-b7"\npassword = 12345678\n'),
    ("setup.cfg", "[auth]\napi_key = CMT-a9\nhub_token: HUB-b7\npassword=12345678\n"),
])
def test_config_copies_are_redacted_key_wise(tmp_path, name, text):
    """A copy of a config the command names is masked under its secret-looking keys, whatever the format."""
    (tmp_path / "inputs").mkdir()
    copy = tmp_path / "inputs" / f"00-{name}"
    copy.write_text(text)
    assert R.scrub_folder(tmp_path) == []
    kept = copy.read_text()
    for v in ("CMT-a9", "HUB-b7", "12345678"):
        assert v not in kept, kept
    assert "train_batch_size" in kept or "model: gpt2" in kept or "[tool.x]" in kept or "[auth]" in kept
    if name.endswith(".json"):
        assert json.loads(kept)["train_batch_size"] == 8  # still JSON: the shape is kept


def test_records_are_redacted_key_wise_but_keep_their_own_keys():
    tree = {"key": "0f3a9b", "env_key": "ab12", "hub_token": "HUB-b7", "n": 3,
            "command": ["python", "x.py", "--hub_token", "HUB-b7zz"], "nested": {"password": 1234}}
    out = R.redact_tree(tree)
    assert out["key"] == "0f3a9b" and out["env_key"] == "ab12" and out["n"] == 3
    assert out["hub_token"] == HIDDEN and out["nested"]["password"] == HIDDEN
    assert out["command"] == ["python", "x.py", "--hub_token", "HUB-b7zz"] or "HUB-b7zz" not in json.dumps(out)


def test_a_binary_file_is_left_as_it_is(tmp_path):
    data = b"\0\1pickle hf_" + b"a1B2" * 9
    (tmp_path / "nccl_trace_rank_0").write_bytes(data)
    R.scrub_folder(tmp_path)
    assert (tmp_path / "nccl_trace_rank_0").read_bytes() == data


def test_the_venv_marker_keeps_no_index_credentials(tmp_path):
    from dsbisect.envs.venvs import EnvManager
    from dsbisect.core.model import EnvOptions, IndexOptions, Point

    mgr = EnvManager(tmp_path, EnvOptions(), IndexOptions(index_url="https://__token__:idx-Secret-42@mirror/simple",
                                                          extra_index_urls=("https://u:xtra-Secret-43@h/s",)))
    spec = mgr.spec_for(Point(versions=(("dsb-toy", "1.0.0"),)))
    shown = json.dumps(spec.__dict__)
    assert "idx-Secret-42" not in shown and "xtra-Secret-43" not in shown and "https://***@mirror/simple" in shown
    assert mgr.index.index_url.endswith(":idx-Secret-42@mirror/simple")  # uv still gets the credentials


# ------------------------------------------------------------ the goal test

LEAK = '''\
import json, os, sys
import dsb_toy
tok, pw = os.environ["HF_TOKEN"], os.environ["MY_DB_PASS"]
hub = sys.argv[sys.argv.index("--hub_token") + 1]
api = sys.argv[sys.argv.index("--api_key") + 1]
cfg = json.load(open(sys.argv[sys.argv.index("--deepspeed") + 1]))
print({"HF_TOKEN": tok, "MY_DB_PASS": pw})
print(json.dumps({"api_key": api, "hub_token": hub}))
print(f"api_key: {api}")
print(f"HF_TOKEN = '{tok}'")
print(f"Authorization: Bearer {tok}")
print(f"password: {pw}")
print(f"DB_PASS={pw}")
print(sys.argv)
print("raw values:", tok, pw, hub, api, cfg["train_batch_size"])
print(dict(os.environ))
sys.stderr.write(f"stderr sees {tok} and {pw}\\n")
if dsb_toy.__version__ == "1.1.0":
    raise RuntimeError(f"could not connect to the database with {pw}")
'''


def _dsbisect(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsbisect", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_no_planted_secret_reaches_any_output_or_any_file(tmp_path, simple_index):
    dist = f"dsb-leak{secrets.token_hex(3)}"  # fresh names: uv treats find-links files as immutable
    for version, behaviour in (("1.0.0", "ok"), ("1.1.0", "ok")):
        simple_index.add(toypkg.build_wheel(tmp_path / "w", version, behaviour, dist=dist))
    planted = {
        "HF_TOKEN": "hf_" + secrets.token_hex(17),
        "MY_DB_PASS": "pw-" + secrets.token_hex(8),
        "--hub_token": "hf_" + secrets.token_hex(18),
        "--api_key": "ak" + secrets.token_hex(8),
        "comet api_key": "cmt" + secrets.token_hex(8),
        "hub_token in the config": "ht" + secrets.token_hex(8),
        "index password": "ix" + secrets.token_hex(8),
    }
    work = tmp_path / "work"
    work.mkdir()
    (work / "leak.py").write_text(LEAK)
    (work / "ds_config.json").write_text(json.dumps({
        "train_batch_size": 2, "comet": {"enabled": True, "api_key": planted["comet api_key"]},
        "hub_token": planted["hub_token in the config"]}, indent=2))
    store, cache = tmp_path / "store", tmp_path / "cache"
    env = dict(os.environ, HF_TOKEN=planted["HF_TOKEN"], MY_DB_PASS=planted["MY_DB_PASS"], COLUMNS="200",
               UV_CACHE_DIR=str(cache / "uv"))
    index_url = simple_index.url.replace("http://", f"http://__token__:{planted['index password']}@")
    common = ["--store", str(store), "--cache-dir", str(cache), "--index-url", index_url, "--accelerator", "cpu",
              "--nproc", "1"]
    command = ["--", "python", "leak.py", "--deepspeed", "ds_config.json", "--hub_token", planted["--hub_token"],
               "--api_key", planted["--api_key"]]
    outputs = []
    res = _dsbisect("run", "--versions", f"{dist}=1.0.0,1.1.0", *common, "--format", "markdown",
                    "-o", str(tmp_path / "issue.md"), *command, cwd=work, env=env)
    outputs.append(res)
    assert res.returncode == 0, res.stderr
    assert "❌ FAIL" in res.stdout and "✅ PASS" in res.stdout and "RuntimeError" in res.stdout  # it did run
    res = _dsbisect("bisect", dist, "1.0.0", "1.1.0", "--regress-on", "fail", *common, *command, cwd=work, env=env)
    outputs.append(res)
    assert res.returncode == 0 and "1.1.0" in res.stdout, res.stdout + res.stderr
    for args in (["report"], ["report", "--format", "json"], ["report", "--format", "markdown"], ["show", "1"],
                 ["show", "2"], ["log"], ["report", "--format", "html"], ["show", "2", "--format", "html"]):
        res = _dsbisect(*args, "--store", str(store), cwd=work, env=env)
        assert res.returncode == 0, (args, res.stderr)
        outputs.append(res)
    shown = "\n".join(r.stdout + r.stderr for r in outputs) + (tmp_path / "issue.md").read_text()
    assert "api_key" in shown and "ds_config.json" in shown  # the config copy is shown, masked
    files = [p for root in (store, cache) for p in root.rglob("*") if p.is_file()]  # uv's cache too
    assert any(p.name == "run.json" for p in files) and any(p.name == "dsbisect-env.json" for p in files)
    assert any(p.parent.name == "bisections" for p in files)
    for what, value in planted.items():
        assert value not in shown, f"{what} shown"
        for p in files:
            assert value.encode() not in p.read_bytes(), f"{what} in {p}"


def test_a_case_key_does_not_hang_on_a_token(tmp_path):
    """Runs of one command with a rotated token, or replayed from a log that shows ***, are runs
    of one case; the token's value never enters the key's input."""
    from dsbisect.run.matrix import command_case

    (tmp_path / "train.py").write_text("pass\n")

    def key(token: str) -> str:
        return command_case(["python", "train.py", "--hub_token", token, f"--api-key={token}", "--lr", "1"],
                            tmp_path).key

    assert key("hf_" + "a" * 34) == key("hf_" + "b" * 34) == key("***")
    assert command_case(["python", "train.py", "--lr", "2"], tmp_path).key != \
        command_case(["python", "train.py", "--lr", "1"], tmp_path).key


def test_a_count_under_a_secret_looking_key_is_not_a_secret():
    """A bisect step's ``counts: {"pass": 1}`` was shown as ``{"pass": "***"}`` (the full suite of the
    merged tree: test_bisect_cli's --confirm test); a string under it, or a number under any other
    secret-looking key, is still hidden."""
    from dsbisect.core.redact import HIDDEN, redact_tree

    got = redact_tree({"counts": {"pass": 1, "hang": 2}, "pass": "hunter22", "db_pass": 12345678, "password": True})
    assert got["counts"] == {"pass": 1, "hang": 2}
    assert got["pass"] == HIDDEN and got["db_pass"] == HIDDEN and got["password"] is True
