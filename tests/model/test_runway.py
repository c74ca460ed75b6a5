"""The runway's fit (virtcap.model.runway) against an independent least-squares fit: numpy's polyfit
for the line, the textbook formulas for the residuals' deviation and the slope's standard error."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from virtcap.model.runway import BAND_SIGMAS, fit_runway

START = 1_700_000_000.0
"""Times as Prometheus gives them: seconds since the epoch (the fit must stay exact so far out)."""
HOUR = 3600.0


def independent(times: list[float], values: list[float]) -> tuple[float, float, float, float]:
    """(slope, level at the last sample, residual deviation, slope's standard error)."""
    t = np.array(times) - times[-1]
    slope, intercept = np.polyfit(t, np.array(values), 1)
    residuals = np.array(values) - (intercept + slope * t)
    deviation = math.sqrt(float((residuals**2).sum()) / (len(t) - 2))
    error = deviation / math.sqrt(float(((t - t.mean()) ** 2).sum()))
    return float(slope), float(intercept), deviation, error


def test_a_straight_fall_has_its_exact_runway_and_no_band() -> None:
    times = [START + i * HOUR for i in range(101)]
    values = [300.0 - i for i in range(101)]  # one instance an hour: 200 left at the last
    fit = fit_runway(times, values)
    assert fit is not None and fit.points == 101 and fit.last_time == times[-1]
    assert fit.slope_per_day == pytest.approx(-24.0)
    assert fit.level == pytest.approx(200.0)
    assert fit.runway_seconds == pytest.approx(200 * HOUR)
    assert fit.residual_standard_deviation == pytest.approx(0.0, abs=1e-6)
    assert fit.earliest_seconds == pytest.approx(200 * HOUR)
    assert fit.latest_seconds == pytest.approx(200 * HOUR)


@pytest.mark.parametrize("values", [[40.0] * 50, [20.0 + i for i in range(50)]], ids=["flat", "rising"])
def test_no_runway_where_the_trend_does_not_fall(values: list[float]) -> None:
    fit = fit_runway([START + i * HOUR for i in range(50)], values)
    assert fit is not None
    assert (fit.runway_seconds, fit.earliest_seconds, fit.latest_seconds) == (None, None, None)


def test_an_exhausted_flavor_has_a_runway_of_zero() -> None:
    fit = fit_runway([START + i * HOUR for i in range(10)], [9.0 - i for i in range(10)])
    assert fit is not None and fit.level == pytest.approx(0.0, abs=1e-9)
    assert fit.runway_seconds == pytest.approx(0.0, abs=1e-6) and fit.earliest_seconds == 0.0


def test_too_few_samples_or_one_instant_give_no_fit() -> None:
    assert fit_runway([START, START + HOUR], [5.0, 4.0]) is None
    assert fit_runway([START] * 3, [5.0, 4.0, 3.0]) is None
    # samples that are not numbers (Prometheus's NaN) are left out, not fitted
    assert fit_runway([START, START + 1, START + 2], [5.0, math.nan, 3.0]) is None


def test_a_noisy_fall_matches_the_independent_fit_and_its_band() -> None:
    rng = np.random.default_rng(28)
    times = [START + i * 600.0 for i in range(2000)]
    values = [1000.0 - 0.05 * i + float(rng.normal(0, 8)) for i in range(2000)]
    fit = fit_runway(times, values)
    assert fit is not None
    slope, level, deviation, error = independent(times, values)
    assert fit.slope_per_second == pytest.approx(slope, rel=1e-9)
    assert fit.level == pytest.approx(level, rel=1e-9)
    assert fit.residual_standard_deviation == pytest.approx(deviation, rel=1e-9)
    assert fit.slope_standard_error == pytest.approx(error, rel=1e-9)
    assert fit.runway_seconds == pytest.approx(level / -slope, rel=1e-9)
    earliest = (level - BAND_SIGMAS * deviation) / (-slope + BAND_SIGMAS * error)
    latest = (level + BAND_SIGMAS * deviation) / (-slope - BAND_SIGMAS * error)
    assert fit.earliest_seconds == pytest.approx(earliest, rel=1e-9)
    assert fit.latest_seconds == pytest.approx(latest, rel=1e-9)
    assert (
        fit.runway_seconds is not None and fit.earliest_seconds is not None and fit.latest_seconds is not None
    )
    assert fit.earliest_seconds < fit.runway_seconds < fit.latest_seconds


def test_a_fall_too_weak_to_be_sure_of_has_no_latest_exhaustion() -> None:
    """Where the slope's standard error is larger than the fall, a flat trend is plausible: the
    latest exhaustion is unbounded (None), the runway and the earliest are still given."""
    values = [100.0, 90.0, 101.0, 89.0, 99.0, 88.0]
    fit = fit_runway([START + i * HOUR for i in range(6)], values)
    assert fit is not None and fit.slope_per_second < 0
    assert fit.slope_standard_error * BAND_SIGMAS > -fit.slope_per_second
    assert fit.runway_seconds is not None and fit.earliest_seconds is not None
    assert fit.latest_seconds is None


@settings(max_examples=60, deadline=None)
@given(
    slope=st.floats(-50, -0.01),
    level=st.floats(1, 10_000),
    noise=st.lists(st.floats(-5, 5), min_size=3, max_size=60),
)
def test_the_band_holds_the_runway(slope: float, level: float, noise: list[float]) -> None:
    count = len(noise)
    times = [START + i * HOUR for i in range(count)]
    values = [level + slope * (i - count + 1) + noise[i] for i in range(count)]
    fit = fit_runway(times, values)
    assert fit is not None
    if fit.runway_seconds is None:
        return
    assert fit.earliest_seconds is not None and fit.earliest_seconds <= fit.runway_seconds * (1 + 1e-9)
    if fit.latest_seconds is not None:
        assert fit.runway_seconds <= fit.latest_seconds * (1 + 1e-9)
