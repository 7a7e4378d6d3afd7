"""Calibrated concurrency rate table ρ_s(n) and its versioned JSON file format (App. C.1).

ρ_s(n) is the dimensionless execution rate of a stage-``s`` unit while ``n = (n_V, n_P,
n_A)`` *other* units run next to it: ρ_s(0, 0, 0) = 1 is isolated execution, and a unit
with W_s of isolated work finishes in W_s / ρ_s(n) while the load stays at n. The table
is defined on the full grid ``0 <= n_k <= c_k`` of the calibrated bounds c; lookups
outside the grid are clipped to it (Eq. 8).

File format (``schema_version`` 1, times in milliseconds as in the paper)::

    {
      "schema": "xinfer_ros.rate_table",
      "schema_version": 1,
      "time_unit": "ms",
      "stages": ["V", "P", "A"],
      "work_ms": {"V": 4.328931, "P": 8.907749, "A": 12.116308},
      "overhead_ms": {"V": 2.1, "P": 0.25, "A": 1.1},
      "h_out_ms": 1.2,
      "bounds": {"V": 4, "P": 4, "A": 6},
      "provenance": "who/what produced the table",
      "assumptions": "what the rates assume",
      "model": {...},                      # optional: generator parameters
      "entries": [{"n": [0, 0, 0], "rho": [1.0, 1.0, 1.0]}, ...]
    }

``rho`` lists ρ_V, ρ_P, ρ_A for the vector ``n`` of other running units. The engine's
calibration writes this format with :func:`write_rate_table`; ``scripts/rate_table_generate.py``
regenerates the shipped default from :func:`interference_model_table`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from xinfer_ros.config_paths import config_dir
from xinfer_ros.core.batching import batch_sizes
from xinfer_ros.core.constants import (
    DEFAULT_BOUNDS,
    H_OUT,
    H_STAGE,
    RATE_TABLE_SCHEMA_VERSION,
    W_STAGE,
)
from xinfer_ros.core.errors import RateTableError
from xinfer_ros.core.stages import NUM_STAGES, STAGES

__all__ = [
    "DEFAULT_BATCH_BETA",
    "DEFAULT_BATCH_BOUNDS",
    "DEFAULT_BATCH_RATE_TABLE_PATH",
    "DEFAULT_INTERFERENCE",
    "DEFAULT_INTERFERENCE_SCALE",
    "DEFAULT_INTERFERENCE_SHAPE",
    "DEFAULT_RATE_TABLE_PATH",
    "SCHEMA_NAME",
    "BatchFactors",
    "RateTable",
    "Vec3",
    "batch_factors",
    "calibrated_max_batch",
    "default_rate_table",
    "interference_model_table",
    "load_rate_table",
    "resolve_rate_table",
    "validate_rate_table_file",
    "write_rate_table",
]

Vec3 = tuple[int, int, int]
SCHEMA_NAME = "xinfer_ros.rate_table"
#: The shipped table, at the repository root (``share/xinfer_ros/config`` when installed
#: with colcon; pass the path explicitly there).
DEFAULT_RATE_TABLE_PATH = config_dir() / "rate_table_default.json"
#: The shipped model with a batch dimension (``interference_model_table(max_batch=4)``):
#: what the simulator projects batching on the paper's GPU with. Not a measurement.
DEFAULT_BATCH_RATE_TABLE_PATH = config_dir() / "rate_table_default_batch4.json"

#: α[s][k]: how much one co-running unit of stage k slows a stage-s unit, in
#: ρ_s(n) = 1 / (1 + Σ_k α[s][k] · n_k). Chosen, not measured: see ``_ASSUMPTIONS``.
#: The matrix's *shape*: relative strengths, which stage slows which (see _ASSUMPTIONS).
DEFAULT_INTERFERENCE_SHAPE: tuple[tuple[float, float, float], ...] = (
    (0.30, 0.35, 0.20),  # ViT slowed by ViT, Prefill, Action
    (0.30, 0.40, 0.25),  # Prefill
    (0.15, 0.20, 0.30),  # Action
)
#: Common scale k of the shape: alpha = k * shape. Chosen with
#: ``scripts/sim_calibrate_alpha.py`` from the *baselines'* capacities only (FIFO and
#: EDF on the phases workload near the paper's 14 and 12 robots); see _ASSUMPTIONS.
DEFAULT_INTERFERENCE_SCALE: float = 1.4
DEFAULT_INTERFERENCE: tuple[tuple[float, float, float], ...] = tuple(
    (round(DEFAULT_INTERFERENCE_SCALE * a, 6), round(DEFAULT_INTERFERENCE_SCALE * b, 6),
     round(DEFAULT_INTERFERENCE_SCALE * c, 6))
    for a, b, c in DEFAULT_INTERFERENCE_SHAPE)

#: Bounds of the shipped batch table: slots (12, 12, 16) run as 3, 3, 4 lanes of up
#: to four units, about the streams of the unbatched default's 4, 4, 6 slots.
DEFAULT_BATCH_BOUNDS: tuple[int, int, int] = (11, 11, 15)
#: β_s: what each further member adds to a stage-s batch, as a fraction of one unit's
#: work, in the batch model of :func:`interference_model_table` (see _BATCH_ASSUMPTIONS).
#: ViT and Prefill are compute-bound, so stacking buys them what a concurrent stream
#: does (β = α_ss); Action's denoising steps are launch- and memory-bound at batch one.
DEFAULT_BATCH_BETA: tuple[float, float, float] = (
    DEFAULT_INTERFERENCE[0][0], DEFAULT_INTERFERENCE[1][1], 0.1)

_ASSUMPTIONS = (
    "Synthetic interference model, not a GPU measurement: rho_s(n) = 1 / (1 + sum_k "
    "alpha[s][k] * n_k), where n counts the OTHER units running concurrently (the unit's "
    "own count removed) and alpha is given in 'model'. (1) Isolated execution has rate 1, "
    "so a unit alone takes h_s + W_s. (2) Batch-size-one units leave most of the GPU idle, "
    "so co-running units slow each other only partly: every co-running unit slows every "
    "stage by alpha 0.15-0.40 of its isolated rate. ViT and Prefill (compute-bound, one "
    "process, CUDA streams) interfere most with each other and themselves (0.30-0.40); "
    "Action (memory-bound denoising in its own MPS process) is slowed least by vision and "
    "prefix work (0.15-0.20) and slows them by 0.20-0.25. (3) Running k identical units "
    "together raises aggregate throughput sublinearly, k / (1 + alpha_ss (k - 1)): for "
    "Action (alpha 0.30) six concurrent trajectories give 2.4x the throughput of one, for "
    "Prefill (0.40) four give 1.8x. (4) Rates are monotone non-increasing in every count. "
    "(5) Beyond the bounds c the rate is taken at the bound (Eq. 8 clipping). (6) How "
    "alpha was chosen: the shape (which stage slows which, relative strengths) is the "
    "judgement in (2); one common scale k multiplies it (alpha = k * shape, shape in "
    "'model'). k = 1.4 was chosen with scripts/sim_calibrate_alpha.py so that the "
    "*baselines'* capacities on the simulator's phases workload land near the paper's "
    "(Table 3: FIFO 14, EDF 12 robots): k in {1.4, 1.5, 1.6, 2.2} gave FIFO 14/13/13/10 and "
    "EDF 14/13/13/10 (1 round x 120 s); 1.4 is the value that reproduces FIFO's 14 (3 x "
    "210 s: FIFO 14, EDF 14). EDF cannot be moved below FIFO by alpha alone (its gap in "
    "the paper comes from its tuned per-stage limits, which are not published). XInfer "
    "was never run to choose k. k = 1 (the previous table) gave FIFO 19, far above the "
    "paper. With k = 1.4, every co-running unit slows a stage by 0.21-0.56 of its "
    "isolated rate; the figures in (2) and (3) are for the shape (k = 1). Not fitted "
    "to any GPU measurement. W_s, h_s and h_out "
    "are the paper's frozen calibration (App. C.1, including the common work factor "
    "1.02). Replace this file with the engine's calibration (same format) for real "
    "deployments."
)


_BATCH_ASSUMPTIONS = (
    " Batch dimension (model.settings.max_batch = N; a synthetic batch-cost model, not a "
    "measurement): the n_s + 1 stage-s units, the unit's own included, run as the even "
    "split into ceil((n_s + 1) / N) batches that the engine's calibration uses, the unit "
    "in the largest, of k members; a batch of m members costs g_s(m) = 1 + beta_s (m - 1) "
    "times one unit's work (beta in model.batch_cost); co-running batches interfere in "
    "proportion to their work, so n_j in the interference sum becomes the sum of g_j over "
    "stage j's batches (its n_j units split the same way; the unit's own batch excluded): "
    "rho_s(n) = 1 / (g_s(k) (1 + sum_j alpha[s][j] w_j)). With N = 1 this is the table "
    "above. beta: ViT and Prefill are compute-bound at the paper's token counts, so "
    "stacking m units buys them what m concurrent streams do (beta_s = alpha_ss); "
    "Action is a 10-step denoising loop over about 50 action tokens, at W_A = 12.1 ms "
    "about 1.2 ms a step, far above the arithmetic of one step, i.e. bound by kernel "
    "launches and weight reads, so a further member adds little (beta_A = 0.1). Unlike "
    "(4), a stage's own rate may rise by a step where one more unit splits its batch "
    "(five units run as 3 + 2, so the unit's own batch shrinks), as in a calibrated "
    "batch table. Replace with xinfer-calibrate --max-batch N on the serving GPU."
)


def _grid(bounds: Vec3) -> list[Vec3]:
    return [(v, p, a) for v in range(bounds[0] + 1) for p in range(bounds[1] + 1)
            for a in range(bounds[2] + 1)]


@dataclass(frozen=True)
class RateTable:
    """An immutable, validated rate table (times in seconds).

    Attributes:
        work: W_s, isolated stage work (s), per stage.
        overhead: h_s, stage-issue overhead (s), per stage.
        h_out: output processing after Action (s).
        bounds: calibrated lookup bounds c = (c_V, c_P, c_A).
        rates: ρ for every vector on the grid ``0..c``: ``rates[(nV, nP, nA)] = (ρV, ρP, ρA)``.
        provenance: who or what produced the numbers.
        assumptions: what the numbers assume.
        model: optional generator parameters, stored verbatim.
        schema_version: file schema version.
    """

    work: tuple[float, float, float]
    overhead: tuple[float, float, float]
    h_out: float
    bounds: Vec3
    rates: Mapping[Vec3, tuple[float, float, float]]
    provenance: str = ""
    assumptions: str = ""
    model: Mapping[str, object] = field(default_factory=dict)
    schema_version: int = RATE_TABLE_SCHEMA_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "work", _vec_f("work W_s", self.work, positive=True))
        object.__setattr__(self, "overhead", _vec_f("overhead h_s", self.overhead))
        h_out = self.h_out
        if isinstance(h_out, bool) or not isinstance(h_out, (int, float)) or \
                not math.isfinite(h_out) or h_out < 0:
            raise RateTableError(f"h_out must be a finite number >= 0, got {h_out!r}")
        object.__setattr__(self, "h_out", float(h_out))
        bounds = self.bounds
        if len(bounds) != NUM_STAGES or any(isinstance(b, bool) or not isinstance(b, int)
                                            or b < 0 for b in bounds):
            raise RateTableError(f"bounds must be three integers >= 0, got {bounds!r}")
        object.__setattr__(self, "bounds", tuple(bounds))
        if self.schema_version != RATE_TABLE_SCHEMA_VERSION:
            raise RateTableError(f"unsupported rate-table schema_version {self.schema_version!r}; "
                                 f"this code reads {RATE_TABLE_SCHEMA_VERSION}")
        clean: dict[Vec3, tuple[float, float, float]] = {}
        for n, rho in self.rates.items():
            key = tuple(n)
            if len(key) != NUM_STAGES or any(isinstance(x, bool) or not isinstance(x, int)
                                             for x in key):
                raise RateTableError(f"rate-table key must be (n_V, n_P, n_A) ints, got {n!r}")
            if any(k < 0 or k > c for k, c in zip(key, bounds, strict=True)):
                raise RateTableError(f"rate-table entry {key} lies outside the bounds {bounds}")
            clean[key] = _vec_f(f"rate at n={key}", rho, positive=True)  # type: ignore[index]
        missing = [n for n in _grid(self.bounds) if n not in clean]
        if missing:
            shown = ", ".join(str(n) for n in missing[:5])
            raise RateTableError(f"rate table is missing {len(missing)} of "
                                 f"{len(clean) + len(missing)} grid entries within bounds "
                                 f"{self.bounds}, e.g. {shown}")
        object.__setattr__(self, "rates", clean)

    @property
    def isolated_request_s(self) -> float:
        """Latency of one request alone on the device (s).

        Every stage's work and issue overhead, then output processing.
        """
        return sum(self.work) + sum(self.overhead) + self.h_out

    def with_work_scaled(self, factors: Sequence[float], why: str) -> RateTable:
        """The same table with each stage's work W_s scaled to ``k_s · W_s``.

        What the predictor does with an online rate correction's factors (the
        interference pattern ρ_s(n) is kept), as a table: the simulator can then run
        what the engine learned. ``why`` is added to the provenance.
        """
        k = _vec_f("work factors", factors, positive=True)
        work = (self.work[0] * k[0], self.work[1] * k[1], self.work[2] * k[2])
        note = f"work scaled by ({k[0]:.3g}, {k[1]:.3g}, {k[2]:.3g}): {why}"
        return replace(self, work=work,
                       provenance=f"{self.provenance}; {note}" if self.provenance else note)

    def rate(self, stage: int, n: Sequence[int]) -> float:
        """ρ_s(n̄) with n̄ clipped to the bounds (negative counts clip to 0)."""
        c = self.bounds
        key = (min(max(n[0], 0), c[0]), min(max(n[1], 0), c[1]), min(max(n[2], 0), c[2]))
        return self.rates[key][stage]

    # -- constructors -----------------------------------------------------------------
    @classmethod
    def from_function(
        cls,
        fn: Callable[[int, Vec3], float],
        *,
        work: Sequence[float] = W_STAGE,
        overhead: Sequence[float] = H_STAGE,
        h_out: float = H_OUT,
        bounds: Sequence[int] = DEFAULT_BOUNDS,
        provenance: str = "",
        assumptions: str = "",
        model: Mapping[str, object] | None = None,
    ) -> RateTable:
        """Tabulate ``fn(stage, n) -> ρ`` over the full grid of ``bounds``."""
        b = tuple(int(x) for x in bounds)
        rates = {n: (fn(0, n), fn(1, n), fn(2, n)) for n in _grid(b)}  # type: ignore[arg-type]
        return cls(tuple(work), tuple(overhead), h_out, b, rates,  # type: ignore[arg-type]
                   provenance, assumptions, dict(model or {}))

    @classmethod
    def isolated(cls, like: RateTable) -> RateTable:
        """Same W, h, bounds as ``like`` but ρ ≡ 1: the "no interference modelling" ablation."""
        return cls.from_function(lambda s, n: 1.0, work=like.work, overhead=like.overhead,
                                 h_out=like.h_out, bounds=like.bounds,
                                 provenance=f"isolated copy of: {like.provenance}",
                                 assumptions="rho = 1 everywhere (isolated stage durations)")

    # -- (de)serialisation --------------------------------------------------------------
    def to_json_dict(self) -> dict[str, Any]:
        """The file representation (milliseconds)."""
        def ms(v: Sequence[float]) -> dict[str, float]:
            return {s.short: round(x * 1e3, 9) for s, x in zip(STAGES, v, strict=True)}
        return {
            "schema": SCHEMA_NAME,
            "schema_version": self.schema_version,
            "time_unit": "ms",
            "stages": [s.short for s in STAGES],
            "work_ms": ms(self.work),
            "overhead_ms": ms(self.overhead),
            "h_out_ms": round(self.h_out * 1e3, 9),
            "bounds": {s.short: c for s, c in zip(STAGES, self.bounds, strict=True)},
            "provenance": self.provenance,
            "assumptions": self.assumptions,
            "model": dict(self.model),
            "entries": [{"n": list(n), "rho": [round(r, 9) for r in self.rates[n]]}
                        for n in _grid(self.bounds)],
        }

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> RateTable:
        """Parse and validate the file representation.

        Raises:
            RateTableError: naming ``source`` and the offending key or value.
        """
        if not isinstance(data, Mapping):
            raise RateTableError(f"{source}: rate table must be a JSON object")
        if data.get("schema") != SCHEMA_NAME:
            raise RateTableError(f"{source}: 'schema' must be {SCHEMA_NAME!r}, "
                                 f"got {data.get('schema')!r}")
        if data.get("time_unit", "ms") != "ms":
            raise RateTableError(f"{source}: only time_unit 'ms' is supported, "
                                 f"got {data.get('time_unit')!r}")
        for key in ("schema_version", "work_ms", "overhead_ms", "h_out_ms", "bounds", "entries"):
            if key not in data:
                raise RateTableError(f"{source}: missing key {key!r}")

        def per_stage(key: str) -> list[Any]:
            obj = data[key]
            if not isinstance(obj, Mapping):
                raise RateTableError(f"{source}: {key!r} must map V/P/A to values, got {obj!r}")
            absent = [s.short for s in STAGES if s.short not in obj]
            if absent:
                raise RateTableError(f"{source}: {key!r} lacks stage(s) {absent}: {obj!r}")
            return [obj[s.short] for s in STAGES]

        def to_s(key: str) -> tuple[float, ...]:
            vals = per_stage(key)
            for s, v in zip(STAGES, vals, strict=True):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                        not math.isfinite(v) or v < 0:
                    raise RateTableError(f"{source}: {key}[{s.short}] must be a finite "
                                         f"number >= 0, got {v!r}")
            return tuple(float(v) * 1e-3 for v in vals)

        rates = _parse_entries(data["entries"], source)
        try:
            return cls(
                work=to_s("work_ms"),  # type: ignore[arg-type]
                overhead=to_s("overhead_ms"),  # type: ignore[arg-type]
                h_out=_ms_scalar(data["h_out_ms"], "h_out_ms", source),
                bounds=tuple(per_stage("bounds")),
                rates=rates,
                provenance=str(data.get("provenance", "")),
                assumptions=str(data.get("assumptions", "")),
                model=dict(data.get("model") or {}),
                schema_version=data["schema_version"],
            )
        except RateTableError as exc:
            raise RateTableError(f"{source}: {exc}") from None


def _parse_entries(entries: object, source: str) -> dict[Vec3, tuple[float, float, float]]:
    """Parse the file's ``entries`` list into ``{n: (ρ_V, ρ_P, ρ_A)}``.

    Raises:
        RateTableError: naming ``source`` and the offending entry.
    """
    if not isinstance(entries, list):
        raise RateTableError(f"{source}: 'entries' must be a list")
    rates: dict[Vec3, tuple[float, float, float]] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, Mapping) or "n" not in e or "rho" not in e:
            raise RateTableError(f"{source}: entries[{i}] needs 'n' and 'rho', got {e!r}")
        n, rho = e["n"], e["rho"]
        if not isinstance(n, list) or len(n) != NUM_STAGES or \
                not isinstance(rho, list) or len(rho) != NUM_STAGES:
            raise RateTableError(f"{source}: entries[{i}] must have 3 counts and 3 rates, "
                                 f"got {e!r}")
        vec = cast(Vec3, tuple(n))  # ints are checked by RateTable itself
        if vec in rates:
            raise RateTableError(f"{source}: duplicate entry for n={n}")
        for s, r in zip(STAGES, rho, strict=True):
            if isinstance(r, bool) or not isinstance(r, (int, float)) or \
                    not math.isfinite(r) or r <= 0:
                raise RateTableError(f"{source}: entries[{i}] (n={n}) has rate "
                                     f"rho_{s.short}={r!r}; rates must be finite and > 0")
        rates[vec] = (float(rho[0]), float(rho[1]), float(rho[2]))
    return rates


def _ms_scalar(v: object, key: str, source: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise RateTableError(f"{source}: {key} must be a finite number >= 0, got {v!r}")
    return float(v) * 1e-3


def _vec_f(name: str, v: Sequence[float], *, positive: bool = False) -> tuple[float, float, float]:
    if len(v) != NUM_STAGES:
        raise RateTableError(f"{name} needs one value per stage (V, P, A), got {v!r}")
    out = []
    for s, x in zip(STAGES, v, strict=True):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) \
                or x < 0 or (positive and x == 0):
            need = "> 0" if positive else ">= 0"
            raise RateTableError(f"{name}[{s.short}] must be finite and {need}, got {x!r}")
        out.append(float(x))
    return (out[0], out[1], out[2])


#: f_s(k) per stage: ``factors[s][k - 1]`` is a batch of k over one unit, alone.
BatchFactors = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]


def calibrated_max_batch(table: RateTable) -> int:
    """``model.settings.max_batch`` of the table; 1 when absent.

    Raises:
        RateTableError: when the field is present but not an integer >= 1.
    """
    settings = table.model.get("settings") if isinstance(table.model, Mapping) else None
    if not isinstance(settings, Mapping) or "max_batch" not in settings:
        return 1
    value = settings["max_batch"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RateTableError(f"rate table model.settings.max_batch must be an integer >= 1, "
                             f"got {value!r}")
    return value


def batch_factors(table: RateTable) -> BatchFactors | None:
    """``model.settings.batch_factors`` as f_s(1..N) per stage; None when absent.

    Raises:
        RateTableError: factors that are not, for every stage, N = ``max_batch``
            finite numbers > 0 starting at 1.
    """
    settings = table.model.get("settings") if isinstance(table.model, Mapping) else None
    if not isinstance(settings, Mapping) or "batch_factors" not in settings:
        return None
    raw = settings["batch_factors"]
    n = calibrated_max_batch(table)
    if not isinstance(raw, Mapping) or sorted(raw) != sorted(s.short for s in STAGES):
        raise RateTableError("rate table model.settings.batch_factors must map V, P and A "
                             f"to lists of factors, got {raw!r}")
    out: list[tuple[float, ...]] = []
    for stage in STAGES:
        values = raw[stage.short]
        if (not isinstance(values, list) or len(values) != n
                or any(isinstance(v, bool) or not isinstance(v, (int, float))
                       or not math.isfinite(v) or v <= 0 for v in values)
                or values[0] != 1):
            raise RateTableError(
                f"rate table model.settings.batch_factors[{stage.short}] must be "
                f"max_batch = {n} finite factors > 0 starting at 1, got {values!r}")
        out.append(tuple(float(v) for v in values))
    return (out[0], out[1], out[2])


def load_rate_table(path: str | Path) -> RateTable:
    """Read and validate a rate-table JSON file.

    Raises:
        RateTableError: the file is unreadable, not JSON, or fails validation.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RateTableError(f"cannot read rate table {p}: {exc}") from None
    table = RateTable.from_json_dict(data, source=str(p))
    # Batch factors are checked when the table is read, whichever policy reads it.
    try:
        batch_factors(table)
    except RateTableError as exc:
        raise RateTableError(f"{p}: {exc}") from None
    return table


