"""Issue 22 in the zoo, before and after: builds zoo-issue22.md from dsbisect's own JSON.

    python docs/results/zoo_issue22.py          # writes docs/results/zoo-issue22.md

Per case, "before" is the table's run (``zoo-runs/<case>.json`` and its ``.meta.json``: a
dsbisect from before issue 22, where any failure counted as bad and no revert proof ran) and
"after" the re-run of the same command by a dsbisect with issue 22 in it
(``zoo-runs/<case>.issue22.json``, made by ``zoo_table.py --run CASE --suffix issue22``).  Every
figure is read from those files: the verdict, the releases and the commit, the runs (the sum of
each step's ``runs``), the wall time (the meta's ``seconds``), the failures that differ from the
bad end's (before: a step counted on the regression's side whose reason names another exception
type than the regressed end's; after: dsbisect's ``different`` lines), the learned identity
(``regression.identity``) and the revert proof (``proof``, in dsbisect's own words).
A case not re-run yet is listed as such.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE / "zoo-runs"
sys.path.insert(0, str(HERE.parent.parent / "src"))

from dsbisect.records.proof import Proof  # noqa: E402  (the proof's sentence, as the report prints it)

CASES = ["accelerate_main_process_first", "ds_bf16_zero0_grad_scale", "ds_pipe_backward_zero0",
         "ds_bf16_zero1_ga_leak", "ds_pipe_ga_scaling", "ds_zero2_cpu_flatten_inplace"]
TRUTHS = [HERE / "zoo-truth-hf.json", HERE / "zoo-truth-deepspeed.json"]

# What happened beyond what the outputs say (written after reading the runs' logs and the store).
NOTES: dict[str, str] = {
    "accelerate_main_process_first":
        "Positions on the 72 first-parent commits from the merge base b51b78ffb7 to v0.17.0 (1 = oldest): "
        "the culprit a60640d4fa is 7, 38fd30e764 (#1079) is 36, the middle. From 24 (5a2cb3b5e3, #1070: "
        "`@on_main_process` on `Accelerator`'s methods builds a `PartialState()` when accelerator.py is "
        "imported) importing accelerate under a launcher's LOCAL_RANK calls `torch.cuda.set_device`, and a "
        "CPU-only torch has no `_cuda_setDevice`. After a skip the search probes the untested point nearest "
        "the middle, so it walked outwards one commit at a time (35, 37, 34, 38, ... 24, 48): all 25 commits "
        "24-48 failed so, at import, and none was counted; 23 failed with the regression's AssertionError, "
        "and the search went on below it (11, 5, 8, 6, 7). The before-run had counted 36 bad and gone "
        "straight on. The revert proof conflicts: a60640d4fa's lines were rewritten by the 65 commits after "
        "it. The re-run was stopped once at its 30-minute limit (14 runs) and resumed (its 14 runs reused): "
        "the wall time is the sum. Its JSON names the different failure's frames "
        "(`at accelerate/state.py:__init__ ← accelerate/accelerator.py:on_main_process`).",
    "ds_bf16_zero0_grad_scale":
        "Two attempts, neither finished, no revert proof reached. Attempt 1 (811 s): the broken end 0.18.3 "
        "failed with the regression's GradScaleError in 519 s (run 1: the JIT build of DeepSpeed's shm op "
        "under a load average of 13-28 on the 2 cores), then it was stopped to run the accelerate case "
        "first. Attempt 2 (649 s) put ccache first on PATH (masquerading as c++, base_dir the venv root) so "
        "that every later point's JIT build would be a cache hit; that changed PATH and added CCACHE_* "
        "variables, so run 1 was not reused (`recorded run 1 is for other inputs: CCACHE_BASEDIR set, ... "
        "PATH changed`), and torch (which prepends ccache when it finds one) rebuilt the op in 0.18.3's venv: "
        "the run passed its 600 s wall timeout (run 18, `hang`). Stopped: with about 11 runs of 5-10 min each "
        "left, the case could not finish in the session.",
}
NOT_STARTED = ("Not started: at the load this session's machine had (load average 20-39 on 2 cores from "
               "eight helpers' work), each DeepSpeed point took 5-10 min (its venv's JIT build of the shm "
               "op, then the run), about an hour a case, and the one attempt made "
               "(ds_bf16_zero0_grad_scale) did not finish.")


def _load(name: str) -> tuple[dict | None, dict | None]:
    out, meta = RUNS / f"{name}.json", RUNS / f"{name}.meta.json"
    return (json.loads(out.read_text()) if out.exists() else None,
            json.loads(meta.read_text()) if meta.exists() else None)


def _truths() -> dict[str, dict]:
    found = {}
    for path in TRUTHS:
        for entry in json.loads(path.read_text()):
            found[entry["case"]] = entry
    return found


def _exc(detail: str) -> str:
    return detail.split(":", 1)[0].strip() if detail else ""


def _answer(res: dict) -> str:
    text = f"{res['verdict']} {res.get('last_good')} → {res.get('first_bad')}"
    commit = res.get("commit") or {}
    if commit.get("first_bad"):
        text += f", commit {commit['first_bad'][:10]} ({commit.get('subject', '')})"
    return text


def _runs(res: dict) -> int:
    return sum(int(s.get("runs") or 0) for s in res["steps"])


def _counted_unrelated(res: dict) -> list[str]:
    """Before issue 22: steps counted bad (broken) with another exception type than the broken
    end's own failure (the bad end; in a fix search, the GOOD argument, the end still broken)."""
    side = "bad"
    end = res["good"] if res.get("mode") == "find-fix" else res["bad"]
    ends = [s for s in res["steps"] if s["stage"] == "release" and s["version"] == end and s.get("detail")]
    if not ends:
        return []
    want = _exc(ends[0]["detail"])
    out = []
    for s in res["steps"]:
        if s["verdict"] == side and s.get("outcome") == "fail" and _exc(s.get("detail", "")) not in ("", want):
            where = s["commit"][:10] if s.get("commit") else s["version"]
            out.append(f"{where} counted {side}: {s['detail']}")
    return out


