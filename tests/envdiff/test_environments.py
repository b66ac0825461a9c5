"""Reading environments (freezes, requirements, uv.lock, pylock.toml, venvs) and diffing them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from dsbisect.envdiff.environments import Change, Kind, apply, diff, read_environment
from dsbisect.core.errors import InputError
from dsbisect.envdiff.pins import EnvFormat, Environment, Pin

# The shape of a real `pip freeze` (pip 23, python 3.11): a git editable with no remote gets a
# comment naming it, names keep their case (Jinja2, MarkupSafe), versions their local part.
PIP_FREEZE = """\
annotated-types==0.8.0
deepspeed==0.19.8
# Editable Git install with no remote (dsbisect==0.1.1)
-e /src/dsbisect
Jinja2==3.1.6
MarkupSafe==3.0.4
numpy==2.4.6
PyYAML==6.0.2
torch==2.13.0+cpu
typing_extensions==4.15.0
"""

# `uv pip freeze`: editables as file:// URLs without a comment, pip itself listed.
UV_FREEZE = """\
annotated-types==0.8.0
deepspeed==0.19.8
-e file:///src/dsbisect
jinja2==3.1.6
markupsafe==3.0.4
numpy==2.4.6
pip==23.2.1
pyyaml==6.0.2
torch==2.13.0+cpu
typing-extensions==4.15.0
"""


def write(tmp_path: Path, text: str, name: str = "env.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def pins_of(tmp_path: Path, text: str, name: str = "env.txt") -> dict[str, str]:
    return {p.name: p.requirement for p in read_environment(write(tmp_path, text, name)).pins}


def test_pip_freeze_and_uv_pip_freeze_of_one_env_are_the_same_environment(tmp_path):
    a = read_environment(write(tmp_path, PIP_FREEZE, "pip.txt"))
    b = read_environment(write(tmp_path, UV_FREEZE, "uv.txt"))
    assert [p.name for p in a.pins] == sorted(p.name for p in a.pins)
    assert a.get("PyYAML") == a.get("pyyaml") == Pin("pyyaml", "6.0.2")
    assert a.get("typing_extensions").requirement == "typing-extensions==4.15.0"
    assert a.get("dsbisect") == Pin("dsbisect", None, "file:///src/dsbisect", editable=True)
    assert b.get("dsbisect") == a.get("dsbisect")
    assert b.get("pip") is None and any("pip 23.2.1 left out" in n for n in b.notes)
    assert diff(a, b) == ()
    assert a.format is EnvFormat.REQUIREMENTS and a.python is None


@pytest.mark.parametrize("text, expected", [
    # comments, blank lines, trailing comments; a URL's #fragment is not a comment
    ("# a comment\n\nfoo==1.0  # pinned for #123\n", {"foo": "foo==1.0"}),
    ("bar @ https://example.org/bar-2.0.tar.gz#sha256=abc\n", {"bar": "bar @ https://example.org/bar-2.0.tar.gz#sha256=abc"}),
    # continuation lines and --hash options (pip-compile --generate-hashes, uv export)
    ("foo==1.0 \\\n    --hash=sha256:aaaa \\\n    --hash=sha256:bbbb\nbar==2.0\n", {"foo": "foo==1.0", "bar": "bar==2.0"}),
    # index options are remembered, not pins
    ("--index-url https://user:secret@pypi.example/simple\n-i https://x/simple\n--extra-index-url https://y/simple\n"
     "--find-links ./wheels\n-f /w\n--no-index\n--trusted-host x\nfoo==1.0\n", {"foo": "foo==1.0"}),
    # extras, === and the canonical name
    ("Foo.Bar[Extra_One]==1.0\nbaz===2.0.post1\n", {"foo-bar": "foo-bar[extra-one]==1.0", "baz": "baz==2.0.post1"}),
    # a git editable from pip freeze, an editable git install with #egg
    ("-e git+https://github.com/org/repo.git@0123abcd#egg=my_pkg\n",
     {"my-pkg": "my-pkg @ git+https://github.com/org/repo.git@0123abcd#egg=my_pkg"}),
    # "# Editable install with no version control" names the -e line after it
    ("# Editable install with no version control (proj==0.3.0)\n-e /home/u/proj\n", {"proj": "proj @ file:///home/u/proj"}),
    # name @ file:// (pip freeze of a wheel installed from a path), bare wheel paths and URLs
    ("toy @ file:///tmp/w/toy-1.0-py3-none-any.whl\n", {"toy": "toy @ file:///tmp/w/toy-1.0-py3-none-any.whl"}),
    ("/tmp/w/dsb_toy-1.2.0-py3-none-any.whl\n", {"dsb-toy": "dsb-toy @ file:///tmp/w/dsb_toy-1.2.0-py3-none-any.whl"}),
    ("https://h.example/p/Foo-2.1.tar.gz\n", {"foo": "foo @ https://h.example/p/Foo-2.1.tar.gz"}),
    ("git+https://github.com/org/repo@v1#egg=repo-x\n", {"repo-x": "repo-x @ git+https://github.com/org/repo@v1#egg=repo-x"}),
    # markers: evaluated here; the pin kept carries its marker, the other is left out
    ('numpy==1.26.4 ; python_version < "3.0"\nnumpy==2.4.6 ; python_version >= "3.0"\n', {"numpy": "numpy==2.4.6"}),
    ('colorama==0.4.6 ; sys_platform == "win32-never"\n', {}),
    # a UTF-8 BOM and CRLF line ends (a freeze written on Windows)
    ("\ufefffoo==1.0\r\nbar==2.0\r\n", {"foo": "foo==1.0", "bar": "bar==2.0"}),
    # the same pin twice is harmless (pip-compile lists a package once per extra asked)
    ("foo==1.0\nFoo==1.0\n", {"foo": "foo==1.0"}),
    ("foo[a]==1.0\nfoo==1.0.0\n-c constraints.txt\n", {"foo": "foo[a]==1.0"}),
])
def test_requirements_lines(tmp_path, text, expected):
    assert pins_of(tmp_path, text) == expected


def test_a_utf16_freeze_from_windows_powershell(tmp_path):
    path = tmp_path / "good.txt"
    path.write_bytes("numpy==1.26.4\r\ntorch==2.1.0+cu121\r\n".encode("utf-16"))  # with its BOM
    assert {p.requirement for p in read_environment(path).pins} == {"numpy==1.26.4", "torch==2.1.0+cu121"}


def test_a_conda_envs_freeze_names_its_build_folders(tmp_path):
    gone = tmp_path / "croot"  # a conda build folder of another machine: not here
    env = read_environment(write(tmp_path, f"certifi @ file://{gone / 'certifi-build' / 'certifi'}\n"
                                           f"numpy==1.26.4\nmkl-service @ file://{gone / 'mkl-build'}\n"))
    (note,) = env.notes
    assert note.startswith("2 direct references to paths not on this machine (certifi, mkl-service)")
    assert "pip list --format=freeze" in note


def test_debians_pkg_resources_artifact_is_left_out(tmp_path):
    env = read_environment(write(tmp_path, "pkg-resources==0.0.0\nsix==1.16.0\n"))
    assert [p.name for p in env.pins] == ["six"] and "pkg-resources==0.0.0 left out" in env.notes[0]


def test_pytorch_local_builds_name_their_index(tmp_path):
    env = read_environment(write(tmp_path, "torch==2.1.0+cu121\ntorchvision==0.16.0+cu121\ntorchaudio==2.1.0+cpu\n"
                                           "mylib==1.0+local.7\n"))
    assert env.notes == ("torchaudio 2.1.0+cpu: local build that PyPI does not have; its index is "
                         "https://download.pytorch.org/whl/cpu (--extra-index-url)",
                         "torch 2.1.0+cu121, torchvision 0.16.0+cu121: local builds that PyPI does not have; their "
                         "index is https://download.pytorch.org/whl/cu121 (--extra-index-url)")
    named = read_environment(write(tmp_path, "--extra-index-url https://download.pytorch.org/whl/cu121\n"
                                             "torch==2.1.0+cu121\n"))
    assert named.notes == ()


@pytest.mark.parametrize("name, text, message", [
    ("env.txt", "# platform: linux-64\nnumpy=1.26.4=py311h64a7726_0\n",
     "env.txt:2: not a requirement: numpy=1.26.4=py311h64a7726_0 (a `conda list --export` line: give "
     "`pip list --format=freeze` output instead)"),
    ("environment.yml", "name: train\nchannels:\n  - conda-forge\ndependencies:\n  - python=3.11\n",
     "environment.yml:1: not a requirement: name: train (a conda environment.yml: give `pip list --format=freeze`"),
    ("Pipfile.lock", '{"_meta": {"hash": {}}, "default": {"six": {"version": "==1.16.0"}}, "develop": {}}',
     "Pipfile.lock: a Pipfile.lock is not read: give `pipenv requirements` output or a pip freeze"),
])
def test_other_tools_files_say_what_to_give_instead(tmp_path, name, text, message):
    with pytest.raises(InputError) as e:
        read_environment(write(tmp_path, text, name))
    assert message in str(e.value)


def test_relative_paths_and_includes_start_at_the_file(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "-r ../base.txt\n./wheels/a-1.0-py3-none-any.whl\n", "top.txt")
    write(tmp_path, "b==2.0\n", "base.txt")
    env = read_environment(tmp_path / "sub" / "top.txt")
    assert env.get("a").direct == (tmp_path / "sub" / "wheels" / "a-1.0-py3-none-any.whl").as_uri()
    assert env.get("b") == Pin("b", "2.0")


def test_index_options_are_kept_without_their_credentials(tmp_path):
    env = read_environment(write(tmp_path, "--index-url https://user:s3cret@pypi.example/simple\n"
                                           "--extra-index-url=https://__token__:tok@x.example/simple\nfoo==1\n"))
    assert env.options == ("--index-url https://***@pypi.example/simple", "--extra-index-url https://***@x.example/simple")
    assert "s3cret" not in repr(env) and "tok@" not in repr(env)


def test_a_false_marker_is_named_in_the_notes_and_a_true_one_kept_on_the_pin(tmp_path):
    env = read_environment(write(tmp_path, 'a==1 ; python_version >= "3.0"\nb==2 ; python_version < "3.0"\n'))
    assert env.get("a").marker == 'python_version >= "3.0"'
    assert env.get("b") is None and any("env.txt:2" in n and "marker is false" in n for n in env.notes)
    # the marker values of another interpreter pick the other pin
    other = read_environment(tmp_path / "env.txt", markers={"python_version": "2.7"})
    assert other.get("a") is None and other.get("b") == Pin("b", "2", marker='python_version < "3.0"')


def test_an_editable_path_without_a_hint_takes_its_projects_name(tmp_path):
    proj = tmp_path / "checkout"
    proj.mkdir()
    (proj / "pyproject.toml").write_text('[build-system]\nrequires = []\n\n[project]\nname = "My_Project"\n')
    env = read_environment(write(tmp_path, f"-e {proj.as_uri()}\n-e ./elsewhere\n"))
    assert env.get("my-project").direct == proj.as_uri()
    assert env.get("elsewhere").editable  # no project there: the folder's name


@pytest.mark.parametrize("text, message", [
    ("foo==1.0\nnumpy>=1.2\n", "env.txt:2: not an exact pin: numpy>=1.2"),
    ("numpy\n", "env.txt:1: not an exact pin: numpy"),
    ("numpy==1.*\n", "env.txt:1: not an exact pin: numpy==1.*"),
    ("numpy==1.0,<2\n", "env.txt:1: not an exact pin"),
    ("a==1\n\n# c\nnumpy~=1.2 \\\n  --hash=sha256:x\n", "env.txt:4: not an exact pin: numpy~=1.2"),
    ("foo==1.0\nfoo==2.0\n", "env.txt:2: foo is pinned twice (foo==1.0 at "),
    ("this is not a requirement\n", "env.txt:1: not a requirement: this is not a requirement"),
    ("foo==1.0 --frobnicate\n", "env.txt:1: unknown option after a requirement: --frobnicate"),
    ("--frobnicate\n", "env.txt:1: unknown or incomplete option: --frobnicate"),
    ("--index-url\n", "env.txt:1: unknown or incomplete option: --index-url"),
    ("-e\n", "env.txt:1: -e needs a path or URL"),
    ("-e git+https://github.com/org/repo\n", "env.txt:1: cannot tell which distribution -e git+https://github.com/org/repo is"),
    ("https://h.example/download?id=7\n", "env.txt:1: cannot tell which distribution https://h.example/download?id=7 is"),
    ("-r missing.txt\n", "env.txt:1: cannot read -r missing.txt"),
    ("-r env.txt\n", "env.txt:1: -r env.txt includes itself"),
    ("--index-url https://u:hunter2@h/simple\nfoo>=1\n", "env.txt:2: not an exact pin: foo>=1"),
    ("foo @ https://u:hunter2@h/foo.whl\nfoo==1.0\n", "foo is pinned twice (foo @ https://***@h/foo.whl"),
])
def test_bad_requirements_name_file_and_line(tmp_path, text, message):
    with pytest.raises(InputError) as e:
        read_environment(write(tmp_path, text))
    assert message in str(e.value)
    assert "hunter2" not in str(e.value)
    assert e.value.exit_code == 2


@pytest.mark.parametrize("content, message", [
    (b"", "empty file: expected a pip freeze"),
    (b"\n  \n\t\n", "empty file"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "a binary file, not a pip freeze"),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", "a binary file"),  # a wheel given by mistake
])
def test_empty_and_binary_files(tmp_path, content, message):
    path = tmp_path / "f"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        read_environment(path)


def test_missing_file_and_a_folder_that_is_no_environment(tmp_path):
    with pytest.raises(InputError, match="nope.txt: no such file or folder"):
        read_environment(tmp_path / "nope.txt")
    with pytest.raises(InputError, match="a folder, but not a virtual environment"):
        read_environment(tmp_path)
    write(tmp_path, UV_LOCK, "uv.lock")
    with pytest.raises(InputError, match=r"no bin/python\); did you mean .*uv.lock\?"):
        read_environment(tmp_path)


# ----------------------------------------------------------------------------- diff

GOOD = """\
accelerate==0.24.1
# Editable install with no version control (mylib==0.1)
-e /src/mylib
numpy==1.26.4
PyYAML==6.0.1
tokenizers==0.15.0
torch==2.1.0+cu121
transformers==4.36.2
vendored @ https://files.example/vendored-1.0-py3-none-any.whl
"""
BAD = """\
accelerate==0.25.0
-e git+https://github.com/me/mylib@abc123#egg=mylib
numpy==1.26.4
pyyaml==6.0.1
safetensors==0.4.1
torch==2.2.0+cu121
transformers==4.39.2
vendored @ https://files.example/vendored-1.1-py3-none-any.whl
"""


@pytest.fixture
def two(tmp_path):
    return read_environment(write(tmp_path, GOOD, "good.txt")), read_environment(write(tmp_path, BAD, "bad.txt"))


def test_diff_gives_changed_added_and_removed_sorted_by_name(two):
    good, bad = two
    changes = diff(good, bad)
    assert [(c.name, c.kind) for c in changes] == [
        ("accelerate", Kind.CHANGED), ("mylib", Kind.CHANGED), ("safetensors", Kind.ADDED),
        ("tokenizers", Kind.REMOVED), ("torch", Kind.CHANGED), ("transformers", Kind.CHANGED),
        ("vendored", Kind.CHANGED)]
    by = {c.name: c for c in changes}
    assert [c.name for c in changes if c.bisectable] == ["accelerate", "torch", "transformers"]
    assert by["transformers"].describe() == "transformers 4.36.2 -> 4.39.2"
    assert by["safetensors"].describe() == "+ safetensors 0.4.1"
    assert by["tokenizers"].describe() == "- tokenizers 0.15.0"
    assert by["torch"].describe() == "torch 2.1.0+cu121 -> 2.2.0+cu121 (local version +cu121)"
    assert by["mylib"].whole and "editable: applied whole, not bisected below" in by["mylib"].describe()
    assert by["vendored"].whole and "direct URL: applied whole, not bisected below" in by["vendored"].notes
    assert not by["safetensors"].bisectable and not by["tokenizers"].bisectable


def test_diff_of_a_downgrade_and_of_equal_versions_written_differently(tmp_path):
    a = read_environment(write(tmp_path, "a==2.0\nb==1.0\n", "a.txt"))
    b = read_environment(write(tmp_path, "a==1.9\nb==1.0.0\n", "b.txt"))
    (change,) = diff(a, b)
    assert change.name == "a" and "downgrade" in change.notes


def test_apply_gives_the_good_environment_with_the_changes_applied(two):
    good, bad = two
    by = {c.name: c for c in diff(good, bad)}
    assert apply(good, []) == tuple(p.requirement for p in good.pins)  # sorted by name
    applied = apply(good, [by["transformers"], by["safetensors"], by["tokenizers"], by["mylib"]])
    assert applied == ("accelerate==0.24.1", "mylib @ git+https://github.com/me/mylib@abc123#egg=mylib",
                       "numpy==1.26.4", "pyyaml==6.0.1", "safetensors==0.4.1", "torch==2.1.0+cu121",
                       "transformers==4.39.2", "vendored @ https://files.example/vendored-1.0-py3-none-any.whl")
    assert set(apply(good, diff(good, bad))) == {p.requirement for p in bad.pins}
    for requirement in applied:  # each one PEP 508 string, one argv word for uv
        assert Requirement(requirement).name
    assert bad.get("mylib").install_args == ("-e", "git+https://github.com/me/mylib@abc123#egg=mylib")
    assert bad.get("numpy").install_args == ("numpy==1.26.4",)


def test_a_change_on_its_own():
    c = Change("x", Pin("x", "1.0"), Pin("x", None, "file:///w/x-2.0-py3-none-any.whl"))
    assert c.kind is Kind.CHANGED and not c.bisectable and c.whole
    assert c.notes == ("direct URL: applied whole, not bisected below",)
    odd = Change("y", Pin("y", "1.0"), Pin("y", "nightly-7"))  # pinned with ===
    assert not odd.bisectable and odd.notes == ("nightly-7 is not a PEP 440 version: applied whole, not bisected below",)
    assert Change("z", Pin("z", "2.1.0rc1"), Pin("z", "2.1.0")).bisectable  # a pre-release is a release
    assert Change("x", None, Pin("x", "1")).kind is Kind.ADDED
    assert Change("x", Pin("x", "1"), None).kind is Kind.REMOVED


# ------------------------------------------------------------------------------ CLI


def test_diff_cli_table(cli, tmp_path):
    write(tmp_path, "--extra-index-url https://__token__:s3cret@pypi.corp.example/simple\n" + GOOD, "good.txt")
    write(tmp_path, BAD, "bad.txt")
    r = cli("diff", str(tmp_path / "good.txt"), str(tmp_path / "bad.txt"), "--python", sys.executable)
    assert r.exit_code == 0, r.output
    assert "7 changes: 5 changed, 1 added, 1 removed" in r.output
    row = next(ln for ln in r.output.splitlines() if "transformers" in ln)
    assert "4.36.2" in row and "4.39.2" in row and "changed" in row
    assert "direct URL: applied whole, not bisected below" in r.output
    assert "index options not used (give them on the command line): --extra-index-url " \
           "https://***@pypi.corp.example/simple" in r.output and "s3cret" not in r.output


def test_diff_cli_json_and_markdown_to_a_file(cli, tmp_path):
    write(tmp_path, GOOD, "good.txt")
    write(tmp_path, BAD.replace("https://files", "https://me:hunter2@files"), "bad.txt")
    r = cli("diff", str(tmp_path / "good.txt"), str(tmp_path / "bad.txt"), "--format", "json",
            "-o", str(tmp_path / "d.json"))
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data == json.loads((tmp_path / "d.json").read_text())
    assert set(data) == {"summary", "good", "bad", "changes"}
    assert set(data["good"]) == {"source", "format", "python", "requires_python", "packages", "options", "notes",
                                 "roots"}
    assert set(data["changes"][0]) == {"name", "kind", "good", "bad", "bisectable", "whole", "describe", "notes"}
    first = data["changes"][0]
    assert first["name"] == "accelerate" and first["good"]["version"] == "0.24.1" and first["bisectable"]
    assert "hunter2" not in r.output
    r = cli("diff", str(tmp_path / "good.txt"), str(tmp_path / "bad.txt"), "--format", "markdown")
    assert "| transformers | 4.36.2 | 4.39.2 | changed |" in r.output


@pytest.mark.parametrize("good, bad, code, message", [
    ("good.txt", "good.txt", 1, "no difference between GOOD and BAD"),
    ("good.txt", "missing.txt", 2, "missing.txt: no such file or folder"),
    ("good.txt", "loose.txt", 2, "loose.txt:2: not an exact pin: numpy>=1.2"),
    ("empty.txt", "good.txt", 2, "empty.txt: empty file"),
    ("-", "-", 2, "GOOD and BAD are both - : only one of them can be read from stdin"),
])
def test_diff_cli_bad_input_is_one_line_and_creates_nothing(cli, tmp_path, good, bad, code, message):
    write(tmp_path, GOOD, "good.txt")
    write(tmp_path, "a==1\nnumpy>=1.2\n", "loose.txt")
    write(tmp_path, "", "empty.txt")
    before = sorted(tmp_path.iterdir())
    r = cli("diff", good, bad, "-o", "out.md", cwd=tmp_path)
    assert r.exit_code == code
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.output
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("args, message", [
    (["-o", "no/such/out.md"], "-o no/such/out.md: there is no folder no/such"),
    (["--python", "no-such-python-here", "-o", "out.md"], "python interpreter 'no-such-python-here' not found"),
    (["--format", "yaml"], "Invalid value for '--format'"),
])
def test_diff_cli_bad_options(cli, tmp_path, args, message):
    write(tmp_path, "a==1\n", "g.txt")
    write(tmp_path, "a==2\n", "b.txt")
    r = cli("diff", "g.txt", "b.txt", *args, cwd=tmp_path)
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt", "g.txt"]


def test_diff_cli_as_a_subprocess_reading_one_side_from_stdin(tmp_path):
    write(tmp_path, "a==1.0\nb==1.0\nc==1.0\n", "g.txt")
    done = subprocess.run([sys.executable, "-m", "dsbisect", "diff", "g.txt", "-", "--format", "json"], cwd=tmp_path,
                          input="a==1.0\nb==2.0\n", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["summary"] == "2 changes: 1 changed, 1 removed" and data["bad"]["source"] == "<stdin>"
    assert [c["name"] for c in data["changes"]] == ["b", "c"]


@pytest.mark.parametrize("text, message", [
    ("a==1.0\nb>=2\n", "<stdin>:2: not an exact pin: b>=2 (each line must pin one version with ==, as pip freeze writes)"),
    ("", "<stdin>: empty"),
])
def test_bad_input_on_stdin(tmp_path, text, message):
    from typer.testing import CliRunner

    from dsbisect.cli import app

    write(tmp_path, "a==1.0\n", "g.txt")
    r = CliRunner().invoke(app, ["diff", str(tmp_path / "g.txt"), "-"], input=text, env={"COLUMNS": "220"})
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1


# ------------------------------------------------------------------ uv.lock, pylock

LINUX_311 = {"implementation_name": "cpython", "implementation_version": "3.11.7", "os_name": "posix",
             "platform_machine": "x86_64", "platform_release": "6.1.0", "platform_system": "Linux",
             "platform_version": "#1 SMP", "python_full_version": "3.11.7", "platform_python_implementation": "CPython",
             "python_version": "3.11", "sys_platform": "linux"}
WINDOWS_312 = {**LINUX_311, "os_name": "nt", "platform_system": "Windows", "sys_platform": "win32",
               "python_full_version": "3.12.1", "python_version": "3.12"}

# A universal uv.lock of a two-member workspace, in the shape uv 0.5+ writes: a fork on the
# python version (numpy), a windows-only edge (colorama), an extra asked by an edge
# (transformers[torch]), a git source, a URL wheel, a local wheel, a dev group and an optional
# extra of the root, and a package nothing needs here.
UV_LOCK = """\
version = 1
revision = 2
requires-python = ">=3.10"
resolution-markers = [
    "python_full_version >= '3.12'",
    "python_full_version < '3.12'",
]

