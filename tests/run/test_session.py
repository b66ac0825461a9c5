"""session: what every command that runs points is given (index options, cache root, store,
runner), each checked before anything is created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsbisect.core.errors import InputError
from dsbisect.core.model import EnvOptions, IndexStrategy
from dsbisect.run.session import cache_root, index_options, open_runner, share_with


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A user with no pip or uv configuration of their own, working in an empty folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "etc-xdg"))
    monkeypatch.setenv("UV_NO_SYSTEM_CONFIG", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def test_find_links_are_made_absolute_and_a_missing_one_is_bad_input(tmp_path, home):
    (tmp_path / "wh").mkdir()
    ix = index_options(True, [Path("wh")], None, None)
    assert (ix.offline, ix.find_links) == (True, (str(tmp_path / "wh"),))
    assert ix.origin == f"offline (--offline); find-links {tmp_path / 'wh'} (--find-links)"
    with pytest.raises(InputError, match="--find-links nowhere: no such folder"):
        index_options(False, [Path("nowhere")], None, None)


@pytest.mark.parametrize("env, said", [({}, "--offline"), ({"UV_OFFLINE": "1"}, "offline (UV_OFFLINE)")])
def test_offline_without_a_wheelhouse_names_where_offline_came_from(home, monkeypatch, env, said):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(InputError, match=rf"^{said.replace('(', '[(]').replace(')', '[)]')} needs at least one"):
        index_options(not env, None, None, None)


def test_pips_several_indexes_give_the_typed_strategy_and_the_origin_says_why(home, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple/")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://extra.example/simple/")
    ix = index_options(False, None, None, None)
    assert ix.strategy is IndexStrategy.UNSAFE_BEST_MATCH
    assert ix.uv_args()[-2:] == ["--index-strategy", "unsafe-best-match"]
    assert ix.origin.endswith("; index-strategy unsafe-best-match (pip's settings, as pip would use them)")
    # the command line's own index: uv's first-index, nothing decided for pip
    monkeypatch.delenv("PIP_INDEX_URL")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL")
    assert index_options(False, None, "https://mine.example/simple/", None).strategy is None


def test_the_settings_left_out_travel_as_notes_not_into_the_stored_options(tmp_path, home, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\ncert = /corp.pem\nindex-url = https://mirror.example/simple/\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    ix = index_options(False, None, None, None)
    assert ix.notes[0] == f"pip.conf {conf}: cert not applied: dsbisect runs pip with PIP_CONFIG_FILE={os.devnull} " \
                          "(set PIP_CERT instead)"
    assert ix.notes[-1].startswith("index settings read from ") and ix.notes[-1].endswith(f"pip.conf {conf}")
    assert "notes" not in ix.to_json() and type(ix).from_json(ix.to_json()) == ix  # job.json as before


def test_open_runner_says_the_notes_once_and_checks_the_cache_root_first(tmp_path, home, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\ncert = /corp.pem\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    (tmp_path / "wh").mkdir()
    ix = index_options(True, [tmp_path / "wh"], None, None)
    said = []
    runner = open_runner(tmp_path / "store", tmp_path / "cache", EnvOptions(), ix, lambda k, t: said.append((k, t)))
    assert [t for k, t in said if k == "note" and "cert not applied" in t] == [ix.notes[0]]
    runner.store.close()

    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="is a file, not a folder"):
        open_runner(tmp_path / "store2", tmp_path / "afile" / "cache", EnvOptions(), ix, lambda k, t: None)
    assert not (tmp_path / "store2").exists()  # the cache root is checked before the store is made


def test_cache_root_and_shared_group_are_checked(tmp_path):
    assert cache_root(tmp_path / "c") == tmp_path / "c"
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match=r"--cache-dir .*/f/c: .*/f is a file, not a folder"):
        cache_root(tmp_path / "f" / "c")
    old = os.umask(0o022)
    try:
        with pytest.raises(InputError, match="--shared-group no-such-group-dsb: no such group"):
            share_with("no-such-group-dsb")
        share_with(None)
        assert os.umask(0o022) == 0o077  # private to the user by default
    finally:
        os.umask(old)
