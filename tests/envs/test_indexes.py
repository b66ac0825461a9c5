"""One index configuration: the command line, then uv's environment and files, then pip's.

Table tests build the environment and the files (uv.toml, pyproject.toml [tool.uv], pip.conf)
in tmp_path, with ``home`` and ``etc`` there too, so the machine's own settings play no part.
The last test serves two real indexes over http and checks that the release list and a real
``uv pip install --dry-run`` given only the resolved options pick the same release.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import toypkg
from conftest import SimpleIndex

from dsbisect.core.errors import InputError
from dsbisect.envs.indexes import PYPI, pip_child_env, resolve, uv_child_env
from dsbisect.core.model import IndexOptions, IndexStrategy


def u(name: str) -> str:
    return f"https://{name}.example/simple/"


def setup(tmp_path: Path, files: dict[str, str]) -> None:
    """Write ``files`` (paths relative to tmp_path; ``{tmp}`` and ``{x}`` URLs expanded)."""
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expand(text, tmp_path))


def expand(text: str, tmp_path: Path) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: str(tmp_path) if m[1] == "tmp" else u(m[1]), text)


NO_CLI = IndexOptions()


def run(tmp_path: Path, files: dict[str, str] | None = None, env: dict[str, str] | None = None,
        cli: IndexOptions = NO_CLI, cwd: str = "proj"):
    setup(tmp_path, files or {})
    (tmp_path / cwd).mkdir(parents=True, exist_ok=True)
    env = {k: expand(v, tmp_path) for k, v in (env or {}).items()}
    return resolve(cli, env, tmp_path / cwd, tmp_path / "home", etc=tmp_path / "etc")


def toml_url(key: str, name: str) -> str:
    return f'{key} = "{{{name}}}"\n'


# ------------------------------------------------------------- the default index

EVERY_LOWER_ONE = {
    "proj/uv.toml": toml_url("index-url", "projtoml"),
    "home/.config/uv/uv.toml": toml_url("index-url", "usertoml"),
    "etc/uv/uv.toml": toml_url("index-url", "systoml"),
    "home/.config/pip/pip.conf": "[global]\nindex-url = {userpip}\n",
}
EVERY_LOWER_ENV = {"UV_INDEX_URL": "{uvindexurl}", "PIP_INDEX_URL": "{pipindexurl}"}

DEFAULT_INDEX = [
    # id, files, env, cli index url, expected index, expected source
    ("nothing", {}, {}, None, None, "default"),
    ("--index-url over everything", EVERY_LOWER_ONE, EVERY_LOWER_ENV | {"UV_DEFAULT_INDEX": "{uvdefault}"},
     "cli", "cli", "--index-url"),
    ("UV_DEFAULT_INDEX over UV_INDEX_URL (as uv)", EVERY_LOWER_ONE, EVERY_LOWER_ENV | {"UV_DEFAULT_INDEX": "{uvdefault}"},
     None, "uvdefault", "UV_DEFAULT_INDEX"),
    ("UV_INDEX_URL over the files and pip", EVERY_LOWER_ONE, EVERY_LOWER_ENV, None, "uvindexurl", "UV_INDEX_URL"),
    ("an empty UV_INDEX_URL is unset", EVERY_LOWER_ONE, {"UV_INDEX_URL": ""}, None, "projtoml", "{tmp}/proj/uv.toml"),
    ("project uv.toml over user's, system's and pip's", EVERY_LOWER_ONE, {"PIP_INDEX_URL": "{pipindexurl}"},
     None, "projtoml", "{tmp}/proj/uv.toml"),
    ("user uv.toml over system's",
     {"home/.config/uv/uv.toml": toml_url("index-url", "usertoml"), "etc/uv/uv.toml": toml_url("index-url", "systoml")},
     {}, None, "usertoml", "~/.config/uv/uv.toml"),
    ("XDG_CONFIG_HOME moves the user's file",
     {"xdg/uv/uv.toml": toml_url("index-url", "xdgtoml"), "home/.config/uv/uv.toml": toml_url("index-url", "usertoml")},
     {"XDG_CONFIG_HOME": "{tmp}/xdg"}, None, "xdgtoml", "{tmp}/xdg/uv/uv.toml"),
    ("system: XDG_CONFIG_DIRS's uv.toml over /etc/uv/uv.toml",
     {"etc/xdg/uv/uv.toml": toml_url("index-url", "xdgsys"), "etc/uv/uv.toml": toml_url("index-url", "systoml")},
     {}, None, "xdgsys", "{tmp}/etc/xdg/uv/uv.toml"),
    ("system file read", {"etc/uv/uv.toml": toml_url("index-url", "systoml")}, {}, None, "systoml", "{tmp}/etc/uv/uv.toml"),
    ("UV_NO_SYSTEM_CONFIG", {"etc/uv/uv.toml": toml_url("index-url", "systoml")}, {"UV_NO_SYSTEM_CONFIG": "1"},
     None, None, "default"),
    ("[[index]] default = true over index-url (as uv)",
     {"proj/uv.toml": toml_url("index-url", "plain") + '[[index]]\nurl = "{table}"\ndefault = true\n'},
     {}, None, "table", "{tmp}/proj/uv.toml"),
    ("a user [[index]] default over a project index-url (as uv)",
     {"proj/uv.toml": toml_url("index-url", "projtoml"),
      "home/.config/uv/uv.toml": '[[index]]\nurl = "{usertable}"\ndefault = true\n'},
     {}, None, "usertable", "~/.config/uv/uv.toml"),
    ("[pip] over the top level", {"proj/uv.toml": toml_url("index-url", "top") + "[pip]\n" + toml_url("index-url", "pipsec")},
     {}, None, "pipsec", "{tmp}/proj/uv.toml"),
    ("the nearest pyproject [tool.uv] over a uv.toml above it",
     {"proj/sub/pyproject.toml": "[tool.uv]\n" + toml_url("index-url", "nearpy"), "proj/uv.toml": toml_url("index-url", "projtoml")},
     {}, None, "nearpy", "{tmp}/proj/sub/pyproject.toml [tool.uv]"),
    ("a pyproject without [tool.uv] is passed over",
     {"proj/sub/pyproject.toml": '[project]\nname = "x"\n', "proj/uv.toml": toml_url("index-url", "projtoml")},
     {}, None, "projtoml", "{tmp}/proj/uv.toml"),
    ("uv.toml over the pyproject.toml beside it",
     {"proj/sub/uv.toml": toml_url("index-url", "besidetoml"),
      "proj/sub/pyproject.toml": "[tool.uv]\n" + toml_url("index-url", "besidepy")},
     {}, None, "besidetoml", "{tmp}/proj/sub/uv.toml"),
    ("UV_CONFIG_FILE replaces discovery and outranks UV_NO_CONFIG (as uv)",
     EVERY_LOWER_ONE | {"cf.toml": toml_url("index-url", "configfile")},
     {"UV_CONFIG_FILE": "{tmp}/cf.toml", "UV_NO_CONFIG": "1"}, None, "configfile", "{tmp}/cf.toml"),
    ("UV_NO_CONFIG: no uv file, so pip's settings count", EVERY_LOWER_ONE, {"UV_NO_CONFIG": "true"},
     None, "userpip", "pip.conf ~/.config/pip/pip.conf"),
    ("PIP_INDEX_URL when uv says nothing", {"home/.config/pip/pip.conf": "[global]\nindex-url = {userpip}\n"},
     {"PIP_INDEX_URL": "{pipindexurl}"}, None, "pipindexurl", "PIP_INDEX_URL"),
]


@pytest.mark.parametrize("files, env, cli_url, expected, source", [row[1:] for row in DEFAULT_INDEX],
                         ids=[row[0] for row in DEFAULT_INDEX])
def test_the_default_index_by_precedence(tmp_path, files, env, cli_url, expected, source):
    got = run(tmp_path, files, env, IndexOptions(index_url=u(cli_url) if cli_url else None), cwd="proj/sub")
    assert got.index.index_url == (u(expected) if expected else None)
    assert got.source("index_url") == source.replace("{tmp}", str(tmp_path))


# ------------------------------------------------------------------- pip's files

PIP_FILES = [
    # id, files, env, expected index, expected source
    ("PIP_INDEX_URL over every file",
     {"pipcf.conf": "[global]\nindex-url = {envfile}\n", "venv/pip.conf": "[install]\nindex-url = {site}\n"},
     {"PIP_INDEX_URL": "{envvar}", "PIP_CONFIG_FILE": "{tmp}/pipcf.conf", "VIRTUAL_ENV": "{tmp}/venv"},
     "envvar", "PIP_INDEX_URL"),
    ("PIP_CONFIG_FILE over the site file (pip's code and docs since 23.1)",
     {"pipcf.conf": "[global]\nindex-url = {envfile}\n", "venv/pip.conf": "[global]\nindex-url = {site}\n"},
     {"PIP_CONFIG_FILE": "{tmp}/pipcf.conf", "VIRTUAL_ENV": "{tmp}/venv"}, "envfile", "pip.conf {tmp}/pipcf.conf"),
    ("the site file over the user's",
     {"venv/pip.conf": "[global]\nindex-url = {site}\n", "home/.config/pip/pip.conf": "[global]\nindex-url = {user}\n"},
     {"VIRTUAL_ENV": "{tmp}/venv"}, "site", "pip.conf {tmp}/venv/pip.conf"),
    ("~/.config/pip over the legacy ~/.pip",
     {"home/.config/pip/pip.conf": "[global]\nindex-url = {user}\n", "home/.pip/pip.conf": "[global]\nindex-url = {legacy}\n"},
     {}, "user", "pip.conf ~/.config/pip/pip.conf"),
    ("the legacy user file over the global ones",
     {"home/.pip/pip.conf": "[global]\nindex-url = {legacy}\n", "etc/pip.conf": "[global]\nindex-url = {etc}\n"},
     {}, "legacy", "pip.conf ~/.pip/pip.conf"),
    ("/etc/pip.conf over /etc/xdg/pip/pip.conf",
     {"etc/pip.conf": "[global]\nindex-url = {etc}\n", "etc/xdg/pip/pip.conf": "[global]\nindex-url = {xdg}\n"},
     {}, "etc", "pip.conf {tmp}/etc/pip.conf"),
    ("[install] over [global], whatever the file",
     {"etc/pip.conf": "[install]\nindex_url = {etcinstall}\n", "home/.config/pip/pip.conf": "[global]\nindex-url = {user}\n"},
     {}, "etcinstall", "pip.conf {tmp}/etc/pip.conf"),
    ("a PIP_CONFIG_FILE that exists hides the user's files",
     {"pipcf.conf": "[global]\ntimeout = 5\n", "home/.config/pip/pip.conf": "[global]\nindex-url = {user}\n",
      "etc/pip.conf": "[global]\nindex-url = {etc}\n"},
     {"PIP_CONFIG_FILE": "{tmp}/pipcf.conf"}, "etc", "pip.conf {tmp}/etc/pip.conf"),
    ("a PIP_CONFIG_FILE that does not exist hides nothing",
     {"home/.config/pip/pip.conf": "[global]\nindex-url = {user}\n"},
     {"PIP_CONFIG_FILE": "{tmp}/missing.conf"}, "user", "pip.conf ~/.config/pip/pip.conf"),
    ("PIP_CONFIG_FILE=os.devnull: no file at all",
     {"home/.config/pip/pip.conf": "[global]\nindex-url = {user}\n", "etc/pip.conf": "[global]\nindex-url = {etc}\n"},
     {"PIP_CONFIG_FILE": os.devnull}, None, "default"),
    ("other sections are not pip install's", {"etc/pip.conf": "[download]\nindex-url = {download}\n"}, {}, None, "default"),
]


@pytest.mark.parametrize("files, env, expected, source", [row[1:] for row in PIP_FILES], ids=[row[0] for row in PIP_FILES])
def test_pips_settings_by_pips_precedence(tmp_path, files, env, expected, source):
    got = run(tmp_path, files, env)
    assert got.index.index_url == (u(expected) if expected else None)
    assert got.source("index_url") == source.replace("{tmp}", str(tmp_path))


def test_pip_lists_are_replaced_not_joined_and_paths_are_against_cwd(tmp_path):
    got = run(tmp_path, {"etc/pip.conf": "[global]\nextra-index-url = {a}\n  {b}\nfind-links = /w1\n",
                         "home/.config/pip/pip.conf": "[install]\nextra-index-url = {c} {d}\n"},
              {"PIP_FIND_LINKS": "rel file:///abs/house"})
    assert got.index.extra_index_urls == (u("c"), u("d"))
    assert got.index.find_links == (str(tmp_path / "proj" / "rel"), "/abs/house")
    assert got.source("extra_index_urls") == "pip.conf ~/.config/pip/pip.conf"
    assert got.source("find_links") == "PIP_FIND_LINKS"


# ------------------------------------------------------- uv first, pip otherwise


def test_pip_counts_only_when_uv_says_nothing_and_the_notes_say_so(tmp_path):
    files = {"home/.config/pip/pip.conf": "[global]\nextra-index-url = {pipextra}\nfind-links = /pipwheels\n"}
    got = run(tmp_path, files, {"UV_EXTRA_INDEX_URL": "{uvextra}", "PIP_INDEX_URL": "{pipindex}"})
    assert got.index == IndexOptions(extra_index_urls=(u("uvextra"),))  # PyPI, as uv would do
    assert got.source("index_url") == "default"
    text = "\n".join(got.notes)
    assert f"PIP_INDEX_URL: index-url {u('pipindex')} ignored" in text
    assert f"pip.conf ~/.config/pip/pip.conf: extra-index-url {u('pipextra')} ignored" in text
    assert "find-links /pipwheels ignored" in text and "(UV_EXTRA_INDEX_URL)" in text

    # uv says nothing: pip's settings are the configuration, and the command line adds to them.
    got = run(tmp_path, files, {"PIP_INDEX_URL": "{pipindex}"}, IndexOptions(find_links=("/cli",)))
    # several indexes from pip's settings: the best version of any, as pip takes them
    assert got.index == IndexOptions(index_url=u("pipindex"), extra_index_urls=(u("pipextra"),),
                                     find_links=("/cli", "/pipwheels"), strategy=IndexStrategy.UNSAFE_BEST_MATCH)
    assert got.source("index_strategy") == "pip's settings, as pip would use them"
    assert got.source("find_links") == "--find-links, pip.conf ~/.config/pip/pip.conf"
    assert not [n for n in got.notes if "ignored" in n]
    assert got.describe().endswith("; index-strategy unsafe-best-match (pip's settings, as pip would use them)")

    # pip's settings name only a wheelhouse, or a uv strategy is set: nothing is decided for them
    files = {"home/.config/pip/pip.conf": "[global]\nfind-links = /pipwheels\n"}
    assert run(tmp_path, files).index.strategy is None
    got = run(tmp_path / "fresh", {}, {"PIP_INDEX_URL": "{pipindex}", "UV_INDEX_STRATEGY": "first-index"})
    assert (got.index.strategy, got.source("index_strategy")) == (IndexStrategy.FIRST_INDEX, "UV_INDEX_STRATEGY")
    # the command line's index alone is uv's
    assert run(tmp_path / "fresh", {}, {}, IndexOptions(index_url=u("cli"))).index.strategy is None


def test_extra_indexes_in_uvs_order_joined_across_files(tmp_path):
    files = {
        "proj/uv.toml": 'index-url = "{default}"\nextra-index-url = ["{t2}"]\n'
                        '[[index]]\nurl = "{t1}"\n'
                        '[[index]]\nname = "private"\nurl = "{x}"\nexplicit = true\n'
                        '[[index]]\nurl = "{default}"\n',
        "home/.config/uv/uv.toml": 'extra-index-url = ["{u1}", "{t2}"]\n',
    }
    got = run(tmp_path, files, {"UV_INDEX": "{i1} named={i2}", "UV_EXTRA_INDEX_URL": "{e1}"},
              IndexOptions(extra_index_urls=(u("c1"),)))
    assert got.index.index_url == u("default")
    # command line, UV_INDEX, UV_EXTRA_INDEX_URL, the files' [[index]], the files' extra-index-url;
    # the explicit index is not used, duplicates (and the default itself) once.
    assert got.index.extra_index_urls == tuple(u(n) for n in ("c1", "i1", "i2", "e1", "t1", "t2", "u1"))
    assert got.source("extra_index_urls") == (f"--extra-index-url, UV_INDEX, UV_EXTRA_INDEX_URL, "
                                              f"{tmp_path}/proj/uv.toml, ~/.config/uv/uv.toml")


def test_an_index_named_in_UV_INDEX_is_taken_from_the_files(tmp_path):
    files = {"proj/uv.toml": '[[index]]\nname = "torch"\nurl = "{torch}"\nexplicit = true\n'}
    assert run(tmp_path, files).index.extra_index_urls == ()
    got = run(tmp_path, files, {"UV_INDEX": "torch", "UV_INDEX_TORCH_USERNAME": "me"})
    assert got.index.extra_index_urls == (u("torch"),)
    assert any("UV_INDEX_TORCH_*" in n for n in got.notes)


def test_find_links_from_everywhere_paths_made_absolute_where_each_tool_would(tmp_path):
    files = {"proj/uv.toml": 'find-links = ["wheels", "file:///srv/house", "https://h.example/links/"]\n',
             "home/.config/uv/uv.toml": 'find-links = ["/userwheels"]\n'}
    got = run(tmp_path, files, {"UV_FIND_LINKS": "envrel,/envabs"}, IndexOptions(find_links=("/cli",)), cwd="proj/sub")
    assert got.index.find_links == ("/cli", str(tmp_path / "proj/sub/envrel"), "/envabs", str(tmp_path / "proj/wheels"),
                                    "/srv/house", "https://h.example/links/", "/userwheels")
    assert got.source("find_links") == f"--find-links, UV_FIND_LINKS, {tmp_path}/proj/uv.toml, ~/.config/uv/uv.toml"


def test_a_flat_index_is_a_find_links_location(tmp_path):
    got = run(tmp_path, {"proj/uv.toml": '[[index]]\nurl = "/flat"\nformat = "flat"\n'})
    assert got.index == IndexOptions(find_links=("/flat",))


@pytest.mark.parametrize("files, env, cli, source", [
    ({}, {}, IndexOptions(offline=True, find_links=("/w",)), "--offline"),
    ({}, {"UV_OFFLINE": "1"}, IndexOptions(), "UV_OFFLINE"),
    ({"proj/uv.toml": "offline = true\n"}, {}, IndexOptions(), "{tmp}/proj/uv.toml"),
    ({"proj/uv.toml": "[pip]\nno-index = true\n"}, {}, IndexOptions(), "{tmp}/proj/uv.toml"),
    ({"home/.config/pip/pip.conf": "[global]\nno-index = yes\n"}, {}, IndexOptions(), "pip.conf ~/.config/pip/pip.conf"),
    ({}, {"PIP_NO_INDEX": "1"}, IndexOptions(), "PIP_NO_INDEX"),
], ids=["--offline", "UV_OFFLINE", "uv offline", "uv no-index", "pip.conf no-index", "PIP_NO_INDEX"])
def test_offline_and_no_index(tmp_path, files, env, cli, source):
    got = run(tmp_path, files, env, cli)
    assert got.index.offline and got.source("offline") == source.replace("{tmp}", str(tmp_path))
    assert "--no-index" in got.index.uv_args()


def test_offline_settings_that_do_not_apply(tmp_path):
    assert not run(tmp_path, {}, {"UV_OFFLINE": "false", "PIP_NO_INDEX": "no"}).index.offline
    # a nearer no-index = false wins over a farther true; pip's no-index is ignored once uv says something
    got = run(tmp_path, {"proj/uv.toml": "no-index = false\n", "home/.config/uv/uv.toml": "no-index = true\n"},
              {"PIP_NO_INDEX": "1"})
    assert not got.index.offline
    assert any(n.startswith("PIP_NO_INDEX: no-index ignored") for n in got.notes)


def test_index_strategy(tmp_path):
    files = {"proj/uv.toml": 'index-strategy = "unsafe-first-match"\n[pip]\nindex-strategy = "unsafe-best-match"\n'}
    got = run(tmp_path, files)
    assert (got.index_strategy, got.source("index_strategy")) == ("unsafe-best-match", f"{tmp_path}/proj/uv.toml")
    got = run(tmp_path, files, {"UV_INDEX_STRATEGY": "first-index"})
    assert (got.index_strategy, got.source("index_strategy")) == ("first-index", "UV_INDEX_STRATEGY")
    assert run(tmp_path / "other", {}).index_strategy is None


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize("files, env, message", [
    ({"proj/uv.toml": "index-url = \n"}, {}, "{tmp}/proj/uv.toml: not valid TOML"),
    ({"proj/uv.toml": "index-url = 3\n"}, {}, "{tmp}/proj/uv.toml: index-url must be a string"),
    ({"proj/uv.toml": 'extra-index-url = "{a}"\n'}, {}, "{tmp}/proj/uv.toml: extra-index-url must be a list of strings"),
    ({"proj/uv.toml": "[[index]]\ndefault = true\n"}, {}, "{tmp}/proj/uv.toml: every [[index]] needs a url"),
    ({"proj/uv.toml": 'index-strategy = "fastest"\n'}, {}, "index-strategy = 'fastest': not one of"),
    ({"home/.config/uv/uv.toml": "[pip\n"}, {}, "~/.config/uv/uv.toml: not valid TOML"),
    ({"etc/uv/uv.toml": "offline = 1\n"}, {}, "{tmp}/etc/uv/uv.toml: offline must be true or false"),
    ({"home/.config/pip/pip.conf": "index-url = {a}\n[global\n"}, {}, "pip.conf ~/.config/pip/pip.conf: not a valid pip configuration file"),
    ({"etc/pip.conf": "[global]\nno-index = maybe\n"}, {}, "pip.conf {tmp}/etc/pip.conf: no-index = 'maybe' is not a boolean"),
    ({}, {"PIP_NO_INDEX": "sometimes"}, "PIP_NO_INDEX: no-index = 'sometimes' is not a boolean"),
    ({}, {"UV_OFFLINE": "maybe"}, "UV_OFFLINE=maybe: not a boolean"),
    ({}, {"UV_INDEX_STRATEGY": "best"}, "UV_INDEX_STRATEGY=best: not one of"),
    ({}, {"UV_CONFIG_FILE": "{tmp}/nope.toml"}, "UV_CONFIG_FILE={tmp}/nope.toml: no such file"),
], ids=["uv.toml toml", "uv.toml type", "uv.toml list", "index url", "strategy", "user toml", "system type",
        "pip.conf syntax", "pip.conf bool", "PIP_NO_INDEX", "UV_OFFLINE", "UV_INDEX_STRATEGY", "UV_CONFIG_FILE"])
def test_a_malformed_file_or_value_is_one_line_naming_it(tmp_path, files, env, message):
    with pytest.raises(InputError) as e:
        run(tmp_path, files, env)
    assert message.replace("{tmp}", str(tmp_path)) in str(e.value)
    assert "\n" not in str(e.value)


def test_a_pyproject_uv_cannot_read_is_passed_over_as_uv_does(tmp_path):
    for broken in ("this is [ not toml", "[tool.uv]\nindex-url = 3\n"):
        got = run(tmp_path, {"proj/sub/pyproject.toml": broken, "proj/uv.toml": toml_url("index-url", "parent")},
                  cwd="proj/sub")
        assert got.index.index_url == u("parent")
        assert any(n.startswith(f"{tmp_path}/proj/sub/pyproject.toml") and "passed over" in n for n in got.notes)


# ------------------------------------------------------------- what reports show


def test_describe_and_json_hide_credentials_the_runs_keep_them(tmp_path):
    got = run(tmp_path, {}, {"UV_INDEX_URL": "https://me:s3cret@mirror.example/simple",
                             "UV_EXTRA_INDEX_URL": "https://tok:s3cret@extra.example/simple",
                             "PIP_INDEX_URL": "https://pip:s3cret@pip.example/simple"})
    line = got.describe()
    assert line == ("index https://***@mirror.example/simple (UV_INDEX_URL); "
                    "extra https://***@extra.example/simple (UV_EXTRA_INDEX_URL)")
    assert "s3cret" not in " ".join(got.notes)
    assert "s3cret" in got.index.index_url  # uv and the release list need them
    assert run(tmp_path / "other").describe() == f"index {PYPI} (default)"


def test_describe_offline_and_the_rest(tmp_path):
    got = run(tmp_path, {"proj/uv.toml": 'index-strategy = "unsafe-best-match"\n'},
              {"UV_OFFLINE": "yes"}, IndexOptions(find_links=("/w",)))
    assert got.describe() == (f"offline (UV_OFFLINE); find-links /w (--find-links); "
                              f"index-strategy unsafe-best-match ({tmp_path}/proj/uv.toml)")


def test_notes_name_what_uv_and_pip_will_not_see(tmp_path):
    got = run(tmp_path, {"home/.config/uv/uv.toml": 'native-tls = true\ncache-dir = "/c"\n[pip]\nprerelease = "allow"\n',
                         "etc/pip.conf": "[global]\ncert = /ca.pem\ntimeout = 60\n[install]\ntrusted-host = h\n"},
              {"UV_DEFAULT_INDEX": "{a}", "UV_INDEX_URL": "{b}"})
    text = "\n".join(got.notes)
    assert "~/.config/uv/uv.toml: native-tls, pip.prerelease not applied: dsbisect runs uv with --no-config" in text
    assert f"UV_INDEX_URL: default index {u('b')} not used: UV_DEFAULT_INDEX comes first" in text
    assert f"pip.conf {tmp_path}/etc/pip.conf: cert not applied" in text and "trusted-host not applied" in text
    assert "timeout" not in text and "cache-dir" not in text
    assert got.files == ("~/.config/uv/uv.toml", f"pip.conf {tmp_path}/etc/pip.conf")


def test_resolved_is_frozen_and_hashable(tmp_path):
    got = run(tmp_path, {}, {"UV_INDEX_URL": "{a}"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.index = IndexOptions()  # type: ignore[misc]
    assert hash(got) == hash(run(tmp_path, {}, {"UV_INDEX_URL": "{a}"}))


def test_child_environments_leave_only_the_explicit_arguments():
    env = {"UV_INDEX_URL": "x", "UV_DEFAULT_INDEX": "x", "UV_INDEX": "x", "UV_EXTRA_INDEX_URL": "x", "UV_FIND_LINKS": "x",
           "UV_OFFLINE": "1", "UV_CONFIG_FILE": "x", "UV_CACHE_DIR": "/c", "PIP_INDEX_URL": "x", "PIP_EXTRA_INDEX_URL": "x",
           "PIP_FIND_LINKS": "x", "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": "x", "PIP_CERT": "/ca", "PATH": "/bin"}
    assert uv_child_env(env) == {"UV_CACHE_DIR": "/c", "PIP_INDEX_URL": "x", "PIP_EXTRA_INDEX_URL": "x",
                                 "PIP_FIND_LINKS": "x", "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": "x", "PIP_CERT": "/ca",
                                 "PATH": "/bin", "UV_NO_CONFIG": "1"}
    assert pip_child_env(env) == {k: v for k, v in env.items() if not k.startswith("PIP_") or k == "PIP_CERT"} | {
        "PIP_CONFIG_FILE": os.devnull}


# ------------------------------------------- listing and installing agree (http)


@pytest.fixture
def two_indexes(tmp_path):
    """Index A holds dsb-idx 1.0.0 and 1.1.0, index B 2.0.0 and 2.1.0."""
    made = {}
    for name, versions in (("A", ("1.0.0", "1.1.0")), ("B", ("2.0.0", "2.1.0"))):
        index = SimpleIndex(tmp_path / f"index{name}")
        for v in versions:
            index.add(toypkg.build_wheel(tmp_path / "w" / name, v, "ok", dist="dsb-idx"))
        made[name] = index
    yield made
    for index in made.values():
        index.close()


@pytest.mark.slow  # about 1.5 s a case: a real uv venv and dry runs, pypi-simple's first import
@pytest.mark.parametrize("setting", ["UV_INDEX_URL", "PIP_INDEX_URL", "uv.toml"])
def test_the_release_list_and_uv_see_the_same_index(tmp_path, two_indexes, monkeypatch, setting):
    from dsbisect.envs.uv import Uv, uv_bin
    from dsbisect.envs.versions import releases

    a, b = two_indexes["A"].url, two_indexes["B"].url
    proj = tmp_path / "proj"
    proj.mkdir()
    env = {"PIP_INDEX_URL": a}  # what uv ignores: only B may be seen
    if setting == "UV_INDEX_URL":
        env["UV_INDEX_URL"] = b
    elif setting == "PIP_INDEX_URL":
        env = {"PIP_INDEX_URL": b}
    else:
        (proj / "uv.toml").write_text(f'index-url = "{b}"\n')
    got = resolve(IndexOptions(), env, proj, tmp_path / "home", etc=tmp_path / "etc")
    assert got.index.index_url == b

    listed = [str(r.version) for r in releases("dsb-idx", got.index)]
    assert listed == ["2.0.0", "2.1.0"]

    # uv as dsbisect should run it: its own index variables and files out of the way, so the
    # resolved options alone decide (without them it would go to PyPI, which is not reachable here).
    for k in list(os.environ):
        if k.startswith(("UV_", "PIP_")) and k != "UV_CACHE_DIR":
            monkeypatch.delenv(k)
    for k, v in uv_child_env({}, got).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    uv = Uv(tmp_path / "uvcache", got.index)
    uv.venv(tmp_path / "venv", sys.executable)
    plan = uv.dry_run(tmp_path / "venv", ["dsb-idx"])
    assert re.search(r"dsb-idx==(\S+)", plan)[1] == listed[-1]
    assert re.search(r"dsb-idx==(\S+)", uv.dry_run(tmp_path / "venv", ["dsb-idx<2.1"]))[1] == "2.0.0"

    if setting != "PIP_INDEX_URL":
        # uv reading the same setting by itself (no arguments) agrees with the resolver.
        monkeypatch.delenv("UV_NO_CONFIG")
        monkeypatch.setenv("UV_NO_SYSTEM_CONFIG", "1")  # as resolve's etc, which is empty
        monkeypatch.chdir(proj)
        for k, v in env.items():
            if k.startswith("UV_"):
                monkeypatch.setenv(k, v)
        # uv itself, as a user runs it (dsbisect's Uv takes these settings away from it on purpose)
        own = subprocess.run([uv_bin(), "pip", "install", "--dry-run", "--python", str(tmp_path / "venv" / "bin" / "python"),
                              "dsb-idx"], capture_output=True, text=True, cwd=proj,
                             env=dict(os.environ, UV_CACHE_DIR=str(tmp_path / "uvcache")))
        assert own.returncode == 0, own.stderr
        assert re.search(r"dsb-idx==(\S+)", own.stderr + own.stdout)[1] == listed[-1]
