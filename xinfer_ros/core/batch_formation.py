"""Slack-aware batch formation: which launched units of a stage run as one batch (issue 28).

The lanes of today batch blindly: a free lane takes the oldest launched unit and up to
``max_batch − 1`` mates of its batch key (:mod:`xinfer_ros.engine.batching`). Under
per-request deadlines that can make a mate late: a batch of k runs for d_s(k, n), longer
than the lead's d_s(1, n). :func:`form_batch` decides instead, from the predictor's batch
costs (:class:`~xinfer_ros.core.batch_cost.BatchCost`):

* **No member is made late.** Member j finishes its stage at ``t + d(k)`` and the
  request at ``t + d(k) + rest_j``; a mate joins only while that stays ``<= ℓ_j`` for
  every member that could still make its deadline alone (one predicted late even
  alone is lost whatever the batch: it constrains nobody, and runs now).
* **Tight slack stays intact.** The batch's extra lane time ``d(k) − d(1)`` must fit in
  ``guard``, the smallest slack among protected requests outside the batch (they wait
  on the same lanes; with ``forecast_batch_guard`` the policy adds the spare time of
  robots forecast to arrive), and a *tight* member keeps at least half of its own
  slack. A member is tight when a full batch would cost it more than its slack:
  ``σ_j(1) < max(0, d(N) − d(1))`` (so a member late even alone is tight).
* **A tight unit is never held.** The oldest tight candidate leads the batch (else
  the oldest), and a batch with a tight member runs now. Otherwise, when the batch is
  not full, the lead may wait for mates until ``start_by``: the latest start at which
  a *full* batch still keeps every member (and ``guard``) feasible with ``margin`` of
  slack to spare, and at most one lone-unit duration d(1) after ``t`` (waiting longer
  than the unit takes alone never pays: the lane would have finished it). The caller
  runs the batch at ``start_by`` at the latest, or sooner when a mate arrives (it
  calls again).

* **Late by less than the predictor's error is not lost** (``contest``). A member
  predicted late alone by at most ``contest`` seconds may still make it (on this CPU the
  predicted end of an Action unit is off by 10–30 ms on average): it keeps all of its
  slack, so it runs alone and joins no batch. Only a member later than that is
  given up. With ``contest`` 0 (the default) every member late alone is given up.

* **On time by less than the predictor's error is at risk** (``margin``). A member
  keeps at least ``margin`` seconds of slack in a batch, or all of it when it has less:
  without it a relaxed member's floor is 0, so mates join until its predicted end
  meets its deadline, and an end predicted 10–30 ms off then makes it late. With
  ``margin`` 0 (the default) the floors are the ones above.

* **Under pressure, fill** (``fill``): when the policy finds that the stage's backlog
  served in batches keeps more deadlines than served one unit at a time, the guard (on
  the batch's extra time and on a relaxed lead's hold alike) and the tight members'
  half-slack floors no longer apply: a mate joins while no member that could still
  make its deadline alone is made late by the batch. Lane batching's
  full batches then form too, minus the ones the predictor says would cost a member
  its deadline. With ``keep_floors`` only the guard goes: tight members keep half of
  their slack, a margin against a batch that runs longer than predicted.

All times are seconds. The function is pure and O(N · members): one lookup of the
sizes' costs (:meth:`BatchCost.durations`) and a greedy scan of the candidates (lead
first, then in their given order).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BatchPlan", "Candidate", "form_batch", "form_batch_of", "is_tight"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A launched unit of one stage and batch key, waiting for a lane.

    Attributes:
        request_id: its request.
        deadline: ℓ_j, the request's deadline (s).
        rest: predicted time from the end of this stage to the request's end (later
            stages and output processing) (s).
    """

    request_id: int
    deadline: float
    rest: float


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """What the lane should run.

    Attributes:
        members: request ids of the batch, lead first, then mates in candidate order.
        duration: predicted batch duration d(len(members)) (s).
        start_by: latest start time; equal to the decision time when the batch runs now,
            later when the lead may wait for mates.
    """

    members: tuple[int, ...]
    duration: float
    start_by: float

    def runs_now(self, t: float) -> bool:
        """Whether the batch should start at ``t`` (no mate is worth waiting for)."""
        return self.start_by <= t


def is_tight(c: Candidate, t: float, durations: Sequence[float]) -> bool:
    """Whether a full batch would cost ``c`` more than its slack alone (see module doc)."""
    alone = c.deadline - t - durations[0] - c.rest
    return alone < 0.0 or alone < durations[-1] - durations[0]