[manifest]
members = [
    "trainer",
    "trainer-utils",
]

[[package]]
name = "accelerate"
version = "0.25.0"
source = { registry = "https://pypi.org/simple" }
dependencies = [
    { name = "numpy", version = "1.26.4", source = { registry = "https://pypi.org/simple" }, marker = "python_full_version < '3.12'" },
    { name = "numpy", version = "2.1.3", source = { registry = "https://pypi.org/simple" }, marker = "python_full_version >= '3.12'" },
    { name = "torch" },
]
sdist = { url = "https://files.pythonhosted.org/packages/aa/accelerate-0.25.0.tar.gz", hash = "sha256:ecf55b0ab278a1dac8539dde0d276977aff04683f07ede73eaf02478538576a1", size = 277014 }
wheels = [
    { url = "https://files.pythonhosted.org/packages/bb/accelerate-0.25.0-py3-none-any.whl", hash = "sha256:c7bb817eb974bba0ff3ea1ba0f24d55afb86d50e3d4fe98d6922dc69cf2ccff1", size = 265699 },
]

[[package]]
name = "colorama"
version = "0.4.6"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "flash-attn"
version = "2.5.6"
source = { url = "https://github.com/Dao-AILab/flash-attention/releases/download/v2.5.6/flash_attn-2.5.6+cu122torch2.2cxx11abiFALSE-cp311-cp311-linux_x86_64.whl" }

