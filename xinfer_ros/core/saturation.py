"""Whether unbatched serving keeps up with the offered load (issue 28, ``saturation_switch``).

On the CPU engine, lane batching and unbatched XInfer win on opposite sides of one line:
below it units served one per lane keep more deadlines (a batch makes its tight members
wait for its mates' work), past it only batches have the throughput to shorten
everyone's queue. Across every block of docs/BENCHMARKS.md section 5.3 that ran both
arms, the line lay where unbatched serving's Action lanes would be about 0.9 busy:
``ρ_s = λ · d̄_s / L_s``, with λ the requests arriving per second, d̄_s the time one
stage-``s`` unit runs alone on its lane under the load it meets, and L_s the stage's
lanes.

:class:`SaturationMeter` measures that from what a policy sees: λ from the arrivals of
the last ``window`` seconds, d̄_s from the forwards that completed in it, each batch of
``k`` counted as ``k`` units of its duration over the batch's cost factor f_s(k) (a
batch of k alone over one unit alone, from the rate table), so that the measure reads
the same whether the server batches or not. It says the server is saturated once the
largest ρ_s reaches ``enter`` and no longer once it falls below ``leave`` (a band, so
that a load on the line does not switch at every decision), each only once the readings
stayed across for ``dwell`` seconds (hysteresis in time: a band alone let a load near the
line switch 7-36 times in a 40 s run, see :class:`SaturationSettings`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from xinfer_ros.core.stages import NUM_STAGES

__all__ = ["BATCH_WHEN", "SaturationMeter", "SaturationSettings", "SaturationSummary"]

#: When a driver's XInfer policies let their lanes batch (the engine's ``batch_when``, the
#: server's ``torch.batch_when``): ``always``, whenever launched units wait, or
#: ``saturated``, only while a :class:`SaturationMeter` reads unbatched serving saturated.
BATCH_WHEN: tuple[str, ...] = ("always", "saturated")


@dataclass(frozen=True, slots=True)
class SaturationSettings:
    """Parameters of :class:`SaturationMeter`.

    Attributes:
        window: seconds of arrivals and forwards each reading counts (> 0). 2 s holds
            about 70 Action units at the load where the arms cross on the CPU engine,
            enough for a mean within a few per cent, and follows a change of robots
            or of host speed within a few seconds.
        enter: utilisation at which serving turns batched (> 0). Across the paired
            blocks of section 5.3 (medians of 3 rounds, ρ_A read from unbatched
            XInfer's runs; docs/data/cpu-2026-12-06-switch/crossover.py), lane
            batching kept fewer requests than unbatched XInfer at 18 of the 26 points
            below 0.92 and at least as many at 28 of the 33 at or above it. Those
            blocks ran without phase spreading; in a fast hour with it (on in
            config/fleet.yaml), unbatched XInfer still kept more at 0.98-1.02 and a band at
            1.10 resolved nothing (docs/BENCHMARKS.md 5.3, "Phase spreading and the
            switch").
        leave: utilisation below which serving turns unbatched again (0 < leave <=
            enter).
        dwell: seconds every reading must stay across the band, without one back
            inside it, before the verdict changes (>= 0; 0 changes at the first
            reading across). The band is about three arrivals of a 2 s window wide at
            the crossover, less than the window's own noise: without a dwell the
            switch changed mode 7-36 times in each 40 s run at phases 8 (ρ_A 0.85-1.02,
            docs/data/cpu-2026-12-06-switch/block2, block3), and in the simulator
            often back within 0.1 s. 1 s is half a window: the window's mean has
            then moved on by half its arrivals, so a change it still reads is the
            load's, not one arrival's; with it the switch changed mode at most once a
            run there (docs/data/cpu-2026-12-06-dwell).
    """

    window: float = 2.0
    enter: float = 0.92
    leave: float = 0.88
    dwell: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 < self.window < math.inf):
            raise ValueError(f"window must be positive and finite, got {self.window!r}")
        if not (0.0 < self.leave <= self.enter < math.inf):
            raise ValueError(f"need 0 < leave <= enter, got leave {self.leave!r}, "
                             f"enter {self.enter!r}")
        if not (0.0 <= self.dwell < math.inf):
            raise ValueError(f"dwell must be >= 0 and finite, got {self.dwell!r}")


class SaturationSummary(TypedDict):
    """:meth:`SaturationMeter.summary`: what the meter read and decided."""

    # Share of the time between the first and the latest reading spent saturated.
    saturated_share: float
    # Times the verdict changed.
    switches: int
    # The latest ρ_s per stage (V, P, A) and its inputs: arrivals per second and the
    # mean unit time alone per stage (s).
    utilisation: list[float]
    arrival_rate: float
    unit_s: list[float]
    window: float
    enter: float
    leave: float
    dwell: float


class SaturationMeter:
    """Unbatched utilisation of each stage's lanes, and a saturated verdict with a band.

    Not thread-safe: fed and read by the thread that drives one policy.

    Args:
        lanes: lanes per stage (V, P, A), each >= 1.
        fallback: the time (s) one stage-``s`` unit runs alone, used while no forward
            of that stage completed within the window (the start, an idle stage): the
            caller passes the predictor's, which follows its online correction.
        settings: window and band.

    Example::

        meter = SaturationMeter((1, 1, 2), lambda s: (0.002, 0.005, 0.040)[s])
        for i in range(90):              # 45 requests per second for 2 s
            meter.arrive(i / 45)
        meter.observe(2, 0.040, t=1.9)   # one Action unit of 40 ms
        meter.saturated(2.0)             # 89 in (0, 2]: 44.5 * 0.040 / 2 = 0.89 < 0.92
    """

    __slots__ = ("_across", "_arrivals", "_fallback", "_first", "_lanes", "_last", "_pin",
                 "_saturated", "_sums", "_units", "pin", "saturated_time", "settings",
                 "switches")

    def __init__(self, lanes: tuple[int, int, int], fallback: Callable[[int], float],
                 settings: SaturationSettings | None = None) -> None:
        self.settings = settings if settings is not None else SaturationSettings()
        self._lanes = (1, 1, 1)
        self.lanes = lanes
        self._fallback = fallback
        #: Arrival times within the window, oldest first.
        self._arrivals: deque[float] = deque()
        #: Per stage: (completion time, unit time alone, units) of each recent forward,
        #: and their running sums of units and of unit time (a reading costs no scan).
        self._units: list[deque[tuple[float, float, int]]] = [deque() for _ in range(NUM_STAGES)]
        self._sums: list[list[float]] = [[0.0, 0.0] for _ in range(NUM_STAGES)]
        self._saturated = False
        #: First reading of the current run of readings across the band (NaN: the
        #: latest reading agreed with the verdict).
        self._across = math.nan
        self._first = math.nan
        self._last = math.nan
        #: Seconds the measured verdict was saturated, and its changes, since the first
        #: reading (a pin below does not change them).
        self.saturated_time = 0.0
        self.switches = 0
        #: A verdict to serve instead of the measured one (None: the measured one). Any
        #: thread may set it; it takes effect at the next reading (:meth:`saturated`),
        #: so that one decision sees one verdict. Interleaved benchmarks pin the two
        #: modes in turn beside the measured one (``xinfer-bench engine --interleave``).
        self.pin: bool | None = None
        #: The pin the latest reading took.
        self._pin: bool | None = None

    @property
    def lanes(self) -> tuple[int, int, int]:
        """Lanes per stage (V, P, A) the utilisation divides by."""
        return self._lanes

    @lanes.setter
    def lanes(self, lanes: tuple[int, int, int]) -> None:
        if len(lanes) != NUM_STAGES or min(lanes) < 1:
            raise ValueError(f"lanes must be {NUM_STAGES} counts >= 1, got {lanes!r}")
        self._lanes = (lanes[0], lanes[1], lanes[2])

    def arrive(self, t: float) -> None:
        """Count one request arriving at ``t``."""
        self._arrivals.append(t)

    def observe(self, stage: int, alone: float, units: int = 1, *, t: float) -> None:
        """Count a forward of ``units`` stage-``stage`` units that completed at ``t``.

        Args:
            stage: 0 ViT, 1 Prefill, 2 Action.
            alone: the time one of its units would have run alone (s): the forward's
                duration over its batch's cost factor. Not positive and finite: ignored.
            units: units the forward ran (>= 1).
            t: its completion time.
        """
        if 0.0 < alone < math.inf and units >= 1:
            self._units[stage].append((t, alone, units))
            sums = self._sums[stage]
            sums[0] += units
            sums[1] += alone * units

    def _prune(self, t: float) -> None:
        since = t - self.settings.window
        arrivals = self._arrivals
        while arrivals and arrivals[0] <= since:
            arrivals.popleft()
        for q, sums in zip(self._units, self._sums, strict=True):
            while q and q[0][0] <= since:
                _, alone, units = q.popleft()
                sums[0] -= units
                sums[1] -= alone * units
            if not q:  # no rounding left over from the subtractions
                sums[0] = sums[1] = 0.0

    def unit_times(self, t: float) -> tuple[float, float, float]:
        """Mean time (s) one unit of each stage ran alone in the window ending at ``t``."""
        self._prune(t)
        out = [total / n if n > 0.0 else self._fallback(s)
               for s, (n, total) in enumerate(self._sums)]
        return (out[0], out[1], out[2])

    def arrival_rate(self, t: float) -> float:
        """Requests per second that arrived in the window ending at ``t``."""
        self._prune(t)
        return self._rate()

    def _rate(self) -> float:
        return len(self._arrivals) / self.settings.window

    def utilisation(self, t: float) -> tuple[float, float, float]:
        """ρ_s at ``t``: arrivals per second times unit time alone over lanes, per stage."""
        d = self.unit_times(t)  # pruned to the window
        rate = self._rate()
        lanes = self._lanes
        return (rate * d[0] / lanes[0], rate * d[1] / lanes[1], rate * d[2] / lanes[2])

    @property
    def verdict(self) -> bool:
        """The latest reading's verdict, or the pin it took (False before the first).

        Reads nothing new.
        """
        return self._saturated if self._pin is None else self._pin

    def saturated(self, t: float) -> bool:
        """The verdict at ``t``: enters at ``enter``, leaves below ``leave``, after ``dwell``.

        A :attr:`pin` set since the last reading replaces the measured verdict from
        this reading on; the measurement goes on beneath it.

        The readings are those taken at the instants this is asked, so a run across
        the band is timed from its first reading: a gap without readings counts as
        across when the readings on either side of it are.
        """
        if t <= self._last:  # one reading per instant (a lane's plan may lag a decision)
            return self.verdict
        self._pin = self.pin
        if math.isnan(self._first):
            self._first = t
        elif self._saturated:  # t is past the last reading (see above)
            self.saturated_time += t - self._last
        self._last = t
        peak = max(self.utilisation(t))
        cfg = self.settings
        if (peak >= cfg.leave) if self._saturated else (peak < cfg.enter):
            self._across = math.nan
            return self.verdict
        if math.isnan(self._across):
            self._across = t
        if t - self._across >= cfg.dwell:
            self._saturated = not self._saturated
            self._across = math.nan
            self.switches += 1
        return self.verdict

    def summary(self) -> SaturationSummary:
        """JSON-ready readings (the latest) and decisions so far."""
        span = self._last - self._first if not math.isnan(self._first) else 0.0
        t = self._last if not math.isnan(self._last) else 0.0
        cfg = self.settings
        return {"saturated_share": self.saturated_time / span if span > 0.0 else 0.0,
                "switches": self.switches,
                "utilisation": list(self.utilisation(t)),
                "arrival_rate": self.arrival_rate(t),
                "unit_s": list(self.unit_times(t)),
                "window": cfg.window, "enter": cfg.enter, "leave": cfg.leave,
                "dwell": cfg.dwell}
