"""The command line's own behaviour: every command's options, bad input (one line, exit 2,
nothing created), environment failures (exit 1), and the exit code of each signal on the
paths that run something (exit 130 for Ctrl-C, 143 for SIGTERM)."""

from __future__ import annotations

import http.server
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import typer

from conftest import TOY_RELEASES, git, live_pids, offline, slurm_job_under, wait_until, write_matrix

# Every command's arguments and options, in the order --help lists them (the names are the
# command line's contract: scripts and READMEs spell them).
OPTIONS = {
    'bisect': ['PACKAGE', 'GOOD', 'BAD', 'COMMAND', '--case', '--script', '--matrix', '--pin', '--nproc', '--accelerator', '--regress-on', '--any-failure', '--find-fix', '--fixed-in', '--fixed-in-upto', '--repeat', '--confirm', '--signature', '--confidence', '--git-repo', '--verify-commit-ends --no-verify-commit-ends', '--prove --no-prove', '--metric', '--worse-if', '--metric-pattern', '--pre', '--include-yanked', '--manual', '--good-env', '--bad-env', '--hold', '--good-config', '--bad-config', '--good-vars', '--bad-vars', '--good-command', '--commits', '--max-runs', '--deadline', '--store', '--timeout', '--collective-timeout', '--idle-timeout', '--no-early-hang', '--offline', '--find-links', '--index-url', '--extra-index-url', '--cache-dir --env-root', '--python', '--base', '--jobs -j', '--executor', '--partition', '--slurm-time', '--gpus-per-job', '--slurm-arg', '--hostfile', '--num-nodes', '--launcher-backend', '--master-addr', '--include', '--exclude', '--format', '--output -o', '--quiet -q'],
    'diff': ['GOOD', 'BAD', '--python', '--format', '--output -o', '--quiet -q', '--offline', '--find-links', '--index-url', '--extra-index-url'],
    'envs list': ['--cache-dir --env-root'],
    'envs prune': ['--cache-dir --env-root', '--all', '--older-than'],
    'log': ['KEY', '--store'],
    'mark': ['VERDICT', 'ARGS', '--case', '--script', '--matrix', '--pin', '--nproc', '--accelerator', '--commit', '--git-repo', '--note', '--store', '--timeout', '--collective-timeout', '--idle-timeout', '--no-early-hang', '--hostfile', '--num-nodes', '--launcher-backend', '--master-addr', '--include', '--exclude'],
    'prefetch': ['MATRIX', '--dest', '--case', '--versions', '--with-candidates', '--python-version', '--platform', '--base-snapshot', '--tool', '--cases --no-cases', '--extra', '--git-repo', '--commits', '--package', '--good-env', '--bad-env', '--hold', '--cache-dir --env-root', '--offline', '--find-links', '--index-url', '--extra-index-url'],
    'replay': ['FILE', '--store'],
    'report': ['--store', '--case', '--bisection', '--html', '--format', '--output -o', '--quiet -q'],
    'run': ['ARGS', '--case', '--versions', '--pin', '--nproc', '--accelerator', '--rerun', '--repeat', '--store', '--timeout', '--collective-timeout', '--idle-timeout', '--no-early-hang', '--offline', '--find-links', '--index-url', '--extra-index-url', '--cache-dir --env-root', '--python', '--base', '--jobs -j', '--executor', '--partition', '--slurm-time', '--gpus-per-job', '--slurm-arg', '--hostfile', '--num-nodes', '--launcher-backend', '--master-addr', '--include', '--exclude', '--format', '--output -o', '--quiet -q'],
    'run-one': ['SPEC'],
    'show': ['RUN_ID', '--store', '--lines', '--format', '--output -o'],
    'snapshot-base': ['--output -o', '--python'],
    'store repair': ['--store'],
    'workaround': ['COMMAND', '--config', '--pin', '--knob', '--only-own', '--repeat', '--accelerator', '--max-group', '--max-group-runs', '--every-group', '--store', '--timeout', '--collective-timeout', '--idle-timeout', '--no-early-hang', '--offline', '--find-links', '--index-url', '--extra-index-url', '--cache-dir --env-root', '--python', '--base', '--jobs -j', '--executor', '--partition', '--slurm-time', '--gpus-per-job', '--slurm-arg', '--hostfile', '--num-nodes', '--launcher-backend', '--master-addr', '--include', '--exclude', '--format', '--output -o', '--quiet -q'],
    'versions': ['PACKAGE', 'GOOD', 'BAD', '--pre', '--offline', '--find-links', '--index-url', '--extra-index-url'],
}