[[package]]
name = "mylocal"
version = "1.0"
source = { path = "wheels/mylocal-1.0-py3-none-any.whl" }

[[package]]
name = "numpy"
version = "1.26.4"
source = { registry = "https://pypi.org/simple" }
resolution-markers = [
    "python_full_version < '3.12'",
]

[[package]]
name = "numpy"
version = "2.1.3"
source = { registry = "https://pypi.org/simple" }
resolution-markers = [
    "python_full_version >= '3.12'",
]

[[package]]
name = "pytest"
version = "8.3.4"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "tqdm"
version = "4.66.1"
source = { registry = "https://pypi.org/simple" }
dependencies = [
    { name = "colorama", marker = "sys_platform == 'win32'" },
]

[[package]]
name = "torch"
version = "2.2.0+cu121"
source = { registry = "https://download.pytorch.org/whl/cu121" }

[[package]]
name = "trainer"
version = "0.1.0"
source = { editable = "." }
dependencies = [
    { name = "accelerate" },
    { name = "flash-attn", marker = "sys_platform == 'linux'" },
    { name = "mylocal" },
    { name = "tqdm" },
    { name = "trainer-utils" },
    { name = "transformers", extra = ["torch"] },
]

[package.optional-dependencies]
tracking = [
    { name = "wandb" },
]

