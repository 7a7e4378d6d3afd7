"""The progress model of a running stage unit (paper Eq. 8–9), written once.

A unit issued at τ spends its issue overhead h_s first and does no work until its
compute start b = τ + h_s; from then on it does isolated-time work at the rate
ρ_s(n_{-j}) of the other units running beside it, a rate that changes whenever a unit
starts or ends. The scheduler's predictor integrates the work *done* at calibrated
rates; the simulator's GPU and the emulated device integrate the work *left* at the
true rates. All three advance and finish units through these functions.
"""

from __future__ import annotations

__all__ = ["finish_time", "others", "progress"]


def progress(rate: float, compute_start: float, last: float, t: float) -> float:
    """Work a unit does from ``max(last, compute_start)`` to ``t`` at ``rate`` (Eq. 9).

    Args:
        rate: Its rate over the interval (isolated seconds per second).
        compute_start: Its compute start b = τ + h_s.
        last: Time up to which its work is already accounted.
        t: Time to account up to.

    Returns:
        Isolated-time seconds of work; 0 while the overhead runs or when ``t`` is not
        later than what is accounted.
    """
    begin = last if last > compute_start else compute_start
    return rate * (t - begin) if t > begin else 0.0


def finish_time(rate: float, compute_start: float, work_left: float, t: float) -> float:
    """When a unit with ``work_left`` at ``t`` ends if its rate stays ``rate``."""
    begin = compute_start if compute_start > t else t
    return begin + max(work_left, 0.0) / rate


def others(counts: list[int] | tuple[int, int, int], stage: int) -> tuple[int, int, int]:
    """n_{-j}: the running counts per stage without the unit itself (of ``stage``)."""
    return (counts[0] - (stage == 0), counts[1] - (stage == 1), counts[2] - (stage == 2))
