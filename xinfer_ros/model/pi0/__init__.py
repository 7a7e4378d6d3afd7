"""transformers' π0 (``PI0ForConditionalGeneration``) served through the stage engine.

Public API::

    from xinfer_ros.model.loading import load_stage_model

    model = load_stage_model("pi0-tiny")                       # seeded random weights
    model = load_stage_model("pi0", model_path="/ckpt/pi0")   # a real checkpoint
    state = model.prepare(images, "pick up the cup", joints, seed=7)   # CPU
    model.vit(state); model.prefill(state); model.action(state)        # device
    chunk = model.finish(state)                                        # (H, D), robot units

Modules: :mod:`.family` (the family's entry in the preset registry), :mod:`.preset`
(presets, checkpoint directories, the resolved spec),
:mod:`.normalization` (statistics and each source's convention), :mod:`.lerobot_pipeline`
(lerobot's saved pre/post-processor pipelines), :mod:`.relative` (relative actions),
:mod:`.tokenizer`, :mod:`.processing` (CPU preparation and output), :mod:`.report`
(what a checkpoint holds and what runs, ``xinfer-check-checkpoint``),
:mod:`.checkpoint` (weights in, checkpoints out),
:mod:`.stages` (ViT / Prefill / Action with RTC) and :mod:`.parity` (the check against
``sample_actions``). Only :mod:`.checkpoint`, :mod:`.stages` and :mod:`.parity` import
torch at module level.
"""

__all__ = ["FAMILY"]

#: The ``family`` key of a π0 preset.
FAMILY = "pi0"
