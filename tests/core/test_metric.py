"""--metric and --worse-if read into a MetricSpec (literal tables), bad input as one clear line,
units converted, and a run's readings folded into its one number."""

from __future__ import annotations

import pytest

from dsbisect.core.errors import InputError
from dsbisect.core.metric import (Aggregate, Direction, MetricSpec, Reading, RunValue, Source, Threshold,
                                  convert, parse_metric, run_value)

LOWER, HIGHER, DIFFERS = Direction.LOWER, Direction.HIGHER, Direction.DIFFERS


@pytest.mark.parametrize("metric, worse_if, spec", [
    ("samples_per_sec", "lower by 5%", MetricSpec("samples_per_sec", LOWER, Threshold(0.05, True))),
    ("peak_gpu_mem", "higher by 10 %", MetricSpec("peak_gpu_mem", HIGHER, Threshold(0.10, True))),
    ("loss@step50", "differs by 1%", MetricSpec("loss", DIFFERS, Threshold(0.01, True), step=50)),
    ("peak_rss@max", "higher by 200 MB", MetricSpec("peak_rss", HIGHER, Threshold(200, False, "MB"), aggregate=Aggregate.MAX)),
    ("loss@step7@last", "higher by 0.01", MetricSpec("loss", HIGHER, Threshold(0.01, False), 7, Aggregate.LAST)),
    ("train/loss@mean", "higher by .5e-1", MetricSpec("train/loss", HIGHER, Threshold(0.05, False), aggregate=Aggregate.MEAN)),
    ("samples_per_sec", "  lower by 3 samples/s ", MetricSpec("samples_per_sec", LOWER, Threshold(3, False, "samples/s"))),
    ("loss", "differs by 0%", MetricSpec("loss", DIFFERS, Threshold(0.0, True))),
])
def test_specs(metric, worse_if, spec):
    assert parse_metric(metric, worse_if) == spec


@pytest.mark.parametrize("metric, worse_if, says", [
    ("", "lower by 5%", "a metric name is"),
    ("loss step", "lower by 5%", "a metric name is"),
    ("9lives", "lower by 5%", "a metric name is"),
    ("loss@stepX", "lower by 5%", "after @ comes stepN"),
    ("loss@step1@step2", "lower by 5%", "each at most once"),
    ("loss@max@min", "lower by 5%", "each at most once"),
    ("loss", "slower by 5%", "say 'lower by N%'"),
    ("loss", "lower 5%", "say 'lower by N%'"),
    ("loss", "lower by -5%", "say 'lower by N%'"),
    ("loss", "lower by five %", "say 'lower by N%'"),
    ("loss", "", "say 'lower by N%'"),
    ("samples_per_sec", "lower by 100%", "cannot get lower by 100 %"),
])
def test_bad_input_is_one_line_and_exit_2(metric, worse_if, says):
    with pytest.raises(InputError) as e:
        parse_metric(metric, worse_if)
    assert says in str(e.value) and "\n" not in str(e.value) and e.value.exit_code == 2


def test_the_spec_says_what_it_means():
    spec = parse_metric("loss@step50", "differs by 1%")
    assert spec.label == "loss@step50" and spec.describe() == "loss@step50, worse if differs by 1 %"
    assert parse_metric("peak_rss", "higher by 200 MB").describe() == "peak_rss, worse if higher by 200 MB"


@pytest.mark.parametrize("name, fold", [("peak_gpu_mem", Aggregate.MAX), ("peak_rss", Aggregate.MAX),
                                        ("wall_time", Aggregate.MAX), ("step_time", Aggregate.MEDIAN),
                                        ("loss", Aggregate.MEDIAN)])
def test_default_folds(name, fold):
    assert parse_metric(name, "higher by 1%").fold is fold


@pytest.mark.parametrize("value, unit, to, out", [
    (1, "GiB", "MiB", 1024), (1500, "MB", "GB", 1.5), (2 ** 30, "B", "GiB", 1), (250, "ms", "s", 0.25),
    (2, "min", "s", 120), (7, "samples/s", "samples/s", 7), (3, "", "", 3),
])
def test_convert(value, unit, to, out):
    assert convert(value, unit, to) == pytest.approx(out)


@pytest.mark.parametrize("unit, to", [("MB", "s"), ("samples/s", "MB"), ("", "MB"), ("furlongs", "MB")])
def test_convert_refuses_what_does_not_compare(unit, to):
    with pytest.raises(InputError, match="cannot compare"):
        convert(1, unit, to)


@pytest.mark.parametrize("fold, out", [(Aggregate.MEDIAN, 3), (Aggregate.MEAN, 3.4), (Aggregate.MAX, 7),
                                       (Aggregate.MIN, 1), (Aggregate.FIRST, 3), (Aggregate.LAST, 4)])
def test_folds(fold, out):
    assert fold.fold([3, 1, 7, 2, 4]) == out


def r(name, value, unit="", rank=None, step=None):
    return Reading(name, value, unit, rank, step, Source.MEASURED)


def test_run_value_folds_ranks_and_steps():
    readings = [r("peak_gpu_mem", 3 * 2 ** 30, "B", rank=0), r("peak_gpu_mem", 5 * 2 ** 30, "B", rank=1),
                r("loss", 2.0, step=10), r("loss", 1.5, step=50, rank=0), r("loss", 1.7, step=50, rank=1),
                r("loss", 1.0, step=90)]
    assert run_value(readings, parse_metric("peak_gpu_mem", "higher by 10%")) == RunValue(5 * 2 ** 30, "B", 2)
    # an absolute threshold with a unit: the run's number in that unit
    assert run_value(readings, parse_metric("peak_gpu_mem", "higher by 100 MiB")) == RunValue(5 * 1024, "MiB", 2)
    assert run_value(readings, parse_metric("loss@step50", "differs by 1%")) == RunValue(1.6, "", 2)
    assert run_value(readings, parse_metric("loss@last", "differs by 1%")) == RunValue(1.0, "", 4)
    assert run_value(readings, parse_metric("loss@step60", "differs by 1%")) is None
    assert run_value(readings, parse_metric("samples_per_sec", "lower by 5%")) is None


def test_run_value_refuses_a_threshold_in_another_dimension():
    with pytest.raises(InputError, match="cannot compare B with s"):
        run_value([r("peak_rss", 10, "B")], parse_metric("peak_rss", "higher by 2 s"))