def _grouped(different: list[str]) -> str:
    """dsbisect's lines, those that differ only in the point named once with the points listed."""
    groups: dict[str, list[str]] = {}
    for line in different:
        point, _, rest = line.partition(" ")
        groups.setdefault(rest, []).append(point)
    return "; ".join(f"`{pts[0]} {rest}`" if len(pts) == 1 else
                     f"{len(pts)} points ({', '.join(pts)}), each `<point> {rest}`" for rest, pts in groups.items())


def _proof_line(res: dict) -> str:
    if not res.get("proof"):
        return "none (no exact first commit)" if not (res.get("commit") or {}).get("first_bad") else "none"
    proof = Proof.from_json(res["proof"], find_fix=res.get("mode") == "find-fix")
    return f"{proof.describe()} (verdict `{proof.verdict.value}`)"


def _proof_seconds(res: dict) -> float:
    return round(sum(float(s.get("seconds") or 0) for s in res["steps"] if s["stage"] == "prove"), 1)


def _case(name: str, truth: dict) -> list[str]:
    lines = _before_after(name, truth)
    if name in NOTES:
        lines += [f"Note: {NOTES[name]}", ""]
    return lines


def _before_after(name: str, truth: dict) -> list[str]:
    before, bmeta = _load(name)
    after, ameta = _load(f"{name}.issue22")
    t = truth["truth"]
    lines = [f"## {name}", "",
             f"Truth: {t['last_good']} → {t['first_bad']}" + (f", commit {t['commit'][:10]}" if t.get("commit") else "")
             + f" ({truth['source']}).", ""]
    if before and bmeta:
        unrelated = _counted_unrelated(before)
        lines += ["**Before** (dsbisect " + bmeta["dsbisect_commit"][:7] + f", {bmeta['date']}): "
                  f"`{bmeta['command']}`", "",
                  f"- verdict: {_answer(before)}",
                  f"- runs: {_runs(before)}, wall time {bmeta['seconds']:.0f} s, exit {bmeta['exit_code']}",
                  "- a failure other than the regression's, counted: "
                  + ("; ".join(f"`{u}`" for u in unrelated) if unrelated else "none"),
                  "- revert proof: none (the dsbisect of that run had none)", ""]
    if not after and ameta and ameta.get("interrupted"):
        return lines + _interrupted(name, ameta)
    if not (after and ameta):
        return lines + ["**After**: " + NOT_STARTED, ""]
    different = after.get("different") or []
    reg = after.get("regression") or {}
    lines += ["**After** (dsbisect " + ameta["dsbisect_commit"][:7] + f", {ameta['date']}): "
              f"`{ameta['command']}`" + (" (interrupted)" if ameta.get("interrupted") else ""), "",
              f"- verdict: {_answer(after)}",
              f"- the regression: `{reg.get('identity', '')}` (learned from {reg.get('learned_from')}, "
              f"rule `{after.get('regress_on')}`, asked `{reg.get('asked')}`)",
              "- failed differently: " + (_grouped(different) if different else "none"),
              f"- revert proof: {_proof_line(after)}"
              + (f" ({_proof_seconds(after):.0f} s)" if _proof_seconds(after) else ""),
              f"- runs: {_runs(after)}, wall time {ameta['seconds']:.0f} s, exit {ameta['exit_code']}", ""]
    return lines


