"""Effective robot capacity (ERC) search (§6.1, App. B.2 and C.4).

ERC is the largest tested robot count at which *every* round passes the acceptance
criterion; the adjacent larger tested count must fail in at least one round. The
criterion is ≥ 95 % SLO attainment for heterogeneous budgets, or P50 < 150 ms with
zero errors for a uniform budget. Passing is not assumed monotone in the robot count
(the paper notes this), so the search walks counts upward and stops only after
``patience`` consecutive failing counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from xinfer_ros.core.constants import ATTAINMENT_TARGET
from xinfer_ros.core.metrics import WindowMetrics, passes_attainment, passes_latency

__all__ = ["Criterion", "ErcResult", "erc_from_grid", "passes", "search_erc"]


class Criterion(str, Enum):
    """Acceptance criterion of one ERC study."""

    ATTAINMENT = "attainment"
    LATENCY = "latency"


def passes(
    metrics: WindowMetrics,
    criterion: Criterion,
    target: float = ATTAINMENT_TARGET,
    p50_limit_ms: float = 150.0,
) -> bool:
    """Whether one round passes ``criterion`` (a :class:`Criterion` or its value)."""
    if Criterion(criterion) is Criterion.ATTAINMENT:
        return passes_attainment(metrics, target)
    return passes_latency(metrics, p50_limit_ms)


@dataclass(frozen=True, slots=True)
class ErcResult:
    """Outcome of an ERC study.

    Attributes:
        erc: Largest tested count where every round passed (0 if none).
        failing: Smallest tested count above ``erc`` that failed (``None`` if none
            was tested).
        criterion: Criterion used.
        verdicts: Per robot count, the pass flag of each round.
    """

    erc: int
    failing: int | None
    criterion: Criterion
    verdicts: dict[int, list[bool]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "erc": self.erc,
            "failing": self.failing,
            "criterion": self.criterion.value,
            "verdicts": {str(k): v for k, v in sorted(self.verdicts.items())},
        }


def erc_from_grid(
    verdicts: Mapping[int, Sequence[bool]], criterion: Criterion
) -> ErcResult:
    """ERC from per-count round verdicts of a sweep (e.g. a ``compare`` grid).

    The ERC is the largest count whose rounds all pass and whose next larger tested
    count fails; if every count passes, it is the largest count and ``failing`` is
    ``None``.
    """
    counts = sorted(verdicts)
    ok = {n: bool(verdicts[n]) and all(verdicts[n]) for n in counts}
    erc = 0
    for n in counts:
        if ok[n]:
            erc = n
    failing = next((n for n in counts if n > erc and not ok[n]), None)
    return ErcResult(erc, failing, criterion, {n: list(verdicts[n]) for n in counts})


def search_erc(
    evaluate: Callable[[int], Iterable[WindowMetrics]],
    criterion: Criterion,
    lo: int,
    hi: int,
    *,
    patience: int = 1,
    target: float = ATTAINMENT_TARGET,
    p50_limit_ms: float = 150.0,
    on_count: Callable[[int, list[bool]], None] | None = None,
) -> ErcResult:
    """Walk robot counts ``lo..hi`` upward and return the ERC.

    Args:
        evaluate: Runs every round at a robot count and yields each round's metrics.
        criterion: Acceptance criterion.
        lo: First count tested.
        hi: Last count tested.
        patience: Stop after this many consecutive failing counts above the best
            passing one (1 reproduces "the adjacent larger count fails").
        target: Attainment target for :attr:`Criterion.ATTAINMENT`.
        p50_limit_ms: P50 limit for :attr:`Criterion.LATENCY`.
        on_count: Called with each count's verdicts (progress reporting).

    Raises:
        ValueError: If ``lo > hi`` or ``patience < 1``.
    """
    if lo > hi or lo < 1:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo!r}, hi={hi!r}")
    if patience < 1:
        raise ValueError(f"patience must be >= 1, got {patience!r}")
    verdicts: dict[int, list[bool]] = {}
    fails_in_row = 0
    for n in range(lo, hi + 1):
        v = [passes(m, criterion, target, p50_limit_ms) for m in evaluate(n)]
        verdicts[n] = v
        if on_count is not None:
            on_count(n, v)
        if v and all(v):
            fails_in_row = 0
        else:
            fails_in_row += 1
            if fails_in_row >= patience and any(all(x) for x in verdicts.values()):
                break
    return erc_from_grid(verdicts, criterion)
