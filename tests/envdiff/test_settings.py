"""Settings as changes (envdiff.settings, envdiff.trialcase): reading two env dumps, two configs and
two command lines, the differences as changes, and a trial's config written with its keys replaced
(YAML and TOML comments kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsbisect.core.errors import InputError
from dsbisect.core.model import Case
from dsbisect.core.proc import UNSET, without_unset
from dsbisect.envdiff.settings import (
    Where,
    config_settings,
    flag_settings,
    flag_words,
    parse_line,
    read_vars,
    setting_json,
    var_settings,
)
from dsbisect.envdiff.settingsplan import SettingsFiles, read_settings
from dsbisect.envdiff.trialcase import TrialCases, edited
from dsbisect.run.matrix import command_case

TOKEN = "hf_" + "Q" * 8 + "settingsTokenValue42"  # a Hugging Face token's shape, made up


def test_an_env_dump_is_read_with_multiline_values_quotes_and_exports(tmp_path):
    dump = tmp_path / "good.env"
    dump.write_text("A=1\nFUNC=line one\nline two\nexport B='quoted value'\n# a comment\nC=\n")
    assert read_vars(dump) == {"A": "1", "FUNC": "line one\nline two", "B": "quoted value", "C": ""}


@pytest.mark.parametrize("text, expected", [
    ("", "no variables"),
    ("not a variable\nA=1\n", "good.env:1: not NAME=value"),
])
def test_a_bad_env_dump_is_one_input_error(tmp_path, text, expected):
    (tmp_path / "good.env").write_text(text)
    with pytest.raises(InputError, match=expected):
        read_vars(tmp_path / "good.env")


def test_variables_that_differ_less_the_shells_own_and_secrets_masked():
    good = {"PWD": "/a", "SHLVL": "1", "NCCL_P2P_DISABLE": "1", "HF_TOKEN": TOKEN, "SAME": "x", "GONE": "y"}
    bad = {"PWD": "/b", "SHLVL": "2", "HF_TOKEN": TOKEN[::-1], "SAME": "x", "NEW": "z"}
    found, left = var_settings(good, bad)
    assert [s.name for s in found] == ["NCCL_P2P_DISABLE", "HF_TOKEN", "GONE", "NEW"]
    assert left == ("PWD", "SHLVL")
    shown = [s.describe() for s in found]
    assert shown[0] == "env NCCL_P2P_DISABLE 1 -> (unset)" and shown[3] == "env NEW (unset) -> z"
    assert shown[1] == "env HF_TOKEN *** -> ***"
    assert TOKEN not in json.dumps([setting_json(s) for s in found]) and TOKEN[::-1] not in json.dumps(
        [setting_json(s) for s in found])


@pytest.mark.parametrize("suffix, good, bad", [
    (".json", '{"zero_optimization": {"overlap_comm": true, "stage": 2}, "lr": 0.1}',
     '{"zero_optimization": {"overlap_comm": false, "stage": 2}, "lr": 0.1, "new": [1, 2]}'),
    (".yaml", "zero_optimization:\n  overlap_comm: true\n  stage: 2\nlr: 0.1\n",
     "zero_optimization:\n  overlap_comm: false\n  stage: 2\nlr: 0.1\nnew: [1, 2]\n"),
    (".toml", "lr = 0.1\n[zero_optimization]\noverlap_comm = true\nstage = 2\n",
     "lr = 0.1\nnew = [1, 2]\n[zero_optimization]\noverlap_comm = false\nstage = 2\n"),
])
def test_configs_of_each_format_differ_in_key_paths(tmp_path, suffix, good, bad):
    (tmp_path / f"ok{suffix}").write_text(good)
    (tmp_path / f"broken{suffix}").write_text(bad)
    found = config_settings(tmp_path / f"ok{suffix}", tmp_path / f"broken{suffix}")
    assert [(s.where, s.name, s.good, s.bad) for s in found] == [
        (Where.CONFIG, "zero_optimization.overlap_comm", "true", "false"), (Where.CONFIG, "new", None, "[1, 2]")]
    assert found[0].describe() == "config zero_optimization.overlap_comm true -> false"


@pytest.mark.parametrize("files, expected", [
    ({"ok.json": '{"a": 1}', "broken.yaml": "a: 2\n"}, "configs of different formats"),
    ({"ok.json": '{"a": 1,}', "broken.json": '{"a": 2}'}, "ok.json:1: not valid JSON"),
    ({"ok.json": '[1, 2]', "broken.json": '{"a": 2}'}, "the top of a config must be a mapping"),
    ({"ok.json": '{"a": 1}'}, "broken.json: no such file"),
    ({"ok.yaml": 'a: [1\n', "broken.yaml": "a: 2\n"}, "not valid YAML"),
    ({"ok.toml": 'a = \n', "broken.toml": "a = 2\n"}, "not valid TOML"),
])
def test_bad_configs_are_one_input_error(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    good = next(n for n in ("ok.json", "ok.yaml", "ok.toml") if n in files)
    bad = "broken" + (Path(next(n for n in files if n.startswith("broken"))).suffix
                      if any(n.startswith("broken") for n in files) else ".json")
    with pytest.raises(InputError, match=expected):
        config_settings(tmp_path / good, tmp_path / bad)


def test_yaml_and_toml_edits_keep_comments_and_other_keys():
    yaml_text = "# the run\nzero_optimization:\n  overlap_comm: true  # overlap\n  stage: 2\nlr: 0.1\n"
    out = edited(yaml_text, "yaml", [(("zero_optimization", "overlap_comm"), "false"), (("lr",), None),
                                     (("offload", "device"), '"cpu"')])
    assert "# the run" in out and "overlap_comm: false # overlap" in out.replace("  #", " #") and "lr" not in out
    assert "offload:\n  device: cpu" in out
    toml_text = "# top\nlr = 0.1 # rate\n\n[zero]\noverlap_comm = true # overlap\n"
    out = edited(toml_text, "toml", [(("zero", "overlap_comm"), "false"), (("zero", "bucket"), "500")])
    assert "# top" in out and "lr = 0.1 # rate" in out and "overlap_comm = false # overlap" in out
    assert "bucket = 500" in out
    assert edited('{\n    "a": {"b": 1}\n}', "json", [(("a", "b"), "2")]) == '{\n    "a": {\n        "b": 2\n    }\n}\n'


def test_launcher_flags_differ_and_a_trial_line_applies_some():
    good = parse_line(["torchrun", "--nproc_per_node=1", "--standalone=1", "job.py", "--steps", "3"], "good")
    bad = parse_line(["torchrun", "--nproc_per_node", "2", "job.py", "--steps", "3", "--fast"], "bad")
    found = flag_settings(good, bad)
    assert [s.describe() for s in found] == ["flag --nproc_per_node 1 -> 2", "flag --standalone 1 -> (absent)",
                                             "flag --fast (absent) -> (present)"]
    assert flag_words(good, bad, [found[0]]) == ["torchrun", "--nproc_per_node", "2", "--standalone", "1", "job.py",
                                                 "--steps", "3"]
    assert flag_words(good, bad, found[1:]) == ["torchrun", "--nproc_per_node", "1", "job.py", "--steps", "3", "--fast"]
    with pytest.raises(InputError, match="differ in more than options"):
        flag_settings(good, parse_line(["torchrun", "other.py"], "bad"))
    switch = parse_line(["torchrun", "--standalone", "job.py", "--steps", "3"], "bad")  # the switch takes job.py
    with pytest.raises(InputError, match="write --switch after it, or --name=value"):
        flag_settings(good, switch)


def test_a_trial_case_sets_and_removes_variables_and_names_its_config(tmp_path):
    (tmp_path / "job.py").write_text("pass\n")
    (tmp_path / "ok.json").write_text('{"a": 1, "b": 1}')
    (tmp_path / "broken.json").write_text('{"a": 2, "b": 2}')
    (tmp_path / "good.env").write_text("X=1\nY=keep\n")
    (tmp_path / "bad.env").write_text("X=2\n")
    words = ["python", "job.py", "--config", "broken.json"]
    files = SettingsFiles(tmp_path / "ok.json", tmp_path / "broken.json", tmp_path / "good.env", tmp_path / "bad.env")
    plan = read_settings(files, words, tmp_path)
    assert [s.describe() for s in plan.settings] == ["config a 1 -> 2", "config b 1 -> 2", "env X 1 -> 2",
                                                     "env Y keep -> (unset)"]
    base: Case = command_case(words, tmp_path)
    cases = TrialCases(plan, base, tmp_path / "cache")
    a, _, x, y = plan.settings
    trial = cases.case_for(frozenset({a, y}))
    assert without_unset(dict(trial.env)) == {"X": "1"} and dict(trial.env)["Y"] == UNSET
    written = Path(trial.args[-1])
    assert written.parent.parent == tmp_path / "cache" and json.loads(written.read_text()) == {"a": 2, "b": 1}
    assert written in [Path(p) for p, _ in trial.inputs] and trial.key != base.key
    assert cases.case_for(frozenset()).args[-1] == str((tmp_path / "ok.json").resolve())
    assert cases.case_for(frozenset(plan.settings)).args[-1] == str((tmp_path / "broken.json").resolve())


@pytest.mark.parametrize("files, words, expected", [
    ({"good_config": "ok.json"}, ["python", "job.py"], "--good-config and --bad-config go together"),
    ({"good_config": "ok.json", "bad_config": "broken.json"}, ["python", "job.py"], "does not name .*broken.json"),
    ({"good_config": "ok.txt", "bad_config": "broken.txt"}, ["python", "job.py"], "not a config dsbisect reads"),
    ({"good_vars": "ok.env", "bad_vars": "ok.env"}, ["python", "job.py"], "no difference in any setting"),
    ({"good_command": "python 'job.py"}, ["python", "job.py"], "--good-command: No closing quotation"),
])
def test_settings_input_errors(tmp_path, files, words, expected):
    (tmp_path / "ok.json").write_text('{"a": 2}')
    (tmp_path / "broken.json").write_text('{"a": 1}')
    (tmp_path / "ok.env").write_text('A=1\n')
    with pytest.raises(InputError, match=expected):
        read_settings(SettingsFiles(**{k: v if k == "good_command" else tmp_path / v for k, v in files.items()}),
                      words, tmp_path)


def test_a_config_key_that_looks_secret_is_masked(tmp_path):
    (tmp_path / "ok.json").write_text(json.dumps({"wandb": {"api_key": TOKEN}, "lr": 1}))
    (tmp_path / "broken.json").write_text(json.dumps({"wandb": {"api_key": TOKEN[::-1]}, "lr": 1}))
    (found,) = config_settings(tmp_path / "ok.json", tmp_path / "broken.json")
    assert found.describe() == "config wandb.api_key *** -> ***"
    assert TOKEN not in json.dumps(setting_json(found)) and TOKEN[::-1] not in json.dumps(setting_json(found))


def test_the_ends_are_named_by_what_differs():
    from dsbisect.envdiff.environments import Change
    from dsbisect.envdiff.settings import Setting, Where, ends_word, is_end_label

    key, var, flag = (Setting(w, ("x",), "1", "2") for w in (Where.CONFIG, Where.ENV, Where.FLAG))
    package = Change("dsb-a", None, None)
    assert [ends_word(c) for c in ([key], [key, key], [var], [flag], [key, var], [package, key], [])] == [
        "config", "config", "vars", "command", "settings", "env", "env"]
    assert is_end_label("good config") and is_end_label("bad env") and is_end_label("bad settings")
    assert not is_end_label("good + config x 1 -> 2") and not is_end_label("trial 3")
