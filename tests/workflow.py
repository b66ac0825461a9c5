"""Runs one job of a GitHub Actions workflow file here, step by step, as the runner would run its
``run:`` steps: each with ``bash -eo pipefail``, the job's and the step's ``env:``, a fresh
``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY`` file, ``RUNNER_TEMP``, in the checkout; ``if:``,
``continue-on-error``, ``steps.<id>.outputs`` and ``.outcome`` as the runner keeps them.

GitHub itself is not reachable here, so the ``uses:`` steps the nightly workflow names stand in
for what they do on a runner: ``actions/checkout`` (the checkout is given), ``actions/cache``
restore and save (a folder per key prefix, copied, so a later job finds what an earlier saved),
``actions/upload-artifact`` (copied to an artifacts folder).  Any other action is refused.

Expressions: ``${{ inputs.X }}``, ``steps.ID.outputs.X``, ``steps.ID.outcome``, ``runner.temp``,
``github.run_id``, ``github.token``, ``always()``, ``==``, ``!=``, ``&&``, ``||``, '…' strings.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

_RUN_IDS = itertools.count(1000)
_TOKEN = re.compile(r"'[^']*'|==|!=|&&|\|\||\(\)|[A-Za-z_][\w.-]*|\s+")


@dataclass
class Step:
    name: str
    outcome: str  # success | failure | skipped
    outputs: dict[str, str]
    summary: str
    stdout: str


@dataclass
class Job:
    """One run of the workflow's only job."""

    temp: Path  # its RUNNER_TEMP
    steps: dict[str, Step] = field(default_factory=dict)
    order: list[Step] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(s.outcome == "failure" and not s.name.startswith("~") for s in self.order)

    def step(self, name: str) -> Step:
        return next(s for s in self.order if s.name == name)


