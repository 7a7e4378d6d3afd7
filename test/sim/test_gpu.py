"""GPU model: isolated durations, concurrent rates, rate changes mid-unit, slots, noise."""

from __future__ import annotations

import random

import pytest

from xinfer_ros.sim.gpu import BatchedGpuModel, GpuModel

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


def _drain(gpu: GpuModel) -> list[tuple[object, float]]:
    out = []
    while gpu.next_finish != float("inf"):
        t = gpu.next_finish
        out.append((gpu.pop_finished(t).key, t))
    return out


def test_units_of_one_instant_run_as_one_batch_and_finish_together() -> None:
    gpu = BatchedGpuModel(_rate, W, H, (4, 4, 4), max_batch=2)
    assert gpu.lanes == (2, 2, 2)
    for key in ("a", "b", "c"):
        gpu.issue(key, 2, 1.0)
    # a and b share a batch, c starts the second lane: 3 units run, each with 2 others.
    assert gpu.counts == [0, 0, 3]
    expected = 1.0 + H[2] + W[2] * (1.0 + 0.5 * 2)
    assert gpu.next_finish == pytest.approx(expected)
    done = _drain(gpu)
    assert sorted(k for k, _ in done) == ["a", "b", "c"]
    assert [t for _, t in done] == pytest.approx([expected] * 3)


def test_a_unit_waits_for_a_lane_and_starts_with_the_waiting_ones() -> None:
    gpu = BatchedGpuModel(_rate, (0.010, 0.010, 0.010), (0.0, 0.0, 0.0), (4, 4, 4),
                          max_batch=4)
    gpu.issue("a", 0, 0.0)
    gpu.issue("b", 0, 0.002)  # the only ViT lane is busy: b waits, a runs alone
    gpu.issue("c", 0, 0.003)
    assert gpu.free(0) == 1 and gpu.next_finish == pytest.approx(0.010)
    assert gpu.pop_finished(0.010).key == "a"
    # b and c start together at 10 ms as one batch: 10 ms at rate 1/1.5 -> 25 ms.
    assert gpu.next_finish == pytest.approx(0.025)
    # A unit launched at that instant finds the lane taken (as the engine's lane took
    # b and c before the dispatcher heard of a's end): it waits for the next batch.
    gpu.issue("d", 0, 0.010)
    assert gpu.next_finish == pytest.approx(0.025)
    assert [k for k, _ in _drain(gpu)] == ["b", "c", "d"]
    with pytest.raises(ValueError, match="no free slot"):
        full = BatchedGpuModel(_rate, W, H, (1, 1, 1), max_batch=2)
        full.issue("x", 1, 0.0)
        full.issue("y", 1, 0.0)


def test_tight_units_take_the_next_lane_with_tight_mates_within_their_limits() -> None:
    w = (0.010, 0.010, 0.010)
    gpu = BatchedGpuModel(_rate, w, (0.0, 0.0, 0.0), (8, 8, 8), max_batch=8)
    assert gpu.lanes[0] == 1
    gpu.issue("a", 0, 0.0)  # the one ViT lane
    for key in ("b", "c"):
        gpu.issue(key, 0, 0.002)
    gpu.issue("t", 0, 0.003, limit=2)  # queued ahead of b and c, though later
    gpu.issue("u", 0, 0.004, limit=3)
    gpu.issue("v", 0, 0.005, limit=1)  # the pair's limit leaves it out
    assert gpu.pop_finished(0.010).key == "a"
    assert gpu.units["t"].batch == gpu.units["u"].batch == 2
    assert gpu.units["t"].started == 0.010
    assert gpu.next_finish == pytest.approx(0.025)  # 10 ms at rate 1/1.5
    assert {gpu.pop_finished(0.025).key for _ in range(2)} == {"t", "u"}
    assert gpu.units["v"].batch == 1 and gpu.units["v"].started == 0.025
    assert gpu.pop_finished(gpu.next_finish).key == "v"
    assert gpu.units["b"].batch == gpu.units["c"].batch == 2  # then the ordinary ones
    # Every lane taken by a batch opened this instant: the tight unit takes its lane
    # and the batch's members wait again, as the engine's lane, started once the whole
    # decision is queued, would take the tight unit first; a tight mate launched at
    # that instant joins it within its limit.
    gpu2 = BatchedGpuModel(_rate, w, (0.0, 0.0, 0.0), (8, 8, 8), max_batch=8)
    for key in ("x", "y"):
        gpu2.issue(key, 1, 1.0)
    gpu2.issue("z", 1, 1.0, limit=2)
    gpu2.issue("z2", 1, 1.0, limit=2)
    gpu2.issue("z3", 1, 1.0, limit=2)  # the pair is full: it waits ahead of x and y
    assert gpu2.units["z"].batch == gpu2.units["z2"].batch == 2
    assert gpu2._running[1] == 2  # the displaced pair x, y waits: only z and z2 run
    assert gpu2.next_finish == pytest.approx(1.0 + 0.010 * 1.5)  # a batch of 2 alone
    assert [k for k, _ in _drain(gpu2)][:3] == ["z", "z2", "z3"]


