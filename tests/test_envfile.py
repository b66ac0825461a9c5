"""Reading environments (freezes, requirements, uv.lock, pylock.toml, venvs) and diffing them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsbisect.envfile import Change, Kind, apply, diff, read_environment
from dsbisect.errors import InputError
from dsbisect.pins import EnvFormat, Pin

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
     {"my-pkg": "-e git+https://github.com/org/repo.git@0123abcd#egg=my_pkg"}),
    # "# Editable install with no version control" names the -e line after it
    ("# Editable install with no version control (proj==0.3.0)\n-e /home/u/proj\n", {"proj": "-e file:///home/u/proj"}),
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
    # the same pin twice is harmless
    ("foo==1.0\nFoo==1.0\n", {"foo": "foo==1.0"}),
])
def test_requirements_lines(tmp_path, text, expected):
    assert pins_of(tmp_path, text) == expected


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
    (b"\xff\xfe\x00f\x00o", "a binary file"),
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
    assert "local version" in by["torch"].describe()
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
    assert applied == ("accelerate==0.24.1", "-e git+https://github.com/me/mylib@abc123#egg=mylib",
                       "numpy==1.26.4", "pyyaml==6.0.1", "safetensors==0.4.1", "torch==2.1.0+cu121",
                       "transformers==4.39.2", "vendored @ https://files.example/vendored-1.0-py3-none-any.whl")
    assert set(apply(good, diff(good, bad))) == {p.requirement for p in bad.pins}


def test_a_change_on_its_own():
    c = Change("x", Pin("x", "1.0"), Pin("x", None, "file:///w/x-2.0-py3-none-any.whl"))
    assert c.kind is Kind.CHANGED and not c.bisectable and c.whole
    assert Change("x", None, Pin("x", "1")).kind is Kind.ADDED
    assert Change("x", Pin("x", "1"), None).kind is Kind.REMOVED


# ------------------------------------------------------------------------------ CLI


def test_diff_cli_table(cli, tmp_path):
    write(tmp_path, GOOD, "good.txt")
    write(tmp_path, BAD, "bad.txt")
    r = cli("diff", str(tmp_path / "good.txt"), str(tmp_path / "bad.txt"), "--python", sys.executable)
    assert r.exit_code == 0, r.output
    assert "7 changes: 5 changed, 1 added, 1 removed" in r.output
    row = next(ln for ln in r.output.splitlines() if "transformers" in ln)
    assert "4.36.2" in row and "4.39.2" in row and "changed" in row
    assert "direct URL: applied whole, not bisected below" in r.output


def test_diff_cli_json_and_markdown_to_a_file(cli, tmp_path):
    write(tmp_path, GOOD, "good.txt")
    write(tmp_path, BAD.replace("https://files", "https://me:hunter2@files"), "bad.txt")
    r = cli("diff", str(tmp_path / "good.txt"), str(tmp_path / "bad.txt"), "--format", "json",
            "-o", str(tmp_path / "d.json"))
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data == json.loads((tmp_path / "d.json").read_text())
    assert set(data) == {"summary", "good", "bad", "changes"}
    assert set(data["good"]) == {"source", "format", "python", "requires_python", "packages", "options", "notes"}
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


def test_diff_cli_as_a_subprocess(tmp_path):
    write(tmp_path, "a==1.0\nb==1.0\n", "g.txt")
    write(tmp_path, "a==1.1\n", "b.txt")
    done = subprocess.run([sys.executable, "-m", "dsbisect", "diff", "g.txt", "b.txt"], cwd=tmp_path,
                          capture_output=True, text=True, env={"COLUMNS": "200", "NO_COLOR": "1", "PATH": "/usr/bin:/bin",
                                                               **_pythonpath()})
    assert done.returncode == 0, done.stderr
    assert "2 changes: 1 changed, 1 removed" in done.stdout


def _pythonpath() -> dict[str, str]:
    import os

    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