[package.dev-dependencies]
dev = [
    { name = "pytest" },
]

[[package]]
name = "trainer-utils"
version = "0.1.0"
source = { editable = "packages/utils" }

[[package]]
name = "transformers"
version = "4.39.2"
source = { git = "https://github.com/huggingface/transformers?rev=v4.39.2#a0857740c0e6127485c11476650314df3accc2b6" }

[package.optional-dependencies]
torch = [
    { name = "torch" },
]

[[package]]
name = "unused-thing"
version = "1.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "wandb"
version = "0.16.2"
source = { registry = "https://pypi.org/simple" }
"""


def test_uv_lock_gives_what_the_root_reaches_here(tmp_path):
    env = read_environment(write(tmp_path, UV_LOCK, "uv.lock"), markers=LINUX_311)
    assert env.format is EnvFormat.UV_LOCK and env.requires_python == ">=3.10" and env.python is None
    assert {p.name: p.requirement for p in env.pins} == {
        "accelerate": "accelerate==0.25.0",
        "flash-attn": "flash-attn @ https://github.com/Dao-AILab/flash-attention/releases/download/v2.5.6/"
                      "flash_attn-2.5.6+cu122torch2.2cxx11abiFALSE-cp311-cp311-linux_x86_64.whl",
        "mylocal": f"mylocal @ {(tmp_path / 'wheels/mylocal-1.0-py3-none-any.whl').as_uri()}",
        "numpy": "numpy==1.26.4",
        "pytest": "pytest==8.3.4",
        "torch": "torch==2.2.0+cu121",
        "tqdm": "tqdm==4.66.1",
        "transformers": "transformers @ git+https://github.com/huggingface/transformers"
                        "@a0857740c0e6127485c11476650314df3accc2b6",
        "wandb": "wandb==0.16.2",
    }
    assert env.roots == ("trainer", "trainer-utils")  # the workspace's members: not changes, left out quietly
    assert not any("trainer" in n for n in env.notes)


def test_uv_lock_for_another_interpreter_takes_the_other_fork(tmp_path):
    env = read_environment(write(tmp_path, UV_LOCK, "uv.lock"), markers=WINDOWS_312)
    assert env.get("numpy").version == "2.1.3"
    assert env.get("colorama").version == "0.4.6" and env.get("flash-attn") is None


def test_a_lock_is_known_by_its_content_and_a_freeze_by_its_own(tmp_path):
    lock = read_environment(write(tmp_path, UV_LOCK, "last-month.txt"), markers=LINUX_311)
    assert lock.format is EnvFormat.UV_LOCK and lock.get("torch")
    freeze = read_environment(write(tmp_path, PIP_FREEZE, "requirements.lock"))  # rye's name for a freeze
    assert freeze.format is EnvFormat.REQUIREMENTS and freeze.get("torch")


def test_a_scripts_uv_lock_starts_from_its_manifest(tmp_path):
    text = """\
