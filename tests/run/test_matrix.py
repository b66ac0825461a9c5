"""matrix.yaml: validation with one clear line, and the points it expands to."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsbisect.core.errors import MatrixError
from dsbisect.run.matrix import load
from dsbisect.core.model import Accelerator

GOOD = """\
defaults:
  pins: ["pydantic<2"]
  collective_timeout: 30
  nproc: 2
cases:
  seed:
    script: s.py
    accelerator: cuda
    compat: [torch-elastic-socket]
    axes:
      deepspeed: ["0.9.5", "0.10.0"]
      transformers: ["4.36.2", "4.37.0", "4.39.2"]
    gpu:
      H200: {env: {HEADROOM_GB: "6.75"}}
  smoke:
    script: s.py
    nproc: 1
    points:
      - {deepspeed: "0.19.8"}
"""


def _write(tmp_path: Path, text: str, script: bool = True) -> Path:
    if script:
        (tmp_path / "s.py").write_text("print('hi')\n")
    p = tmp_path / "matrix.yaml"
    p.write_text(text)
    return p


def test_expands_axes_and_inherits_defaults(tmp_path):
    m = load(_write(tmp_path, GOOD))
    seed = m.case("seed")
    assert len(seed.points) == 6
    assert seed.points[0].versions == (("deepspeed", "0.9.5"), ("transformers", "4.36.2"))
    assert seed.points[0].requirements() == ("pydantic<2", "deepspeed==0.9.5", "transformers==4.36.2")
    assert seed.collective_timeout == 30 and seed.nproc == 2 and seed.accelerator is Accelerator.CUDA
    assert m.case("smoke").nproc == 1
    assert [p.label for p in m.case("smoke").points] == ["deepspeed 0.19.8"]


def test_gpu_override_applies_by_model_name(tmp_path):
    seed = load(_write(tmp_path, GOOD)).case("seed")
    assert dict(seed.for_gpu("NVIDIA H200").env) == {"HEADROOM_GB": "6.75"}
    assert seed.for_gpu("NVIDIA A100-SXM4-80GB").env == ()
    assert seed.for_gpu("NVIDIA H200").key != seed.key


def test_case_key_follows_script_content(tmp_path):
    path = _write(tmp_path, GOOD)
    before = load(path).case("seed").key
    (tmp_path / "s.py").write_text("print('changed')\n")
    assert load(path).case("seed").key != before


def test_point_key_is_the_requirement_set_whatever_its_order(tmp_path):
    from dataclasses import replace

    m = load(_write(tmp_path, GOOD))
    points = m.case("seed").points
    assert len({p.key for p in points}) == 6  # every versions pair its own key
    p = points[0]
    pinned = replace(p, pins=("numpy<2", "pydantic<2"))
    assert replace(p, pins=("pydantic<2", "numpy<2")).key == pinned.key  # pins in another order: same point
    assert replace(p, versions=tuple(reversed(p.versions))).key == p.key  # axes in another order too
    assert pinned.key != p.key


@pytest.mark.parametrize(
    "text, expected",
    [
        ("cases: [unclosed", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
        ("cases:\n  x:\n    script: s.py\n    axes: {deepspeed: ['0.1']}\n    colour: red\n", "cases.x.colour: Extra inputs are not permitted"),
        ("cases:\n  x:\n    script: missing.py\n    axes: {deepspeed: ['0.1']}\n", "cases.x.script: missing.py does not exist"),
        ("cases:\n  x:\n    script: s.py\n    axes: {deepspeed: []}\n", "axis 'deepspeed' lists no versions"),
        ("cases:\n  x:\n    script: s.py\n    axes: {deepspeed: ['not a version']}\n", "is not a PEP 440 version"),
        ("cases:\n  x:\n    script: s.py\n    nproc: two\n    axes: {deepspeed: ['0.1']}\n", "cases.x.nproc"),
        ("cases:\n  x:\n    script: s.py\n", "no axes or points"),
        ("cases: {}\n", "must define at least one case"),
        ("cases:\n  x:\n    script: s.py\n    compat: [time-travel]\n    axes: {deepspeed: ['0.1']}\n", "unknown compat shim 'time-travel'"),
        ("defaults:\n  pins: ['torch>>2']\ncases:\n  x:\n    script: s.py\n    axes: {deepspeed: ['0.1']}\n", "is not a requirement"),
    ],
)
def test_bad_matrix_is_one_line(tmp_path, text, expected):
    with pytest.raises(MatrixError) as e:
        load(_write(tmp_path, text))
    assert expected in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(MatrixError, match="no such matrix file"):
        load(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "nope.yaml"], "no such matrix file"),
        (["run", "matrix.yaml", "--case", "ghost"], "no case named 'ghost'"),
        (["run", "matrix.yaml", "--offline"], "--offline needs at least one --find-links"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(tmp_path, cli, args, expected):
    _write(tmp_path, GOOD)
    result = cli(*args, cwd=tmp_path)
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.output


def test_cli_malformed_yaml_exits_2(tmp_path, cli):
    _write(tmp_path, "cases:\n  x: [1, 2\n")
    result = cli("run", "matrix.yaml", cwd=tmp_path)
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: matrix.yaml:") and "not valid YAML" in result.output
