"""Adapter to the core's policy registry (``xinfer_ros.core.registry.make_policy``).

The engine builds every policy through :func:`make_policy`, so names, ablation presets
and errors are the core's. A fallback over the four policy classes keeps the engine
usable with a core that predates the registry.
"""

from __future__ import annotations

from typing import Any

from xinfer_ros.core.policy import Policy

__all__ = ["make_policy", "policy_names"]

_BASE = ("xinfer", "fifo", "edf", "slack_gate")


def policy_names() -> list[str]:
    """Names :func:`make_policy` accepts."""
    try:
        from xinfer_ros.core.registry import policy_names as core_names
    except ImportError:
        return list(_BASE)
    return list(core_names())


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build a scheduling policy by registry name.

    Args:
        name: ``xinfer``, ``fifo``, ``edf``, ``slack_gate`` or a core ablation preset.
        **kwargs: constructor arguments (``slots``, ``rate_table``, ...).

    Raises:
        ValueError: on an unknown name (the core's ``UnknownPolicyError`` is one).
    """
    try:
        from xinfer_ros.core.registry import make_policy as core_make
    except ImportError:
        core_make = None
    if core_make is not None:
        return core_make(name, **kwargs)
    from xinfer_ros.core.baselines import EDFPolicy, FIFOPolicy, SlackGatePolicy
    from xinfer_ros.core.xinfer_policy import XInferPolicy

    classes: dict[str, type[Policy]] = {"xinfer": XInferPolicy, "fifo": FIFOPolicy,
                                        "edf": EDFPolicy, "slack_gate": SlackGatePolicy}
    key = name.strip().lower().replace("-", "_")
    if key not in classes:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(_BASE)}")
    return classes[key](**kwargs)
