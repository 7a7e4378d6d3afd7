"""What a π0 checkpoint directory holds and what the server will run for it.

:func:`describe_checkpoint` resolves a checkpoint exactly as the server does at
start-up (:func:`~xinfer_ros.model.pi0.preset.resolve_pi0` and the tokenizer; the
weights are not loaded) and returns a :class:`CheckpointReport`: layout, cameras in
request order, widths, normalisation per feature, the saved pipeline's steps, the
transforms of the request path in order, the tokenizer, chunk length, steps and dtype.
``xinfer-check-checkpoint`` prints it. A directory the server would refuse raises the
same :class:`~xinfer_ros.model.errors.CheckpointError`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from xinfer_ros.model.pi0.lerobot_pipeline import PipelineStep
from xinfer_ros.model.pi0.normalization import FeatureStats

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from xinfer_ros.model.pi0.preset import Pi0Spec

__all__ = [
    "CheckpointReport",
    "FeatureReport",
    "TokenizerReport",
    "build_report",
    "describe_checkpoint",
]

#: JSON values of :meth:`CheckpointReport.to_dict`.
JSONValue = str | int | float | bool | None | list["JSONValue"] | dict[str, "JSONValue"]


@dataclasses.dataclass(frozen=True)
class FeatureReport:
    """How one feature (state or actions) is normalised.

    Attributes:
        mode: ``mean_std``, ``min_max``, ``quantiles``, ``quantile10`` or ``identity``.
        convention: Whose formulas apply (``lerobot``, ``openpi``, ``transformers``).
        eps: That source's epsilon.
        width: Values per statistic (``None`` for identity).
    """

    mode: str
    convention: str
    eps: float
    width: int | None

    @classmethod
    def of(cls, stats: FeatureStats) -> FeatureReport:
        """The report of one feature's statistics."""
        return cls(stats.mode, stats.convention.name, stats.convention.eps, stats.dim)


@dataclasses.dataclass(frozen=True)
class TokenizerReport:
    """The prompt tokenizer.

    Attributes:
        source: Its directory, or ``offline`` (random weights).
        kind: Its class.
        size: ``len(tokenizer)``: base vocabulary and added tokens.
        largest_prompt_id: The largest id a prompt can hold (below ``embedding_rows``).
        embedding_rows: Rows of the model's token embedding.
        special_tokens: Special tokens by name and id (never parsed from instructions).
        newline: How the instruction gets its newline.
        prompt_tokens: Prompt length in tokens, padding included.
    """

    source: str
    kind: str
    size: int
    largest_prompt_id: int
    embedding_rows: int
    special_tokens: dict[str, int]
    newline: str
    prompt_tokens: int


@dataclasses.dataclass(frozen=True)
class CheckpointReport:
    """What was found in a checkpoint directory and what will run for it.

    Typed all the way down so later transforms (the openpi layouts' input and output
    transforms) join as fields of their own; :meth:`to_dict` serialises whatever is
    there.

    Attributes:
        directory: The checkpoint directory (``None``: random weights).
        preset: The preset it was resolved with.
        layout: ``transformers``, ``lerobot`` or ``random``.
        cameras: Camera names in request order.
        image_size: Square model input side in pixels.
        state_dim: The robot's state width.
        action_dim: The robot's action width.
        max_state_dim: Padded state width of the model.
        max_action_dim: Padded action width of the model.
        chunk_size: Keyframes per chunk H.
        num_steps: Denoising steps K.
        dtype: Parameter dtype.
        normalization_source: Where the statistics come from.
        state: Normalisation of the state.
        action: Normalisation of the actions.
        relative_mask: Per action dimension, whether it is predicted relative to the
            state (``None``: absolute actions).
        steps: The saved pipeline's steps and what runs for each (lerobot).
        transforms: The request path, in order, in words.
        tokenizer: The prompt tokenizer.
        unused_files: Entries of the directory the server does not use.
    """

    directory: str | None
    preset: str
    layout: str
    cameras: tuple[str, ...]
    image_size: int
    state_dim: int
    action_dim: int
    max_state_dim: int
    max_action_dim: int
    chunk_size: int
    num_steps: int
    dtype: str
    normalization_source: str
    state: FeatureReport
    action: FeatureReport
    relative_mask: tuple[bool, ...] | None
    steps: tuple[PipelineStep, ...]
    transforms: tuple[str, ...]
    tokenizer: TokenizerReport
    unused_files: tuple[str, ...]

    def to_dict(self) -> dict[str, JSONValue]:
        """The report as JSON-ready values (tuples become lists)."""
        return _json(dataclasses.asdict(self))  # type: ignore[return-value]

    def lines(self) -> list[str]:
        """The report as text, one fact per line."""
        out = [f"checkpoint: {self.directory or '(none: seeded random weights)'}",
               f"preset: {self.preset}", f"layout: {self.layout}",
               f"cameras (request order): {', '.join(self.cameras)} at "
               f"{self.image_size}x{self.image_size}",
               f"state: {self.state_dim} values (padded to {self.max_state_dim})",
               f"actions: {self.action_dim} values (model width {self.max_action_dim})",
               f"chunk: H={self.chunk_size}, K={self.num_steps} denoising steps, "
               f"dtype {self.dtype}",
               f"normalisation: {self.normalization_source}"]
        for name, feature in (("state", self.state), ("actions", self.action)):
            out.append(f"  {name}: {feature.mode} ({feature.convention} convention, eps "
                       f"{feature.eps:g}, width {feature.width})")
        if self.relative_mask is not None:
            out.append(f"relative actions on dimensions "
                       f"{[i for i, m in enumerate(self.relative_mask) if m]}")
        tok = self.tokenizer
        out.append(f"tokenizer: {tok.kind} from {tok.source}, {tok.size} tokens, prompt ids "
                   f"up to {tok.largest_prompt_id} of {tok.embedding_rows} embedded, "
                   f"specials {tok.special_tokens}")
        if self.steps:
            out.append("pipeline steps:")
            out.extend(f"  {s.file}[{s.index}] {s.name}: {s.runs}" for s in self.steps)
        out.append("request path:")
        out.extend(f"  {i + 1}. {t}" for i, t in enumerate(self.transforms))
        out.append(f"unused files: {', '.join(self.unused_files) or 'none'}")
        return out


