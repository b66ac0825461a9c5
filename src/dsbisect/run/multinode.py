"""Multi-node cases: the deepspeed launcher's hostfile and back ends, and reaching every node.

A case with a ``hostfile`` runs under the deepspeed launcher's multi-node mode (pdsh by
default; ``launcher_backend`` picks openmpi, mvapich, mpich, impi or slurm).  The point
venv must exist at the same path on every node (a ``--cache-dir`` on shared storage), so
before the first launch of a venv dsbisect runs that venv's python on each host of the
hostfile, through the channel the back end uses (ssh as pdsh does, honouring
``PDSH_SSH_ARGS_APPEND``; ``srun`` for the slurm back end), and compares its torch and NCCL
with the local import check.  A host that cannot be reached, does not see the venv, or has
other versions makes the run a SKIP that names the host.

Ranks on other nodes are not descendants of the local launcher: the process-tree teardown
and stack capture of ``launch``/``evidence`` cannot reach them.  Every process of a run
carries ``DSBISECT_RUN_DIR=<run dir>`` in its environment (written to the run folder's
``.deepspeed_env``, which the launcher exports to every node), and a small helper, run on
each host through the same channel, finds them by that marker in ``/proc``: it sends the
stack signal to the ranks (their faulthandler hook writes into the shared run folder),
reads them with py-spy where ptrace is allowed, and at teardown sends SIGTERM, then
SIGKILL, to whatever is left of the run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from dsbisect.core import files
from dsbisect.core import proc
from dsbisect.core.command import read_hostfile
from dsbisect.forensics.evidence import Capture, pyspy_bin
from dsbisect.envs.facts import node_check_code
from dsbisect.core.model import Case, LauncherBackend
from dsbisect.records.run import RunFacts
from dsbisect.core.rundir import RunDir
from dsbisect.forensics.stacks import pyspy_main

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
TAG = "DSBISECT-NODE "

# Run on each host with the point venv's python: find the run's processes by their marker.
HELPER_CODE = r"""
import json, os, signal, subprocess, sys, time
mode, run_dir, arg, pyspy, stacks = sys.argv[1:6]
marker = ("DSBISECT_RUN_DIR=" + run_dir).encode()

def procs():
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if marker in env:
            found[int(name)] = next((e[5:].decode() for e in env if e.startswith(b"RANK=")), None)
    return found

out = {"host": os.uname().nodename, "ranks": [], "killed": [], "survivors": []}
if mode == "stacks":
    signum = getattr(signal, arg, signal.SIGUSR1)
    for pid, rank in sorted(procs().items()):
        if rank is None:
            continue
        item = {"pid": pid, "rank": rank, "signalled": False, "pyspy": "", "pyspy_error": ""}
        if os.path.exists(os.path.join(stacks, f"rank{rank}.pid{pid}.txt")):  # the hook's file
            try:
                os.kill(pid, signum)
                item["signalled"] = True
            except OSError:
                pass
        if pyspy and os.path.exists(pyspy):
            try:
                p = subprocess.run([pyspy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20)
                item["pyspy"] = p.stdout if p.returncode == 0 else ""
                item["pyspy_error"] = "" if p.returncode == 0 else (p.stderr or p.stdout).strip()[-300:]
            except (OSError, subprocess.TimeoutExpired) as e:
                item["pyspy_error"] = str(e)
        out["ranks"].append(item)
else:
    grace = float(arg)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = procs()
        for pid in alive:
            try:
                os.kill(pid, sig)
                out["killed"].append(pid)
            except OSError:
                pass
        deadline = time.time() + grace
        while alive and time.time() < deadline and procs():
            time.sleep(0.2)
    out["survivors"] = sorted(procs())
    out["killed"] = sorted(set(out["killed"]))
print("DSBISECT-NODE " + json.dumps(out))
"""


# ------------------------------------------------------------------ launcher and hosts


def hostfile_hosts(case: Case) -> list[str]:
    """The hosts a run of ``case`` uses: the hostfile's, filtered as the deepspeed launcher does."""
    n = case.nodes
    if n.hostfile is None:
        return []
    listed = list(read_hostfile(n.hostfile))
    if n.include:
        wanted = [part.split(":", 1)[0] for part in n.include.split("@") if part]
        listed = [h for h in listed if h in wanted]
    if n.exclude:  # a host is dropped only when all its slots are (no ":" in its part)
        whole = [part for part in n.exclude.split("@") if part and ":" not in part]
        listed = [h for h in listed if h not in whole]
    if n.num_nodes:
        listed = listed[: n.num_nodes]
    return listed


def remote_argv(backend: LauncherBackend | None, host: str, command: list[str], env: Mapping[str, str]) -> list[str]:
    """``command`` on ``host`` through the launcher back end's channel."""
    if backend is LauncherBackend.SLURM:
        return ["srun", "--nodes=1", "--ntasks=1", "--overlap", f"--nodelist={host}", *command]
    ssh = shlex.split(env.get("DSBISECT_SSH") or "ssh")
    return [*ssh, *SSH_OPTIONS, *shlex.split(env.get("PDSH_SSH_ARGS_APPEND", "")), host, shlex.join(command)]


def channel_env(case: Case) -> dict[str, str]:
    """What the channel to the hosts sees: this process's environment and the case's."""
    return dict(os.environ) | dict(case.env)


ANSWER_KEEP = proc.Keep(64 << 10, 32 << 20)  # the tagged answer (stacks of every rank) is the last line


def _on_host(case: Case, host: str, command: list[str], timeout: float) -> tuple[dict | None, str]:
    """Run ``command`` on ``host``; its tagged JSON line, or why there is none."""
    argv = remote_argv(case.nodes.backend, host, command, channel_env(case))
    done = proc.run(argv, timeout=timeout, keep=ANSWER_KEEP)
    if done.returncode is None:
        return None, done.error
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(TAG)), None)
    if line is None:
        return None, done.last_line()[:300]
    return json.loads(line.removeprefix(TAG)), ""