def form_batch(candidates: Sequence[Candidate], t: float, durations: Sequence[float], *,
               guard: float = float("inf"), may_wait: bool = True,
               fill: bool = False, keep_floors: bool = False,
               contest: float = 0.0, margin: float = 0.0) -> BatchPlan:
    """The batch a free lane runs, and how long it may wait for mates.

    Args:
        candidates: the waiting units of one stage and batch key, oldest first.
        t: decision time.
        durations: ``d(1), ..., d(N)`` at the current load
            (:meth:`~xinfer_ros.core.batch_cost.BatchCost.durations`); N is the most
            units one batch may take.
        guard: smallest slack of protected requests outside the batch; the batch's extra
            duration over the lead alone must fit in it.
        may_wait: False runs the batch now whatever the slack (e.g. while mates cannot
            come: no other robot has work upstream of this stage).
        fill: the stage is under pressure: no guard (on mates nor on holding) and no
            half-slack floors, only no member made late (see module doc).
        keep_floors: with ``fill``, tight members keep their half-slack floors (only
            the guard goes).
        contest: how late alone (s, >= 0) a member may be predicted and still be
            served as if it could make its deadline: it keeps all its slack.
        margin: slack (s, >= 0) every member that can make its deadline keeps in a
            batch (all of it when it has less), beside its floor.

    Returns:
        The plan; ``members`` is never empty.

    Raises:
        ValueError: no candidates, or no durations.
    """
    return form_batch_of([c.request_id for c in candidates], [c.deadline for c in candidates],
                         [c.rest for c in candidates], t, durations, guard=guard,
                         may_wait=may_wait, fill=fill, keep_floors=keep_floors,
                         contest=contest, margin=margin)


def form_batch_of(ids: Sequence[int], deadlines: Sequence[float], rests: Sequence[float],
                  t: float, durations: Sequence[float], *, guard: float = float("inf"),
                  may_wait: bool = True, fill: bool = False,
                  keep_floors: bool = False, contest: float = 0.0,
                  margin: float = 0.0) -> BatchPlan:
    """:func:`form_batch` on the candidates' fields as parallel sequences.

    The policy's hot path (:meth:`~xinfer_ros.core.xinfer_policy.XInferPolicy.plan_batch`
    runs at every decision with waiting units) calls this directly: it builds no
    :class:`Candidate` per waiting unit. Same arguments and plan as :func:`form_batch`,
    candidate ``i`` being ``(ids[i], deadlines[i], rests[i])``.

    Raises:
        ValueError: no candidates, or no durations.
    """
    n = len(ids)
    if not n:
        raise ValueError("form_batch needs at least one candidate")
    if fill:
        guard = math.inf  # on the batch's extra time and on holding for mates alike
    if not durations:
        raise ValueError("form_batch needs the duration of a batch of one")
    n_max = len(durations)
    d1 = durations[0]
    spread = durations[-1] - d1
    if n == 1:
        # One waiting unit (most plans): the greedy scan below has no mate to consider.
        alone0 = deadlines[0] - t - d1 - rests[0]
        start_by = t
        if (may_wait and n_max > 1 and not (alone0 < 0.0 or alone0 < spread)
                and spread <= guard):
            latest = deadlines[0] - rests[0] - durations[-1] - margin
            start_by = max(t, min(latest, t + d1))
        return BatchPlan((ids[0],), d1, start_by)
    # Each candidate's slack alone, computed once: tightness and floors derive from it.
    alone = [dl - t - d1 - rest for dl, rest in zip(deadlines, rests, strict=True)]
    tight = [sl < 0.0 or sl < spread for sl in alone]
    # The oldest tight unit leads when there is one: it must not queue behind a relaxed
    # lead's batch (nor behind a lead that waits for mates).
    first = tight.index(True) if True in tight else 0
    # Filling, a member keeps a floor of 0 (if it can still make it alone), never half,
    # unless the floors are kept.
    spread_floor = 0.0 if fill and not keep_floors else spread
    members = [first]
    floors = [_floor_of(alone[first], spread_floor, contest, margin)]
    for i in range(n):
        if i == first:
            continue
        k = len(members)
        if k == n_max:
            break
        extra = durations[k] - d1
        if extra > guard:
            break  # larger batches only cost more lane time
        floor = _floor_of(alone[i], spread_floor, contest, margin)
        # Slack in a batch of duration d is the slack alone less the extra duration; it
        # must stay at the floor. Compared as spare slack (alone − floor) against the
        # extra: a member keeping all its slack then refuses any extra, however small,
        # where alone − extra would round back to alone.
        if alone[i] - floor < extra:
            continue  # this mate would be late (or lose its tight slack): skip it
        if all(alone[m] - f >= extra for m, f in zip(members, floors, strict=True)):
            members.append(i)
            floors.append(floor)
    k = len(members)
    start_by = t
    if may_wait and k < n_max and not any(tight[m] for m in members) and spread <= guard:
        # Nobody tight: wait while a full batch started then keeps everyone feasible.
        latest = min(deadlines[m] - rests[m] for m in members) - durations[-1] - margin
        start_by = max(t, min(latest, t + d1))
    return BatchPlan(tuple(ids[m] for m in members), durations[k - 1], start_by)


def _floor_of(alone: float, spread: float, contest: float = 0.0,
              margin: float = 0.0) -> float:
    """Slack a member must keep in a batch, from its slack ``alone`` (see module doc).

    Half of it when tight, else 0, and at least ``margin`` (all of it when it has
    less). A member predicted late alone by more than ``contest`` has no floor: its
    deadline is lost whatever the batch, and refusing it mates would only cost the
    others throughput. One late by less keeps all of it.
    """
    if alone < 0.0:
        return alone if alone >= -contest else -math.inf
    floor = alone / 2.0 if alone < spread else 0.0
    return max(floor, min(alone, margin))