version = 1
revision = 3
requires-python = ">=3.11"

[manifest]
requirements = [
    { name = "colorama", marker = "sys_platform == 'win32'" },
    { name = "rich", specifier = ">=13" },
]

[[package]]
name = "colorama"
version = "0.4.6"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "markdown-it-py"
version = "3.0.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "rich"
version = "13.9.4"
source = { registry = "https://pypi.org/simple" }
dependencies = [
    { name = "markdown-it-py" },
]
"""
    env = read_environment(write(tmp_path, text, "train.py.lock"), markers=LINUX_311)
    assert env.format is EnvFormat.UV_LOCK and env.roots == ()
    assert [p.requirement for p in env.pins] == ["markdown-it-py==3.0.0", "rich==13.9.4"]
    with pytest.raises(InputError, match="train.py.lock: the script depends on gone, which is not in the lock"):
        read_environment(write(tmp_path, text.replace('name = "rich", specifier', 'name = "gone", specifier'),
                               "train.py.lock"), markers=LINUX_311)


def test_two_uv_locks_diff_into_a_git_change_and_version_changes(tmp_path):
    old = UV_LOCK.replace('version = "0.25.0"', 'version = "0.24.1"').replace("rev=v4.39.2#a0857740c0e6127485c11476650314df3accc2b6", "rev=v4.36.2#a7cab3c283312b8d4de5df3bbe719971e24f4281")
    good = read_environment(write(tmp_path, old, "uv.lock"), markers=LINUX_311)
    (tmp_path / "new").mkdir()
    bad = read_environment(write(tmp_path / "new", UV_LOCK, "uv.lock"), markers=LINUX_311)
    changes = {c.name: c for c in diff(good, bad)}
    assert changes["accelerate"].bisectable and changes["accelerate"].describe() == "accelerate 0.24.1 -> 0.25.0"
    assert changes["transformers"].whole and not changes["transformers"].bisectable
    assert "mylocal" in changes  # a local path in another folder is another file


PYLOCK = """\
# This file was autogenerated by uv via the following command:
#    uv export --format pylock.toml
lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.10"
environments = ["sys_platform == 'linux'", "sys_platform == 'darwin'"]

