"""GPU model: isolated durations, concurrent rates, rate changes mid-unit, slots, noise."""

from __future__ import annotations

import pytest

from xinfer_ros.sim.gpu import GpuModel

W = (0.004, 0.009, 0.012)
H = (0.002, 0.0005, 0.001)


def _rate(stage: int, others: tuple[int, int, int]) -> float:
    # Each other unit halves nothing: rate = 1 / (1 + 0.5 * others).
    return 1.0 / (1.0 + 0.5 * sum(others))


def test_isolated_unit_takes_overhead_plus_work() -> None:
    gpu = GpuModel(_rate, W, H, (2, 2, 2))
    gpu.issue("a", 1, 1.0)
    assert gpu.next_finish == pytest.approx(1.0 + H[1] + W[1])
    unit = gpu.pop_finished(gpu.next_finish)
    assert unit.key == "a" and gpu.counts == [0, 0, 0]
    assert gpu.next_finish == float("inf")


def test_rates_change_when_concurrency_changes() -> None:
    gpu = GpuModel(_rate, (0.010, 0.010, 0.010), (0.0, 0.0, 0.0), (2, 2, 2))
    gpu.issue("a", 2, 0.0)
    gpu.issue("b", 0, 0.004)  # a has 6 ms left, now at rate 1/1.5
    # b: 10 ms at rate 2/3 -> 15 ms; a: 6 ms at 2/3 -> 9 ms, finishes first at 13 ms.
    assert gpu.next_finish == pytest.approx(0.013)
    first = gpu.pop_finished(gpu.next_finish)
    assert first.key == "a"
    # b did 6 ms of its 10 ms during [4, 13] ms; the last 4 ms run alone at rate 1.
    assert gpu.next_finish == pytest.approx(0.017)


def test_slots_are_enforced() -> None:
    gpu = GpuModel(_rate, W, H, (1, 1, 1))
    gpu.issue("a", 0, 0.0)
    assert gpu.free(0) == 0
    with pytest.raises(ValueError, match="no free slot"):
        gpu.issue("b", 0, 0.0)
    with pytest.raises(ValueError, match="already running"):
        gpu.issue("a", 1, 0.0)


def test_noise_is_seeded_and_mean_preserving() -> None:
    def durations(seed: int) -> list[float]:
        gpu = GpuModel(_rate, W, (0.0, 0.0, 0.0), (1, 1, 1), noise=0.05, seed=seed)
        out = []
        t = 0.0
        for i in range(400):
            gpu.issue(i, 0, t)
            t = gpu.next_finish
            gpu.pop_finished(t)
            out.append(t)
        return [b - a for a, b in zip([0.0, *out], out, strict=False)]

    a, b = durations(1), durations(1)
    assert a == b
    assert a != durations(2)
    mean = sum(a) / len(a)
    assert mean == pytest.approx(W[0], rel=0.02)
    assert min(a) < W[0] < max(a)


def test_rate_error_is_one_fixed_factor_per_state_whatever_the_order() -> None:
    def durations(order: list[int], seed: int) -> dict[int, float]:
        gpu = GpuModel(_rate, W, (0.0, 0.0, 0.0), (2, 2, 2), rate_error=0.3, seed=seed)
        out = {}
        for stage in order:  # one unit alone at a time: state (0, 0, 0) per stage
            gpu.issue(stage, stage, 0.0)
            out[stage] = gpu.pop_finished(gpu.next_finish).finish
        return out

    first, again = durations([0, 1, 2], 7), durations([2, 0, 1], 7)
    assert first == pytest.approx(again)
    assert first != pytest.approx({s: W[s] for s in range(3)})  # the table is off
    assert durations([0, 1, 2], 8) != pytest.approx(first)      # another seed, other errors
    with pytest.raises(ValueError, match="rate_error"):
        GpuModel(_rate, W, H, (1, 1, 1), rate_error=-0.1)