# -------------------------------------------------------------------------- the check

_checked: dict[tuple[str, str], str] = {}
_checked_lock = threading.Lock()


def check_nodes(case: Case, env_key: str, python: Path, local: RunFacts) -> str:
    """Why a run in this venv cannot use every host ("" when it can).

    Each host must run the venv's python and have the torch (and NCCL) of ``local``, the
    import check's facts.  Cached per (venv, hostfile content, hosts, back end).
    """
    listed = hostfile_hosts(case)
    key = (env_key, hashlib.sha256(f"{files.digest(case.nodes.hostfile)}|{listed}|{case.nodes.backend}".encode())
           .hexdigest()[:16])
    with _checked_lock:
        if key in _checked:
            return _checked[key]
    if not listed:
        problem = f"hostfile {case.nodes.hostfile} lists no host that the case's include/exclude/num_nodes keep"
    else:
        with ThreadPoolExecutor(max_workers=min(16, len(listed))) as pool:
            check = [str(python), "-c", node_check_code()]
            answers = list(pool.map(lambda h: _on_host(case, h, check, 300), listed))
        problem = _compare(listed, answers, python, local)
    with _checked_lock:
        _checked[key] = problem
    return problem


@dataclass(frozen=True)
class NodeFacts:
    """What ``CHECK_CODE`` says of a node: its torch and NCCL, or why torch did not import."""

    torch: str | None
    nccl: str | None
    error: str

    @classmethod
    def of(cls, answer: Mapping) -> NodeFacts:
        def text(key: str) -> str | None:
            v = answer.get(key)
            return None if v is None else str(v)
        return cls(text("torch"), text("nccl"), text("error") or "")


def _compare(listed: list[str], answers: list[tuple[dict | None, str]], python: Path, local: RunFacts) -> str:
    want_torch = local.version("torch")
    want_nccl = local.nccl
    for host, (answer, why) in zip(listed, answers):
        if answer is None:
            return (f"node {host} cannot run the point venv's python {python} ({why}); the venv must be at "
                    "the same path on every node: put --cache-dir on storage all nodes mount")
        node = NodeFacts.of(answer)
        if node.error:
            return f"node {host}: {node.error[:300]}"
        if want_torch and node.torch != want_torch:
            return f"node {host} has torch {node.torch}, this node torch {want_torch}"
        want_nccl = want_nccl or node.nccl
        if want_nccl and node.nccl and node.nccl != want_nccl:
            return f"node {host} has NCCL {node.nccl}, another node NCCL {want_nccl}"
    return ""


# ----------------------------------------------------------- the run's env on every node


# What every DeepSpeed launcher passes through its remote shell untouched: newer ones wrap any
# other value in double quotes (where $( ), backticks and $VAR still expand), older ones not at
# all (where spaces split it).  Values with other characters travel base64-encoded instead.
_SHELL_SAFE = re.compile(r"[\w@%+=:,./-]*")
ENCODED = "DSBISECT_ENV_B64"  # decoded into the environment by the start-up hook of every process