def write_rate_table(table: RateTable, path: str | Path) -> Path:
    """Write ``table`` as JSON (validated by construction) and read it back to check."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(_dumps(table.to_json_dict()), encoding="utf-8")
    load_rate_table(p)
    return p


def _dumps(data: Mapping[str, Any]) -> str:
    # One top-level key per line and one grid entry per line: diffable, still JSON.
    lines = []
    for key, value in data.items():
        if key == "entries":
            body = ",\n".join(f"  {json.dumps(e)}" for e in value)
            lines.append(f' "entries": [\n{body}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def validate_rate_table_file(path: str | Path) -> list[str]:
    """Return a list of problems with the file at ``path`` (empty when it is valid)."""
    try:
        load_rate_table(path)
    except RateTableError as exc:
        return [str(exc)]
    return []


def interference_model_table(
    alpha: Sequence[Sequence[float]] = DEFAULT_INTERFERENCE,
    *,
    bounds: Sequence[int] = DEFAULT_BOUNDS,
    work: Sequence[float] = W_STAGE,
    overhead: Sequence[float] = H_STAGE,
    h_out: float = H_OUT,
    max_batch: int = 1,
    batch_beta: Sequence[float] = DEFAULT_BATCH_BETA,
) -> RateTable:
    """The shipped default: ρ_s(n) = 1 / (1 + Σ_k α[s][k] n_k) with the paper's W, h.

    With ``max_batch`` N > 1, the same model with a batch dimension (``_BATCH_ASSUMPTIONS``):
    the table :mod:`~xinfer_ros.core.batch_cost` reads batches of up to N from, as if
    calibrated with ``xinfer-calibrate --max-batch N``. Deterministic, so
    ``scripts/rate_table_generate.py`` reproduces the shipped files.

    Raises:
        RateTableError: ``alpha`` not a 3x3 matrix of values >= 0, ``max_batch`` below
            one, or ``batch_beta`` not three values in [0, 1].
    """
    a = [tuple(float(x) for x in row) for row in alpha]
    if len(a) != NUM_STAGES or any(len(row) != NUM_STAGES or min(row) < 0 for row in a):
        raise RateTableError(f"alpha must be a 3x3 matrix of values >= 0, got {alpha!r}")
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise RateTableError(f"max_batch must be an integer >= 1, got {max_batch!r}")
    beta = tuple(float(x) for x in batch_beta)
    if len(beta) != NUM_STAGES or not all(0.0 <= x <= 1.0 for x in beta):
        raise RateTableError(f"batch_beta must be three values in [0, 1], got {batch_beta!r}")

    def work_of(j: int, sizes: Sequence[int]) -> float:
        # Σ g_j(m) over stage-j batches of these sizes, in units of one unit's work.
        return sum(1.0 + beta[j] * (m - 1) for m in sizes)

    def rho(s: int, n: Vec3) -> float:
        if max_batch == 1:
            return 1.0 / (1.0 + a[s][0] * n[0] + a[s][1] * n[1] + a[s][2] * n[2])
        own, *others = batch_sizes(n[s] + 1, max_batch)
        w = [work_of(j, others if j == s else batch_sizes(n[j], max_batch))
             for j in range(NUM_STAGES)]
        return 1.0 / (work_of(s, (own,)) *
                      (1.0 + a[s][0] * w[0] + a[s][1] * w[1] + a[s][2] * w[2]))

    model: dict[str, object] = {"form": "rho_s(n) = 1 / (1 + sum_k alpha[s][k] * n_k)",
                                "alpha_rows_stage_cols_V_P_A": [list(row) for row in a]}
    assumptions, provenance = _ASSUMPTIONS, (
        "xinfer_ros.core.rate_table.interference_model_table() with the paper's frozen W_s, "
        "h_s, h_out (App. C.1); regenerate with scripts/rate_table_generate.py")
    if max_batch > 1:
        model["form"] = "rho_s(n) = 1 / (g_s(k) * (1 + sum_j alpha[s][j] * w_j))"
        model["batch_cost"] = {"form": "g_s(m) = 1 + beta_s (m - 1)", "beta_V_P_A": list(beta)}
        model["settings"] = {"max_batch": max_batch}
        assumptions += _BATCH_ASSUMPTIONS
        provenance = provenance.replace("interference_model_table()",
                                        f"interference_model_table(max_batch={max_batch})")
    return RateTable.from_function(
        rho, work=work, overhead=overhead, h_out=h_out, bounds=bounds,
        provenance=provenance, assumptions=assumptions, model=model)


def resolve_rate_table(path: str | Path | None = None) -> RateTable:
    """Return the table a driver was given, or the shipped one when given none.

    The one place where a ``--rate-table``/``rate_table`` option becomes a table;
    ``None`` or an empty path (an unset option or ROS parameter) is the shipped table.
    That is regenerated when its file is not installed (``pip install`` without the
    repository's ``config/``); both give the same numbers.

    Raises:
        RateTableError: When the given file is missing or malformed.
    """
    if path is None or str(path) == "":
        if not DEFAULT_RATE_TABLE_PATH.exists():
            return interference_model_table()
        p = DEFAULT_RATE_TABLE_PATH
    else:
        p = Path(path)
        if not p.is_file():
            raise RateTableError(f"rate table {p} does not exist")
    # Tables are immutable, so every policy built in a process can share one parse;
    # the modification time keys the cache so a rewritten file is read again.
    key = (str(p.resolve()), p.stat().st_mtime_ns)
    table = _TABLE_CACHE.get(key)
    if table is None:
        table = load_rate_table(p)
        if len(_TABLE_CACHE) >= _TABLE_CACHE_SIZE:
            _TABLE_CACHE.pop(next(iter(_TABLE_CACHE)))
        _TABLE_CACHE[key] = table
    return table


def default_rate_table() -> RateTable:
    """Return the shipped table (see :func:`resolve_rate_table`)."""
    return resolve_rate_table(None)


#: Distinct tables a process keeps parsed (a sweep over a few tables stays cached).
_TABLE_CACHE_SIZE = 8
_TABLE_CACHE: dict[tuple[str, int], RateTable] = {}
