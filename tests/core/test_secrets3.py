"""Secrets, third battery (issue 36): netrc lines and PEM private keys reached the Markdown issue
body, ``show``, ``run``'s output and the kept rank logs; a ``--pin`` URL's credentials were
stored raw in run.json and SQLite.  The other shapes of the same classes: every netrc form,
every PEM private key kind (and its halves when a log is scrubbed in blocks), a URL's signing
parameters, more token formats; and credentials at rest in the store and the venv cache.
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
from dsbisect.core.model import Point

V = "Zq8vLr2pX7w"
B64 = "MIIEowIBAAKCAQEAx1y2z3Q9mVb" + "A" * 40  # a body line no format rule knows


@pytest.mark.parametrize("text", [
    f"machine api.example.com login bob password {V}",
    f"machine api.example.com\n  login bob\n  password {V}\n",
    f"default login anonymous password {V}",
    f"machine h login u account {V} password x{V}",
    f"machine h port 443 login u passwd {V}",
    f"RuntimeError: login failed: machine h login u password {V}exc",
    f"'machine api.example.com login bob password {V}' (from ~/.netrc)",
    f"  password {V}",
    f"[pypi]\nusername = __token__\npassword = {V}\n",
    f"[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = {V}\n",
    f"X-Auth-Token: {V}", f"Cookie: session={V}", f"Proxy-Authorization: Basic {V}==",
    f"https://bucket.s3.amazonaws.com/o?X-Amz-Credential=AKID%2F{V}&X-Amz-Signature={V}",
    f"https://acct.blob.core.windows.net/c/b?sv=2022&sig={V}%3D",
    f"https://storage.googleapis.com/b/o?X-Goog-Signature={V}",
    f"git clone https://oauth2:{V}@gitlab.example.com/g/r.git",
    f"pkg @ https://alice:{V}@wheels.example/pkg.whl?token={V}",
])
def test_more_secret_shapes_are_masked(text):
    out = R.redact(text)
    assert V not in out and R.HIDDEN in out, out


@pytest.mark.parametrize("kind", ["RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY", "ENCRYPTED PRIVATE KEY",
                                  "OPENSSH PRIVATE KEY", "DSA PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])
@pytest.mark.parametrize("form", ["whole", "headers", "unterminated", "json", "indented"])
def test_every_pem_private_key_is_masked(kind, form):
    body = f"{B64}\n{B64[::-1]}\nAb+/cD==\n"
    if form == "headers":
        body = f"Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0123456789ABCDEF\n\n{body}"
    block = f"-----BEGIN {kind}-----\n{body}-----END {kind}-----\n"
    if form == "unterminated":
        block = block[: block.index("-----END")]
    if form == "indented":
        block = "".join(f"    {ln}\n" for ln in block.splitlines())
    text = f"before\n{block}after: loss 0.1\n"
    if form == "json":
        text = json.dumps({"key": block, "other": 1})
    out = R.redact(text)
    assert B64 not in out and B64[::-1] not in out and json.dumps(B64)[1:-1] not in out, out
    assert f"BEGIN {kind}" in out and R.HIDDEN in out
    if form not in ("json",):
        assert "after: loss 0.1" in out  # the rest of the log stays


def test_a_key_cut_in_two_by_a_scrub_block_is_masked_in_both_halves(tmp_path):
    """A rank log is scrubbed 1 MB at a time: a key across the boundary loses both halves."""
    log = tmp_path / "rank0.log"
    lines = [f"{B64[:60]}{i:04d}" for i in range(60)]
    filler = "x" * 80 + "\n"
    head = filler * ((1 << 20) // len(filler) - 3)
    log.write_text(head + "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines)
                   + "\n-----END RSA PRIVATE KEY-----\ndone\n")
    assert R.scrub_file(log, block=1 << 20)
    text = log.read_text()
    assert not any(ln in text for ln in lines), [ln for ln in lines if ln in text][:3]
    assert text.endswith("-----END RSA PRIVATE KEY-----\ndone\n")


@pytest.mark.parametrize("token", [
    "pypi-AgEIcHlwaS5vcmcCJDEyMzQ1Njc4LTEyMzQtMTIzNC0xMjM0LTEyMzQ1Njc4OTAxMgACKlszLCJ4eXoiXQ",
    "npm_" + "aB3" * 12, "sk_live_" + "x9Y" * 8, "rk_test_" + "Qw1" * 8, "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "api_org_" + "Zz" * 15])
def test_more_token_formats_are_masked_anywhere(token):
    assert token not in R.redact(f"using {token} now") and R.redact(f"using {token} now") == "using *** now"


@pytest.mark.parametrize("text", [
    "the password is wrong", "machine learning models", "login page loaded", "account of the run",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----",
    "https://pypi.org/simple/torch/?format=json&page=2", "password hashing with bcrypt",
    "transformers @ git+https://github.com/huggingface/transformers@a1b2c3", "signature: rank 1 waits in all_reduce"])
def test_ordinary_text_of_those_classes_is_left_alone(text):
    assert R.redact(text) == text


def test_keys_hold_no_credential_and_a_rotated_one_keeps_them(tmp_path):
    from dsbisect.envs.venvs import EnvSpec
    from dsbisect.run.matrix import command_case

    def pin(pw: str) -> str:
        return f"pkg @ https://alice:{pw}@wheels.example/pkg-1.0-py3-none-any.whl?token={pw}"

    a, b = (Point(versions=(("x", "1"),), pins=(pin(p),)) for p in ("first-Secret-1", "second-Secret-2"))
    assert a.key == b.key
    specs = [EnvSpec("layered", "p", "b", (pin(p),), None, (), ()) for p in ("first-Secret-1", "second-Secret-2")]
    assert specs[0].key == specs[1].key and "first-Secret-1" not in json.dumps(specs[0].shown())
    (tmp_path / "train.py").write_text("pass\n")
    keys = {command_case(["python", "train.py", "--data", f"https://u:{p}@h/d"], tmp_path).key
            for p in ("first-Secret-1", "second-Secret-2")}
    assert len(keys) == 1


# ------------------------------------------------------------ the goal test

LEAK = '''\
import sys
import dsb_toy
v = open("v.txt").read().strip()
print(f"machine api.example.com login bob password {v}n1")
print(f"machine h\\n  login bob\\n  password {v}n2")
print("-----BEGIN OPENSSH PRIVATE KEY-----")
for i in range(8):
    print(f"{v}pem{i:02d}" + "A" * 50)
print("-----END OPENSSH PRIVATE KEY-----")
print(f"[pypi]\\nusername = __token__\\npassword = {v}pypirc")
print(f"aws_secret_access_key = {v}aws")
print(f"https://b.s3.amazonaws.com/o?X-Amz-Signature={v}sig&x=1")
print(f"x-auth-token: {v}hdr")
sys.stderr.write(f"could not reach https://alice:{v}url@h/x\\n")
if dsb_toy.__version__ == "1.1.0":
    raise RuntimeError(f"login failed: machine h login u password {v}exc")
'''


def _dsbisect(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsbisect", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_no_netrc_key_or_pin_credential_reaches_any_output_or_any_file(tmp_path, simple_index):
    dist, helper = f"dsb-leak{secrets.token_hex(3)}", f"dsb-help{secrets.token_hex(3)}"
    for version, behaviour in (("1.0.0", "ok"), ("1.1.0", "ok")):
        simple_index.add(toypkg.build_wheel(tmp_path / "w", version, behaviour, dist=dist))
    helper_wheel = toypkg.build_wheel(tmp_path / "w", "1.0.0", "ok", dist=helper)
    simple_index.add(helper_wheel)
    v = "S3" + secrets.token_hex(6)
    pin_pw, pin_tok = "pw" + secrets.token_hex(6), "tk" + secrets.token_hex(6)
    base = simple_index.url.removesuffix("simple/")
    pin = f"{helper} @ {base.replace('http://', f'http://alice:{pin_pw}@')}files/{helper_wheel.name}?token={pin_tok}"
    work, store, cache = tmp_path / "work", tmp_path / "store", tmp_path / "cache"
    work.mkdir()
    (work / "leak.py").write_text(LEAK)
    (work / "v.txt").write_text(v)
    env = dict(os.environ, COLUMNS="200", UV_CACHE_DIR=str(cache / "uv"))
    common = ["--store", str(store), "--cache-dir", str(cache), "--index-url", simple_index.url,
              "--accelerator", "cpu", "--nproc", "1"]
    outputs = [_dsbisect("run", "--versions", f"{dist}=1.0.0,1.1.0", "--pin", pin, *common, "--format", "markdown",
                         "-o", str(tmp_path / "issue.md"), "--", "python", "leak.py", cwd=work, env=env)]
    assert outputs[0].returncode == 0, outputs[0].stderr
    assert "PASS" in outputs[0].stdout and "RuntimeError" in outputs[0].stdout, outputs[0].stdout
    for args in (["report"], ["report", "--format", "json"], ["report", "--format", "markdown"], ["show", "1"],
                 ["show", "2"], ["show", "2", "--format", "html"], ["report", "--format", "html"]):
        res = _dsbisect(*args, "--store", str(store), cwd=work, env=env)
        assert res.returncode == 0, (args, res.stderr)
        outputs.append(res)
    shown = "\n".join(r.stdout + r.stderr for r in outputs) + (tmp_path / "issue.md").read_text()
    assert "login bob password ***" in shown and "BEGIN OPENSSH PRIVATE KEY" in shown  # it was printed, masked
    store_files = [p for p in store.rglob("*") if p.is_file()]
    markers = [p for p in cache.rglob("dsbisect-env.json")]
    assert any(p.name == "run.json" for p in store_files) and markers
    for value in [v, pin_pw, pin_tok]:
        assert value not in shown, f"{value} shown"
        for p in store_files + markers:
            assert value.encode() not in p.read_bytes(), f"{value} in {p}"


@pytest.mark.parametrize("text", [
    "-----BEGIN PRIVATE KEY-----\n" * 20000,
    ("QUJDREVGR0hJSktMTU5PUFFSU1RVVldY\n" * 5000 + "-----END PRIVATE KEY-----\n") * 4,
    "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY\n-----END PRIVATE KEY-----\n" * 20000,
    ("x" * 80 + "\n") * 13000 + "-----BEGIN RSA PRIVATE KEY-----\n" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY\n" * 30,
])
def test_texts_made_of_key_markers_are_masked_whole(text):
    """A rank that prints markers by the thousand (the first form of the tail rule, a pattern,
    took minutes on a 1 MB block of base64-like lines): every base64 line of a key is gone."""
    out = R.redact(text)
    assert "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY" not in out
    assert out.count("-----END") == text.count("-----END") and out.count("-----BEGIN") == text.count("-----BEGIN")
