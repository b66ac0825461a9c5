"""Each parser against literal lines taken from real outputs (where each came from is said beside
it), and text from outside kept inert: odd names dropped, huge lines passed over, literals never
evaluated."""

from __future__ import annotations

import json

import pytest

from dsbisect.core.errors import InputError
from dsbisect.core.metric import Reading, Source
from dsbisect.verdict.readings import (MAX_LINE, accelerate_readings, compile_pattern, deepspeed_readings,
                                       hf_trainer_readings, jsonl_readings, literal_dict, pattern_readings,
                                       readings)

DS = Source.DEEPSPEED


def named(found, name):
    return [(r.value, r.unit, r.rank, r.step) for r in found if r.name == name]


# ------------------------------------------------------------------ DeepSpeed

# deepspeedai/DeepSpeed#3742 (2023-07, DeepSpeed 0.9/0.10): the throughput timer from 0.8.0 on,
# wall_clock_breakdown's timers through log_dist ("[Rank 0]"), and the engine's progress line.
ISSUE_3742 = """\
[2023-07-25 21:03:17,269] [INFO] [timer.py:215:stop] epoch=0/micro_step=34/global_step=34, RunningAvgSamplesPerSec=7.864669709950182, CurrSamplesPerSec=8.00912418308922, MemAllocated=59.65GB, MaxMemAllocated=63.31GB
[2023-07-25 21:03:17,269] [INFO] [logging.py:96:log_dist] [Rank 0] rank=0 time (ms) | forward: 652.41 | backward: 2164.52 | backward_inner: 2001.89 | backward_allreduce: 162.60 | step: 1172.13
[2023-07-25 21:03:21,037] [INFO] [logging.py:96:log_dist] [Rank 0] step=35, skipped=0, lr=[2.1731931451279077e-06, 2.1731931451279077e-06], mom=[[0.9, 0.95], [0.9, 0.95]]
"""


def test_deepspeed_timer_from_0_8():
    found = deepspeed_readings(ISSUE_3742)
    assert named(found, "samples_per_sec") == [(7.864669709950182, "samples/s", None, 34)]
    assert named(found, "running_avg_samples_per_sec") == named(found, "samples_per_sec")
    assert named(found, "curr_samples_per_sec") == [(8.00912418308922, "samples/s", None, 34)]
    assert named(found, "mem_allocated") == [(59.65, "GiB", None, 34)]
    assert named(found, "max_mem_allocated") == [(63.31, "GiB", None, 34)]
    assert named(found, "time_forward") == [(652.41, "ms", 0, None)]
    assert named(found, "time_step") == [(1172.13, "ms", 0, None)]
    assert named(found, "skipped_steps") == [(0.0, "", 0, 35)]
    assert named(found, "lr") == [(2.1731931451279077e-06, "", 0, 35)]
    assert {r.source for r in found} == {DS}


def test_deepspeed_timer_in_0_7():
    # A CSCS user-lab tutorial's log (fine-tuning BERT on SQuAD, DeepSpeed of 2022-08): "E/S, ..."
    line = ("[2022-08-29 06:58:56,176] [INFO] [timer.py:198:stop] 0/20, RunningAvgSamplesPerSec=232.7340551694273, "
            "CurrSamplesPerSec=227.48090316379353, MemAllocated=0.36GB, MaxMemAllocated=15.06GB")
    found = deepspeed_readings(line)
    assert named(found, "samples_per_sec") == [(232.7340551694273, "samples/s", None, 20)]
    assert named(found, "max_mem_allocated") == [(15.06, "GiB", None, 20)]


def test_deepspeed_timer_before_0_7():
    # deepspeedai/DeepSpeed#1825 (2022-03): "E/S, SamplesPerSec=..." and the old progress line
    text = ("[2022-03-11 02:06:58,985] [INFO] [logging.py:69:log_dist] [Rank 0] step=40, skipped=2, lr=[5e-05], mom=[[0.9, 0.999]]\n"
            "[2022-03-11 02:06:58,985] [INFO] [timer.py:189:stop] 0/40, SamplesPerSec=83.48609168106144, MemAllocated=0.26GB, MaxMemAllocated=9.02GB\n"
            "<IPython.core.display.HTML object>\n")
    found = deepspeed_readings(text)
    assert named(found, "samples_per_sec") == [(83.48609168106144, "samples/s", None, 40)]
    assert named(found, "mem_allocated") == [(0.26, "GiB", None, 40)]
    assert named(found, "skipped_steps") == [(2.0, "", 0, 40)]
    assert named(found, "curr_samples_per_sec") == []