def _json(value: object) -> JSONValue:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _normalise_words(stats: FeatureStats) -> str:
    if stats.mode == "identity":
        return "identity"
    return f"{stats.mode} ({stats.convention.name}, eps {stats.convention.eps:g})"


def _transforms(spec: Pi0Spec) -> tuple[str, ...]:
    newline = {"always": "a newline appended", "if_missing": "a newline appended unless "
               "present", "never": "no newline added"}[spec.newline]
    steps = [
        f"images: resized with padding to {spec.image_size}x{spec.image_size} "
        f"({spec.resample} resampling), scaled to [-1, 1]; missing cameras masked",
        f"prompt: <bos> + instruction ({newline}; special tokens as text), padded to "
        f"{spec.prompt_tokens} tokens",
        f"state: {_normalise_words(spec.normalizer.state)}, zero-padded to "
        f"{spec.max_state_dim}",
    ]
    if spec.relative is not None:
        steps.append("previous chunk (RTC): made relative to the current state on the joint "
                     "mask, then normalised")
    steps += [
        f"model: {spec.num_steps} flow-matching steps over a {spec.chunk_size}-keyframe chunk",
        f"actions: first {spec.action_dim} of {spec.max_action_dim} dimensions, "
        f"un-normalised ({_normalise_words(spec.normalizer.action)})",
    ]
    if spec.relative is not None:
        dims = [i for i, m in enumerate(spec.relative.mask) if m]
        steps.append(f"actions: raw state added back on dimensions {dims}")
    return tuple(steps)


def _tokenizer_report(spec: Pi0Spec, tokenizer: PreTrainedTokenizerBase) -> TokenizerReport:
    from xinfer_ros.model.pi0.tokenizer import prompt_ids

    specials = {str(t): int(i) for i, t in sorted(tokenizer.added_tokens_decoder.items())
                if t.special}
    return TokenizerReport(
        source=spec.tokenizer_path or "offline", kind=type(tokenizer).__name__,
        size=len(tokenizer), largest_prompt_id=max(prompt_ids(tokenizer)),
        embedding_rows=spec.vocab_size, special_tokens=specials, newline=spec.newline,
        prompt_tokens=spec.prompt_tokens)


def build_report(spec: Pi0Spec, tokenizer: PreTrainedTokenizerBase) -> CheckpointReport:
    """The report of a resolved spec and its loaded tokenizer."""
    return CheckpointReport(
        directory=spec.model_path, preset=spec.name, layout=spec.layout, cameras=spec.cameras,
        image_size=spec.image_size, state_dim=spec.state_dim, action_dim=spec.action_dim,
        max_state_dim=spec.max_state_dim, max_action_dim=spec.max_action_dim,
        chunk_size=spec.chunk_size, num_steps=spec.num_steps, dtype=spec.dtype,
        normalization_source=spec.normalizer.source,
        state=FeatureReport.of(spec.normalizer.state),
        action=FeatureReport.of(spec.normalizer.action),
        relative_mask=spec.relative.mask if spec.relative is not None else None,
        steps=spec.steps, transforms=_transforms(spec),
        tokenizer=_tokenizer_report(spec, tokenizer), unused_files=spec.unused_files)


def describe_checkpoint(directory: str | Path | None, preset: str | Path = "pi0"
                        ) -> CheckpointReport:
    """Resolve ``directory`` with ``preset`` as the server would, without the weights.

    Raises:
        CheckpointError: Whatever the server would refuse at start-up.
        FileNotFoundError: On an unknown preset.
        ValueError: On a malformed preset or one not of the π0 family.
    """
    from xinfer_ros.model.pi0.preset import Pi0Preset, resolve_pi0
    from xinfer_ros.model.pi0.tokenizer import load_tokenizer
    from xinfer_ros.model.presets import load_model_preset

    loaded = load_model_preset(preset)
    if not isinstance(loaded, Pi0Preset):
        raise ValueError(f"model preset {str(preset)!r} is not of the pi0 family")
    spec = resolve_pi0(loaded, directory)[1]
    return build_report(spec, load_tokenizer(spec.tokenizer_path, spec.vocab_size))
