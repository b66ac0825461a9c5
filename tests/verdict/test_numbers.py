"""The decision rule for numbers: literal tables (the rule on bounds, the exact Mann-Whitney
distribution, samples judged), the steps between levels and the one-line answers, and properties
against noisy samples whose noise is bounded, where the rule may never be wrong."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsbisect.core.errors import InputError
from dsbisect.core.metric import Call, change_text, parse_metric
from dsbisect.verdict.numbers import Judge, Shape, Summary, bound_rank, call, describe, find_steps, shift, u_cdf

G, B, U = Call.GOOD, Call.BAD, Call.UNKNOWN
THROUGHPUT = Judge(parse_metric("samples_per_sec", "lower by 5%"))
MEMORY = Judge(parse_metric("peak_gpu_mem", "higher by 10%"))
LOSS = Judge(parse_metric("loss@step50", "differs by 1%"))


@pytest.mark.parametrize("est, low, high, threshold, differs, out", [
    (0.10, 0.02, 0.20, 0.05, False, B),  # worse beyond the noise, by the threshold
    (0.10, -0.01, 0.20, 0.05, False, U),  # as large, but within the noise
    (0.04, 0.01, 0.06, 0.05, False, U),  # beyond the noise, maybe under the threshold
    (0.01, -0.02, 0.04, 0.05, False, G),  # surely under the threshold
    (-0.10, -0.20, -0.02, 0.05, False, G),  # better
    (0.05, 0.01, 0.09, 0.05, False, B),  # at the threshold counts
    (-0.10, -0.20, -0.02, 0.05, True, B),  # differs: lower counts too
    (0.002, -0.004, 0.008, 0.01, True, G),
    (0.02, -0.004, 0.03, 0.01, True, U),
    (0.0, -math.inf, math.inf, 0.05, False, U),  # too few runs for a bound
])
def test_the_rule_on_bounds(est, low, high, threshold, differs, out):
    assert call(est, low, high, threshold, differs) is out


def _brute_cdf(n: int, m: int) -> list[float]:
    counts = [0] * (n * m + 1)
    for first in itertools.combinations(range(n + m), n):
        rest = [j for j in range(n + m) if j not in first]
        counts[sum(1 for a in first for b in rest if a > b)] += 1
    total, run, out = sum(counts), 0, []
    for c in counts:
        run += c
        out.append(run / total)
    return out


@pytest.mark.parametrize("n, m", [(1, 1), (1, 4), (2, 3), (3, 3), (3, 5), (4, 4)])
def test_mann_whitney_distribution_is_exact(n, m):
    assert u_cdf(n, m) == pytest.approx(_brute_cdf(n, m))


@pytest.mark.parametrize("n, m, alpha, k", [
    (3, 3, 0.05, 1), (2, 3, 0.05, 0), (1, 18, 0.05, 0), (1, 19, 0.05, 1), (4, 4, 0.05, 2),
    (10, 10, 0.05, 28), (10, 10, 0.025, 24), (5, 8, 0.05, 9),  # the tables' critical values + 1
    (60, 60, 0.05, 1487),  # the normal approximation's
])
def test_bound_ranks(n, m, alpha, k):
    assert bound_rank(n, m, alpha) == k


def test_hodges_lehmann_and_its_bounds():
    assert shift([1, 2, 3], [11, 12, 13], 0.05) == (10, 8, 12)  # bounds: the extreme differences
    est, low, high = shift([1, 2], [11, 12], 0.05)
    assert est == 10 and low == -math.inf and high == math.inf


@pytest.mark.parametrize("judge, before, after, threshold, out", [
    (THROUGHPUT, [400, 402, 398, 401, 399], [360, 362, 358, 361, 359], 0.05, B),  # -10 %
    (THROUGHPUT, [400, 402, 398, 401, 399], [399, 401, 397, 402, 400], 0.05, G),
    (THROUGHPUT, [400, 402, 398, 401, 399], [440, 442, 438, 441, 439], 0.05, G),  # faster is fine
    (THROUGHPUT, [400, 402, 398, 401, 399], [360, 362], 0.05, B),  # 5 and 2 runs: P(U = 0) = 1/21
    (THROUGHPUT, [400, 402, 398], [360, 362], 0.05, U),  # 3 and 2: 1/10, no bound at 95 %
    (THROUGHPUT, [400, 380, 420, 390, 410], [385, 370, 395], 0.05, U),  # -4 % in 5 % noise
    (THROUGHPUT, [400, 402, 398, 401, 399], [385, 387, 383, 386], 0.05, G),  # -3.7 %: worse, surely not by 5 %
    (THROUGHPUT, [400, 402, 398, 401, 399], [385, 387, 383, 386], 0.03, B),  # ... but by 3 %
    (MEMORY, [100, 100, 100], [110], 0.10, B),  # exact: one value in every run
    (MEMORY, [100, 100, 100], [109], 0.10, G),
    (MEMORY, [100, 100], [110], 0.10, U),  # two runs do not make it exact
    (LOSS, [2.5, 2.5, 2.5], [2.52, 2.52], 0.01, G),  # 0.8 %
    (LOSS, [2.5, 2.5, 2.5], [2.47], 0.01, B),  # -1.2 %: differs either way
    (Judge(parse_metric("loss", "differs by 0%")), [2.5] * 3, [2.5000001], 0.0, B),  # any change, exactly
])
def test_samples_judged(judge, before, after, threshold, out):
    assert judge(before, after, threshold, before).call is out


def test_a_stricter_judge_needs_more_runs():
    good, point = [400, 402, 398], [360, 362, 358]  # three runs a side: P(U = 0) = 1/20
    assert THROUGHPUT(good, point, 0.05, good).call is B
    assert THROUGHPUT.at(0.99)(good, point, 0.05, good).call is U and THROUGHPUT.at(0.99).confidence == 0.99
    with pytest.raises(InputError, match="--confidence"):
        THROUGHPUT.at(1.0)


def test_effect_is_relative_to_the_good_end_and_worse_is_positive():
    c = THROUGHPUT([400] * 5 + [401], [360] * 5 + [361], 0.05, [400] * 5 + [401])
    assert c.effect == pytest.approx(0.1) and c.low <= c.effect <= c.high and not c.exact
    m = MEMORY([100] * 3, [125], 0.1, [100] * 3)
    assert (m.effect, m.low, m.high, m.exact) == (0.25, 0.25, 0.25, True)


def test_absolute_threshold_in_the_units_of_the_runs():
    judge = Judge(parse_metric("peak_rss", "higher by 200 MB"))
    assert judge([1000] * 3, [1150], 200, [1000] * 3).call is G
    assert judge([1000] * 3, [1250], 200, [1000] * 3).effect == 250


def test_one_wild_run_never_flips_the_call():
    """The estimate ignores it; a bound near it widens (the search then runs again), no more."""
    good = [400, 402, 398, 401, 399, 400, 403]
    stalled = THROUGHPUT(good, [399, 401, 397, 402, 60], 0.05, good)
    assert stalled.call is U and abs(stalled.effect) < 0.01
    assert THROUGHPUT(good, [399, 401, 397, 402, 60, 400, 398, 401, 399, 400], 0.05, good).call is G
    lucky = THROUGHPUT(good, [360, 362, 358, 361, 4000], 0.05, good)
    assert lucky.call is U and lucky.effect == pytest.approx(0.0975)


def test_a_nan_is_as_bad_as_a_number_can_be():
    good = [2.5] * 3
    assert Judge(parse_metric("loss", "higher by 1%"))(good, [float("nan")], 0.01, good).call is B
    assert LOSS(good, [float("nan")], 0.01, good).call is B
    assert THROUGHPUT([400] * 3, [float("nan")], 0.05, [400] * 3).call is B


def test_a_percentage_of_zero_is_undefined_and_any_change_beyond_the_noise_counts():
    judge = Judge(parse_metric("skipped_steps", "higher by 10%"))
    assert judge([0, 0, 0], [1], 0.1, [0, 0, 0]).call is B  # exact: one step more than none
    assert judge([0, 0, 0], [0, 0], 0.1, [0, 0, 0]).call is G
    noisy = judge([0.0, 0.01, -0.01, 0.0, 0.02], [0.0, -0.01, 0.01, 0.01, 0.0], 0.1, [0.0, 0.01, -0.01])
    assert noisy.call is not B  # no change beyond the noise is not worse, whatever its percentage
    with pytest.raises(InputError, match="a percentage of it means nothing"):
        judge([float("inf")] * 3, [1], 0.1, [float("inf")] * 3)


@pytest.mark.parametrize("before, after, reference, unit, text", [
    (400, 360, 400, "", "−10.0 %"),
    (1.5, 1.75, 1.5, "", "+16.7 %"),
    (512, 134217728, 512, "B", "+1.34e+08 B (% undefined: the good end is ~0)"),  # was +26214300 %
    (0, 3, 0, "", "+3 (% undefined: the good end is 0)"),
    (1e-9, -0.26, 1e-9, "", "−0.26 (% undefined: the good end is ~0)"),
    (4.828, 5366.4, 4.828, "ms", "×1,112"),  # 1100 times slower (accelerate 0.32.0): a factor, not ~0
    (1.0, 12.5, 1.0, "", "×12.5"),
    (100, 2, 100, "", "−98.0 %"),
])
def test_a_change_is_a_percentage_unless_the_reference_is_about_zero(before, after, reference, unit, text):
    assert change_text(before, after, reference, unit) == text


def test_the_answer_gives_the_amount_when_the_good_end_is_about_zero():
    judge = Judge(parse_metric("peak_gpu_mem", "higher by 10%"))
    report = find_steps([((0, (512.0,) * 3),), ((1, (134217728.0,) * 3),)], judge)
    line = describe(report, judge.spec, ["1.0", "1.1"], "B")
    assert "(+1.34e+08 B (% undefined: the good end is ~0)) at 1.1" in line and "%)" not in line.split("(%")[0]


def test_summary():
    assert Summary.of([412, 406, 418]) == Summary(412, pytest.approx(8.8956), 3)
    assert Summary.of([412, 406, 418]).describe("samples/s") == "412 ± 8.9 samples/s"
    assert Summary.of([5.0]).describe("GiB") == "5 GiB"


# ------------------------------------------------------------------ steps between levels


def level(*points):
    return tuple((i, tuple(v)) for i, v in points)


GOOD5 = (400, 402, 398, 401, 399)
BAD5 = (360, 362, 358, 361, 359)
MID5 = (380, 381, 379, 382, 378)
NEAR5 = (385, 386, 384, 387, 383)
LABELS = [f"0.15.{i}" for i in range(10)]


def test_one_step():
    levels = (level((0, GOOD5), (3, GOOD5), (4, GOOD5)), level((5, BAD5), (9, BAD5)))
    report = find_steps(levels, THROUGHPUT)
    assert report.shape is Shape.STEP and report.largest.first == 5 and report.largest.located
    assert describe(report, THROUGHPUT.spec, LABELS, "samples/s") == "samples_per_sec 400 → 360 samples/s (−10.0 %) at 0.15.5"


def test_two_steps_over_the_threshold_and_a_range():
    spec = parse_metric("samples_per_sec", "lower by 3%")
    judge = Judge(spec)
    levels = (level((0, GOOD5), (2, GOOD5)), level((4, NEAR5), (5, NEAR5)), level((9, BAD5),))
    report = find_steps(levels, judge)
    assert report.shape is Shape.STEPS and [(s.last, s.first, s.located) for s in report.over] == [(5, 9, False), (2, 4, False)]
    assert describe(report, spec, LABELS) == ("samples_per_sec 400 → 360 (−10.0 %) in 2 steps: −3.8 % after 0.15.2, by 0.15.4, "
                                              "−6.2 % after 0.15.5, by 0.15.9 (the largest)")


def test_spread_out_names_no_culprit():
    judge = Judge(parse_metric("samples_per_sec", "lower by 6%"))
    levels = (level((0, GOOD5)), level((1, MID5)), level((2, BAD5)))
    report = find_steps(levels, judge)
    assert report.shape is Shape.SPREAD and report.over == () and len(report.steps) == 2
    assert describe(report, judge.spec, LABELS).endswith("spread out: no single step over 6 % (largest −5.0 % at 0.15.1)")


def test_not_reproduced_within_noise():
    levels = (level((0, (412, 406, 418, 410))), level((9, (405, 396, 414, 399))))
    report = find_steps(levels, THROUGHPUT)
    assert report.shape is Shape.NOT_REPRODUCED and report.steps == ()
    assert describe(report, THROUGHPUT.spec, LABELS, "samples/s") == (
        "not reproduced: within noise (good 411 ± 4.4, bad 402 ± 6.7 samples/s)")
    assert find_steps((level((0, (412, 406))), level((9, (370, 380)))), THROUGHPUT).shape is Shape.UNDECIDED
    unmeasured = find_steps((level((0, (412, 406, 410))), level((9, ()))), THROUGHPUT)
    assert unmeasured.shape is Shape.UNDECIDED
    assert describe(unmeasured, THROUGHPUT.spec, LABELS) == "not reproduced: the runs cannot tell (good 410 ± 3, bad not measured)"


# ------------------------------------------------------------------ properties: bounded noise


@st.composite
def bounded_samples(draw):
    """A good sample around 100 and a point's around 100 * (1 - shift), each run within ±eta %."""
    eta = draw(st.floats(0.0, 0.02))
    shift = draw(st.floats(-0.3, 0.3))
    n, m = draw(st.integers(1, 8)), draw(st.integers(1, 12))
    noise = st.floats(-eta, eta)
    good = [100 * (1 + draw(noise)) for _ in range(m)]
    point = [100 * (1 - shift) * (1 + draw(noise)) for _ in range(n)]
    return eta, shift, good, point


@settings(max_examples=300, deadline=None, derandomize=True)
@given(bounded_samples(), st.floats(0.01, 0.2))
def test_with_bounded_noise_the_rule_is_never_wrong(sample, threshold):
    """Every pairwise difference lies within the noise of the true change, so an order statistic
    of them can neither call a small change BAD nor a large one GOOD, however few the runs."""
    eta, shift, good, point = sample
    c = THROUGHPUT(good, point, threshold, good)
    worst, best = (shift + 2.1 * eta) / (1 - eta), (shift - 2.1 * eta) / (1 + eta)  # the effect's range
    assert best - 1e-9 <= c.effect <= worst + 1e-9
    if worst < threshold:
        assert c.call is not B
    if best >= threshold:
        assert c.call is not G
        if bound_rank(len(good), len(point), 0.05):
            assert c.call is B


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.floats(1, 1e6), min_size=1, max_size=6), st.lists(st.floats(1, 1e6), min_size=1, max_size=6))
def test_bounds_hold_the_estimate_and_mirror(before, after):
    est, low, high = shift(before, after, 0.05)
    back, blow, bhigh = shift(after, before, 0.05)
    assert low <= est <= high
    assert (back, blow, bhigh) == (-est, -high, -low)
