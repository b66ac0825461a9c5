"""The search for where a number got worse: literal tables on exact oracles, properties against
oracles whose noise is bounded (where it may never be wrong), drift, and rates against Gaussian
noise on fixed seeds (benchmarks/metric_search.py measures them at length)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsbisect.core.metric import parse_metric
from dsbisect.search.numeric import Runs, Status, default_cap, search
from dsbisect.verdict.numbers import Judge, Shape, find_steps

THROUGHPUT = Judge(parse_metric("samples_per_sec", "lower by 5%"))


def oracle(n: int, steps: dict[int, float], noise: float = 0.0, rng: random.Random | None = None,
           drift: float = 0.0, uniform: bool = False, untestable=(), base: float = 400.0):
    """A throughput that drops by ``steps[i]`` (a fraction of ``base``) at each index ``i``; each
    run off by Gaussian noise of sd ``noise`` (or uniform within ±``noise``), times ``1 - drift``
    per run so far (a machine that slows down)."""
    rng = rng or random.Random(0)
    runs = [0]

    def probe(i: int) -> float | None:
        if i in untestable:
            return None
        runs[0] += 1
        level = base * (1 - sum(e for at, e in steps.items() if i >= at))
        jitter = rng.uniform(-noise, noise) if uniform else rng.gauss(0, noise)
        return level * (1 + jitter) * (1 - drift * runs[0])
    return probe


def explore(n, probe, judge=THROUGHPUT, **kw):
    ex = search(n, probe, judge, judge.spec.threshold.amount, **kw)
    return ex, find_steps(ex.grouped(), judge)


# ------------------------------------------------------------------ exact oracles, literally


def test_one_exact_step_is_a_bisection_with_one_run_a_point():
    ex, report = explore(9, oracle(9, {5: 0.10}))
    # the ends interleaved until the good end gave one value three times: the metric is exact
    assert ex.runs.order[:5] == (0, 8, 0, 8, 0)
    assert ex.status is Status.DONE and ex.runs.total == 8  # 5 + three bisection points, one run each
    assert len(ex.levels) == 2 and ex.levels[0][-1] == 4 and ex.levels[1][0] == 5
    assert report.shape is Shape.STEP and (report.largest.last, report.largest.first) == (4, 5)


def test_two_exact_steps_both_located():
    judge = Judge(parse_metric("samples_per_sec", "lower by 3%"))
    ex, report = explore(12, oracle(12, {3: 0.05, 8: 0.05}), judge)
    assert report.shape is Shape.STEPS
    assert sorted((s.last, s.first) for s in report.over) == [(2, 3), (7, 8)]
    assert all(s.located and s.change.exact for s in report.over)


def test_exact_ends_alike_are_not_reproduced():
    ex, report = explore(9, oracle(9, {}))
    assert ex.status is Status.NOT_REPRODUCED and ex.runs.order == (0, 8, 0, 8, 0)
    assert report.shape is Shape.NOT_REPRODUCED


def test_untestable_points_leave_a_range():
    ex, report = explore(9, oracle(9, {5: 0.10}, untestable={4, 5}))
    assert {4, 5} <= ex.runs.untestable
    step = report.largest
    assert (step.last, step.first, step.located) == (3, 6, False)


@pytest.mark.parametrize("bad, status", [({0}, Status.GOOD_END_UNTESTABLE), ({8}, Status.BAD_END_UNTESTABLE)])
def test_untestable_ends_stop_at_once(bad, status):
    ex, _ = explore(9, oracle(9, {5: 0.10}, untestable=bad))
    assert ex.status is status and ex.runs.total <= 2


def test_caps_are_kept():
    probe = oracle(32, {11: 0.04}, noise=0.05, rng=random.Random(3))
    ex, _ = explore(32, probe, max_runs=30, point_runs=4, end_runs=6)
    assert ex.runs.total <= 30
    counts = [ex.runs.order.count(i) for i in range(32)]
    assert counts[0] <= 6 and counts[31] <= 6 and max(counts[1:31]) <= 4
    assert ex.status in (Status.CAPPED, Status.ENDS_UNDECIDED, Status.DONE)


def test_runs_record_every_answer():
    runs = Runs.start(3).add(0, 1.0).add(2, None).add(0, 2.0)
    assert runs.values == ((1.0, 2.0), (), ()) and runs.untestable == {2} and runs.order == (0, 2, 0)
    with pytest.raises(ValueError):
        Runs.start(1)


# ------------------------------------------------------------------ drift


def test_interleaving_ends_keeps_drift_from_faking_a_regression():
    """A machine slowing 1.5 % a run: the good end's runs all first and the bad end's after would
    show a regression; interleaved, the same runs show none."""
    drifting = [400 * (1 - 0.015 * t) for t in range(10)]
    one_then_other = THROUGHPUT(drifting[:5], drifting[5:], 0.05, drifting[:5])
    interleaved = THROUGHPUT(drifting[0::2], drifting[1::2], 0.05, drifting[0::2])
    assert one_then_other.call.value == "bad" and interleaved.call.value != "bad"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.floats(0.0, 0.0012), st.integers(8, 40))
def test_drift_alone_names_no_culprit(drift, n):
    ex, report = explore(n, oracle(n, {}, drift=drift))
    assert report.shape in (Shape.NOT_REPRODUCED, Shape.UNDECIDED) and report.steps == ()


# ------------------------------------------------------------------ bounded noise: never wrong


@st.composite
def stepped(draw):
    """Up to three steps, each of 2-4 thresholds, on a list of 3-40 points; noise within ±eta
    with eta at most a fifth of the threshold."""
    n = draw(st.integers(3, 40))
    at = draw(st.lists(st.integers(1, n - 1), min_size=1, max_size=3, unique=True))
    threshold = draw(st.sampled_from([0.04, 0.05, 0.08]))
    steps = {i: draw(st.floats(2.0, 4.0)) * threshold for i in at}
    eta = draw(st.floats(0.0, threshold / 5))
    return n, steps, threshold, eta, draw(st.integers(0, 2 ** 16))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(stepped())
def test_with_bounded_noise_every_step_is_found_and_no_other(case):
    n, steps, threshold, eta, seed = case
    if sum(steps.values()) >= 0.9:
        return  # a throughput cannot fall by 90 % and still be measured
    judge = Judge(parse_metric("samples_per_sec", f"lower by {threshold * 100:g}%"))
    ex, report = explore(n, oracle(n, steps, eta, random.Random(seed), uniform=True), judge)
    assert ex.status is Status.DONE and ex.runs.total <= default_cap(n)
    assert sorted(s.first for s in report.over) == sorted(steps)
    assert all(s.located for s in report.over) and len(report.steps) == len(steps)
    assert report.shape is (Shape.STEP if len(steps) == 1 else Shape.STEPS)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(2, 40), st.floats(0.0, 0.01), st.integers(0, 2 ** 16))
def test_with_bounded_noise_and_no_step_it_is_not_reproduced(n, eta, seed):
    ex, report = explore(n, oracle(n, {}, eta, random.Random(seed), uniform=True))
    assert ex.status is Status.NOT_REPRODUCED and report.shape is Shape.NOT_REPRODUCED


# ------------------------------------------------------------------ Gaussian noise: rates on fixed seeds


def rate(effect: float, noise: float, seeds: int = 40, n: int = 32) -> tuple[int, int]:
    """(right answers, confident wrong answers) of searches for one step of ``effect`` at a
    threshold of half of it."""
    judge = Judge(parse_metric("samples_per_sec", f"lower by {effect * 50:g}%"))
    right = wrong = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        first = rng.randrange(1, n)
        _, report = explore(n, oracle(n, {first: effect}, noise, rng), judge)
        named = [s for s in report.over if s.located]
        right += report.shape is Shape.STEP and [s.first for s in named] == [first]
        wrong += any(s.first != first for s in named)
    return right, wrong


@pytest.mark.parametrize("effect, noise, at_least", [(0.10, 0.02, 38), (0.20, 0.05, 36), (0.20, 0.02, 39)])
def test_one_step_under_gaussian_noise(effect, noise, at_least):
    right, wrong = rate(effect, noise)
    assert right >= at_least and wrong <= 1


def test_two_steps_each_over_the_threshold():
    judge = Judge(parse_metric("samples_per_sec", "lower by 3%"))
    both = 0
    for seed in range(30):
        rng = random.Random(seed)
        a = rng.randrange(1, 20)
        b = rng.randrange(a + 4, 32)
        _, report = explore(32, oracle(32, {a: 0.06, b: 0.06}, 0.01, rng), judge)
        both += sorted(s.first for s in report.over if s.located) == [a, b]
    assert both >= 24


def test_a_change_spread_over_two_small_steps_names_no_culprit():
    judge = Judge(parse_metric("samples_per_sec", "lower by 5%"))
    spread = culprit = 0
    for seed in range(30):
        rng = random.Random(seed)
        a = rng.randrange(1, 20)
        b = rng.randrange(a + 4, 32)
        _, report = explore(32, oracle(32, {a: 0.035, b: 0.035}, 0.01, rng), judge)
        spread += report.shape is Shape.SPREAD
        culprit += report.shape is Shape.STEP
    assert spread >= 22 and culprit <= 3


# accelerate_offload_gc_speed's commit step (docs/results/2026-12-05-cpu-metric-accelerate-speed-commit.json):
# step_ms of the last good commit, of PR #2857's commit and of the v0.32.0 tag, in the order measured
# at load 22-26: the two bad commits ~500 times the good one, in noise no run can narrow to 50 % of it.
GC_GOOD = [2.15, 1.67, 5.69, 1.68, 1.94, 1.84, 1.66, 1.73, 1.73, 6.12, 3.08, 6.83, 6.17, 1.85, 1.64]
GC_PR = [2650.56, 2189.13, 2953.73, 3590.08, 2517.02, 2905.99, 2748.75, 2222.71, 3023.06, 2071.88, 2033.24,
         2379.75, 1754.97, 1290.34, 1405.12]
GC_TAG = [5573.51, 5611.7, 5892.83, 2273.77, 6536.16, 7071.81, 2013.13, 1791.4, 2426.07, 1743.79, 2572.41,
          2350.68, 1202.67, 1395.46, 1881.45, 1827.72, 1804.16, 1827.57, 1698.29, 1931.76]


def test_a_point_surely_past_a_step_is_found_when_the_next_cannot_be_told_from_it():
    """Two bad points after a step of ×500 under a 50 % threshold: the first of them cannot be told
    from the bad end within 50 % of the good end (2 ms in seconds of noise) nor apart from it; it
    is surely worse than the good level by far more, so the step ends there: found, not ambiguous."""
    judge = Judge(parse_metric("step_ms", "higher by 50%"))
    table = {0: GC_GOOD, 1: GC_PR, 2: GC_TAG}
    seen = {i: 0 for i in table}

    def probe(i: int) -> float:
        seen[i] += 1
        return table[i][(seen[i] - 1) % len(table[i])]

    ex, report = explore(3, probe, judge, max_runs=default_cap(33))  # the 32 commits' cap
    assert 1 not in ex.undecided and ex.levels == ((0,), (1,), (2,)), ex.levels
    assert report.shape is Shape.STEP and [(s.last, s.first) for s in report.over] == [(0, 1)]
    assert ex.runs.order.count(1) == 15  # run to its cap first: a second step could have been told


# The same commit step as the whole chain measured it (the 33 points: the good end, 31 commits,
# the tag), every value each probed point gave, in order, when the step was run again on reused runs.
GC_CHAIN = {
    0: [2.729, 10.693, 4.899, 3.977, 1.983, 1.904, 18.116, 10.545, 8.326, 2.063, 1.733, 1.797, 10.002, 1.999,
        5.803],
    16: [1.927, 10.896, 6.204, 1.866, 2.664, 2.088, 9.172, 1.991, 2.017, 7.844, 1.738, 2.063, 1.692, 1.88, 4.468],
    24: [6.328, 2.076, 1.801, 6.055, 12.154, 3.805, 2.015, 6.161, 6.257, 1.882, 1.879, 1.841, 4.44, 1.805, 1.913],
    28: [5.33, 4.066, 2.087, 1.731, 1.828, 1.962, 8.288, 1.791, 1.762, 4.628, 6.168, 1.745, 2.259, 10.229, 1.846],
    30: GC_GOOD, 31: GC_PR, 32: GC_TAG,
}


def test_the_real_chain_ends_its_step_at_the_point_surely_past_it():
    """On the whole chain the levels around the pending point could always take one more run, so
    a rule that waited for them to be full never settled it: the search ran out of runs with
    8330b375 (31) pending and answered ambiguous. A point at its own cap and surely worse than the
    level before is the first of a step whatever the levels would say: found at 31."""
    judge = Judge(parse_metric("step_ms", "higher by 50%"))
    seen = dict.fromkeys(GC_CHAIN, 0)

    def probe(i: int) -> float:
        assert i in GC_CHAIN, f"point {i} was not measured in the real step"
        seen[i] += 1
        return GC_CHAIN[i][(seen[i] - 1) % len(GC_CHAIN[i])]

    ex, report = explore(33, probe, judge, max_runs=default_cap(33))
    assert ex.levels[-2:] == ((31,), (32,)) and 31 not in ex.undecided, ex.levels
    assert report.shape is Shape.STEP and [(s.last, s.first) for s in report.over] == [(30, 31)]
