"""Policy registry: ``make_policy(name, **params)``.

Names: ``fifo``, ``edf``, ``slack_gate``, ``xinfer``, and the App. C.3 ablations of
``xinfer`` as presets: ``xinfer_no_interference``, ``xinfer_strict_priority``,
``xinfer_no_arrival``, ``xinfer_entry_only``, ``xinfer_zero_slack``; and our admission
extensions: ``xinfer_no_slot_aware`` / ``xinfer_paper`` (slot-aware admission off:
Algorithm 1 as written), the experimental, default-off ``xinfer_projection`` and
``xinfer_forecast_load``, ``xinfer_spread`` (the settings for a server with phase
spreading), and ``xinfer_batch`` (slack-aware batch formation, issue 28; without holds for
mates: ``xinfer_batch_nohold``; launching only into free lanes: ``xinfer_batch_gated``,
and with mates past ViT launched without admission: ``xinfer_batch_riders``, batching
only under pressure: ``xinfer_batch_pressure``, and also when serving alone misses a
deadline that batches would not save: ``xinfer_batch_ties``, and filling batches under
pressure: ``xinfer_batch_fill``, also launching up to the slots under pressure:
``xinfer_batch_fill_slots``, the same with the strict pressure test (batches must
keep more deadlines, not as many): ``xinfer_batch_fill_slots_strict``, and filling that
keeps the tight members' floors: ``xinfer_batch_fill_slots_floors``, and the same with batch
costs learned from the forwards: ``xinfer_batch_fill_slots_floors_fed``, and learned per
batch size, with units late by less than the predictor's error still contested:
``xinfer_batch_contest``, whose members also keep the predictor's error as slack:
``xinfer_batch_margin``, or whose units wait without work until their batch starts:
``xinfer_batch_contest_deferred``; unbatched until unbatched serving saturates, then
lane batching: ``xinfer_batch_switch``; the experiments
``xinfer_batch_deferred`` and ``xinfer_batch_guarded``). Names are matched
case-insensitively with ``-`` and ``_`` equivalent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from xinfer_ros.core.baselines import EDFPolicy, FIFOPolicy, SlackGatePolicy
from xinfer_ros.core.errors import UnknownPolicyError
from xinfer_ros.core.policy import Policy
from xinfer_ros.core.xinfer_policy import XInferPolicy

__all__ = ["ABLATIONS", "BATCH_FORMERS", "BATCH_FORMING", "POLICIES", "SERVED_POLICIES",
           "forms_batches", "is_xinfer", "make_policy", "policy_key", "policy_names"]

#: Base policies by name.
POLICIES: Mapping[str, Callable[..., Policy]] = {
    FIFOPolicy.name: FIFOPolicy,
    EDFPolicy.name: EDFPolicy,
    SlackGatePolicy.name: SlackGatePolicy,
    XInferPolicy.name: XInferPolicy,
}

# The gated batch-forming presets, each the one before it and one more setting.
_RIDERS: Mapping[str, object] = {"max_batch": 4, "lane_gate": True, "ride_along": True}
_PRESSURE: Mapping[str, object] = {**_RIDERS, "batch_under_pressure": True}
_TIES: Mapping[str, object] = {**_PRESSURE, "batch_on_ties": True}
_FILL: Mapping[str, object] = {**_TIES, "fill_under_pressure": True}
# Past fill: fsf (launching up to the slots and keeping the floors), fed, contest.
_FLOORS: Mapping[str, object] = {**_FILL, "slots_under_pressure": True,
                                 "fill_keeps_floors": True}
_FED: Mapping[str, object] = {**_FLOORS, "batch_feedback": True}
_CONTEST: Mapping[str, object] = {**_FED, "batch_feedback_by_size": True,
                                  "contest_late": True}

#: Ablation presets: name -> XInferPolicy keyword arguments (App. C.3).
ABLATIONS: Mapping[str, Mapping[str, object]] = {
    "xinfer_no_interference": {"interference": False},
    "xinfer_strict_priority": {"strict_priority": True},
    "xinfer_no_arrival": {"arrival_aware": False},
    "xinfer_entry_only": {"entry_only": True},
    "xinfer_zero_slack": {"zero_slack_promotion": True},
    # Our slot-aware admission (default on, not in the paper) switched off, i.e.
    # Algorithm 1 exactly as the paper writes it.
    "xinfer_no_slot_aware": {"slot_aware": False},
    "xinfer_paper": {"slot_aware": False, "arrival_projection": False,
                     "forecast_load": False},
    # Experimental admission extensions (default off): see XInferPolicy.
    "xinfer_projection": {"arrival_projection": True},
    # The admission settings that did best together with phase-spreading release
    # (core.phase_spread): forecasts at their projected arrival load, slot-aware
    # admission off. Without spreading the projection costs phases capacity.
    "xinfer_spread": {"arrival_projection": True, "slot_aware": False},
    "xinfer_forecast_load": {"forecast_load": True},
    # Issue 28: the policy forms the lanes' batches (needs a table with a batch
    # dimension; the simulator and the engine pass their own max_batch).
    "xinfer_batch": {"max_batch": 4},
    # The same without holds: a formed batch runs at once, no lead waits for mates.
    "xinfer_batch_nohold": {"max_batch": 4, "batch_hold": False},
    # Experiments (section 5.3): units that wait for their batch do no work in the
    # predictor, and with it the batch guard for robots about to send.
    "xinfer_batch_deferred": {"max_batch": 4, "defer_batched_units": True},
    "xinfer_batch_guarded": {"max_batch": 4, "defer_batched_units": True,
                             "forecast_batch_guard": True},
    # Units launch only into free lanes, so ready work waits where the policy orders it
    # and batches form only when more units are ready than lanes are free.
    "xinfer_batch_gated": {"max_batch": 4, "lane_gate": True},
    # The same, and past ViT a batch's mates launch without admission (the former
    # prices the extra batch time they cost).
    "xinfer_batch_riders": _RIDERS,
    # Riders that batch a stage only while batches keep more of its backlog's deadlines
    # than serving units alone: unbatched XInfer's launches below saturation.
    "xinfer_batch_pressure": _PRESSURE,
    # The same, erring towards batching: a backlog that misses a deadline served alone
    # is batched whenever batches keep as many (any late unit suffices).
    "xinfer_batch_ties": _TIES,
    # The same, and under pressure batches fill up: no guard, no half-slack floors, only
    # no member made late.
    "xinfer_batch_fill": _FILL,
    # The same, and under pressure units launch up to the stage's slots (lane batching's
    # launch), not one batch per free lane.
    "xinfer_batch_fill_slots": {**_FILL, "slots_under_pressure": True},
    # The same without batch_on_ties: a stage batches only when batches keep more of
    # its backlog's deadlines. The simulator preferred it at 4 to 8 robots; on the
    # CPU engine it was below fill_slots at every count, while on the modelled GPU's
    # table it projects one robot above lane batching and fill_slots five below
    # (docs/BENCHMARKS.md section 5.3): the better one depends on the batch costs.
    "xinfer_batch_fill_slots_strict": {**_PRESSURE, "fill_under_pressure": True,
                                       "slots_under_pressure": True},
    # fill_slots whose filling keeps the tight members' half-slack floors (drops the
    # guard only). Within issue 28's tolerance at 6-12 robots in a slow hour; in a fast
    # one 4.6-11.7 points short at 6 and 8 robots on phases and at 6 on parcel
    # (docs/BENCHMARKS.md section 5.3).
    "xinfer_batch_fill_slots_floors": _FLOORS,
    # fsf whose batch costs learn from the batches the engine ran (batch_feedback): on
    # the CPU engine fsf's plans ran 1.3-1.45x the forwards; fed was within issue 28's
    # tolerance at 6, 8, 12 robots and parcel 10 but short at parcel 6 and 4 robots in
    # one slow hour (docs/BENCHMARKS.md section 5.3).
    "xinfer_batch_fill_slots_floors_fed": _FED,
    # fed whose batch costs learn per batch size and whose units predicted late by less
    # than the predictor's typical error still run as if they could make it (alone):
    # the forming policies gave up the 90 ms class on parcel at 6 robots. On a fast host
    # short of lane batching at phases 8 and 12 and parcel 8-12 (docs/BENCHMARKS.md 5.3).
    "xinfer_batch_contest": _CONTEST,
    # contest whose batch members keep the predictor's typical error as slack: under
    # contest, batches filled relaxed members up to their predicted deadlines. Within
    # at phases 4 and 8 in slower hours, short at 6 by the medians, 9-17 points short
    # past saturation (docs/BENCHMARKS.md 5.3).
    "xinfer_batch_margin": {**_CONTEST, "error_margin": True},
    # contest whose units do no work in the predictor until their batch starts, so the
    # online correction learns the time units run, not the time they wait for a lane.
    # Its k_A came closer to unbatched XInfer's; attainment did not follow (3-13
    # points short at phases 8, 12 and parcel 8, 12; docs/BENCHMARKS.md 5.3).
    "xinfer_batch_contest_deferred": {**_CONTEST, "defer_batched_units": True},
    # Unbatched XInfer while unbatched serving keeps up with the offered load, lane
    # batching once it cannot (core.saturation): the arms crossed where unbatched
    # Action lanes were about 0.9 busy on the CPU engine (docs/BENCHMARKS.md 5.3). It
    # sets how many units launch; the lanes batch them (it is no batch former).
    "xinfer_batch_switch": {"max_batch": 4, "saturation_switch": True},
    # The switch whose saturated lanes run tight requests' units alone and first, and
    # batch the others (XInferPolicy tight_alone).
    "xinfer_batch_switch_tight": {"max_batch": 4, "saturation_switch": True,
                                  "tight_alone": True},
    # XInfer on a device whose concurrent units slow each other (a CPU): spare slots
    # serve protected requests only (issue 27).
    "xinfer_lazy": {"lazy_slots": "stage"},
    "xinfer_lazy_device": {"lazy_slots": "device"},
}

#: The preset that forms its lanes' batches (issue 28): a driver building it by name
#: passes its own ``max_batch``.
BATCH_FORMING = "xinfer_batch"
#: Every preset that forms batches (see :func:`forms_batches`), and the saturation switch,
#: which forms none but needs the engine's max_batch to count its lanes.
BATCH_FORMERS: frozenset[str] = frozenset({BATCH_FORMING, "xinfer_batch_nohold",
                                           "xinfer_batch_deferred", "xinfer_batch_guarded",
                                           "xinfer_batch_gated", "xinfer_batch_riders",
                                           "xinfer_batch_pressure", "xinfer_batch_ties",
                                           "xinfer_batch_fill", "xinfer_batch_fill_slots",
                                           "xinfer_batch_fill_slots_strict",
                                           "xinfer_batch_fill_slots_floors",
                                           "xinfer_batch_fill_slots_floors_fed",
                                           "xinfer_batch_contest", "xinfer_batch_margin",
                                           "xinfer_batch_contest_deferred",
                                           "xinfer_batch_switch",
                                           "xinfer_batch_switch_tight"})


#: Names the ROS server and ``xinfer-fleet`` offer: the four policies of the paper's
#: comparison and XInfer's settings for a server with phase spreading. (A server's
#: ``lazy_slots`` parameter sets the XInfer ones' ``lazy_slots``.)
SERVED_POLICIES: tuple[str, ...] = ("fifo", "edf", "slack_gate", "xinfer", "xinfer_spread")


def policy_names() -> list[str]:
    """All names ``make_policy`` accepts."""
    return [*POLICIES, *ABLATIONS]


def policy_key(name: str) -> str:
    """``name`` as the registry spells it (case and ``-`` / ``_`` do not matter)."""
    return str(name).strip().lower().replace("-", "_")


def is_xinfer(name: str) -> bool:
    """Whether ``name`` is XInfer or one of its presets (an :class:`XInferPolicy`)."""
    key = policy_key(name)
    return key == XInferPolicy.name or key in ABLATIONS


def forms_batches(name: str) -> bool:
    """Whether preset ``name`` takes its driver's ``max_batch``.

    It forms its lanes' batches, or (``saturation_switch``) lets them batch once saturated.
    """
    return policy_key(name) in BATCH_FORMERS


def make_policy(name: str, **params: object) -> Policy:
    """Build a policy by name; ``params`` go to its constructor.

    Raises:
        UnknownPolicyError: naming ``name`` and listing the known names.
        TypeError: a parameter the policy does not take.
    """
    key = policy_key(name)
    if key in POLICIES:
        return POLICIES[key](**params)
    if key in ABLATIONS:
        # Parameters from files and flags: the constructor checks them (TypeError).
        xinfer: Callable[..., Policy] = XInferPolicy
        return xinfer(**{**ABLATIONS[key], **params})
    raise UnknownPolicyError(f"unknown policy {name!r}; known: {', '.join(policy_names())}")
