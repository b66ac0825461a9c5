"""Reuse of a run whose package puts a folder of vendored distributions on ``sys.path`` (issue 38's
leftover): ``pkg_resources`` of setuptools >= 71 appends ``setuptools/_vendor`` (with its own
``*.dist-info``: jaraco.text, more_itertools, backports.tarfile...), and accelerate < 0.21 imports
it.  The run imports distributions from a folder inside the point venv's site folder, not from
the site folder itself; their versions now are read where the run read them, so an unchanged
vendored distribution is reused and a changed one runs again.

A toy of the same shape: ``dsb_vend`` carries ``_vendor/dsbvendored-1.0.dist-info`` and
``_vendor/dsbvendored.py``, adds ``_vendor`` to ``sys.path`` and imports it; the script's verdict
is the vendored module's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import offline
import toypkg

pytestmark = pytest.mark.slow

DIST = "dsb-vend"  # a name of its own: uv takes find-links files as immutable
INIT = "import os as _os, sys as _sys\n_sys.path.append(_os.path.join(_os.path.dirname(__file__), '_vendor'))\n"
SCRIPT = "import sys\nimport dsb_vend\nimport dsbvendored\nsys.exit(0 if dsbvendored.OK else 1)\n"


def _vendored(version: str, ok: bool) -> dict[str, bytes]:
    info = f"dsb_vend/_vendor/dsbvendored-{version}.dist-info"
    return {"dsb_vend/_vendor/dsbvendored.py": f"OK = {ok}\n".encode(),
            f"{info}/METADATA": f"Metadata-Version: 2.1\nName: dsbvendored\nVersion: {version}\n".encode(),
            f"{info}/top_level.txt": b"dsbvendored\n"}


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    out = tmp_path_factory.mktemp("vend-wheels")
    # the package's own __init__ puts its vendor folder on sys.path, as pkg_resources does
    toypkg.build_wheel(out, "1.0.0", "ok", dist=DIST, module="dsb_vend",
                       extra={"dsb_vend/__init__.py": INIT.encode()} | _vendored("1.0", True))
    return out


def _run(cli, project: Path, house: Path, cache_dir: Path):
    res = cli("run", "--versions", f"{DIST}=1.0.0", "--nproc", "1", "--accelerator", "cpu",
              *offline(house, cache_dir), "--format", "json", "--", "python", "x.py", cwd=project)
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)["runs"]
    return run, res.stderr


def test_a_vendored_distribution_is_reused_unchanged_and_runs_again_changed(cli, tmp_path, house, cache_dir):
    (tmp_path / "x.py").write_text(SCRIPT)
    first, err = _run(cli, tmp_path, house, cache_dir)
    assert first["outcome"] == "pass", (first["reason"], err)
    files = dict(map(tuple, first["environment"]["fingerprint"]["files"]))
    (vendor,) = [k.split(":", 2)[2] for k in files if k.startswith("dist:dsbvendored:")]
    assert files[f"dist:dsbvendored:{vendor}"] == "1.0" and vendor.endswith("_vendor"), files

    again, err = _run(cli, tmp_path, house, cache_dir)  # nothing changed: the recorded run stands
    assert again["id"] == first["id"] and f"(run {first['id']}, recorded)" in err, err
    assert "other inputs" not in err, err

    # the vendored copy upgraded in place (its dist-info renamed, as an installer does), and worse
    folder = Path(vendor)
    (folder / "dsbvendored-1.0.dist-info").rename(folder / "dsbvendored-1.1.dist-info")
    (folder / "dsbvendored-1.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: dsbvendored\nVersion: 1.1\n")
    (folder / "dsbvendored.py").write_text("OK = False\n")
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    changed, err = _run(cli, tmp_path, house, cache_dir)
    assert changed["id"] != first["id"] and changed["outcome"] == "fail", err
    assert f"recorded run {first['id']} is for other inputs: dsbvendored changed (1.0 -> 1.1)" in err, err
