"""The runway of a flavor: how long until no more instance of it fits, at the trend of its history.

The history is the instances that fit (a fleet's or a group's, recorded by Prometheus) sampled
over a window. The trend is the ordinary least-squares line through it, value = level + slope x
time; the runway is the time that line takes from the last sample to 0: the fitted level at the
last sample over minus the slope. Only a falling trend has one: a flat or rising one never reaches
0 (no exhaustion in sight), and an already exhausted flavor (a fitted level at or below 0) has a
runway of 0.

The band says how far the answer could plausibly be off, from the fit's own scatter, at about two
standard errors (BAND_SIGMAS):

- the level is uncertain by the residuals' standard deviation (how far the samples stray from the
  line: builds and deletes in bursts), so the level may be that much lower or higher;
- the slope is uncertain by its standard error (the residuals' deviation over the spread of the
  sample times), so the fall may be that much faster or slower.

The earliest plausible exhaustion is the lower level at the faster fall; the latest, the higher
level at the slower fall, and none at all (unbounded) when the slower fall is no fall: the trend
is too weak to say the flavor runs out. Samples of a flavor are usually correlated (a burst of
builds lasts several samples), which makes the true uncertainty larger than the band: read it as
the least the answer could be off by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BAND_SIGMAS = 2.0
"""The band's width in standard errors (about 95% under independent, normal residuals)."""
MINIMUM_POINTS = 3
"""Fewer samples leave no residual to measure the scatter by: no fit."""
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class RunwayFit:
    """The trend of one history, and the runway it gives (None where the trend does not fall)."""

    points: int
    last_time: float
    """The time of the last sample (seconds since the epoch): the runways count from it."""
    level: float
    """The fitted number of instances at the last sample."""
    slope_per_second: float
    slope_standard_error: float
    residual_standard_deviation: float
    runway_seconds: float | None
    earliest_seconds: float | None
    """The earliest plausible exhaustion, seconds after the last sample (None: no runway)."""
    latest_seconds: float | None
    """The latest plausible exhaustion (None: no runway, or the slower fall is no fall)."""

    @property
    def slope_per_day(self) -> float:
        return self.slope_per_second * SECONDS_PER_DAY

    @property
    def slope_standard_error_per_day(self) -> float:
        return self.slope_standard_error * SECONDS_PER_DAY


def fit_runway(times: Sequence[float], values: Sequence[float]) -> RunwayFit | None:
    """The least-squares trend of `values` sampled at `times` (seconds, increasing) and its runway,
    or None with fewer than MINIMUM_POINTS samples. Samples that are not finite are left out."""
    t = np.asarray(times, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(t) & np.isfinite(y)
    t, y = t[finite], y[finite]
    if len(t) < MINIMUM_POINTS:
        return None
    last_time = float(t.max())
    # centred on the last sample: the level is the intercept, and the sums stay well conditioned
    # with times of 1.7e9 seconds
    x = t - last_time
    x_mean, y_mean = float(x.mean()), float(y.mean())
    spread = float(((x - x_mean) ** 2).sum())
    if spread == 0.0:  # every sample at one instant: no trend
        return None
    slope = float(((x - x_mean) * (y - y_mean)).sum()) / spread
    level = y_mean - slope * x_mean
    residuals = y - (level + slope * x)
    deviation = math.sqrt(float((residuals**2).sum()) / (len(t) - 2))
    slope_error = deviation / math.sqrt(spread)
    runway, earliest, latest = _runway_band(level, slope, deviation, slope_error)
    return RunwayFit(
        points=len(t),
        last_time=last_time,
        level=level,
        slope_per_second=slope,
        slope_standard_error=slope_error,
        residual_standard_deviation=deviation,
        runway_seconds=runway,
        earliest_seconds=earliest,
        latest_seconds=latest,
    )


def _runway_band(
    level: float, slope: float, deviation: float, slope_error: float
) -> tuple[float | None, float | None, float | None]:
    if slope >= 0.0:
        return None, None, None
    fall = -slope
    runway = max(level, 0.0) / fall
    earliest = max(level - BAND_SIGMAS * deviation, 0.0) / (fall + BAND_SIGMAS * slope_error)
    slower = fall - BAND_SIGMAS * slope_error
    latest = (max(level, 0.0) + BAND_SIGMAS * deviation) / slower if slower > 0.0 else None
    return runway, earliest, latest