def test_deepspeed_2020_lines():
    # deepspeedai/DeepSpeed#255 (2020-06): the timer had no memory yet; wall_clock_breakdown's timers
    text = (">[INFO 2020-06-08 06:02:19] 0/450, SamplesPerSec=7.458824487454903\n"
            "time (ms) | forward_microstep: 193.65 | backward_microstep: 329.25 | backward_inner_microstep: 329.14 "
            "| backward_allreduce_microstep: 0.05 | step_microstep: 0.92\n")
    found = deepspeed_readings(text)
    assert named(found, "samples_per_sec") == [(7.458824487454903, "samples/s", None, 450)]
    assert named(found, "time_backward_microstep") == [(329.25, "ms", None, None)]
    assert len([r for r in found if r.name.startswith("time_")]) == 5


def test_deepspeed_pipeline_engine_line():
    # The pipeline engine's train_batch line (deepspeed/runtime/pipe/engine.py), with the
    # additional losses of an MoE model, as a Megatron-DeepSpeed test script quotes it.
    line = "steps: 200 loss: 5.5508 lm loss: 5.5103 moe loss: 0.0405 iter time (s): 0.936 samples/sec: 136.706"
    found = deepspeed_readings(line)
    assert named(found, "loss") == [(5.5508, "", None, 200)]
    assert named(found, "iter_time") == [(0.936, "s", None, 200)]
    assert named(found, "pipe_samples_per_sec") == [(136.706, "samples/s", None, 200)]


def test_deepspeed_megatron_timer_line_keeps_what_it_can():
    # deepspeedai/DeepSpeed#3742: Megatron's own timers, one of them named with a space
    line = ("time (ms) | forward: 659.86 | backward: 2164.69 | backward-backward: 2164.66 | "
            "backward-allreduce: 0.00 | optimizer: 1172.51 | batch generator: 0.83")
    names = [r.name for r in deepspeed_readings(line)]
    assert names == ["time_forward", "time_backward", "time_backward-backward", "time_backward-allreduce",
                     "time_optimizer"]


# ------------------------------------------------------------------ the HF Trainer

# huggingface/transformers#35207 (2024-12, a comment's log): the Trainer's dicts, floats as floats
TRAINER = """\
{'loss': 2.119, 'grad_norm': 37.657958984375, 'learning_rate': 4.5833333333333334e-05, 'epoch': 0.25}                                                                                                                  
{'loss': 1.6462, 'grad_norm': 17.54932403564453, 'learning_rate': 4.166666666666667e-05, 'epoch': 0.5}
"""


def test_trainer_dicts():
    found = hf_trainer_readings(TRAINER, rank=0)
    assert named(found, "loss") == [(2.119, "", 0, None), (1.6462, "", 0, None)]
    assert named(found, "epoch") == [(0.25, "", 0, None), (0.5, "", 0, None)]
    assert {r.source for r in found} == {Source.HF_TRAINER}


def test_trainer_dicts_with_floats_as_strings_and_the_summary():
    # Recent transformers' ProgressCallback writes floats with {:.4g} (strings); the summary dict
    # of train() carries the runtime and the throughput.  The bar's remains before the dict stay.
    text = ("\r 50%|#####     | 4/8 [00:01<00:01,  3.1it/s]{'loss': '2.119', 'grad_norm': '37.66', "
            "'learning_rate': '4.583e-05', 'epoch': '0.25'}\n"
            "{'train_runtime': 12.5123, 'train_samples_per_second': 81.52, 'train_steps_per_second': 2.55, "
            "'train_loss': 1.9, 'epoch': 1.0}\n")
    found = hf_trainer_readings(text)
    assert named(found, "loss") == [(2.119, "", None, None)]
    assert named(found, "learning_rate") == [(4.583e-05, "", None, None)]
    assert named(found, "train_runtime") == [(12.5123, "s", None, None)]
    assert named(found, "train_samples_per_second") == [(81.52, "samples/s", None, None)]
    assert named(found, "train_steps_per_second") == [(2.55, "steps/s", None, None)]


def test_tf_trainer_dicts_carry_their_step():
    # huggingface/transformers#9613 (2021-01): the TensorFlow Trainer logged the step in the dict
    line = ("[INFO|trainer_tf.py:398] 2021-01-15 10:28:50,371 >> {'loss': 0.6347228, 'learning_rate': 4.891304e-05, "
            "'epoch': 0.08695652173913043, 'step': 10}")
    found = hf_trainer_readings(line)
    assert named(found, "loss") == [(0.6347228, "", None, 10)] and not named(found, "step")


