"""A machine with no network at all (a GPU node, an air-gapped cluster): an `--offline`
bisection from a wheelhouse answers, although dsbisect's best-effort looks at the public index
(releases the wheelhouse lacks, a release's date for the next step) cannot reach it."""

from __future__ import annotations

import json

import pytest

import toypkg
from conftest import offline, write_matrix

pytestmark = pytest.mark.slow


def test_an_offline_bisection_answers_with_no_network(tmp_path_factory, tmp_path, cli, cache_dir, monkeypatch):
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("dsb-nonet"),
                                    {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "raise", "1.3.0": "raise"},
                                    dist="dsb-nonet")
    # Every request goes to a proxy nobody listens on: the index is unreachable, as on the device.
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    write_matrix(tmp_path, ["1.0.0"], package="dsb-nonet", collective_timeout=3, nproc=1)
    args = ("bisect", "dsb-nonet", "1.0.0", "1.3.0", "--case", "toy", *offline(house, cache_dir), "-q")
    res = cli(*args, "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert "cannot read" not in res.output
    out = json.loads(res.stdout)
    assert (out["verdict"], out["last_good"], out["first_bad"]) == ("found", "1.1.0", "1.2.0")
    # The issue body from the same runs (reused from the store), as gpu_zoo.sh asks for it next.
    res = cli(*args, "--format", "markdown", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert "verdict: found" in res.stdout and "cannot read" not in res.output