class Workflow:
    def __init__(self, file: Path, inputs: dict[str, str], checkout: Path, home: Path, env: dict[str, str]):
        self.spec = yaml.safe_load(file.read_text())
        (self.job_spec,) = self.spec["jobs"].values()
        declared = self.spec[True]["workflow_call"]["inputs"]  # YAML 1.1 reads `on:` as True
        self.inputs = {k: str(v.get("default", "")) for k, v in declared.items()} | inputs
        self.checkout, self.home, self.env = checkout, home, env
        (home / "cache").mkdir(parents=True, exist_ok=True)
        (home / "artifacts").mkdir(exist_ok=True)

    def run(self) -> Job:
        """One job: a fresh runner temp folder (another machine's, as a later job gets)."""
        run_id = next(_RUN_IDS)
        temp = self.home / f"runner-{run_id}"
        temp.mkdir()
        job, ctx = Job(temp), {"runner.temp": str(temp), "github.run_id": str(run_id), "github.token": "t0ken"}
        env = {k: self._sub(str(v), job, ctx) for k, v in self.job_spec.get("env", {}).items()}
        for i, spec in enumerate(self.job_spec["steps"]):
            sid = spec.get("id", f"step{i}")
            name = spec.get("name", spec.get("uses", sid))
            cond = spec.get("if", "success()")
            if not self._true(cond, job, ctx):
                step = Step(name, "skipped", {}, "", "")
            elif "uses" in spec:
                step = self._action(spec, name, job, ctx)
            else:
                step = self._shell(spec, name, env, temp, job, ctx)
            job.steps[sid], job.order = step, job.order + [step]
        return job

    # ------------------------------------------------------------ expressions

    def _value(self, path: str, job: Job, ctx: dict[str, str]) -> str:
        if path.startswith("inputs."):
            return self.inputs[path[len("inputs."):]]
        if path.startswith("steps."):
            _, sid, what, *rest = path.split(".")
            step = job.steps.get(sid)
            if step is None:
                return ""
            return step.outcome if what == "outcome" else step.outputs.get(rest[0], "")
        return ctx[path]

    def _eval(self, expr: str, job: Job, ctx: dict[str, str]) -> object:
        parts = []
        for tok in _TOKEN.findall(expr.strip()):
            if tok.isspace() or tok == "()":
                continue
            if tok.startswith("'"):
                parts.append(repr(tok[1:-1]))
            elif tok in ("==", "!="):
                parts.append(tok)
            elif tok in ("&&", "||"):
                parts.append(" and " if tok == "&&" else " or ")
            elif tok in ("always", "success", "failure"):
                failed = job.failed
                parts.append(repr({"always": True, "success": not failed, "failure": failed}[tok]))
            else:
                parts.append(repr(self._value(tok, job, ctx)))
        joined = "".join(parts)
        assert "".join(_TOKEN.findall(expr.strip())).replace(" ", "") == expr.strip().replace(" ", ""), expr
        return eval(joined, {"__builtins__": {}})  # noqa: S307 - our own expressions, of the forms above

    def _true(self, cond: str, job: Job, ctx: dict[str, str]) -> bool:
        cond = cond.strip()
        if cond.startswith("${{"):
            cond = cond[3:-2]
        value = bool(self._eval(cond, job, ctx))
        failed = job.failed
        status = any(f in cond for f in ("always()", "failure()", "success()"))
        return value and (status or not failed)  # GitHub adds success() unless a status function is named

    def _sub(self, text: str, job: Job, ctx: dict[str, str]) -> str:
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(self._eval(m[1], job, ctx)), text)

    # ------------------------------------------------------------------ steps

    def _shell(self, spec: dict, name: str, env: dict[str, str], temp: Path, job: Job, ctx: dict) -> Step:
        out, summ = temp / f"out-{len(job.order)}", temp / f"summary-{len(job.order)}"
        out.touch()
        summ.touch()
        step_env = {k: self._sub(str(v), job, ctx) for k, v in spec.get("env", {}).items()}
        full = dict(os.environ) | self.env | env | step_env | {
            "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summ), "RUNNER_TEMP": str(temp), "CI": "true",
            "GITHUB_ACTIONS": "true"}
        script = self._sub(spec["run"], job, ctx)
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=self.checkout,
                              env=full, capture_output=True, text=True)
        outcome = "success" if done.returncode == 0 else "failure"
        if outcome == "failure" and spec.get("continue-on-error"):
            name = "~" + name  # its failure does not fail the job
        return Step(name, outcome, read_outputs(out.read_text()), summ.read_text(), done.stdout + done.stderr)

    def _action(self, spec: dict, name: str, job: Job, ctx: dict) -> Step:
        uses, given = spec["uses"].split("@")[0], {k: self._sub(str(v), job, ctx) for k, v in spec.get("with", {}).items()}
        cache = self.home / "cache"
        if uses == "actions/checkout":
            pass
        elif uses == "actions/cache/restore":
            prefix = given["restore-keys"].strip()
            found = sorted((p for p in cache.iterdir() if p.name.startswith(prefix)), key=lambda p: p.stat().st_mtime_ns)
            if found:  # the newest key of the prefix, as actions/cache restores
                shutil.copytree(found[-1], given["path"], dirs_exist_ok=True)
        elif uses == "actions/cache/save":
            if Path(given["path"]).exists():
                shutil.copytree(given["path"], cache / given["key"])
        elif uses == "actions/upload-artifact":
            shutil.copytree(given["path"], self.home / "artifacts" / f"{given['name']}-{ctx['github.run_id']}")
        else:
            raise AssertionError(f"no stand-in for {uses}")
        return Step(name, "success", {}, "", "")


def read_outputs(text: str) -> dict[str, str]:
    """A GITHUB_OUTPUT file: ``k=v`` lines and ``k<<DELIM`` … ``DELIM`` blocks."""
    out, lines, i = {}, text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[key] = "\n".join(lines[i + 1:j])
            i = j + 1
        else:
            key, _, value = line.partition("=")
            out[key] = value
            i += 1
    return out