def write_env_file(case: Case, run: RunDir, env: Mapping[str, str]) -> Path:
    """``<run dir>/.deepspeed_env``: the run's own variables, which the launcher exports to every
    node; each arrives there exactly as it is here, whatever characters it holds."""
    keep = dict(case.env)
    chosen = {k: v for k, v in env.items()
              if k in keep or k.startswith(("DSBISECT_", "TORCH_", "DS_", "NCCL_")) or k == "CUDA_VISIBLE_DEVICES"}
    plain = {k: v for k, v in chosen.items() if _SHELL_SAFE.fullmatch(v)}
    lines = [f"{k}={v}" for k, v in plain.items()]
    encoded = {k: v for k, v in chosen.items() if k not in plain}
    if encoded:
        lines.append(f"{ENCODED}={base64.b64encode(json.dumps(encoded).encode()).decode()}")
    path = run.deepspeed_env
    path.write_text("\n".join(lines) + "\n")
    return path


# -------------------------------------------------------------- stacks and teardown


@dataclass
class RemoteRanks:
    """Launch hooks for a multi-node run: stacks from, and teardown on, every host."""

    case: Case
    python: Path
    run: RunDir
    capture: Capture
    hosts: list[str] = field(default_factory=list)
    grace_s: float = 3.0

    @classmethod
    def of(cls, case: Case, python: Path, run: RunDir, capture: Capture) -> RemoteRanks:
        return cls(case, python, run, capture, hostfile_hosts(case))

    def __call__(self, procs: list[psutil.Process], reason: str) -> None:
        """on_hang / on_quiet: local ranks as usual, then every host through the back end."""
        if procs:
            self.capture(procs, reason)
        self.run.stacks.mkdir(parents=True, exist_ok=True)
        signal_name = os.environ.get("DSBISECT_STACK_SIGNAL", "SIGUSR1")
        answers = self._each(["stacks", str(self.run.path), signal_name, pyspy_bin() or ""])
        asked = []
        for host, (out, why) in zip(self.hosts, answers):
            if out is None:
                self.capture.note(f"no stacks from node {host}: {why}")
                continue
            for item in out["ranks"]:
                if item["signalled"]:
                    asked.append(self.run.faulthandler(item["rank"], item["pid"]))
                if item["pyspy"]:
                    path = self.run.pyspy(item["rank"], reason)
                    path.write_text(item["pyspy"])
                    self.capture.files.append(str(path))
                    self.capture.stacks[item["rank"]] = pyspy_main(item["pyspy"])
                elif item["pyspy_error"]:
                    self.capture.note(f"py-spy could not read rank {item['rank']} on {host} "
                                       f"({item['pyspy_error'].splitlines()[-1][:200]}); faulthandler stacks are used")
        if not any(out and out["ranks"] for out, _ in answers):
            self.capture.note(f"{reason}: no live rank found on {', '.join(self.hosts)}")
            return
        self.capture.taken.append(reason)
        self._await(asked)

    def _await(self, asked: list[Path]) -> None:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not all(_size(p) > 0 for p in asked):
            time.sleep(0.1)
        self.capture.files += [str(p) for p in asked if str(p) not in self.capture.files]

    def stuck(self, procs: list[psutil.Process]) -> bool:
        """Idle check: True unless some rank's stack (local or remote) moved since the last look."""
        before = dict(self.capture.stacks)
        self(procs, "idle")
        return not [r for r, frames in self.capture.stacks.items() if r in before and before[r] != frames]

    def parked(self, procs: list[psutil.Process]) -> bool:
        """Whether every rank's latest stack (local or remote) waits inside torch.distributed."""
        return self.capture.parked(procs)

    def stop(self) -> list[str]:
        """Teardown on every host: SIGTERM, then SIGKILL, to the run's processes; ``host:pid`` survivors."""
        left = []
        for host, (out, why) in zip(self.hosts, self._each(["kill", str(self.run.path), f"{self.grace_s:g}", ""])):
            if out is None:
                self.capture.note(f"teardown could not reach node {host}: {why}")
                continue
            if out["killed"]:
                self.capture.note(f"teardown on node {host}: stopped pid(s) {', '.join(map(str, out['killed']))}")
            left += [f"{host}:{pid}" for pid in out["survivors"]]
        return left

    def _each(self, helper_args: list[str]) -> list[tuple[dict | None, str]]:
        command = [str(self.python), "-c", HELPER_CODE, *helper_args, str(self.run.stacks)]
        if not self.hosts:
            return []
        with ThreadPoolExecutor(max_workers=min(16, len(self.hosts))) as pool:
            return list(pool.map(lambda h: _on_host(self.case, h, command, 60), self.hosts))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
