"""Numbers in the run grid (issue 38): a matrix case that declares ``metric:`` shows, in each
cell beside PASS/FAIL, the median of that metric over its runs (and their spread when more than
one run gave it); the JSON cell carries every value.  Real 2-rank runs of toy releases that
report a loss; a bad ``metric:`` is one line and exit 2."""

from __future__ import annotations

import json

import pytest

import toypkg
from conftest import offline, write_matrix


@pytest.mark.slow
def test_a_case_with_a_metric_shows_its_value_in_each_cell(tmp_path, cli, cache_dir):
    house = toypkg.build_wheelhouse(tmp_path / "house", {"1.0.0": "loss1", "1.2.0": "loss2"}, dist="dsb-gridloss")
    write_matrix(tmp_path, ["1.0.0", "1.2.0"], package="dsb-gridloss", extra="    metric: loss@step5\n")
    res = cli("run", "matrix.yaml", "--repeat", "2", *offline(house, cache_dir), "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    cells = {row["point"]: row["cells"]["toy"] for row in out["grid"]}
    old, new = (next(c for p, c in cells.items() if v in p) for v in ("1.0.0", "1.2.0"))
    assert old["outcome"] == "pass" and old["metric"]["values"] == [1.5, 1.5] and old["metric"]["median"] == 1.5
    assert new["metric"]["values"] == [1.75, 1.75] and new["metric"]["spread"] == 0.0
    assert new["metric"]["shown"] == "loss@step5 1.75 (2 runs)"
    md = cli("run", "matrix.yaml", "--repeat", "2", *offline(house, cache_dir), "--format", "markdown", cwd=tmp_path)
    assert md.exit_code == 0, md.output  # the recorded runs, shown again
    assert "PASS" in md.stdout and "· loss@step5 1.5 (2 runs)" in md.stdout and "· loss@step5 1.75 (2 runs)" in md.stdout


def test_a_bad_metric_in_the_matrix_is_one_line_and_exit_2(tmp_path, cli):
    write_matrix(tmp_path, ["1.0.0"], extra="    metric: lo ss\n")
    res = cli("run", "matrix.yaml", cwd=tmp_path)
    assert res.exit_code == 2 and "a metric name is" in res.output and "Traceback" not in res.output, res.output
    assert len([ln for ln in res.output.splitlines() if ln.strip()]) == 1
