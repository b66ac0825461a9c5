"""What a run's record and a bisection's result keep of numbers (issue 38): readings, conditions
and a numeric answer survive JSON exactly; a record's hand-edited entries are passed over; a run
folder's measured files, metrics file and logs are all read, each reading with its rank."""

from __future__ import annotations

import json
import math

from hypothesis import given, strategies as st

from dsbisect.core.metric import Reading, Source
from dsbisect.core.rundir import RunDir
from dsbisect.records import readings
from dsbisect.records.conditions import Conditions, Gpu, differences
from dsbisect.records.numbers import Numbers, PointNumbers
from dsbisect.run import readings as run_readings

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
values = st.floats(allow_nan=True, allow_infinity=True)
reading = st.builds(Reading, names, values, st.sampled_from(["", "B", "s", "MiB", "samples/s"]),
                    st.none() | st.integers(0, 1024), st.none() | st.integers(0, 10**6), st.sampled_from(list(Source)))


def _same(a: Reading, b: Reading) -> bool:
    same_value = a.value == b.value or (math.isnan(a.value) and math.isnan(b.value))
    return same_value and (a.name, a.unit, a.rank, a.step, a.source) == (b.name, b.unit, b.rank, b.step, b.source)


@given(st.lists(reading, max_size=30))
def test_readings_survive_a_record_as_json(found):
    back = readings.from_json(json.loads(json.dumps(readings.to_json(found))))
    assert len(back) == len(found) and all(_same(a, b) for a, b in zip(found, back))


@given(st.lists(reading, max_size=40), st.integers(0, 40))
def test_a_record_keeps_the_measured_first_and_counts_what_it_left(found, limit):
    kept = readings.kept(found, limit)
    assert len(kept.readings) == min(limit, len(found)) and kept.dropped == len(found) - len(kept.readings)
    first = [r.source in (Source.MEASURED, Source.JSONL) for r in kept.readings]
    assert first == sorted(first, reverse=True)


def test_entries_that_are_not_readings_are_passed_over():
    raw = [{"name": "loss", "value": 1.5}, {"name": "bad name!", "value": 1}, {"name": "x", "value": "1"},
           {"name": "y", "value": True}, "text", {"name": "z", "value": "nan", "rank": -1, "source": "later"}]
    back = readings.from_json(raw)
    assert [(r.name, r.rank, r.source) for r in back] == [("loss", None, Source.PATTERN), ("z", None, Source.PATTERN)]
    assert math.isnan(back[1].value)


gpus = st.builds(Gpu, st.sampled_from(["NVIDIA H100", "NVIDIA H200"]), st.none() | st.floats(0, 3000),
                 st.none() | st.floats(0, 3000), st.none() | st.floats(0, 3000), st.none() | st.integers(0, 8),
                 st.none() | st.floats(0, 3000), st.none() | st.floats(0, 3000), st.none() | st.floats(0, 1000))
conditions = st.builds(Conditions, st.none() | st.floats(0, 64), st.none() | st.floats(0, 64),
                       st.none() | st.integers(1, 256), st.sampled_from(["", "AMD EPYC", "Intel Xeon"]),
                       st.sampled_from(["", "performance"]), st.sampled_from(["", "cpu", "cuda"]),
                       st.lists(gpus, max_size=3).map(tuple),
                       st.dictionaries(st.sampled_from(["OMP_NUM_THREADS", "MKL_NUM_THREADS"]), st.sampled_from(["1", "4"]))
                       .map(lambda d: tuple(sorted(d.items()))))


@given(conditions)
def test_conditions_survive_a_record_and_equal_ones_do_not_differ(c):
    back = Conditions.from_json(json.loads(json.dumps(c.to_json())))
    assert back == c
    assert differences(c, back) == []


def test_what_moves_a_number_is_named():
    a = Conditions(0.5, 0.5, 2, "AMD EPYC", "", "cpu", (), (("OMP_NUM_THREADS", "1"),))
    b = Conditions(4.0, 6.0, 2, "AMD EPYC", "", "cpu", (), (("OMP_NUM_THREADS", "4"),))
    assert differences(a, b) == ["threads OMP_NUM_THREADS=1 vs OMP_NUM_THREADS=4", "load 0.2 vs 3.0 per core"]
    assert differences(a, Conditions()) == []  # nothing known of a run of an older dsbisect