def test_batches_of_one_are_the_plain_gpu() -> None:
    rng = random.Random(3)
    plain, batched = (GpuModel(_rate, W, H, (2, 2, 3), noise=0.1, seed=4),
                      BatchedGpuModel(_rate, W, H, (2, 2, 3), max_batch=1, noise=0.1, seed=4))
    t, key, finished = 0.0, 0, ([], [])
    for _ in range(300):
        t += rng.expovariate(400.0)
        for gpu, out in zip((plain, batched), finished, strict=True):
            while gpu.next_finish <= t:
                done = gpu.next_finish
                out.append((gpu.pop_finished(done).key, done))
        stage = rng.randrange(3)
        if plain.free(stage):
            plain.issue(key, stage, t)
            batched.issue(key, stage, t)
            key += 1
    (plain_done, batched_done) = finished
    assert len(plain_done) > 100
    assert [k for k, _ in plain_done] == [k for k, _ in batched_done]
    assert [t for _, t in plain_done] == pytest.approx([t for _, t in batched_done])


def test_with_batch_factors_a_batch_does_its_factor_of_work_at_the_rate_of_the_others(
        ) -> None:
    factors = ((1.0, 1.5), (1.0, 1.5), (1.0, 1.2))
    gpu = BatchedGpuModel(_rate, W, H, (4, 4, 4), max_batch=2, batch_factors=factors)
    for key in ("a", "b", "c"):
        gpu.issue(key, 2, 1.0)
    # a and b: one batch doing 1.2 W at the rate of the one unit outside it (c); c alone
    # on its lane does W at the rate of the batch's two units, as BatchCost prices them.
    batch_end = 1.0 + H[2] + 1.2 * W[2] * (1.0 + 0.5 * 1)
    lone_end = 1.0 + H[2] + W[2] * (1.0 + 0.5 * 2)
    done = dict(_drain(gpu))
    assert done["a"] == done["b"] == pytest.approx(batch_end)
    # c did 0.9 W at rate 1/2 beside the batch (1.8 W long), then 0.1 W alone.
    assert done["c"] == pytest.approx(1.0 + H[2] + 1.9 * W[2]) and done["c"] < lone_end


def test_spreading_lanes_runs_units_of_one_instant_on_free_lanes_first() -> None:
    """``spread`` (``Policy.spreads_lanes``): units launched together take the free lanes
    before any batch forms, as the engine's queue spreads them; a backlog longer than
    the lanes then goes out ``ceil(waiting / lanes)`` at a time."""
    gpu = BatchedGpuModel(_rate, W, H, (8, 8, 8), max_batch=4)
    gpu.spread = True
    for key in ("a", "b"):
        gpu.issue(key, 2, 1.0)
    assert [b.members for b in gpu._batches] == [[gpu.units["a"]], [gpu.units["b"]]]
    gpu.issue("c", 2, 1.0)  # no free lane: it joins the smaller open batch
    assert sorted(len(b.members) for b in gpu._batches) == [1, 2]
    for key in "defgh":
        gpu.issue(key, 2, 1.5)  # both lanes busy: five wait
    gpu.pop_finished(gpu.next_finish)
    assert sorted(len(b.members) for b in gpu._batches)[-1] == 3  # ceil(5 / 2), not 4
