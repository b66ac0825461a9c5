"""Where an environment comes from: ``SPEC@DATE``, ``git:REV:PATH``, this environment (envdiff.sources).

The parsing and the bad input that needs no index run in the fast tier; resolving a date runs
real ``uv pip compile --exclude-newer`` against a local PEP 691 index whose toy files carry
PEP 700 upload times (``DatedIndex``), and a real bisection from two dates runs toy jobs.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import DatedIndex, git, requirements_history

import toypkg
from dsbisect.core.errors import InputError
from dsbisect.envdiff.sources import Origin, parse_spec

NOW = datetime(2026, 12, 5, 6, 0, tzinfo=timezone.utc)


def test_specs_parse_to_their_origin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("requirements.in").write_text("deepspeed\n")
    dated = parse_spec("requirements.in@2026-10-01", NOW)
    assert (dated.origin, dated.path) == (Origin.DATED, "requirements.in")
    assert dated.when == datetime(2026, 10, 2, tzinfo=timezone.utc)  # the end of that day
    assert parse_spec("requirements.in@today", NOW).when == NOW
    words = parse_spec("deepspeed transformers>=4.40,<5@2026-10-01T08:00:00Z", NOW)
    assert words.words == ("deepspeed", "transformers>=4.40,<5")
    assert words.when == datetime(2026, 10, 1, 8, tzinfo=timezone.utc)
    git_spec = parse_spec("git:HEAD~20:uv.lock", NOW)
    assert (git_spec.origin, git_spec.rev, git_spec.path, git_spec.when) == (Origin.GIT, "HEAD~20", "uv.lock", None)
    assert parse_spec("git:v1:requirements.in@2026-10-01", NOW).origin is Origin.GIT
    assert parse_spec("good.txt", NOW).origin is Origin.FILE
    Path("odd@name.txt").write_text("a==1\n")
    assert parse_spec("odd@name.txt", NOW).origin is Origin.FILE  # an existing file is a file


@pytest.mark.parametrize("text, words", [
    ("requirements.in@2026-13-01", "is not a date"),
    ("requirements.in@2027-01-01", "is in the future"),
    ("git:HEAD", "give git:REV:PATH"),
    ("deepspeed@https://x/y.whl@2026-10-01", "direct reference"),
])
def test_bad_specs_are_one_line(text, words):
    with pytest.raises(InputError, match=words):
        parse_spec(text, NOW)


def _repo(tmp_path: Path) -> Path:
    return requirements_history(tmp_path, "dsb-hs-a==1.0\n", "dsb-hs-a==2.0\n")


@pytest.mark.parametrize("env, words", [
    ("git:nosuch:requirements.txt", "has no commit 'nosuch'"),
    ("git:HEAD~1:missing.txt", "missing.txt is not in commit HEAD~1"),
    ("requirements.txt@2026-10-01", "a wheelhouse (--find-links) cannot answer a date"),
    ("requirements.txt@2026-13-40", "is not a date"),
])
def test_bad_sources_exit_2_and_create_nothing(tmp_path, cli, env, words):
    repo = _repo(tmp_path)
    (repo / "x.py").write_text("pass\n")
    res = cli("bisect", "--good-env", env, "--bad-env", "requirements.txt", "--offline", "--find-links",
              str(tmp_path), "--store", str(tmp_path / "store"), "--cache-dir", str(tmp_path / "cache"),
              "--", "python", "x.py", cwd=repo)
    assert res.exit_code == 2, res.output
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "store").exists() and not (tmp_path / "cache").exists()


def test_a_file_from_history_is_read_as_it_was(tmp_path, monkeypatch):
    from dsbisect.envdiff.sources import Resolving, resolve_env
    from dsbisect.envs.uv import Uv

    repo = _repo(tmp_path)
    how = Resolving(Uv(tmp_path / "uv"), "python3", repo=repo, now=NOW)
    got = resolve_env(parse_spec("git:HEAD~1:requirements.txt", NOW), how)
    assert [p.requirement for p in got.environment.pins] == ["dsb-hs-a==1.0"]
    assert got.environment.source == "git:HEAD~1:requirements.txt" and got.freeze == "dsb-hs-a==1.0\n"


# ------------------------------------------------------------------ against a dated index

DAYS = {"a": {"1.0": "2026-06-01", "1.1": "2026-08-01", "1.2": "2026-10-01", "1.3": "2026-11-01"},
        "b": {"1.0": "2026-06-01", "2.0": "2026-09-01"}}
# dsb-hd-a is the toy the repro imports (dsb_toy): 1.1 breaks it (rank 0 raises), 1.3 fixes it
BEHAVIOUR = {("a", "1.1"): "raise", ("a", "1.2"): "raise"}


@pytest.fixture
def dated_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("dated")
    index = DatedIndex(root / "index")
    for name, versions in DAYS.items():
        for version, day in versions.items():
            dist = f"dsb-hd-{name}"
            module = "dsb_toy" if name == "a" else dist.replace("-", "_")
            wheel = toypkg.build_wheel(root / "wh", version, BEHAVIOUR.get((name, version), "ok"), dist=dist,
                                       module=module)
            index.add(wheel, day)
    yield index
    index.close()


def _resolve(tmp_path, index, text):
    from dsbisect.core.model import IndexOptions
    from dsbisect.envdiff.sources import Resolving, resolve_env
    from dsbisect.envs.uv import Uv
    import sys

    how = Resolving(Uv(tmp_path / "uv", IndexOptions(index_url=index.url)), sys.executable, now=NOW)
    return resolve_env(parse_spec(text, NOW), how)


@pytest.mark.slow
def test_a_date_resolves_what_was_uploaded_by_then(tmp_path, dated_index, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("requirements.in").write_text("dsb-hd-a\ndsb-hd-b\n")
    got = _resolve(tmp_path, dated_index, "requirements.in@2026-08-01")
    assert got.freeze == "dsb-hd-a==1.1\ndsb-hd-b==1.0\n"  # 1.1 uploaded that day counts; b 2.0 came later
    assert _resolve(tmp_path, dated_index, "dsb-hd-a<1.3@today").freeze == "dsb-hd-a==1.2\n"
    Path("pyproject.toml").write_text('[project]\nname = "mine"\nversion = "0"\ndependencies = ["dsb-hd-b"]\n')
    assert _resolve(tmp_path, dated_index, "pyproject.toml@2026-10-01").freeze == "dsb-hd-b==2.0\n"
    with pytest.raises(InputError, match="dsb-hd-a: nothing that fits was uploaded by then"):
        _resolve(tmp_path, dated_index, "requirements.in@2026-05-01")  # before any release of it
    with pytest.raises(InputError, match="nothing resolves as of 2026-08-02"):
        _resolve(tmp_path, dated_index, "dsb-hd-b>=2@2026-08-01")  # a requirement that did not exist then


@pytest.mark.slow
def test_bisect_from_two_dates_answers_with_the_remedy_first(tmp_path, dated_index, cli, cache_dir):
    """requirements.in resolved on 2026-07-01 (a 1.0, b 1.0) and on 2026-10-15 (a 1.2, b 2.0), a
    2-rank toy job: the culprit is a, first bad 1.1; the pin a==1.0 and the fix (1.3) are run."""
    (tmp_path / "requirements.in").write_text("dsb-hd-a\ndsb-hd-b\n")
    toypkg.write_repro(tmp_path)
    res = cli("bisect", "--good-env", "requirements.in@2026-07-01", "--bad-env", "requirements.in@2026-10-15",
              "--script", "toy_repro.py", "--nproc", "2", "--accelerator", "cpu", "--regress-on", "fail",
              "--index-url", dated_index.url, "--cache-dir", str(cache_dir), "--store", str(tmp_path / "store"),
              "-q", "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["env_diff"]["culprits"] == ["dsb-hd-a"]
    assert (out["releases"][0]["last_good"], out["releases"][0]["first_bad"]) == ("1.0", "1.1")
    [fix] = out["remedy"]
    assert (fix["pin"], fix["pin_holds"], fix["latest"], fix["fixed_in"], fix["still_bad"]) == \
        ("dsb-hd-a==1.0", True, "1.3", "1.3", False)
    assert fix["lines"][0].startswith("pin: dsb-hd-a==1.0   (uv pip install 'dsb-hd-a==1.0'")
    pin_runs = {s["version"]: s["outcome"] for s in fix["pin_bisection"]["steps"]}
    assert pin_runs == {"1.0": "pass", "1.1": "fail"}  # others held at the bad env (b 2.0)
    assert fix["pin_bisection"]["pins"] == ["dsb-hd-b==2.0"]
    kept = list((tmp_path / "store" / "bisections").glob("*/*.txt"))
    assert sorted(p.read_text() for p in kept) == ["dsb-hd-a==1.0\ndsb-hd-b==1.0\n", "dsb-hd-a==1.2\ndsb-hd-b==2.0\n"]
    text = cli("bisect", "--good-env", "requirements.in@2026-07-01", "--bad-env", "requirements.in@2026-10-15",
               "--script", "toy_repro.py", "--nproc", "2", "--accelerator", "cpu", "--regress-on", "fail",
               "--index-url", dated_index.url, "--cache-dir", str(cache_dir), "--store", str(tmp_path / "store"),
               "-q", cwd=tmp_path)
    assert text.exit_code == 0 and text.stdout.lstrip().startswith("pin: dsb-hd-a==1.0"), text.stdout
    assert text.stdout.index("fixed in dsb-hd-a 1.3: upgrade") < text.stdout.index("2 changes; culprit")


def test_a_held_package_holds_what_it_requires_in_the_base():
    """--hold torch with a date: torch's own requirements stay at the base's versions too (a date
    before today's sympy would otherwise leave the held torch no resolution)."""
    from dsbisect.envdiff.sources import held_pins
    from dsbisect.envs.base import inspect_base

    base = inspect_base(None)
    held = dict(p.split("==") for p in held_pins(["torch"], base))
    assert held["torch"] == base.version_of("torch")
    assert held["sympy"] == base.version_of("sympy") and "typing-extensions" in held
    assert "numpy" not in held  # torch does not require it


def test_a_uv_lock_from_history_is_read_by_the_lock_reader(tmp_path):
    """git:REV:uv.lock: the lock as it was, parsed by envdiff's lock reader (kept under its own
    name, so it is told as a lock), not the one in the work tree."""
    from dsbisect.envdiff.pins import EnvFormat
    from dsbisect.envdiff.sources import Resolving, resolve_env
    from dsbisect.envs.uv import Uv

    repo = _repo(tmp_path)
    lock = ('version = 1\nrequires-python = ">=3.10"\n\n[[package]]\nname = "dsb-hs-a"\nversion = "{v}"\n'
            'source = {{ registry = "https://pypi.org/simple" }}\n')
    (repo / "uv.lock").write_text(lock.format(v="1.5"))
    git(repo, "add", "uv.lock")
    git(repo, "commit", "-q", "-m", "lock")
    (repo / "uv.lock").write_text(lock.format(v="9.9"))  # the work tree moved on; the commit did not
    got = resolve_env(parse_spec("git:HEAD:uv.lock", NOW), Resolving(Uv(tmp_path / "uv"), "python3", repo=repo))
    assert got.environment.format is EnvFormat.UV_LOCK
    assert got.freeze == "dsb-hs-a==1.5\n"


def test_this_environment_as_the_bad_end_leaves_out_what_only_the_base_has():
    """Layered trials see the base's packages in every venv: an 'added' package of this
    environment is no change a trial could make, so it is left out (and said)."""
    from dsbisect.envdiff.environments import Environment
    from dsbisect.envdiff.pins import make_pin
    from dsbisect.envdiff.sources import CURRENT, EnvSpec, Resolved, without_base_only

    good = Environment("r.in@2026-10-01", (make_pin("a", "1.0"),))
    here = Environment(CURRENT, (make_pin("a", "2.0"), make_pin("pytest", "9.0"), make_pin("rich", "14.0")))
    got = without_base_only(Resolved(EnvSpec(CURRENT, Origin.CURRENT), here, "freeze"), good)
    assert [p.requirement for p in got.environment.pins] == ["a==2.0"]
    assert got.freeze == "freeze" and got.notes[0].startswith("2 package(s) only current has")
