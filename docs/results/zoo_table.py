#!/usr/bin/env python3
"""The regression zoo's table: dsbisect's verdicts next to the independently established truths.

    python docs/results/zoo_table.py                    # build zoo.json and zoo.md
    python docs/results/zoo_table.py --run --accelerate-clone <clone> --deepspeed-clone <clone>
                                                        # run every CPU case, one at a time, then build
    python docs/results/zoo_table.py --run accelerate_tied_load_state   # one case (no clone needed)

Inputs: the truths (``zoo-truth-hf.json``, ``zoo-truth-deepspeed.json``: one entry per case with
``case``, ``package``, ``source``, ``kind``, ``where``, ``truth``, ``how``, ``command``, ``note``)
and, per case that was run, dsbisect's own ``bisect --format json`` output in
``zoo-runs/<case>.json`` with ``zoo-runs/<case>.meta.json`` beside it (the command as run, the
wall time, the date, the machine, the dsbisect commit, the exit code).  ``--run`` writes both: it
runs the truth entry's ``command`` as written (clones put in for ACCELERATE_CLONE and
DEEPSPEED_CLONE), adding ``--format json -o ... --store ...``, and stops a bisection with Ctrl-C
(SIGINT: dsbisect records what it ran, and a second ``--run`` resumes) after ``--limit-minutes``.
Paths of the machine are written as ``<clone>``, ``<store>``, ``<cache>`` and ``~``.

Settings rows (``zoo-truth-settings.json``): ``kind`` ``setting`` is a bisection of settings
(``bisect --good-config/--bad-config``, ``--good-vars/--bad-vars``, ``--good-command/--bad-command``)
whose truth is ``{"culprits": [name, ...]}`` (the settings' names as ``env_diff.culprits`` gives
them: ``zero_optimization.overlap_comm``, ``NCCL_P2P_DISABLE``); ``kind`` ``workaround`` is a
``dsbisect workaround`` whose truth is ``{"workarounds": ["config zero_optimization.stage=0", ...],
"not_workarounds": [...]}`` (each knob as ``<setting> <name>=<value>``, a group's knobs joined by
`` + ``; ``not_workarounds`` optional).  A setting row matches when the culprits are exactly the
truth's; a workaround row when every true workaround is found and none of ``not_workarounds`` is.

``match``: ``true`` when dsbisect's last_good and first_bad equal the truth's and, where the truth
names a commit and the command asked for the commit step (``--git-repo``), its first bad commit
is that commit; ``false`` otherwise; ``null`` when not run.  For ``--find-fix`` cases both the
truth and dsbisect say last_good = the last release with the old behaviour, first_bad = the first
with the new one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RUNS = HERE / "zoo-runs"
TRUTHS = [HERE / "zoo-truth-hf.json", HERE / "zoo-truth-deepspeed.json", HERE / "zoo-truth-gpu.json",
          HERE / "zoo-truth-envdiff.json", HERE / "zoo-truth-settings.json"]
CLONE_WORDS = {"ACCELERATE_CLONE": "accelerate_clone", "DEEPSPEED_CLONE": "deepspeed_clone"}

# What happened in each run, beyond what the outputs say (written after reading the run's log).
RUN_NOTES: dict[str, str] = {
    "accelerate_batch_sampler_no_batch_size":
        "Missed at first (dsbisect c31b15b; zoo-runs/accelerate_batch_sampler_no_batch_size.first-run.json, "
        "13 runs, 228 s): **dsbisect's fault, fixed and re-run.** 0.24.0 also fails in prepare_data_loader, "
        "with its own regression (`'VariableBatches' object has no attribute 'sampler'`, PR #2057, fixed in "
        "0.25.0 by #2097), and the failure identity counted any failure of the same exception type in the "
        "same innermost package function as the bad end's (`... no attribute 'batch_size'`, #2310), whatever "
        "the message: the first run answered 0.23.0 -> 0.24.0, #2057. Fixed in identity.matches (a changed "
        "message in the same frame is the same failure only when it names the same things, up to a rename "
        "that keeps one name inside the other). Re-run from a copy of the same store (dsbisect bd17f0f, "
        "every run it needed already recorded, 2 s): 0.24.0 'failed differently ... not counted', found "
        "0.25.0 -> 0.26.0, first bad commit 0d2280da (#2310), revert proof proven: the truth.",
    "accelerate_sampler_shard_dupes":
        "Missed at first (dsbisect 2ae900f; zoo-runs/accelerate_sampler_shard_dupes.first-run.json, 6 runs, "
        "194 s, answered ambiguous 0.24.1 -> 0.26.0): **dsbisect's fault, fixed and re-run.** 0.25.0, the "
        "true first bad release, fails the same check as the bad end (`samples [5, 7, 8, 9, 16] were served "
        "to no rank` against `samples [5, 6, 11, 20] ...`), but normalise kept the list's length, so it was "
        "called 'failed differently' and stepped around. Fixed in identity.normalise (a bracketed list of "
        "numbers of any length is `[<n>…]`). Re-run from a copy of the same store (dsbisect bd17f0f, 123 s): "
        "found 0.24.1 -> 0.25.0, first bad commit 183c9dd3 (#2126), revert proof proven: the truth.",
    "ds_decoupled_ckpt_dead_writer":
        "The table's run is the re-run of 2026-12-02 (dsbisect e3f34dd, a fresh store, --idle-timeout 60, "
        "1015 s at a load average of 2-7, 11 runs): 0.17.6 hang 106 s, 0.18.4 pass 59 s, 0.18.1 / 0.18.2 / "
        "0.18.3 hang 87-101 s, each 'ranks 0-1 not in a collective -- decoupled_checkpoint_engine.py:commit' "
        "(0.18.3: rank 1 in all_reduce); commit step over the 23 first-parent commits v0.18.3..v0.18.4, 6 "
        "runs (hangs 91-134 s, passes 30-59 s): first fixed ba29fdca30 (#7742), the truth. Its revert proof "
        "is untestable for the reason ds_zero1_overflow_desync_hang's is (the history here cannot check out "
        "a whole commit). --idle-timeout 60 (the matrix says 300): the idle rule counts the ranks' "
        "children's CPU as work since the first run's miss, so a silent compile no longer needs the long "
        "limit, and 60 s makes each hang cost ~1.5 min instead of ~6 (the first run's pace would not fit "
        "this session). Earlier runs kept, not counted: the first full run (dsbisect 44b4ee3, "
        "zoo-runs/ds_decoupled_ckpt_dead_writer.first-run.json, the miss, see Misses) and the release-level "
        "run of 2026-12-01 (dsbisect 519577e, stopped with SIGTERM after 28 min in the commit step; its five "
        "stored runs replayed without --git-repo: 0.18.3 -> 0.18.4, "
        "zoo-runs/ds_decoupled_ckpt_dead_writer.release-level.json).",
    "envdiff_transformers_accelerate_interaction":
        "Level 1 (18 trials, the interaction search) answered the culprits only together: accelerate "
        "0.34.2 -> 1.0.1 with transformers 4.40.0 -> 4.39.3 and tokenizers 0.19.1 -> 0.15.2, each of the "
        "latter two 'cannot be left out of the answer' because the other pin makes uv's resolution "
        "fail (transformers pins its tokenizers range) and 'alone it behaves as the good end'. Level 2: "
        "accelerate with the partners at their bad versions: last good 0.34.2, first bad 1.0.0 (the one "
        "release between); transformers has no release between 4.39.3 and 4.40.0. The regression "
        "learned from the bad end is the truth's TypeError ('dispatch_batches').",
    "envdiff_accelerate_shard_dupes_2023":
        "Level 1 named accelerate alone among the 28 changes; level 2 0.24.1 -> 0.25.0; level 3 first bad "
        "commit 183c9dd3 (#2126) among 61, its revert on top of v0.25.0 proven. zoo_table's 25-minute "
        "limit sent its SIGINT during that revert proof: dsbisect finished the proof and wrote the whole "
        "answer (exit 0), so the meta file says interrupted while the output is complete.",
    "ds_zero1_overflow_desync_hang":
        "Run to the commit on 2026-12-02 (dsbisect 6c8818a, a fresh store, 1155 s at a load average of "
        "4-8): 0.17.0 pass 254 s (the JIT compile of DeepSpeed's shm op), 0.17.6 fail 287 s (its own "
        "compile: 0.17.3 adds -UC10_USE_GLOG to the op's flags, so 0.17.0, 0.17.3 and 0.17.6 each build "
        "one), 0.17.3 fail 229 s, 0.17.1 fail 44 s (0.17.0's build shared); the bad end's failure is the "
        "gloo abort ('rank 0 killed by SIGABRT'). Commit step over the 15 first-parent commits "
        "v0.17.0..v0.17.1, 6 runs of 20-46 s: first bad e440506bee (#6976), the truth. The revert proof "
        "is 'untestable' ('git worktree add failed: fatal: Could not reset index file to revision "
        "'HEAD''): the DeepSpeed history here lacks its largest blobs (blog images), so no commit can be "
        "checked out in full; the commit points themselves build from `git archive` of the package's "
        "folders, which have every blob. Two earlier attempts kept, not counted. (1) dsbisect c15d2b3 "
        "(zoo-runs/ds_zero1_overflow_desync_hang.attempt1.meta.json, stopped after 23 min): its good end "
        "0.17.0 spent the then 1200 s limit inside the JIT compile of DeepSpeed's shm op (load average "
        "30-37; the compiler got ~6 % of a core). (2) dsbisect 580eef2, a fresh store, the compile done "
        "beforehand (zoo-runs/ds_zero1_overflow_desync_hang.attempt2.json, 721 s): 0.17.0 pass, 0.17.6 "
        "'rank 0 killed by SIGABRT' -> 'untestable: 0.17.6 (the bad end) could not be tested' under "
        "--regress-on hang: the right answer for that command. On gloo the desync is not a hang: gloo "
        "sees the mismatched collectives ('gloo::EnforceNotMet ... Received data size doesn't match "
        "expected size. Is there a distributed collective mismatch in your code?', rank 0 in "
        "stage_1_and_2.py:scaled_global_norm's all_reduce) and aborts; on NCCL it is the issue's hang. "
        "The case is a 'fail' on CPU since (truth and command --regress-on fail).",
    "transformers_best_ckpt_barrier_hang":
        "First run 2026-12-02 (dsbisect 286b7c6; a fresh store; 287 s at a load average of 4-6; 26 "
        "candidates with the yanked 4.57.0 and 4.52.0). Every hang was called by the early deadlock proof "
        "about 35 s into the run, before gloo's 30 s collective timeout had ended it: 'rank 0 waits in "
        "BARRIER #16, rank 1 in ALLGATHER #16 (1) -- different ops at #16' (trainer.py's load-best "
        "barrier against store_flos's all-gather, trainer_pt_utils.py:distributed_broadcast_scalars). "
        "Without --include-yanked the answer would be 4.56.2 -> 4.57.1 (4.57.0 is yanked), the "
        "tempting answer of transformers_ga_loss_scale again.",
    "accelerate_gather_object_uneven_hang":
        "Every hang was called by gloo's 30 s collective timeout (40-100 s a run under a load average of "
        "20-35). The first attempt was stopped at zoo_table's 15-minute limit: its SIGINT, sent while "
        "dsbisect was in the commit step (building a commit's wheel), did not end it within the 300 s "
        "grace, and the SIGTERM after it did (exit 143, the run in flight not recorded); the second "
        "attempt resumed from the store, re-ran that one probe and the revert proof ('reverting "
        "e965d590cd on top of v0.19.0': proven).",
    "transformers_accelerate1_dataloader_kwargs":
        "The broken releases' reason is the truth's: 'TypeError: Accelerator.__init__() got an unexpected "
        "keyword argument 'dispatch_batches''.",
    "ds_bf16_zero0_grad_scale_side_zero2":
        "The tempting answer steered around: 0.18.7 and 0.18.8 fail too, with the unrelated ZeRO-2 in-place "
        "RuntimeError of #7828; without --signature they would count as 'not fixed' and a plain bisection "
        "would answer 0.19.0. With --signature GradScaleError they were skips, and 0.18.6 (pass) was found.",
    "ds_bf16_zero0_grad_scale":
        "A first attempt (dsbisect bdd6853) was stopped after 25 min: a Ctrl-C during DeepSpeed's CPU "
        "shm-op build at commit 2c362837b had left torch's build lock in that venv, and the next run there "
        "waited 600 s for it and was recorded as a HANG (a skip under --regress-on fail; a wrong 'bad' under "
        "--regress-on hang). dsbisect now removes such locks before a run (tests/run/test_direct.py). The run "
        "above is from a fresh store; it reused the first attempt's venvs and commit wheels, hence 323 s.",
    "accelerate_main_process_first":
        "One commit probe, 38fd30e7 (#1079), failed for an unrelated reason (AttributeError: module "
        "'torch._C' has no attribute '_cuda_setDevice') and, without --signature, counted as bad; it "
        "lies after #1039, so the answer did not move (--signature main_process_first would have "
        "stepped around it).",
    "accelerate_datapipe_dispatch_hang":
        "Every hang was called by gloo's 30 s collective timeout (42-49 s a run), with the signature "
        "'rank 0 in new_group, rank 1 in broadcast_object_list'. The early deadlock verdict (in dsbisect "
        "from 97e6990) looked five times and found no proof: rank 0 waits in new_group's store barrier, "
        "which the flight recorder does not list as a pending collective, so only rank 1's BROADCAST #1 "
        "was pending.",
    "accelerate_tied_load_state":
        "Three commit probes (0b0d9215, 8256a9c2, e638b1e2) are reported with the bare reason "
        "'RuntimeError:': there accelerate raises the error with a message that begins with a "
        "newline, and the reason is the first line of the exception.",
    "transformers_checkpoint_rename":
        "Widened for issue 24 from 4.35.2..4.36.0 (no release between: the first run, dsbisect 2ee0387, "
        "2 runs, 106 s, kept as zoo-runs/transformers_checkpoint_rename.narrow.json) to 4.33.3..4.36.0: "
        "4.33.3 pass, 4.36.0 fail, then 4.35.0, 4.35.1, 4.35.2 pass (4.34.x not needed). The bad end's "
        "reason is the truth's: 'RuntimeError: Parent directory .../tmp-checkpoint-1 does not exist.'",
    "transformers_zero3_missing_init":
        "The ZeRO-3 runs take 80-145 s each here (deepspeed launcher, 2 CPU ranks). The broken releases' "
        "reasons differ as the truth says: 4.35.2 'std 0.1089' (torch's default init), 4.36.2 "
        "'std 1.099e+37' (uninitialised memory; the researcher saw 2.8e-06, as garbage goes).",
    "transformers_tokens_seen_gather":
        "The broken releases' reason is 'rank 0 killed by SIGABRT (Fatal Python error: Aborted)' -- the "
        "rank gloo aborted in the unequal all-gather -- not rank 1's 'Connection reset by peer' that "
        "the case's researcher saw with an older dsbisect.",
}

# The single-GPU cases' first run (2026-12-02, one H200, dsbisect ca3c700, all five side by side in
# one device call, docs/results/gpu_zoo.sh): kept as zoo-runs/<case>.attempt1.json, not counted, because
# the case scripts were wrong; fixed since, not yet run again (the session's device time was spent).
_DS_ATTEMPT = ("First run on one H200 (zoo-runs/{case}.attempt1.json, 2 runs, {s} s): both ends failed "
               "with DeepSpeed's 'AssertionError: You are using an untested ZeRO Optimizer. Please add "
               "<\"zero_allow_untested_optimizer\": true>' (the script passed a torch SGD without that key), "
               "so dsbisect answered not-reproduced ('the fixed end failed: the fix is not visible here'): the "
               "right answer for that script, the case's fault, not dsbisect's. The key is in the script now; "
               "not run again (no device time left). Not counted.")
GPU_ATTEMPTS: dict[str, str] = {
    "ds_z3_offload_clip_device": _DS_ATTEMPT.format(case="ds_z3_offload_clip_device", s=43),
    "ds_z2_offload_ga": _DS_ATTEMPT.format(case="ds_z2_offload_ga", s=44),
    "ds_z2_offload_gpu_memory": _DS_ATTEMPT.format(case="ds_z2_offload_gpu_memory", s=38),
    "ds_z3_offload_set_grad_norm": _DS_ATTEMPT.format(case="ds_z3_offload_set_grad_norm", s=46),
    "accelerate_fp16_wrapped_forward":
        "First run on one H200 (zoo-runs/accelerate_fp16_wrapped_forward.attempt1.json, 2 runs, 36 s): "
        "0.15.0 and 0.20.3 both passed, so dsbisect answered not-reproduced ('the bad end passed'). The "
        "case's fault, not dsbisect's: dsbisect's 1-rank run sets torchrun's variables (RANK, LOCAL_RANK, "
        "WORLD_SIZE, MASTER_*), under which accelerate 0.20 takes DistributedType.MULTI_GPU and wraps the "
        "model in DDP before the mixed-precision code, and DDP's forward is a bound method, so the broken "
        "`model.forward.__func__` never meets the plain function (read from the 0.20.3 source; not seen "
        "on the GPU). By hand on the CPU, with bf16 (the same line) and no such variables: 0.19.0 pass, "
        "0.20.0 and 0.20.3 'AttributeError: 'function' object has no attribute '__func__'', 0.21.0 pass: "
        "the truth's boundary. The script now drops those variables (a single-process run, as `python "
        "train.py` starts it); not run again (no device time left). Not counted.",
}

# For each miss: what went wrong and why (whose fault: the case, the truth, or dsbisect).
MISSES: dict[str, str] = {
    "envdiff_accelerate_2023":
        "**The commit left open, as designed; not a fault of the search.** Levels 1 and 2 are the truth "
        "(culprit accelerate 0.22.0 -> 0.25.0 in 6 trials; first bad release 0.25.0). At level 3 the "
        "regression is the bad end's failure, `RuntimeError: Error(s) in loading state_dict` at load time "
        "(--regress-on auto); e638b1e2 (#2120, the truth's first failing commit) and the commits after it "
        "until fc0a43c3c (#2136) fail *differently*, at save time ('Some tensors share memory'), so they "
        "are skips, not bad, and the first bad commit cannot be told among the six skipped or bad ones: "
        "dsbisect answers 'commit left between e638b1e21a, 0b0d9215a9, 9674b40580, 6727ac4394, "
        "8256a9c2d4, fc0a43c3c1', which holds the truth. With --any-failure (the same runs; "
        "docs/results/2026-12-02-cpu-envdiff-accelerate-anyfail.json) it answers first bad commit "
        "e638b1e21a: the truth. The strict comparison counts the default run's open commit as a miss; "
        "its root (#2120) therefore counts as a miss among the independent roots although "
        "accelerate_tied_load_state and envdiff_accelerate_tied match.",
    "transformers_ga_loss_scale":
        "**The tempting answer, as designed; not dsbisect's fault.** The true first bad release, "
        "4.46.0, is yanked on PyPI, and dsbisect leaves yanked releases out of the candidates by "
        "default (README, \"Bisecting\"), so it tested 4.45.2, 4.46.3, 4.46.1, 4.46.2 and answered "
        "first bad 4.46.1. Its report says so: the caveat \"4.46.0 (yanked) lies between 4.45.2 and "
        "4.46.1 and was not tested; --include-yanked tests it\" (in zoo-runs/transformers_ga_loss_scale.json). "
        "Run again with --include-yanked (zoo-runs/transformers_ga_loss_scale.include-yanked.json, one "
        "new run, 23 s, the other points reused from the store) it answers last good 4.45.2, first bad "
        "4.46.0: the truth. Nothing changed in dsbisect; the strict comparison counts the default "
        "run's 4.46.1 as a miss.",
}


# Cases whose first run missed by dsbisect's fault, fixed and re-run (both runs kept in zoo-runs/): the
# Misses section lists them with what went wrong and what the re-run answered, matched or not.
FIXED_MISSES: dict[str, str] = {
    "ds_decoupled_ckpt_dead_writer":
        "**First run: a false hang at the fixed end, from this machine's load and dsbisect's idle rule.** "
        "dsbisect 44b4ee3 (2026-12-02, 28 min, exit 1; zoo-runs/ds_decoupled_ckpt_dead_writer.first-run.json) "
        "answered not-reproduced: '0.18.4 (the fixed end) hung', its detail 'ranks 0-1 not in a collective -- "
        "builder.py:jit_load <- builder.py:load <- ds_decoupled_ckpt_dead_writer.py:main' after 746 s. That "
        "was the silent JIT compile of DeepSpeed's shm op in a new venv, not the bug: the case's idle_timeout "
        "(300 s) was set to clear a compile of up to ~200 s, and at a load average of 20-35 one compile took "
        "8-12 minutes; 0.17.6 hung where the truth says (decoupled_checkpoint_engine.py:commit, 797 s). "
        "dsbisect's fault: its idle rule read 'no output and no rank's stack moved' as idle while the ranks' "
        "compiler child processes were busy. Fixed (the idle check counts the CPU of every rank's "
        "descendants, live or reaped, as work -- tests/launch/test_launch.py::"
        "test_a_rank_waiting_on_a_child_that_works_is_not_idle -- and, since f5a66bf, as a share of a core). "
        "**Re-run** (dsbisect e3f34dd, the table's row, --idle-timeout 60, 1015 s): found 0.18.3 -> 0.18.4, "
        "first fixed commit ba29fdca30 (#7742), the truth. In that re-run every point loaded 0.17.6's shared "
        "op build (0.18.x have the same op files and flags), so no compile ran inside it; the compile the "
        "first run tripped on was checked on its own: the fixed end 0.18.4 alone, its op key changed (CXXFLAGS=-O2 in the case's env) so that its shared build was made inside the run, --idle-timeout 60 (dsbisect e3f34dd, a separate store, load 3-4): the compile took 94 s with no output, longer than the idle limit, and the run passed in 118 s (zoo-runs/ds_decoupled_ckpt_dead_writer.fixed-end-compile.json; the matrix of that check is in docs/results/zoo-round4-cpu.md).",
    "accelerate_batch_sampler_no_batch_size":
        "First run (dsbisect c31b15b, zoo-runs/accelerate_batch_sampler_no_batch_size.first-run.json) answered "
        "0.23.0 -> 0.24.0: a failure with another message in the same frame counted as the regression. Fixed "
        "in identity.matches; re-run from a copy of the same store: 0.25.0 -> 0.26.0, 0d2280da, the truth "
        "(see the case's run note).",
    "accelerate_sampler_shard_dupes":
        "First run (dsbisect 2ae900f, zoo-runs/accelerate_sampler_shard_dupes.first-run.json) answered "
        "ambiguous 0.24.1 -> 0.26.0: a list of numbers of another length made the same failure 'different'. "
        "Fixed in identity.normalise; re-run: 0.24.1 -> 0.25.0, 183c9dd3, the truth (see the case's run note).",
}


# ---------------------------------------------------------------- truths and results

def load_truths() -> list[dict]:
    cases: list[dict] = []
    for path in TRUTHS:
        if path.exists():
            cases.extend(json.loads(path.read_text()))
    return cases


def _commit_step(entry: dict) -> bool:
    return "--git-repo" in shlex.split(entry["command"])


def _same_commit(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n]


def result_of(entry: dict) -> dict | None:
    out, meta = RUNS / f"{entry['case']}.json", RUNS / f"{entry['case']}.meta.json"
    if not meta.exists():
        return None
    m = json.loads(meta.read_text())
    r = json.loads(out.read_text()) if out.exists() else {}
    run_ids = {i for s in r.get("steps", []) for i in s.get("run_ids", [])}
    if r.get("kind") == "environment":
        return _env_result(r, m, run_ids)
    if r.get("kind") == "workaround":
        return _workaround_result(r, m)
    commit = r.get("commit")
    return {
        "verdict": r.get("verdict", "interrupted" if m.get("interrupted") else f"no output (exit {m.get('exit_code')})"),
        "last_good": r.get("last_good"),
        "first_bad": r.get("first_bad"),
        "commit": _commit_fields(commit),
        "runs": len(run_ids),
        "seconds": m["seconds"],
        "date": m["date"],
        "machine": m["machine"],
    }


def _commit_fields(commit: dict | None) -> dict | None:
    if commit is None:
        return None
    return {k: commit.get(k) for k in ("last_good", "first_bad", "subject", "commits_in_range", "verdict")}


def _env_result(r: dict, m: dict, run_ids: set) -> dict:
    """An environment bisection's output (``kind: environment``): the culprits, then one release
    bisection per culprit (its commit step inside)."""
    releases = [{"package": x.get("package"), "last_good": x.get("last_good"), "first_bad": x.get("first_bad"),
                 "verdict": x.get("verdict"), "commit": _commit_fields(x.get("commit"))}
                for x in r.get("releases", [])]
    run_ids |= {i for x in r.get("releases", []) for s in x.get("steps", []) for i in s.get("run_ids", [])}
    env = r.get("env_diff") or {}
    return {
        "verdict": r.get("verdict"),
        "culprits": sorted(env.get("culprits") or []),
        "changes": len(env.get("changes") or []),
        "releases": releases,
        "last_good": None, "first_bad": None, "commit": None,
        "runs": len(run_ids), "seconds": m["seconds"], "date": m["date"], "machine": m["machine"],
    }


def _knob_words(trial: dict) -> str:
    """A workaround trial as ``config zero_optimization.stage=0`` (a group: joined by `` + ``)."""
    return " + ".join(f"{k['setting']} {k['name']}={json.dumps(k['value']) if not isinstance(k['value'], str) else k['value']}"
                      for k in trial["knobs"])


def _workaround_result(r: dict, m: dict) -> dict:
    """A ``dsbisect workaround`` output: the knobs (and groups) that passed every run."""
    trials = [*r.get("tried", []), *r.get("groups_tried", [])]
    runs = set(r.get("baseline", {}).get("run_ids", [])) | {i for t in trials for i in t.get("run_ids", [])}
    return {
        "verdict": r.get("verdict"),
        "workarounds": [_knob_words(t) for t in (*r.get("workarounds", []), *r.get("group_workarounds", []))],
        "tried": len(trials), "baseline": r.get("baseline", {}).get("outcome"),
        "last_good": None, "first_bad": None, "commit": None,
        "runs": len(runs), "seconds": m["seconds"], "date": m["date"], "machine": m["machine"],
    }


def _workaround_match(entry: dict, result: dict) -> bool:
    truth = entry["truth"]
    if "workarounds" not in result:  # no output: the run ended before its answer
        return False
    got = set(result["workarounds"])
    return set(truth["workarounds"]) <= got and not got & set(truth.get("not_workarounds", []))


def _env_match(entry: dict, result: dict) -> bool:
    """Every true culprit found (packages dependency metadata ties to one may come along), and for
    each culprit with a release truth its release pair and, asked for, its first bad commit."""
    truth = entry["truth"]
    want = {c["package"] for c in truth["culprits"]}
    got = set(result["culprits"])
    if not want <= got or not got <= want | set(truth.get("tied", [])):
        return False
    by_pkg = {x["package"]: x for x in result["releases"]}
    for c in truth["culprits"]:
        if "first_bad" not in c:
            continue
        rel = by_pkg.get(c["package"])
        if rel is None or (rel["last_good"], rel["first_bad"]) != (c["last_good"], c["first_bad"]):
            return False
        if c.get("commit") and _commit_step(entry) and \
                not _same_commit((rel["commit"] or {}).get("first_bad"), c["commit"]):
            return False
    return True


def match_of(entry: dict, result: dict | None) -> bool | None:
    """None when not run, or when a bisection was stopped before its answer (an interrupted run is
    resumed with another --run; it is not a verdict)."""
    if result is None or result.get("verdict") == "interrupted":
        return None
    if entry["kind"] == "env-diff":
        return _env_match(entry, result)
    if entry["kind"] == "setting":
        return sorted(result.get("culprits") or []) == sorted(entry["truth"]["culprits"])
    if entry["kind"] == "workaround":
        return _workaround_match(entry, result)
    truth = entry.get("truth") or {}
    if result["last_good"] != truth.get("last_good") or result["first_bad"] != truth.get("first_bad"):
        return False
    if truth.get("commit") and _commit_step(entry):
        return _same_commit((result["commit"] or {}).get("first_bad"), truth["commit"])
    return True


def auto_note(entry: dict, result: dict | None) -> str:
    if result is None:
        if entry["where"] != "cpu":
            return f"Not run: needs {entry['where'][-1]} GPUs; ready to run: `{entry['command']}`."
        return "Not run yet."
    meta = json.loads((RUNS / f"{entry['case']}.meta.json").read_text())
    if "workarounds" in result:
        return (f"dsbisect {meta['dsbisect_commit'][:7]}: as given {result['baseline']}; {result['tried']} knobs or "
                f"groups tried, {result['verdict']}: {_fmt_result(result)}; {result['runs']} runs, "
                f"{result['seconds']:.0f} s.")
    if "culprits" in result:
        return (f"dsbisect {meta['dsbisect_commit'][:7]}: {result['changes']} changes, {result['verdict']}: "
                f"{_fmt_result(result)}; {result['runs']} runs, {result['seconds']:.0f} s"
                + (f" ({meta['reconstructed']})" if meta.get("reconstructed") else "") + ".")
    bits = [f"dsbisect {meta['dsbisect_commit'][:7]}: {result['verdict']}"]
    if result["last_good"] or result["first_bad"]:
        bits[0] += f" {result['last_good']} -> {result['first_bad']}"
    c = result["commit"]
    if c:
        bits.append(f"commit step over {c.get('commits_in_range')} commits: {c.get('verdict')}, first "
                    f"{'fixed' if '--find-fix' in entry['command'] else 'bad'} {(c.get('first_bad') or '-')[:9]}"
                    f" {c.get('subject') or ''}".rstrip())
    bits.append(f"{result['runs']} runs, {result['seconds']:.0f} s")
    for i, a in enumerate(meta.get("attempts", [])[:-1]):
        if a["interrupted"]:
            bits.append(f"stopped with Ctrl-C after {a['seconds'] / 60:.0f} min (dsbisect {a['dsbisect_commit'][:7]}) "
                        f"and resumed{' with dsbisect ' + meta['attempts'][i + 1]['dsbisect_commit'][:7]}")
    if meta.get("interrupted"):
        bits.append(f"stopped with Ctrl-C after {meta['limit_minutes']:.0f} min")
    return "; ".join(bits) + "."


# Runs recorded before meta files were written: (the dsbisect commit, what the run was).
EARLIER_RUNS: dict[str, tuple[str, str]] = {
    "ds_decoupled_ckpt_dead_writer": ("519577ed04009023634fff6d226382e16adf2331",
                                      "the release-level run of 2026-12-01 (see its run note)"),
}
# Supplementary runs this table knows (zoo-runs/<case>.<suffix>.json); files with other suffixes
# (other sessions' before/after re-runs, proofs) are not read.
KNOWN_SUFFIXES = ("first-run", "attempt1", "find-fix", "signature", "any-failure", "include-yanked",
                  "release-level", "narrow", "attempt2")
# Issue 24 was filed after this commit (the end of the session whose zoo it describes: "13 of 17
# cases run, 12 matched"; the next commit on main is 15 hours later) and before any of its work.
ISSUE24_AFTER = "80d1cb732a6ef1891efe9d657b75503ba57fd89a"


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    except OSError:
        return None


def _commit_time(commit: str) -> float:
    out = _git("log", "-1", "--format=%ct", commit)
    return float(out.stdout.strip()) if out is not None and out.returncode == 0 and out.stdout.strip() else float("inf")


def first_run(entry: dict) -> str | None:
    """The dsbisect commit of the case's first run: the truth's ``first_run`` where it names one, the
    commits of its meta files (the table's run and the known supplementary ones) and EARLIER_RUNS,
    the oldest by commit time."""
    seen = [entry["first_run"]] if entry.get("first_run") else []
    for suffix in ("",) + tuple("." + x for x in KNOWN_SUFFIXES):
        meta = RUNS / f"{entry['case']}{suffix}.meta.json"
        if meta.exists():
            m = json.loads(meta.read_text())
            seen += [m["dsbisect_commit"]] + [a["dsbisect_commit"] for a in m.get("attempts", [])]
    if entry["case"] in EARLIER_RUNS:
        seen.append(EARLIER_RUNS[entry["case"]][0])
    return min(seen, key=_commit_time) if seen else None


def after_issue(commit: str | None) -> bool | None:
    """True when ``commit`` is not ISSUE24_AFTER nor one of its ancestors (first run after issue 24
    was filed); None without a commit or a git history to ask."""
    if commit is None:
        return None
    out = _git("merge-base", "--is-ancestor", commit, ISSUE24_AFTER)
    if out is None or out.returncode not in (0, 1):
        return None
    return out.returncode == 1


def root_key(root: str | None) -> str | None:
    """The change a root names (its first word, e.g. ``deepspeed#7665``): cases with one key count
    as one independent regression."""
    return root.split()[0].rstrip(":,;") if root else None


def rows() -> list[dict]:
    out = []
    for e in load_truths():
        res = result_of(e)
        match = match_of(e, res)
        note = "Truth: " + e["how"]
        note += " Run: " + auto_note(e, res)
        if e["case"] in RUN_NOTES:
            note += " " + RUN_NOTES[e["case"]]
        if res is None and e["case"] in GPU_ATTEMPTS:
            note += " " + GPU_ATTEMPTS[e["case"]]
        first = first_run(e) if res is not None else None
        out.append({
            "case": e["case"], "package": e["package"], "source": e["source"], "kind": e["kind"],
            "where": e["where"], "truth": e.get("truth"), "result": res, "match": match, "note": note,
            "root": e.get("root"), "root_key": root_key(e.get("root")),
            "first_run": first, "first_run_after_issue": after_issue(first),
        })
    return out


# ---------------------------------------------------------------- the table

def _fmt_pair(last_good, first_bad, commit) -> str:
    s = f"{last_good} → {first_bad}"
    return s + (f" `{commit[:9]}`" if commit else "")


def _fmt_truth(t: dict | None, ff: bool) -> str:
    if not t:
        return "?"
    if "workarounds" in t:
        return "works: " + "; ".join(t["workarounds"]) + (
            "; not: " + "; ".join(t["not_workarounds"]) if t.get("not_workarounds") else "")
    if "culprits" in t and all(isinstance(c, str) for c in t["culprits"]):
        return ("culprits (only together): " if len(t["culprits"]) > 1 else "culprit: ") + ", ".join(t["culprits"])
    if "culprits" in t:
        together = " (only together)" if len(t["culprits"]) > 1 else ""
        return "culprits" + together + ": " + "; ".join(
            c["package"] + (" " + _fmt_pair(c["last_good"], c["first_bad"], c.get("commit")) if "first_bad" in c else "")
            for c in t["culprits"])
    s = f"{t['last_good']} → {t['first_bad']}"
    if t.get("commit"):
        s += f" `{t['commit'][:9]}`"
    return s


def _fmt_result(r: dict | None) -> str:
    if r is None:
        return "not run"
    if "workarounds" in r:
        return f"{r['verdict']}: works: {'; '.join(r['workarounds']) or '-'}"
    if "culprits" in r:
        rels = "; ".join(f"{x['package']} " + _fmt_pair(x["last_good"], x["first_bad"],
                                                        (x["commit"] or {}).get("first_bad"))
                         for x in r["releases"])
        return f"{r['verdict']}: culprits {', '.join(r['culprits']) or '-'}" + (f"; {rels}" if rels else "")
    if r["last_good"] is None and r["first_bad"] is None:
        return r["verdict"]
    s = f"{r['verdict']}: {r['last_good']} → {r['first_bad']}"
    c = r.get("commit")
    if c and c.get("first_bad"):
        s += f" `{c['first_bad'][:9]}`"
    return s


def _fmt_first(t: dict) -> str:
    if not t["first_run"]:
        return ""
    return f"`{t['first_run'][:7]}`" + {True: " (after)", False: " (before)", None: ""}[t["first_run_after_issue"]]


def _fmt_time(r: dict | None) -> str:
    if r is None:
        return ""
    return f"{r['seconds'] / 60:.1f} min"


def _rate(hit: int, n: int) -> str:
    return f"{hit}/{n} ({100 * hit / n:.0f} %)" if n else "0/0"


def rates(table: list[dict]) -> dict:
    """The three match rates: every case run; independent roots (one per root_key -- a root matches
    only when every case of it that was run matches, so a root with a match and a miss is a miss);
    the cases first run after issue 24 was filed (first_run_after_issue)."""
    run = [t for t in table if t["match"] is not None]
    roots: dict[str, list[bool]] = {}
    for t in run:
        roots.setdefault(t["root_key"] or t["case"], []).append(bool(t["match"]))
    late = [t for t in run if t["first_run_after_issue"]]
    return {
        "cases": len(table), "run": len(run), "match": sum(1 for t in run if t["match"]),
        "roots_run": len(roots), "roots_match": sum(1 for v in roots.values() if all(v)),
        "roots_all": len({t["root_key"] or t["case"] for t in table}),
        "after_issue_run": len(late), "after_issue_match": sum(1 for t in late if t["match"]),
    }


def summary(table: list[dict]) -> str:
    r = rates(table)
    misses = [t for t in table if t["match"] is False]
    explained = [t for t in misses if t["case"] in MISSES]
    fixed = [t for t in table if t["case"] in FIXED_MISSES and t["match"]]
    return (f"{r['run']} of {r['cases']} run; match rate: all cases {_rate(r['match'], r['run'])}, "
            f"independent roots {_rate(r['roots_match'], r['roots_run'])} "
            f"({r['roots_all']} roots in the table), "
            f"first run after issue 24 was filed {_rate(r['after_issue_match'], r['after_issue_run'])}; "
            f"{len(explained)} {'miss' if len(explained) == 1 else 'misses'} explained"
            + (f" ({len(misses) - len(explained)} not yet)" if len(misses) > len(explained) else "")
            + (f"; {len(fixed)} first {'run' if len(fixed) == 1 else 'runs'} that missed by dsbisect's fault "
               f"fixed and re-run" if fixed else ""))


def markdown(table: list[dict]) -> str:
    entries = {e["case"]: e for e in load_truths()}
    lines = [
        "# The regression zoo: dsbisect against documented regressions",
        "",
        "Each case is a real regression (or fix) of DeepSpeed, Transformers or Accelerate whose last",
        "good / first bad release — and, where the history could be fetched, the commit — was",
        "established from the trackers and the release tags, independently of dsbisect",
        "([zoo-truth-hf.json](zoo-truth-hf.json), [zoo-truth-deepspeed.json](zoo-truth-deepspeed.json);",
        "scripts and matrix in [`repro_scripts/zoo/`](../../repro_scripts/zoo/matrix.yaml)). dsbisect's",
        "own `bisect --format json` outputs are in [`zoo-runs/`](zoo-runs/); this page and",
        "[zoo.json](zoo.json) are built from them by [`zoo_table.py`](zoo_table.py).",
        "For find-fix cases (`fix`, or a `--find-fix` command) \"last good → first bad\" reads",
        "\"last broken → first fixed\" and the commit is the fix. Settings rows (kind `setting` and",
        "`workaround`, [zoo-truth-settings.json](zoo-truth-settings.json)) hold the config key, option or",
        "workaround of a real regression, established by hand with plain runs: a `setting` row matches when",
        "dsbisect names exactly the truth's culprits, a `workaround` row when it finds every knob that works",
        "and none of those the truth says do not.",
        "",
        f"**{summary(table)}**",
        "",
        "How the three rates count: *all cases* is every row that was run (zoo cases and environment-diff",
        "rows alike); *independent roots* counts each root change once (`root`: the change a case derives",
        "from; cases and env-diff rows of one root are one regression), and a root matches only when every",
        "case of it that was run matches -- a root with a match and a miss counts as a miss; *first run",
        "after issue 24 was filed* is the rows whose `first_run` (the dsbisect commit of the case's first",
        f"run, from its meta files) is not an ancestor of {ISSUE24_AFTER[:7]}, the last commit before the issue",
        "was filed (the end of the session whose zoo it describes, 13 of 17 cases run): nobody tuned dsbisect",
        "to those.",
        "",
        "Run the CPU cases (one at a time; clones only for the commit-level cases):",
        "",
        "```bash",
        "python docs/results/zoo_table.py --run --accelerate-clone <clone> --deepspeed-clone <clone>",
        "```",
        "",
        "| case | package | kind | where | root | first run | truth | dsbisect | match | runs | time |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in table:
        e = entries[t["case"]]
        ff = "--find-fix" in e["command"]
        r = t["result"]
        m = {True: "yes", False: "**no**", None: "–"}[t["match"]]
        kind = t["kind"] + (" (find-fix)" if ff and t["kind"] != "fix" else "")
        lines.append(
            f"| [{t['case']}]({t['source']}) | {t['package']} | {kind} | {t['where']} | "
            f"{t['root_key'] or '?'} | {_fmt_first(t)} | "
            f"{_fmt_truth(t['truth'], ff)} | {_fmt_result(r)} | {m} | "
            f"{'' if r is None else r['runs']} | {_fmt_time(r)} |")
    misses = [t for t in table if t["match"] is False]
    lines += ["", "## Misses", ""]
    if not misses:
        lines += ["None.", ""]
    for t in misses:
        lines += [f"### {t['case']}", "", MISSES.get(t["case"], "Not yet explained."), ""]
    fixed = [t for t in table if t["case"] in FIXED_MISSES and t["match"] is not False]
    if fixed:
        lines += ["### Missed at first, dsbisect's fault: fixed and re-run", "",
                  "The table's row is the re-run; the first run is kept beside it in zoo-runs/.", ""]
        lines += [f"- **{t['case']}** ({'matches' if t['match'] else 'not run again yet'}): "
                  f"{FIXED_MISSES[t['case']]}" for t in fixed] + [""]
    tried = [t for t in table if t["result"] is None and t["case"] in GPU_ATTEMPTS]
    if tried:
        lines += ["### Single-GPU cases: a first run that does not count", "",
                  "Run once on one H200 with case scripts that were wrong (dsbisect's answers were right for "
                  "those scripts); the scripts are fixed and the cases wait for a GPU again:", ""]
        lines += [f"- **{t['case']}**: {GPU_ATTEMPTS[t['case']]}" for t in tried] + [""]
    lines += ["## Cases", ""]
    for t in table:
        e = entries[t["case"]]
        meta_p = RUNS / f"{t['case']}.meta.json"
        lines += [f"### {t['case']}", "", f"Source: {t['source']} (PR: {e.get('pr')})."
                  + (f" Root: {e['root']}." if e.get("root") else ""), "", t["note"], ""]
        if meta_p.exists():
            meta = json.loads(meta_p.read_text())
            lines += ["Ran:", "", "```bash", meta["command"], "```", ""]
        else:
            lines += ["Command:", "", "```bash", e["command"], "```", ""]
        if t["result"] is None and e["where"] != "cpu":
            lines += [f"Not run here: {e['where']} case, for a GPU machine. {e.get('note', '')}".rstrip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def build() -> list[dict]:
    table = rows()
    (HERE / "zoo.json").write_text(json.dumps(table, indent=2) + "\n")
    (HERE / "zoo.md").write_text(markdown(table))
    print(summary(table))
    return table


# ---------------------------------------------------------------- running the cases

def _redact(text: str, subs: dict[str, str]) -> str:
    for path, word in sorted(subs.items(), key=lambda kv: -len(kv[0])):
        if path:
            text = text.replace(path, word)
    return text


def _machine() -> str:
    gpus = 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        gpus = sum(1 for ln in out.stdout.splitlines() if ln.startswith("GPU ")) if out.returncode == 0 else 0
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs, {'no GPU' if not gpus else f'{gpus} GPUs'}"


def _with_options(words: list[str], options: list[str]) -> list[str]:
    """dsbisect's own options put before a ``--`` (what follows it is the job's command line,
    which would take them as its own), else at the end."""
    if "--" in words:
        i = words.index("--")
        return words[:i] + options + words[i:]
    return words + options


def run_case(entry: dict, args) -> None:
    words = shlex.split(entry["command"])
    assert words[0] == "dsbisect", entry["command"]
    subs = {}
    for i, w in enumerate(words):
        if w in CLONE_WORDS:
            clone = getattr(args, CLONE_WORDS[w])
            if not clone:
                print(f"{entry['case']}: needs --{CLONE_WORDS[w].replace('_', '-')}; not run", file=sys.stderr)
                return
            words[i] = str(Path(clone).resolve())
            subs[words[i]] = "<clone>"
    words += args.extra or []
    name = entry["case"] + (f".{args.suffix}" if args.suffix else "")
    store = Path(args.store).resolve()
    store.mkdir(parents=True, exist_ok=True)
    beside = store.with_name(store.name + "-out")  # not inside the store: dsbisect keeps that folder
    beside.mkdir(exist_ok=True)
    out_tmp = beside / f"zoo-{name}.json"
    log = beside / f"zoo-{name}.log"
    out_tmp.unlink(missing_ok=True)
    cmd = shlex.split(args.dsbisect) + _with_options(words[1:], ["--format", "json", "-o", str(out_tmp),
                                                                 "--store", str(store)])
    shown = "dsbisect " + " ".join(_with_options(["<clone>" if w in subs else shlex.quote(w) for w in words[1:]],
                                                 ["--format", "json", "-o", f"zoo-runs/{name}.json", "--store",
                                                  "<store>"]))
    subs.update({str(store): "<store>", str(Path.home() / ".cache" / "dsbisect"): "<cache>",
                 str(Path(args.workdir).resolve()): ".", str(Path.home()): "~"})
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    print(f"== {name}: {shown}", flush=True)
    t0 = time.monotonic()
    interrupted = False
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=args.workdir, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=False)
        try:
            proc.wait(timeout=args.limit_minutes * 60)
        except subprocess.TimeoutExpired:
            interrupted = True
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
        except KeyboardInterrupt:
            interrupted = True
            proc.send_signal(signal.SIGINT)
            proc.wait()
    seconds = round(time.monotonic() - t0, 1)
    RUNS.mkdir(exist_ok=True)
    if out_tmp.exists():
        (RUNS / f"{name}.json").write_text(_redact(out_tmp.read_text(), subs))
    else:
        (RUNS / f"{name}.json").unlink(missing_ok=True)
    meta = {
        "case": entry["case"], "command": shown, "dsbisect_commit": args.dsbisect_commit,
        "exit_code": proc.returncode, "interrupted": interrupted, "limit_minutes": args.limit_minutes,
        "seconds": seconds, "date": date, "machine": args.machine or _machine(),
    }
    prev_p = RUNS / f"{name}.meta.json"
    prev = json.loads(prev_p.read_text()) if prev_p.exists() else None
    if prev and prev.get("interrupted"):
        # A resumed bisection (dsbisect reuses what the stopped one recorded): the wall time is the sum.
        attempts = prev.get("attempts") or [{k: prev[k] for k in ("dsbisect_commit", "exit_code", "interrupted",
                                                                  "seconds", "date")}]
        attempts.append({k: meta[k] for k in ("dsbisect_commit", "exit_code", "interrupted", "seconds", "date")})
        meta["attempts"] = attempts
        meta["seconds"] = round(sum(a["seconds"] for a in attempts), 1)
        meta["date"] = attempts[0]["date"]
        meta["dsbisect_commit"] = args.dsbisect_commit
    (RUNS / f"{name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"   exit {proc.returncode} after {seconds:.0f} s{' (interrupted)' if interrupted else ''}; log: {log}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", nargs="*", metavar="CASE",
                    help="run these cases (none named: every CPU case), then build the table")
    ap.add_argument("--accelerate-clone", help="a clone of huggingface/accelerate (commit-level cases)")
    ap.add_argument("--deepspeed-clone", help="a clone of deepspeedai/DeepSpeed (commit-level cases)")
    ap.add_argument("--store", default=".dsbisect-zoo", help="dsbisect's store for the runs")
    ap.add_argument("--dsbisect", default="dsbisect", help="how to call dsbisect (default: dsbisect)")
    ap.add_argument("--dsbisect-commit", help="the dsbisect commit that runs (default: this checkout's HEAD)")
    ap.add_argument("--workdir", default=str(ROOT), help="where the commands run (a checkout's root)")
    ap.add_argument("--limit-minutes", type=float, default=25, help="Ctrl-C a bisection after this long")
    ap.add_argument("--extra", action="append", metavar="ARG",
                    help="another dsbisect argument for a supplementary run (repeatable; with --suffix)")
    ap.add_argument("--suffix", help="save a supplementary run as zoo-runs/<case>.<suffix>.json (not in the table)")
    ap.add_argument("--machine", help="the machine, in words (default: CPU and GPU counts)")
    args = ap.parse_args()
    if args.run is not None:
        if not args.dsbisect_commit:
            args.dsbisect_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                                  capture_output=True, text=True).stdout.strip()
        entries = {e["case"]: e for e in load_truths()}
        names = args.run or [c for c, e in entries.items() if e["where"] == "cpu"]
        for name in names:
            if name not in entries:
                sys.exit(f"unknown case {name}")
            run_case(entries[name], args)
    build()


if __name__ == "__main__":
    main()