[[packages]]
name = "colorama"
version = "0.4.6"
marker = "sys_platform == 'win32'"
index = "https://pypi.org/simple"
wheels = [{ url = "https://files.pythonhosted.org/packages/colorama-0.4.6-py2.py3-none-any.whl", hashes = { sha256 = "4f1d9991f5acc0ca119f9d443620b77f9d6b33703e51011c16baf57afb285fc6" } }]

[[packages]]
name = "deepspeed"
version = "0.12.4"
index = "https://pypi.org/simple"
sdist = { url = "https://files.pythonhosted.org/packages/deepspeed-0.12.4.tar.gz", upload-time = 2023-11-30T18:00:00Z, size = 1177419, hashes = { sha256 = "0fd7cdb3e8b2a0e8fb0ae4e3c3c0e1a5d8e9f2b1a4d5c6e7f8091a2b3c4d5e6f" } }

[[packages]]
name = "my-fork"
vcs = { type = "git", url = "https://user:tok@github.com/me/my-fork.git", requested-revision = "main", commit-id = "4f2e1b0c9d8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c", subdirectory = "python" }

[[packages]]
name = "myproj"
directory = { path = ".", editable = true }

[[packages]]
name = "sibling"
directory = { path = "../sibling", editable = true }

[[packages]]
name = "vendored"
version = "1.1"
archive = { url = "https://files.example/vendored-1.1.tar.gz", hashes = { sha256 = "abc" } }
"""


def test_pylock_reads_every_source_kind(tmp_path):
    env = read_environment(write(tmp_path, PYLOCK, "pylock.toml"), markers=LINUX_311)
    assert env.format is EnvFormat.PYLOCK and env.requires_python == ">=3.10"
    assert {p.name: p.requirement for p in env.pins} == {
        "deepspeed": "deepspeed==0.12.4",
        "my-fork": "my-fork @ git+https://***@github.com/me/my-fork.git@4f2e1b0c9d8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c"
                   "#subdirectory=python",
        "sibling": f"sibling @ {(tmp_path.parent / 'sibling').as_uri()}",
        "vendored": "vendored @ https://files.example/vendored-1.1.tar.gz",
    }
    assert any("pylock.toml:8: colorama left out: its marker is false here" in n for n in env.notes)
    assert env.roots == ("myproj",)
    assert any("sys_platform == 'linux'" in n for n in env.notes)  # what it was locked for
    named = read_environment(write(tmp_path, PYLOCK, "pylock.train.toml"), markers=WINDOWS_312)
    assert named.get("colorama").version == "0.4.6"


@pytest.mark.parametrize("name, text, message", [
    ("uv.lock", 'version = 1\n[[package]\nname = "x"\n', "uv.lock:2: not valid TOML"),
    ("uv.lock", 'version = 1\n\n[[package]]\nname = "a"\nversion = "1"\nsource = { registry = "r" }\n\n'
                '[[package]]\nversion = "2"\n', "uv.lock:8: a [[package]] without a name"),
    ("uv.lock", 'version = 1\n[[package]]\nname = "a"\nversion = "1"\n', "uv.lock:2: a has no source uv.lock defines"),
    ("uv.lock", 'version = 1\n[[package]]\nname = "a"\nsource = { registry = "r" }\n',
     "uv.lock:2: a from a registry has no version"),
    ("uv.lock", 'version = 1\n[[package]]\nname = "p"\nversion = "1"\nsource = { virtual = "." }\n'
                'dependencies = [{ name = "gone" }]\n', "uv.lock:2: p depends on gone, which is not in the lock"),
    ("uv.lock", 'version = 1\n[[package]]\nname = "a"\nversion = "1"\nsource = { svn = "https://u:hunter2@x" }\n',
     "uv.lock:2: a has no source uv.lock defines (registry, git, url"),
    ("uv.lock", 'version = 1\n[[package]]\nname = "a"\nversion = "1"\nsource = "svn+https://x"\n',
     "uv.lock:2: a has a source uv.lock does not define: svn"),
    ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nname = "a"\n',
     "pylock.toml:2: a has no version, vcs, directory or archive"),
    ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nname = "a"\nversion = "1"\n[[packages]]\nname = "a"\n'
                    'version = "2"\n', "pylock.toml:5: a is locked twice"),
    ("pyproject.toml", '[project]\nname = "x"\n', "a pyproject.toml pins nothing"),
    ("poetry.lock", '[[package]]\nname = "x"\nversion = "1"\n[metadata]\nlock-version = "2.0"\n',
     "poetry.lock is not read"),
    ("other.toml", 'title = "x"\n', "TOML, but neither a uv.lock"),
])
def test_bad_locks_name_file_and_line(tmp_path, name, text, message):
    with pytest.raises(InputError) as e:
        read_environment(write(tmp_path, text, name), markers=LINUX_311)
    assert message in str(e.value) and "hunter2" not in str(e.value)


def test_uv_lock_source_forms_and_extras_that_conflict(tmp_path):
    text = """\
