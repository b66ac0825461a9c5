"""Multi-node cases: the launcher's options pass through, and a real two-"node" pdsh run.

The two nodes are this machine under two names, reached over ssh (an sshd of the test's own
on a free port, a client config given to pdsh through PDSH_SSH_ARGS_APPEND).  Two more
"nodes" are sshds in mount namespaces of their own: one where the env cache is hidden (a
node without the shared filesystem), one where torch is another build.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

import toypkg
from conftest import make_case, offline, write_matrix
from dsbisect.run import matrix as matrix_mod
from dsbisect.run import multinode
from dsbisect.core.errors import MatrixError
from dsbisect.core.model import Accelerator, Case, LauncherBackend, SlurmSettings
from dsbisect.core.rundir import RunDir
from dsbisect.launch.launchers import Target, plan

# --------------------------------------------------------------- pass-through, on paper


def _case(tmp_path: Path, **nodes) -> Case:
    return matrix_mod.with_nodes(make_case(tmp_path, nproc=2, accelerator=Accelerator.CPU), "test", **nodes)


def _hostfile(tmp_path: Path, *hosts: str) -> Path:
    path = tmp_path / "hostfile"
    path.write_text("# nodes\n" + "".join(f"{h} slots=2\n" for h in hosts) + "\n")
    return path


def test_launcher_gets_the_multinode_options(tmp_path):
    hf = _hostfile(tmp_path, "n1", "n2", "n3")
    case = _case(tmp_path, hostfile=hf, num_nodes=2, backend=LauncherBackend.OPENMPI, master_addr="10.0.0.1")
    argv = list(plan(case, Target(tmp_path / "python", RunDir(tmp_path / "run"), 29500, None)).argv)
    i = argv.index("deepspeed.launcher.runner")
    assert argv[i + 1:i + 9] == ["--hostfile", str(hf), "--num_nodes", "2", "--launcher", "openmpi",
                                 "--master_addr", "10.0.0.1"]
    assert argv[argv.index("--num_gpus") + 1] == "2"  # ranks per node
    assert multinode.hostfile_hosts(case) == ["n1", "n2"]

    inc = _case(tmp_path, hostfile=hf, include="n1@n3:0")
    argv = list(plan(inc, Target(tmp_path / "python", RunDir(tmp_path / "run"), 29500, None)).argv)
    assert argv[argv.index("--include") + 1] == "n1@n3:0" and "--num_gpus" not in argv
    assert multinode.hostfile_hosts(inc) == ["n1", "n3"]
    assert multinode.hostfile_hosts(_case(tmp_path, hostfile=hf, exclude="n2@n3:1")) == ["n1", "n3"]


def test_the_channel_to_a_host_is_the_back_ends():
    env = {"PDSH_SSH_ARGS_APPEND": "-F /etc/cfg -p 2222", "DSBISECT_SSH": "/opt/ssh -q"}
    argv = multinode.remote_argv(LauncherBackend.PDSH, "n2", ["/venv/bin/python", "-c", "print(1)"], env)
    assert argv[:2] == ["/opt/ssh", "-q"] and argv[-6:] == ["-F", "/etc/cfg", "-p", "2222", "n2",
                                                            "/venv/bin/python -c 'print(1)'"]
    assert multinode.remote_argv(LauncherBackend.SLURM, "n2", ["x"], {})[:1] == ["srun"]
    assert "--nodelist=n2" in multinode.remote_argv(LauncherBackend.SLURM, "n2", ["x"], {})


@pytest.mark.parametrize("extra, message", [
    ("hostfile: nowhere", "hostfile: "),
    ("num_nodes: 2", "need a hostfile"),
    ("launcher_backend: openmpi", "need a hostfile"),
    ("hostfile: hosts\n    include: a\n    exclude: b", "include or exclude, not both"),
    ("hostfile: hosts\n    num_nodes: 1\n    include: a", "num_nodes cannot be combined"),
    ("hostfile: hosts\n    launcher: torchrun", "need launcher: deepspeed"),
    ("hostfile: hosts\n    launcher_backend: ssh", "launcher_backend"),
    ("slurm: {time: 0}", "slurm.time"),
])
def test_bad_multinode_settings_are_one_line(tmp_path, extra, message):
    (tmp_path / "hosts").write_text("a slots=1\nb slots=1\n")
    path = write_matrix(tmp_path, ["1.0.0"], launcher="deepspeed", extra=f"    {extra}\n")
    with pytest.raises(MatrixError, match=message):
        matrix_mod.load(path)


def test_case_round_trips_and_single_node_keys_stay(tmp_path):
    (tmp_path / "hosts").write_text("a slots=1\nb slots=1\n")
    plain = matrix_mod.load(write_matrix(tmp_path, ["1.0.0"], launcher="deepspeed")).cases[0]
    multi = matrix_mod.load(write_matrix(tmp_path, ["1.0.0"], launcher="deepspeed", extra=(
        "    hostfile: hosts\n    master_addr: 10.1.1.1\n"
        "    slurm: {partition: gpu, time: 20, gpus: 4, args: [--account=x]}\n"))).cases[0]
    assert multi.slurm == SlurmSettings("gpu", 20, 4, ("--account=x",))
    assert multi.nodes.hostfile == tmp_path / "hosts" and multi.key != plain.key
    assert replace(plain, slurm=SlurmSettings("other", 5)).key == plain.key  # where it runs is not what it is
    for c in (plain, multi):
        assert Case.from_json(json.loads(json.dumps(c.to_json()))) == replace(c, points=())
        assert Case.from_json(c.to_json()).key == c.key


def test_cli_multinode_options_are_checked(tmp_path, cli):
    write_matrix(tmp_path, ["1.0.0"], launcher="deepspeed")
    res = cli("run", "matrix.yaml", "--hostfile", "missing", cwd=tmp_path)
    assert res.exit_code == 2 and res.stderr.strip().startswith("error: command line: hostfile:")
    res = cli("run", "matrix.yaml", "--launcher-backend", "rsh", cwd=tmp_path)
    assert res.exit_code == 2 and "'--launcher-backend': 'rsh' is not one of" in res.stderr
    res = cli("run", "matrix.yaml", "--partition", "gpu", cwd=tmp_path)
    assert res.exit_code == 2 and "need --executor slurm" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------ two nodes, for real


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sshd(folder: Path, name: str, prelude: str = "") -> tuple[subprocess.Popen, int]:
    """An sshd for one "node", optionally in a mount namespace set up by ``prelude`` (shell)."""
    port = _free_port()
    cfg = folder / f"sshd-{name}.conf"
    cfg.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder}/hostkey\n"
                   f"AuthorizedKeysFile {folder}/id.pub\nPermitRootLogin prohibit-password\nStrictModes no\n"
                   f"UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                   f"PidFile {folder}/sshd-{name}.pid\n")
    sshd = f"exec /usr/sbin/sshd -D -e -f {cfg}"
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f"{prelude} && {sshd}"] if prelude \
        else ["sh", "-c", sshd]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(folder / f"sshd-{name}.log", "w"))
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    pytest.skip(f"sshd for {name} did not start: {(folder / f'sshd-{name}.log').read_text()[-300:]}")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory, cache_dir):
    """ssh config for node-a and node-b (this machine), node-c (no env cache) and node-d (other torch)."""
    if not (shutil.which("pdsh") and Path("/usr/sbin/sshd").exists() and shutil.which("ssh-keygen")):
        pytest.skip("needs pdsh, openssh-server and openssh-client (apt-get install pdsh openssh-server)")
    folder = tmp_path_factory.mktemp("nodes")
    for key in ("hostkey", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    torch_dir = Path(importlib.util.find_spec("torch").origin).parent
    fake = folder / "fake-torch"
    fake.mkdir()
    (fake / "__init__.py").write_text('import types\n__version__ = "0.0.0+other"\n'
                                      'version = types.SimpleNamespace(cuda=None)\n'
                                      'cuda = types.SimpleNamespace(is_available=lambda: False)\n')
    (cache_dir / "envs").mkdir(parents=True, exist_ok=True)
    daemons = {"ab": _sshd(folder, "ab")}
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0:
        daemons["c"] = _sshd(folder, "c", f"mount -t tmpfs none {cache_dir / 'envs'}")
        daemons["d"] = _sshd(folder, "d", f"mount --bind {fake} {torch_dir}")
    hosts = {"node-a": "ab", "node-b": "ab", "node-c": "c", "node-d": "d"}
    (folder / "ssh_config").write_text("".join(
        f"Host {h}\n  HostName 127.0.0.1\n  Port {daemons[d][1]}\n  User root\n  IdentityFile {folder}/id\n"
        "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        for h, d in hosts.items() if d in daemons))
    yield folder, set(daemons)
    for proc, _ in daemons.values():
        proc.terminate()
        proc.wait(timeout=10)


# Rank 1 ignores SIGINT and SIGTERM and sleeps: the launcher's own teardown (pdsh pkill, then
# deepspeed.launcher.launch's terminate) leaves it for 30 s; dsbisect's must not.
STUBBORN = """
def step(dist):
    import signal, time
    if dist.get_rank() == 1:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(1)
