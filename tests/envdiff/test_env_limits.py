"""Environment files within limits (issue 36: `dsbisect diff` of a 38 MB uv.lock peaked at
2.0 GB and 149 CPU-s; matrix and hostfile inputs had a 16 MB cap, environment files none).
Every way an environment file is read — named, on stdin, included with -r — is held to
``ENV_LIMIT``, refused in one line past it; at the limit a diff peaks under 100 MB.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from dsbisect.envdiff.environments import ENV_LIMIT


def _one_line_exit_2(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) == 1, res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


def _big(path: Path, size: int, head: bytes = b"version = 1\n") -> Path:
    """Text of ``size`` bytes: ``head``, then comment lines."""
    line = b"# " + b"x" * 1021 + b"\n"
    with open(path, "wb") as f:
        f.write(head)
        f.write(line * ((size - len(head)) // len(line)))
        f.write(b"#" * (size - f.tell() - 1) + b"\n")
    return path


@pytest.mark.parametrize("name", ["uv.lock", "pylock.toml", "requirements.txt", "env.txt"])
def test_an_environment_file_over_the_limit_is_one_line(tmp_path, cli, name):
    big = _big(tmp_path / name, 38 << 20)
    (tmp_path / "ok.txt").write_text("torch==2.0\n")
    res = cli("diff", str(big), str(tmp_path / "ok.txt"))
    _one_line_exit_2(res, "too large to read", "38.0 MB")


def test_an_included_file_over_the_limit_is_one_line(tmp_path, cli):
    _big(tmp_path / "big.txt", ENV_LIMIT + 1, b"torch==2.0\n")
    (tmp_path / "req.txt").write_text("-r big.txt\nnumpy==1.26\n")
    (tmp_path / "ok.txt").write_text("torch==2.0\n")
    res = cli("diff", str(tmp_path / "req.txt"), str(tmp_path / "ok.txt"))
    _one_line_exit_2(res, "cannot read -r big.txt", "too large to read")


def test_stdin_over_the_limit_is_one_line(tmp_path):
    (tmp_path / "ok.txt").write_text("torch==2.0\n")
    data = b"torch==2.0\n" + b"#" * (ENV_LIMIT + 10)
    out = subprocess.run([sys.executable, "-m", "dsbisect", "diff", "-", str(tmp_path / "ok.txt")], input=data,
                         capture_output=True)
    assert out.returncode == 2 and b"over 4.0 MB" in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def _uv_lock(path: Path, size: int, bump: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write('version = 1\nrevision = 2\nrequires-python = ">=3.10"\n\n')
        i = 0
        while f.tell() < size - 2000:
            name, ver = f"pkg{i:06d}", f"1.{i % 7}.{int(bump and i % 100 == 0)}"
            wheels = "".join(f'    {{ url = "https://files.example/{name}-{ver}-cp3{k}.whl", hash = "sha256:{i:064x}" }},\n'
                             for k in range(10, 14))
            f.write(f'[[package]]\nname = "{name}"\nversion = "{ver}"\nsource = {{ registry = "https://pypi.org/simple" }}\n'
                    f'dependencies = [\n    {{ name = "pkg{i + 1:06d}" }},\n]\nwheels = [\n{wheels}]\n\n')
            i += 1


@pytest.mark.slow
def test_a_diff_at_the_limit_peaks_under_100_mb(tmp_path):
    """Two uv.locks just under the limit (~3000 packages each): read, parsed, diffed."""
    _uv_lock(tmp_path / "g" / "uv.lock", ENV_LIMIT, False)
    _uv_lock(tmp_path / "b" / "uv.lock", ENV_LIMIT, True)
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)\n")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "dsbisect", "diff", "g/uv.lock",
                          "b/uv.lock", "--format", "json"], cwd=tmp_path, capture_output=True, text=True, check=True)
    kb, rc = map(int, out.stdout.split())
    print(f"diff of two {ENV_LIMIT >> 20} MB uv.locks: peak RSS {kb / 1024:.0f} MB")
    assert rc == 0 and kb < 100 * 1024
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # (the figure is the child's)