def _commands():
    from dsbisect.cli import app

    def walk(group, prefix):
        for name, sub in sorted(group.commands.items()):
            if hasattr(sub, "commands"):
                yield from walk(sub, (*prefix, name))
            else:
                yield " ".join((*prefix, name)), sub
    return dict(walk(typer.main.get_command(app), ()))


def test_every_command_keeps_its_options():
    found = {name: [" ".join(p.opts + p.secondary_opts) if p.param_type_name == "option" else p.name.upper()
                    for p in c.params] for name, c in _commands().items()}
    assert found == OPTIONS


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_help_lists_every_option(cli, name):
    res = cli(*name.split(), "--help")
    assert res.exit_code == 0, res.output
    for option in OPTIONS[name]:
        if option.startswith("-"):
            assert option.split()[0] in res.stdout, option


def _one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.mark.parametrize("args, words", [
    (["run", "--nproc", "zero"], "--nproc"),
    (["run", "--no-such-option"], "no-such-option"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--regress-on", "sometimes", "--case", "toy"], "--regress-on"),
    (["run", "nosuch.yaml"], "nosuch.yaml"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--index-url", "not a url"], "not a usable URL"),
])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, args, words):
    write_matrix(tmp_path, ["1.0.0"])
    before = sorted(p.name for p in tmp_path.iterdir())
    res = cli(*args, cwd=tmp_path)
    assert res.exit_code == 2, res.stderr
    assert words in _one_line(res)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# ------------------------------------------------------------ environment failures: exit 1

class _Failing(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"down for maintenance")

    def log_message(self, *args):
        pass


@pytest.fixture
def failing_index():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()
    server.server_close()


def _refused() -> str:
    import socket

    with socket.socket() as s:  # a port nothing listens on (bound, then closed)
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/simple/"


@pytest.mark.parametrize("where", ["refused", "server error", "no such host"])
@pytest.mark.parametrize("command", ["versions", "bisect", "run"])
def test_an_index_that_cannot_be_read_is_exit_1_and_creates_nothing(tmp_path, cli, monkeypatch, failing_index, where,
                                                                     command):
    url = {"refused": _refused(), "server error": failing_index, "no such host": "http://dsbisect.invalid/simple/"}[where]
    write_matrix(tmp_path, ["1.0.0"])
    args = {"versions": ["versions", "dsb-toy"],
            "bisect": ["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy"],
            "run": ["run", "--versions", "dsb-toy=1.0.0,1.1.0", "--", "python", "toy_repro.py"]}[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.setenv("DSBISECT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DSBISECT_NET_BACKOFF", "0.01")  # the backoff of a real run, shorter
    res = cli(args[0], "--index-url", url, *args[1:], cwd=tmp_path)
    assert res.exit_code == 1, res.stderr
    *retries, error = res.stderr.strip().splitlines()
    assert error.startswith("error: cannot read dsb-toy from the index") and "Traceback" not in res.stderr
    # a transient failure (a 503, a name that does not resolve) is tried again, each retry said; a refusal is not
    assert [r.split("; ")[-1] for r in retries] == ([] if where == "refused" else [
        f"trying again in {s:g} s (retry {k} of 3)" for k, s in ((1, 0.01), (2, 0.02), (3, 0.04))])
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _damaged_clone(tmp_path: Path) -> Path:
    """A clone whose tags resolve but whose history between them is gone (a lost object)."""
    repo = tmp_path / "clone"
    repo.mkdir()
    git(repo, "init", "-q")
    for i in range(3):
        (repo / "f.txt").write_text(f"{i}\n")
        git(repo, "add", "f.txt")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        git(repo, "tag", f"v1.{i}.0")
    middle = git(repo, "rev-parse", "v1.1.0").strip()
    obj = repo / ".git" / "objects" / middle[:2] / middle[2:]
    obj.chmod(0o644)
    obj.unlink()
    return repo


def test_a_git_failure_is_exit_1_and_a_missing_ref_exit_2(tmp_path):
    from dsbisect.envs import gitrepo
    from dsbisect.core.errors import ExternalFailure, InputError

    repo = _damaged_clone(tmp_path)
    with pytest.raises(ExternalFailure, match="git log --first-parent in .* failed") as failed:
        gitrepo.commits_between(repo, "v1.0.0", "v1.2.0")
    assert failed.value.exit_code == 1
    with pytest.raises(InputError, match="has no commit 'v9.9.9'") as missing:
        gitrepo.resolve(repo, "v9.9.9")
    assert missing.value.exit_code == 2
    assert gitrepo.resolve(repo, "v1.2.0") == git(repo, "rev-parse", "v1.2.0").strip()


def test_a_git_failure_on_the_command_line_is_one_line_and_exit_1(tmp_path, cli, monkeypatch):
    repo = _damaged_clone(tmp_path)
    monkeypatch.setenv("DSBISECT_CACHE_DIR", str(tmp_path / "cache"))
    res = cli("prefetch", "--no-cases", "--git-repo", str(repo), "--commits", "v1.0.0..v1.2.0",
              "--package", "dsb-clone", "--dest", str(tmp_path / "wh"), cwd=tmp_path)
    assert res.exit_code == 1, res.stderr
    assert "git log --first-parent in" in _one_line(res) and "failed" in res.stderr


# ------------------------------------------------------------------------ signals

SLEEPER = """\
import os, time
open(os.path.join(os.environ["DSBISECT_RUN_DIR"], "sleeping"), "w").write(str(os.getpid()))
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_a_bisection_with_its_exit_code(tmp_path, wheelhouse, cache_dir, sig, code):
    """`run`'s paths are tests/run/test_reliability.py's; a bisection's run of its first end, here
    (one rank: what is tested is the signal's way out, not the launcher's)."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    proc = subprocess.Popen([sys.executable, "-m", "dsbisect", "bisect", "dsb-toy", "1.0.0", "1.1.0", "--script",
                             "sleeper.py", "--nproc", "1", "--accelerator", "cpu", *offline(wheelhouse, cache_dir)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        mark = wait_until(lambda: next((tmp_path / ".dsbisect" / "runs").glob("*/sleeping"), None), 240,
                          "the first run's script to start")
        wait_until(mark.read_text, 10)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert f"interrupted by {sig.name}" in err, err
    ranks = [int(p.read_text()) for p in (tmp_path / ".dsbisect" / "runs").glob("*/sleeping") if p.read_text()]
    assert ranks and not live_pids(ranks)  # both ends run at once on 2 cores: every one stopped


def _slurm_up() -> bool:
    import shutil

    if not shutil.which("sbatch"):
        return False
    done = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True)
    return done.returncode == 0 and "up" in done.stdout


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no Slurm cluster here (sbatch, sinfo)")
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_a_slurm_job_waits_cancels_it_with_its_exit_code(tmp_path, wheelhouse, cache_dir, sig, code):
    write_matrix(tmp_path, ["1.0.0"], name=f"held{code}")
    proc = subprocess.Popen([sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(wheelhouse, cache_dir),
                             "--executor", "slurm", "--slurm-arg=--hold"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job = wait_until(lambda: slurm_job_under(tmp_path), 120, "the held job in squeue")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert f"slurm job {job} was cancelled" in err, err
    wait_until(lambda: job not in subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                                                 text=True).stdout.split(), 30, f"job {job} to leave squeue")


def test_refused_sbatch_is_an_environment_failure(tmp_path, cli, monkeypatch, wheelhouse):
    """sbatch's refusal, and no sbatch at all, are the cluster's answer, not bad input: exit 1."""
    from dsbisect.core.errors import ExternalFailure

    assert ExternalFailure.exit_code == 1
    write_matrix(tmp_path, ["1.0.0"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"  # a real program that refuses, as sbatch does an unknown partition
    fake.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: nosuch' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DSBISECT_CACHE_DIR", str(tmp_path / "cache"))
    res = cli("run", "matrix.yaml", *offline(wheelhouse), "-q", "--executor", "slurm", cwd=tmp_path)
    assert res.exit_code == 1, res.stderr
    assert _one_line(res).startswith("error: sbatch refused the job: sbatch: error: invalid partition")


def test_the_index_settings_left_out_are_said_where_the_index_is_resolved(tmp_path, cli, monkeypatch, wheelhouse):
    """indexes.resolve's notes (what pip/uv settings dsbisect cannot pass on) and the files it
    read, one line each on stderr once the input is checked; the answer on stdout is as without them."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\ncert = /etc/ssl/corp.pem\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    res = cli("versions", "dsb-toy", *offline(wheelhouse), cwd=tmp_path)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.split() == list(TOY_RELEASES)
    notes = res.stderr.splitlines()
    assert f"note: pip.conf {conf}: cert not applied: dsbisect runs pip with PIP_CONFIG_FILE={os.devnull} " \
           "(set PIP_CERT instead)" in notes, res.stderr
    assert any(n.startswith("note: index settings read from ") and n.endswith(f"pip.conf {conf}") for n in notes)
    # bad input stays one line: the notes come once the input is checked
    bad = cli("versions", "dsb-toy", "1.0.0", "9.9.9", *offline(wheelhouse), cwd=tmp_path)
    assert bad.exit_code == 2 and "9.9.9" in _one_line(bad)

    conf.write_text("[global]\ntimeout = 60\n")  # nothing left out: nothing said of it
    res = cli("versions", "dsb-toy", *offline(wheelhouse), cwd=tmp_path)
    assert res.exit_code == 0, res.stderr
    assert not [n for n in res.stderr.splitlines() if f"{conf}:" in n]  # (a machine's /etc/pip.conf may say more)


# ------------------------------------------------------------------- --help at 80 columns


def _help80(*words: str, columns: int = 80):
    from typer.testing import CliRunner

    from dsbisect.cli import app

    res = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("name", ["", *sorted(n for n in OPTIONS if n != "run-one")])
def test_help_at_80_columns_cuts_nothing(name):
    """Issue 23: typer's table cut option names (--verify-commit…), defaults and examples at 80
    columns. Every name of every option, every value a default names and every example line are
    whole; nothing passes the 80th column; flags take no '<bool>' metavar."""
    from dsbisect.cli import app

    text = _help80(*name.split())
    command = typer.main.get_command(app)
    for word in name.split():
        command = command.commands[word]
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text and "<bool>" not in text and "<str>" not in text and "{" not in text
    words = set(re.findall(r"(?<![\w-])-[-\w]+", text))
    for param in command.params:
        if param.param_type_name == "option" and not param.hidden:
            assert set(param.opts + param.secondary_opts) <= words, (param.opts, param.secondary_opts)
    for example in [line for line in (command.help or "").splitlines() if line.startswith("  dsbisect ")]:
        assert " ".join(example.split()) in " ".join(text.split()), example


def test_bisect_help_is_short_and_puts_the_common_options_first():
    text = _help80("bisect")
    # it was 274 lines at 80 columns; 160 before the metric and budget panels (issues 38, 40);
    # 170 before --fixed-in and --fixed-in-upto (issue 39)
    assert len(text.splitlines()) <= 174
    titles = re.findall(r"╭─ (.+?) ─", text)
    assert titles[:2] == ["Arguments", "Options"] and {"Timeouts", "Commits", "Multi-node"} <= set(titles)
    main = text.split("╭─ Options ")[1].split("╰")[0]
    firsts = re.findall(r"│ (--[\w-]+)", main)
    assert firsts[:6] == ["--case", "--script", "--matrix", "--pin", "--nproc", "--accelerator"]
    assert "--timeout" not in firsts and "--partition" not in firsts and "--confidence" not in firsts


@pytest.mark.parametrize("name", ["run", "bisect"])
def test_nproc_and_accelerator_say_they_go_with_a_command(name):
    """The README gives --accelerator cpu -- deepspeed …: the help must not say "with --script" only."""
    text = " ".join(_help80(name).split())
    for option in ("--nproc N", "--accelerator cpu|cuda|auto"):
        said = text.split(option, 1)[1][:160]
        assert "-- python x.py" in said or "-- COMMAND" in said, said


def test_a_short_command_shows_its_options_in_one_panel():
    text = _help80("versions")
    assert re.findall(r"╭─ (.+?) ─", text) == ["Arguments", "Options"]
    assert "Usage:" in text and " PACKAGE [GOOD] [BAD]" in text  # the usage line spells arguments as typed


@pytest.mark.parametrize("columns", [50, 200])
def test_help_at_other_widths_cuts_nothing_either(columns):
    text = _help80("bisect", columns=columns)
    assert max(len(line) for line in text.splitlines()) <= columns and "…" not in text
    words = set(re.findall(r"(?<![\w-])-[-\w]+", text))
    assert {"--verify-commit-ends", "--no-verify-commit-ends", "--collective-timeout", "--extra-index-url"} <= words