"""


# Each rank writes what it got of DSB_LITERAL (a value a shell would love to interpret).
ENVDUMP = """
def step(dist):
    import os
    path = os.path.join(os.environ["DSBISECT_RUN_DIR"], f"literal.rank{dist.get_rank()}")
    with open(path, "w") as f:
        f.write(os.environ.get("DSB_LITERAL", "<unset>"))
"""


@pytest.fixture(scope="module")
def mn_house(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setitem(toypkg.STEP, "stubborn", STUBBORN)
    monkeypatch_module.setitem(toypkg.STEP, "envdump", ENVDUMP)
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("mn-wheels"),
                                   {"2.0.0": "ok", "2.1.0": "stubborn", "2.2.0": "envdump"}, dist="dsb-mn")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _matrix(folder: Path, ssh_dir: Path, hosts: list[str], versions: list[str], timeout: float = 600,
            collective_timeout: float = 60) -> Path:
    """A passing run ends when it passes: its wall timeout is a backstop (a run through pdsh
    that imports DeepSpeed on both "nodes" outlasted 30 s on a loaded CI machine)."""
    (folder / "hosts").write_text("".join(f"{h} slots=1\n" for h in hosts))
    return write_matrix(folder, versions, launcher="deepspeed", package="dsb-mn",
                        collective_timeout=collective_timeout,
                        timeout=timeout, extra=f"""\
    nproc: 1
    hostfile: hosts
    master_addr: 127.0.0.1
    launcher_args: [--no_ssh_check]
    env: {{OMP_NUM_THREADS: "1", PDSH_SSH_ARGS_APPEND: "-F {ssh_dir}/ssh_config"}}