H200 = dict(name="NVIDIA H200", max_sm_clock=1980.0, app_sm_clock=1980.0, app_mem_clock=3201.0, power_limit=700.0)


def _gpu(**kw) -> Conditions:
    return Conditions(0.3, 0.3, 16, "Intel Xeon", "performance", "cuda", (Gpu(**(H200 | kw)),))


def test_a_gpu_clock_that_follows_idleness_is_not_a_changed_condition():
    """Seen on an H200: 345 MHz idle before one run, 1980 MHz just after another; so are the memory
    clock's idle states. Neither moves what the next run measures; the clock settings do."""
    idle, warm = _gpu(sm_clock=345.0, mem_clock=405.0), _gpu(sm_clock=1980.0, mem_clock=3201.0)
    assert differences(idle, warm) == []
    assert differences(idle, _gpu(sm_clock=1980.0, max_sm_clock=1500.0)) == ["GPU 0 max SM clock 1980 vs 1500 MHz"]
    assert differences(idle, _gpu(app_sm_clock=1200.0)) == ["GPU 0 application SM clock 1980 vs 1200 MHz"]
    assert differences(idle, _gpu(power_limit=400.0)) == ["GPU 0 power limit 700 vs 400 W"]
    assert differences(idle, _gpu(others=0)) == []  # not known of one of them: not compared
    assert differences(_gpu(others=0), _gpu(others=1)) == ["GPU 0 other processes 0 vs 1"]
    # a record of an older dsbisect (no settings but the max clock) reads back and compares what it has
    old = {"name": "NVIDIA H200", "sm_clock": 345, "mem_clock": 405, "max_sm_clock": 1980, "others": 0}
    assert Gpu.from_json(old) == Gpu("NVIDIA H200", 345.0, 405.0, 1980.0, 0)
    # the load within its band is not a changed condition; beyond it, it is
    assert differences(Conditions(0.3, 1.0, 2, "x", "", "cpu"), Conditions(1.0, 1.2, 2, "x", "", "cpu")) == []


def test_a_numeric_answer_survives_json():
    n = Numbers("loss@step5", "worse if differs by 1 %", "", "step", "loss@step5 1.5 → 1.75 (+16.7 %) at 1.2.0",
                (PointNumbers("1.0.0", (1.5, 1.5, 1.5), 1.5, 0.0, "not-worse"),
                 PointNumbers("1.2.0", (1.75,), 1.75, 0.0, "worse", 0.1667, ("load 0.2 vs 3.0 per core",))),
                ("a note",), 4)
    assert Numbers.from_json(json.loads(json.dumps(n.to_json()))) == n
    assert n.table()[1] == ("1.2.0", "1.75 (1 run)", "worse")
    assert Numbers.from_json("not an object") is None


def test_a_run_folder_gives_what_was_measured_written_and_printed(tmp_path):
    run = RunDir(tmp_path)
    run.measured.mkdir()
    (run.measured / "rank1.pid42.json").write_text(json.dumps(
        {"rank": 1, "peak_rss": 300 << 20, "peak_gpu_mem": 1 << 30, "step_times": [[2, 0.5], [3, 0.25]]}))
    (run.measured / "rank0.pid41.json").write_text("{not json")
    run.metrics.write_text('{"step": 5, "loss": 1.75, "rank": 0}\n{"name": "acc", "value": 0.9, "unit": "%"}\n')
    run.launcher_log.write_text("[rank1]: {'loss': 2.5, 'train_samples_per_second': 12.0}\n")
    got = {(r.name, r.rank, r.step, r.unit, r.source) for r in run_readings.collect(run, 12.5).readings}
    assert got == {("wall_time", None, None, "s", Source.MEASURED), ("peak_rss", 1, None, "B", Source.MEASURED),
                   ("peak_gpu_mem", 1, None, "B", Source.MEASURED), ("step_time", 1, 2, "s", Source.MEASURED),
                   ("step_time", 1, 3, "s", Source.MEASURED), ("loss", 0, 5, "", Source.JSONL),
                   ("acc", None, None, "%", Source.JSONL), ("loss", 1, None, "", Source.HF_TRAINER),
                   ("train_samples_per_second", 1, None, "samples/s", Source.HF_TRAINER)}