# ------------------------------------------------------------------ accelerate


def test_accelerate_example_lines():
    # huggingface/accelerate docs/source/usage_guides/sagemaker.md: nlp_example.py's output
    text = ("2021-04-08 12:03:39 Training - Training image download completed. Training in progress..\n"
            "........\n"
            "epoch 0: {'accuracy': 0.7598039215686274, 'f1': 0.8178438661710037}\n"
            "epoch 1: {'accuracy': 0.8357843137254902, 'f1': 0.882249560632689}\n")
    found = accelerate_readings(text)
    assert named(found, "accuracy") == [(0.7598039215686274, "", None, None), (0.8357843137254902, "", None, None)]
    assert named(found, "f1")[1][0] == 0.882249560632689


@pytest.mark.parametrize("prefix, rank", [("[1,mpirank:3,algo-1]<stdout>:", 3), ("[1,2]<stdout>:", 2),
                                          ("[rank5]:", 5), ("[default1]:", 1), ("", None)])
def test_launcher_prefixes_give_the_rank(prefix, rank):
    # Open MPI's --tag-output (as SageMaker's toolkit prints it), torch's "[rankN]:", torchrun --tee's "[defaultN]:"
    found = accelerate_readings(prefix + "epoch 0: {'accuracy': 0.6838235294117647, 'f1': 0.8122270742358079}")
    assert [r.rank for r in found] == [rank, rank]


def test_readings_reads_every_format_at_once():
    text = TRAINER + ISSUE_3742 + "epoch 2: {'accuracy': 0.75, 'f1': 0.838095238095238}\n"
    sources = {r.source for r in readings(text)}
    assert sources == {Source.HF_TRAINER, Source.DEEPSPEED, Source.ACCELERATE}


# ------------------------------------------------------------------ the user's pattern and JSON lines


def test_pattern_with_value_and_step():
    pattern = compile_pattern(r"it (?P<step>\d+): loss=(?P<value>\S+)")
    text = "it 10: loss=2.5\nit 20: loss=nan\nit 30: loss=oops\n[rank1]:it 40: loss=1e-3"
    found = pattern_readings(text, pattern, "loss", rank=None)
    assert [(r.value, r.step, r.rank) for r in found][:1] == [(2.5, 10, None)]
    assert found[1].value != found[1].value  # NaN kept: a loss that became NaN is a finding
    assert [(r.value, r.step, r.rank) for r in found][2:] == [(1e-3, 40, 1)]


@pytest.mark.parametrize("text, says", [("loss=(\\d+", "is not a regular expression"),
                                        (r"loss=(\d+)", "has no group named value")])
def test_bad_patterns_are_one_line(text, says):
    with pytest.raises(InputError) as e:
        compile_pattern(text)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_jsonl_both_shapes():
    text = "\n".join([
        json.dumps({"step": 3, "loss": 1.5, "samples_per_sec": 410, "tag": "warm", "done": True}),
        json.dumps({"name": "peak_gpu_mem", "value": 3.5, "unit": "GiB", "rank": 1, "step": 0}),
        json.dumps({"name": "bad name!", "value": 1}),
        "not json", "[1, 2]", "{" * 5000 + "}" * 5000,
    ])
    found = jsonl_readings(text, rank=0)
    assert found == (Reading("loss", 1.5, "", 0, 3, Source.JSONL), Reading("samples_per_sec", 410.0, "", 0, 3, Source.JSONL),
                     Reading("peak_gpu_mem", 3.5, "GiB", 1, 0, Source.JSONL))


# ------------------------------------------------------------------ inert


def test_outside_text_stays_inert():
    assert literal_dict("{'a': __import__('os').system('true')}") is None  # never evaluated
    assert literal_dict("{'a': " + "[" * 3000 + "]" * 3000 + "}") is None
    assert hf_trainer_readings("{'\x1b[31mred': 1.0, 'ok': 2.0}") == (Reading("ok", 2.0, "", None, None, Source.HF_TRAINER),)
    assert deepspeed_readings("0/1, SamplesPerSec=1" + " " * MAX_LINE) == ()
    assert hf_trainer_readings("{'loss': 1.0, 'nested': {'x': 1}, 'flag': True}") == (
        Reading("loss", 1.0, "", None, None, Source.HF_TRAINER),)