""")


def _marked(run_dir: str) -> list[int]:
    """Processes on this machine (every "node") that belong to the run."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DSBISECT_RUN_DIR") == run_dir and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_two_nodes_through_pdsh(tmp_path, cli, nodes, mn_house, cache_dir, monkeypatch):
    ssh_dir, _ = nodes
    monkeypatch.setattr(multinode, "_checked", {})  # each node checked afresh
    _matrix(tmp_path, ssh_dir, ["node-a", "node-b"], ["2.0.0"])
    res = cli("run", "matrix.yaml", *offline(mn_house, cache_dir), "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    ok = json.loads(res.stdout)["runs"][0]
    # The hang is ended by its wall timeout (rank 1 sleeps outside any collective, so nothing
    # proves a deadlock): 120 s, well past the time the ranks take to reach their waits even at a
    # high load, and a collective timeout longer still, so that gloo does not end rank 0's wait.
    _matrix(tmp_path, ssh_dir, ["node-a", "node-b"], ["2.1.0"], timeout=120, collective_timeout=600)
    res = cli("run", "matrix.yaml", *offline(mn_house, cache_dir), "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    hung = json.loads(res.stdout)["runs"][0]
    assert ok["outcome"] == "pass", ok["reason"]
    log = (Path(ok["run_dir"]) / "launcher.log").read_text()
    assert "pdsh -S" in log and "node-a: " in log and "node-b: " in log  # really through pdsh and ssh
    assert sorted(p.name.split("_")[-1] for p in (Path(ok["run_dir"]) / "ranks").glob("*.log")) == [
        "rank0.log", "rank1.log"]

    # rank 1 sleeps on node-b: the wall timeout ends the run; the stacks came from both nodes...
    assert hung["outcome"] == "hang" and "wall timeout" in hung["reason"]
    stacks = Path(hung["run_dir"]) / "stacks"
    assert any("barrier" in p.read_text() for p in stacks.glob("*rank0*.txt"))
    assert any("step" in p.read_text() and "dsb_toy" in p.read_text() for p in stacks.glob("*rank1*.txt"))
    assert "rank 0 in barrier" in hung["signature"]
    # ...and rank 1 there (it ignores SIGTERM; the local process tree never held it) is gone: it died
    # with its node's launcher (the hook's PR_SET_PDEATHSIG), or the teardown on its node stopped it;
    # that teardown reached both nodes.
    notes = hung["evidence"]["notes"]
    assert not any(n.startswith("teardown could not reach") for n in notes), notes
    assert _marked(hung["run_dir"]) == [] and hung["evidence"]["survivors"] == []


@pytest.mark.slow
def test_a_node_without_the_venv_or_with_another_torch_is_a_skip(tmp_path, cli, nodes, mn_house, cache_dir,
                                                                  monkeypatch):
    ssh_dir, daemons = nodes
    if not {"c", "d"} <= daemons:
        pytest.skip("no mount namespaces here (unshare --mount failed)")
    monkeypatch.setattr(multinode, "_checked", {})  # each node checked afresh
    calls = tmp_path / "ssh-calls"
    wrapper = tmp_path / "ssh"
    wrapper.write_text(f'#!/bin/sh\necho call >> {calls}\nexec ssh "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("DSBISECT_SSH", str(wrapper))
    _matrix(tmp_path, ssh_dir, ["node-a", "node-c"], ["2.0.0"])
    (tmp_path / "hosts-d").write_text("node-a slots=1\nnode-d slots=1\n")
    common = (*offline(mn_house, cache_dir), "--format", "json")
    for hostfile, expect in (("hosts", "node node-c cannot run the point venv's python"),
                             ("hosts-d", "node node-d has torch 0.0.0+other, this node torch")):
        res = cli("run", "matrix.yaml", "--hostfile", hostfile, *common, cwd=tmp_path)
        assert res.exit_code == 0, res.output
        (run,) = json.loads(res.stdout)["runs"]
        assert run["outcome"] == "skip" and run["reason"].startswith(expect), run["reason"]
    assert "No such file or directory" in json.loads(
        cli("run", "matrix.yaml", *common, cwd=tmp_path).stdout)["runs"][0]["reason"]
    # The check is cached per venv and hostfile: the third command asked no node again.
    assert len(calls.read_text().splitlines()) == 4


@pytest.mark.slow
def test_env_values_arrive_literally_on_every_node(tmp_path, cli, nodes, mn_house, cache_dir, monkeypatch):
    """DeepSpeed wraps exported values in double quotes for the remote shell: $( ), backticks and
    $VAR would run there.  Every node must get the value as written, as the local node does."""
    ssh_dir, _ = nodes
    monkeypatch.setattr(multinode, "_checked", {})  # each node checked afresh
    literal = f"$(touch {tmp_path}/pwned1) `touch {tmp_path}/pwned2` \"dq\" 'sq' $HOME a  b\\c; echo ;"
    _matrix(tmp_path, ssh_dir, ["node-a", "node-b"], ["2.2.0"])
    matrix = tmp_path / "matrix.yaml"
    quoted = json.dumps(literal)  # a YAML double-quoted string is JSON-compatible
    matrix.write_text(matrix.read_text().replace('env: {OMP_NUM_THREADS: "1",', f'env: {{DSB_LITERAL: {quoted}, OMP_NUM_THREADS: "1",'))
    res = cli("run", "matrix.yaml", *offline(mn_house, cache_dir),
              "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)["runs"]
    assert run["outcome"] == "pass", run["reason"]
    got = [(Path(run["run_dir"]) / f"literal.rank{r}").read_text() for r in (0, 1)]
    assert got == [literal, literal]
    assert not list(tmp_path.glob("pwned*"))