def _interrupted(name: str, ameta: dict) -> list[str]:
    """A re-run stopped at its limit: dsbisect wrote no result; the store's record of its steps
    (``zoo-runs/<case>.issue22.partial.json``) says what it had done."""
    head = ["**After** (dsbisect " + ameta["dsbisect_commit"][:7] + f", {ameta['date']}): "
            f"`{ameta['command']}`: **stopped with Ctrl-C, no verdict** "
            f"({ameta['seconds']:.0f} s in all, exit {ameta['exit_code']}).", ""]
    limit = float(ameta["limit_minutes"]) * 60
    attempts = ameta.get("attempts") or [ameta]
    head += ["- attempts: " + "; ".join(
        f"{a['seconds']:.0f} s, exit {a['exit_code']}"
        + ((" (stopped at the limit)" if a["seconds"] >= limit else " (stopped by hand)") if a.get("interrupted") else "")
        for a in attempts)]
    part = RUNS / f"{name}.issue22.partial.json"
    if not part.exists():
        return head + ["- the store holds no step of it that the search had finished (see the note)", ""]
    rec = json.loads(part.read_text())
    steps = rec["steps"]
    skipped = [s for s in steps if s["verdict"] == "skip" and s.get("outcome") == "fail"]
    counted = [s for s in steps if s["verdict"] == "bad" and s.get("outcome") == "fail"]
    reasons = sorted({s["detail"] for s in skipped})
    reg = rec.get("regression") or {}
    rel = [s for s in steps if s["stage"] == "release"]
    return head + [
        f"- the regression: `{reg.get('identity', '')}` (rule `{rec.get('regress_on')}`)",
        "- releases: " + ", ".join(f"{s['version']} {s['verdict']}" for s in rel),
        f"- steps so far (the store's record, `zoo-runs/{name}.issue22.partial.json`): {len(steps)} points, "
        f"{_runs(rec)} runs; counted bad: {len(counted)}, all with the regression's failure"
        if all(s["detail"].split(":")[0] == reg.get("error") for s in counted) else
        f"- steps so far: {len(steps)} points, {_runs(rec)} runs",
        f"- failed differently, stepped around (not counted): {len(skipped)} commits, "
        + ", ".join(s["commit"][:10] for s in skipped) + (f" — all `{reasons[0]}`" if len(reasons) == 1 else ""),
        ""]


def build() -> str:
    truths = _truths()
    out = ["# Issue 22 in the zoo: before and after", "",
           "Generated by `python docs/results/zoo_issue22.py` from dsbisect's own `--format json` output "
           "(`zoo-runs/<case>.json`: the table's run; `zoo-runs/<case>.issue22.json`: the same command "
           "re-run by a dsbisect with issue 22's features: the bad end's failure is the regression, "
           "a probe that fails differently is stepped around and named, the revert proof after the "
           "commit step). Runs are the sum of every step's runs; wall time is the whole command's. "
           "Both on this project's 2-CPU machine, shared with other work (so wall times vary with its load).",
           ""]
    for name in CASES:
        out += _case(name, truths[name])
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    (HERE / "zoo-issue22.md").write_text(build())
