"""The saturation meter: unbatched utilisation of each stage's lanes, with a band and a dwell."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xinfer_ros.core.saturation import SaturationMeter, SaturationSettings

UNIT = (0.002, 0.005, 0.040)


def meter(**kwargs: float) -> SaturationMeter:
    """A meter on lanes 1,1,2; without a dwell unless asked, as the band tests read it."""
    kwargs.setdefault("dwell", 0.0)
    return SaturationMeter((1, 1, 2), lambda s: UNIT[s], SaturationSettings(**kwargs))


def arrive(m: SaturationMeter, rate: float, until: float, start: float = 0.0) -> None:
    """Arrivals every 1/rate s in [start, until)."""
    i = 0
    while (t := start + i / rate) < until:
        m.arrive(t)
        i += 1


def test_utilisation_is_arrivals_per_second_times_unit_time_over_lanes():
    m = meter(window=2.0)
    arrive(m, 40.0, 2.0)
    rho = m.utilisation(2.0)
    # 80 arrivals in (0, 2]: the one at 0 has left the window.
    rate = 79 / 2.0
    assert rho == pytest.approx((rate * 0.002, rate * 0.005, rate * 0.040 / 2))
    # Forwards that completed in the window replace the fallback, weighted by units.
    m.observe(2, 0.050, 1, t=1.5)
    m.observe(2, 0.020, 3, t=1.9)
    assert m.unit_times(2.0)[2] == pytest.approx((0.050 + 3 * 0.020) / 4)
    # Past the window they leave, and the fallback returns.
    assert m.unit_times(4.0)[2] == pytest.approx(0.040)
    assert m.utilisation(5.0) == (0.0, 0.0, 0.0)


def test_bad_forwards_are_ignored():
    m = meter()
    m.observe(2, 0.0, 1, t=0.1)
    m.observe(2, float("nan"), 1, t=0.1)
    m.observe(2, 0.01, 0, t=0.1)
    assert m.unit_times(0.2)[2] == pytest.approx(0.040)


def test_the_verdict_enters_at_enter_and_leaves_below_leave():
    m = meter(window=1.0, enter=0.9, leave=0.8)
    # Action: rate * 0.040 / 2 lanes; 46/s = 0.92, 42/s = 0.84, 38/s = 0.76.
    arrive(m, 42.0, 1.0)
    assert not m.saturated(1.0)
    arrive(m, 46.0, 2.0, start=1.0)
    assert m.saturated(2.0)
    arrive(m, 42.0, 3.0, start=2.0)
    assert m.saturated(3.0)  # inside the band: stays
    arrive(m, 38.0, 4.0, start=3.0)
    assert not m.saturated(4.0)
    s = m.summary()
    assert s["switches"] == 2
    # Saturated from the reading at 2 to the one at 4 of the 3 s between readings.
    assert s["saturated_share"] == pytest.approx(2 / 3)
    assert s["utilisation"][2] == pytest.approx(37 * 0.040 / 2)
    assert (s["window"], s["enter"], s["leave"], s["dwell"]) == (1.0, 0.9, 0.8, 0.0)


def test_the_verdict_changes_only_after_dwell_seconds_across_the_band():
    # Action: rate * 0.040 / 2 lanes over a 1 s window; 50/s = 1.0, 30/s = 0.6.
    m = meter(window=1.0, enter=0.9, leave=0.8, dwell=0.5)
    arrive(m, 50.0, 1.0)
    assert not m.saturated(1.0)  # across since 1.0
    arrive(m, 50.0, 1.4, start=1.0)
    assert not m.saturated(1.4)
    arrive(m, 50.0, 1.5, start=1.4)
    assert m.saturated(1.5) and m.switches == 1
    arrive(m, 50.0, 2.0, start=1.5)
    arrive(m, 30.0, 3.1, start=2.0)
    assert m.saturated(3.0)  # 0.6: across since 3.0
    for _ in range(15):  # a burst: 45 in (2.1, 3.1] reads 0.9, back inside the band
        m.arrive(3.1)
    assert m.saturated(3.1)
    arrive(m, 30.0, 4.0, start=3.1)
    assert m.saturated(4.0)  # the burst still in the window: inside
    arrive(m, 30.0, 4.2, start=4.0)
    assert m.saturated(4.2)  # across again, since 4.2 (the dwell restarted)
    arrive(m, 30.0, 4.6, start=4.2)
    assert m.saturated(4.6)
    arrive(m, 30.0, 4.7, start=4.6)
    assert not m.saturated(4.7) and m.switches == 2


def test_a_load_that_wanders_across_the_band_switches_once_with_a_dwell():
    """Readings alternating either side of the band every 0.2 s: no dwell flips at each."""
    flips = {}
    for dwell in (0.0, 1.0):
        m = meter(window=0.2, enter=0.9, leave=0.8, dwell=dwell)
        t = 0.0
        for i in range(40):  # 8 s, a heavy and a light 0.2 s in turn, then heavy
            rate = 60.0 if i % 2 == 0 or i >= 30 else 20.0
            arrive(m, rate, t + 0.2, start=t)
            t += 0.2
            m.saturated(t - 1e-9)
        flips[dwell] = m.switches
    assert flips[0.0] >= 20
    assert flips[1.0] == 1  # the heavy last 2 s, held past the dwell


def test_a_reading_at_or_before_the_last_one_repeats_its_verdict():
    m = meter(window=1.0, enter=0.9, leave=0.8)
    arrive(m, 60.0, 1.0)
    assert m.saturated(1.0)
    assert m.saturated(0.5) and m.switches == 1


@pytest.mark.parametrize("kwargs", [{"window": 0.0}, {"window": float("inf")},
                                    {"enter": 0.8, "leave": 0.9}, {"leave": 0.0},
                                    {"dwell": -0.1}, {"dwell": float("inf")},
                                    {"dwell": float("nan")}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        SaturationSettings(**kwargs)


def test_lanes_must_be_three_positive_counts():
    with pytest.raises(ValueError):
        SaturationMeter((1, 0, 2), lambda s: 0.01)


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.floats(0.001, 0.2), min_size=1, max_size=120),
       enter=st.floats(0.2, 2.0), width=st.floats(0.0, 0.5),
       dwell=st.sampled_from([0.0, 0.05, 0.3]))
def test_the_verdict_is_the_band_applied_to_the_readings(gaps, enter, width, dwell):
    """At every arrival the verdict follows the utilisation through the band and dwell."""
    leave = enter * (1 - width)
    m = meter(window=0.5, enter=enter, leave=leave, dwell=dwell)
    t, state, since = 0.0, False, None
    for gap in gaps:
        t += gap
        m.arrive(t)
        peak = max(m.utilisation(t))
        if (peak >= (leave if state else enter)) == state:
            since = None
        else:
            since = t if since is None else since
            if t - since >= dwell:
                state, since = not state, None
        assert m.saturated(t) == state


def test_a_pin_serves_its_verdict_from_the_next_reading_while_the_meter_measures_on():
    m = meter(window=1.0, enter=0.9, leave=0.8)
    arrive(m, 30.0, 1.0)  # 0.6: unsaturated
    assert not m.saturated(1.0)
    m.pin = True
    assert not m.verdict  # not before the next reading: one decision, one verdict
    arrive(m, 30.0, 2.0, start=1.0)
    assert m.saturated(2.0) and m.verdict
    assert m.saturated(2.0)  # a repeated reading repeats the pin
    arrive(m, 50.0, 3.5, start=2.0)  # 1.0: the measured verdict enters beneath the pin
    m.pin = False
    assert not m.saturated(3.0)
    m.pin = None
    assert m.saturated(3.5)  # the measured verdict returns
    s = m.summary()
    # What the meter read, not what it served: one entry, saturated from 3 to 3.5.
    assert s["switches"] == 1
    assert s["saturated_share"] == pytest.approx(0.5 / 2.5)