version = 1
requires-python = ">=3.10"

[[package]]
name = "app"
version = "0.1.0"
source = "editable+."
dependencies = [{ name = "old-style" }, { name = "sub-pkg" }]

[[package]]
name = "old-style"
version = "1.2"
source = "registry+https://pypi.org/simple"

[[package]]
name = "sub-pkg"
version = "0.3"
source = { url = "https://h.example/mono.tar.gz", subdirectory = "python/sub" }
"""
    env = read_environment(write(tmp_path, text, "uv.lock"), markers=LINUX_311)
    assert {p.requirement for p in env.pins} == {"old-style==1.2",
                                                 "sub-pkg @ https://h.example/mono.tar.gz#subdirectory=python/sub"}
    # torch for cpu and for cuda, each by an extra of the project: no one environment
    conflict = UV_LOCK.replace('tracking = [\n    { name = "wandb" },\n]',
                               'tracking = [\n    { name = "wandb" },\n]\ncpu = [\n    { name = "torch", version = "2.2.0", '
                               'source = { registry = "https://download.pytorch.org/whl/cpu" } },\n]').replace(
        '{ name = "torch" }', '{ name = "torch", version = "2.2.0+cu121", source = { registry = '
                              '"https://download.pytorch.org/whl/cu121" } }') + """
[[package]]
name = "torch"
version = "2.2.0"
source = { registry = "https://download.pytorch.org/whl/cpu" }
"""
    with pytest.raises(InputError, match="torch is locked at two versions for this interpreter .* for different "
                                         "extras or groups of the project: give a freeze"):
        read_environment(write(tmp_path, conflict, "uv.lock"), markers=LINUX_311)


def test_snapshot_base_json_is_an_environment(tmp_path):
    data = {"format": 1, "python": "/usr/bin/python3", "python_version": "3.11.7", "platform": "linux-x86_64",
            "libc": "glibc-2.35", "dists": [{"name": "torch", "version": "2.1.0+cu121", "metadata": "..."},
                                            {"name": "pip", "version": "24.0", "metadata": "..."}]}
    env = read_environment(write(tmp_path, json.dumps(data), "base.json"))
    assert env.format is EnvFormat.SNAPSHOT and env.python == "3.11.7"
    assert env.pins == (Pin("torch", "2.1.0+cu121"),)
    with pytest.raises(InputError, match="JSON, but not a `dsbisect snapshot-base` file"):
        read_environment(write(tmp_path, '{"a": 1}', "x.json"))
    odd = read_environment(write(tmp_path, '{"format": 1, "python_version": 3, "dists": [{"name": 7, "version": "1"},'
                                           ' "x", {"name": "ok", "version": "1.0"}]}', "odd.json"))
    assert odd.pins == (Pin("ok", "1.0"),) and odd.python is None


# ------------------------------------------------------------------- live environments


@pytest.mark.slow
def test_a_real_venv_and_its_python_read_as_their_uv_pip_freeze(tmp_path, wheelhouse, cache_dir, cli):
    """A uv venv with a toy release from a wheelhouse and a toy wheel installed from its path
    (a direct reference, PEP 610 direct_url.json): the venv folder, its python and its own
    `uv pip freeze` are one environment."""
    import platform

    import toypkg
    from dsbisect.envs.uv import uv_bin

    uv = uv_bin()
    other = toypkg.build_wheel(tmp_path / "local", "2.0.0", "ok", dist="dsb-other", module="dsb_other")
    venv = tmp_path / "v"
    for args in (["venv", str(venv), "--python", sys.executable],
                 ["pip", "install", "--python", str(venv / "bin/python"), "--offline", "--no-index", "--find-links",
                  str(wheelhouse), "dsb-toy==1.1.0", str(other)]):
        subprocess.run([uv, *args], check=True, capture_output=True)
    freeze = subprocess.run([uv, "pip", "freeze", "--python", str(venv / "bin/python")], check=True,
                            capture_output=True, text=True).stdout
    from_venv = read_environment(venv)
    from_python = read_environment(venv / "bin" / "python")
    from_freeze = read_environment(write(tmp_path, freeze, "freeze.txt"))
    assert from_venv.format is EnvFormat.VENV and from_python.format is EnvFormat.PYTHON
    assert from_venv.python == from_python.python == platform.python_version()
    assert from_venv.get("dsb-toy") == Pin("dsb-toy", "1.1.0")
    assert from_venv.get("dsb-other") == Pin("dsb-other", None, other.as_uri())
    assert from_venv.pins == from_python.pins
    assert diff(from_freeze, from_venv) == ()
    import importlib.util

    if importlib.util.find_spec("pip"):  # and pip's own freeze of it, where this python has pip
        site = next(venv.glob("lib/python3*/site-packages"))
        pip_freeze = subprocess.run([sys.executable, "-m", "pip", "freeze", "--path", str(site)], check=True,
                                    capture_output=True, text=True).stdout
        assert f"dsb-other @ {other.as_uri()}" in pip_freeze.replace("dsb_other @", "dsb-other @")
        assert diff(read_environment(write(tmp_path, pip_freeze, "pip-freeze.txt")), from_venv) == ()
    write(tmp_path, freeze.replace("dsb-toy==1.1.0", "dsb-toy==1.0.0"), "older.txt")
    r = cli("diff", str(tmp_path / "older.txt"), str(venv), "--python", sys.executable)
    assert r.exit_code == 0, r.output
    assert "1 change: 1 changed" in r.output and "1.0.0" in r.output and "1.1.0" in r.output


@pytest.mark.parametrize("name, content, message", [
    ("run.sh", "#!/bin/sh\necho hi\n", "run.sh: a program (only one named python* or pypy* is run"),
    ("python3", "#!/bin/sh\necho not json\n", "python3: not a python that dsbisect can read"),
    ("python", "#!/bin/sh\necho oops >&2\nexit 3\n", "cannot inspect"),
])
def test_a_program_that_is_not_a_python_is_not_read(tmp_path, name, content, message):
    path = write(tmp_path, content, name)
    path.chmod(0o755)
    with pytest.raises(InputError, match=message.replace("*", r"\*").replace("(", r"\(")):
        read_environment(path)


# ------------------------------------------------------------------ diff/apply properties

_PINS = st.one_of(
    st.builds(lambda v: Pin("", v), st.sampled_from(["1.0", "1.0.0", "2.0", "2.1.0+cu121", "3.0rc1"])),
    st.builds(lambda u: Pin("", None, u), st.sampled_from(["https://h/x-1.whl", "git+https://h/r@abc"])),
    st.builds(lambda u: Pin("", None, u, editable=True), st.sampled_from(["file:///src/x", "file:///src/y"])))
_ENVS = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e", "f"]), _PINS, max_size=6).map(
    lambda d: Environment("x", tuple(Pin(n, p.version, p.direct, p.editable) for n, p in sorted(d.items()))))


def _by_hand(good: Environment, subset) -> Environment:
    """The oracle: good's pins, with each change's bad pin in its place (removed: gone)."""
    pins = {p.name: p for p in good.pins}
    for c in subset:
        if c.bad is None:
            del pins[c.name]
        else:
            pins[c.name] = c.bad
    return Environment("by hand", tuple(pins[n] for n in sorted(pins)))


@settings(max_examples=60, deadline=None)
@given(_ENVS, _ENVS, st.data())
def test_applying_changes_moves_the_good_environment_toward_the_bad(good, bad, data):
    changes = diff(good, bad)
    assert diff(good, good) == () and [c.name for c in changes] == sorted({c.name for c in changes})
    assert apply(good, ()) == tuple(p.requirement for p in good.pins)
    assert diff(_by_hand(good, changes), bad) == ()
    subset = [c for c in changes if data.draw(st.booleans())]
    middle = _by_hand(good, subset)
    assert apply(good, subset) == tuple(p.requirement for p in middle.pins)
    assert [c.name for c in diff(middle, bad)] == [c.name for c in changes if c not in subset]


def test_what_the_base_provides_is_said_once_and_torch_on_its_row(two):
    from dsbisect.render.envreport import EnvDiff, context_lines, markdown

    good, bad = two
    d = EnvDiff(good, bad, diff(good, bad), {"torch": "2.1.0+cu121", "accelerate": "0.24.1", "tokenizers": "0.15.0"})
    by = {c.name: c for c in d.changes}
    assert d.notes(by["torch"])[-1] == "provided by the base (2.1.0+cu121): trials must install torch unless --hold torch"
    assert not any("provided by the base" in n for n in d.notes(by["accelerate"]))
    assert context_lines(d)[-1] == ("the base provides 2 of the changed packages (accelerate, tokenizers): a trial "
                                    "installs its own version over the base's, unless --hold NAME keeps the base's")
    assert "| torch | 2.1.0+cu121 | 2.2.0+cu121 | changed |" in markdown(d)
    assert not any("the base provides" in ln for ln in context_lines(EnvDiff(good, bad, d.changes, {})))


_JUNK = st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(),
                  st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _paths(obj, prefix=()):
    """Every place in a parsed TOML document a value sits."""
    yield prefix
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield from _paths(value, (*prefix, key))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["uv", "pylock"]), st.data())
def test_a_lock_of_another_shape_is_one_line_or_read_never_a_crash(kind, data):
    """Any one value of a real lock replaced by something of another type: the reader answers
    with an Environment's pins or an InputError, never another exception."""
    import copy

    from dsbisect.envdiff.lockfiles import NotALock, read_lock, tomllib  # tomli on python 3.10

    text = UV_LOCK if kind == "uv" else PYLOCK
    doc = tomllib.loads(text)
    path = data.draw(st.sampled_from([p for p in _paths(doc) if p]))
    mutated = copy.deepcopy(doc)
    parent = mutated
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = data.draw(_JUNK)
    try:
        read_lock(mutated, text, "x.lock", Path("/x"), LINUX_311)
    except (InputError, NotALock):
        pass


_FRAGMENTS = st.sampled_from(["foo", "Foo_Bar", "==", "1.0", ">=", "@", " ", "#", "egg=x", ";", "python_version",
                              "<", '"3.12"', "-e", "-r", "-c", "-i", "--hash=sha256:ab", "--index-url", "=", "\\\\",
                              "\\n", "file://", "https://", "https://u:p@h/x", "/p", "./q", "~", "x.whl", "y-1.0.tar.gz",
                              "[", "]", "git+", ".*", "\\t", "%", "-"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=14).map("".join))
def test_any_requirements_text_is_read_or_one_input_error(text):
    from dsbisect.envdiff.freeze import parse_requirements

    try:
        parse_requirements(text, "f.txt", Path("/nowhere"), markers=LINUX_311, include=lambda p: "",
                           project_name=lambda p: None)
    except InputError as e:
        assert str(e).startswith("f.txt:") and "\n" not in str(e) and "u:p@" not in str(e)


@pytest.mark.parametrize("text", ["-e file://[x/y#egg=a\n", "a @ file://[x/a-1.0.tar.gz\n"])
def test_a_url_urllib_cannot_split_is_read_or_one_input_error(tmp_path, text):
    """Hypothesis found ``ValueError: Invalid IPv6 URL`` from urllib on ``file://[x``: never a traceback."""
    from dsbisect.core.errors import InputError

    f = tmp_path / "req.txt"
    f.write_text(text)
    try:
        read_environment(f)
    except InputError:
        pass
