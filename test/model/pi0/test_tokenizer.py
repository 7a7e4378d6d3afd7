"""Tokenizers as they ship: PaliGemma's layout at its real size, special tokens as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xinfer_ros.model.errors import CheckpointError
from xinfer_ros.model.pi0.tokenizer import check_prompt_ids, encode_prompt, load_tokenizer

#: PaliGemma's SentencePiece vocabulary: what PI0Config's text model embeds.
PALIGEMMA_VOCAB = 257_152


def paligemma_like(directory: Path, base: int, added: tuple[str, ...] = ()) -> Path:
    """A tokenizer of PaliGemma's structure: ``base`` pieces, then ``<image>`` added.

    The base vocabulary is PaliGemma's specials (``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2,
    ``<unk>`` 3), one piece per byte and filler pieces up to ``base``; ``<image>`` is a
    special token at id ``base``, and ``added`` are plain (non-special) added tokens
    after it.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AddedToken, PreTrainedTokenizerFast

    specials = ("<pad>", "<eos>", "<bos>", "<unk>")
    vocab = {token: index for index, token in enumerate(specials)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
    vocab.update((f"<piece{i}>", i) for i in range(len(vocab), base))
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                  bos_token="<bos>", unk_token="<unk>")
    tok.add_special_tokens({"additional_special_tokens": [
        AddedToken("<image>", normalized=False, special=True)]})
    if added:
        tok.add_tokens(list(added))
    tok.save_pretrained(str(directory))
    return directory


def test_paligemma_layout_at_the_real_size_loads_and_never_emits_image(tmp_path: Path) -> None:
    folder = paligemma_like(tmp_path / "paligemma", PALIGEMMA_VOCAB)
    tok = load_tokenizer(folder, PALIGEMMA_VOCAB)
    assert len(tok) == PALIGEMMA_VOCAB + 1
    assert tok.convert_tokens_to_ids("<image>") == PALIGEMMA_VOCAB
    text = "put the <image> card in the <bos> box"
    ids, mask = encode_prompt(tok, text, 64)
    used = int(mask.sum())
    assert ids[0] == tok.bos_token_id and ids[1:used].max() < PALIGEMMA_VOCAB
    assert PALIGEMMA_VOCAB not in ids and tok.bos_token_id not in ids[1:used]
    assert tok.decode(ids[1:used]) == text + "\n"  # spelled out, character by character
    # One row fewer and the base vocabulary's last piece no longer fits.
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: vocab: .*id 257151"):
        check_prompt_ids(tok, PALIGEMMA_VOCAB - 1, folder / "tokenizer.json")


def test_the_300_piece_tokenizer_with_image_added_starts_the_server(
        unseen_model: Any, tmp_path: Path) -> None:
    from xinfer_ros.model.loading import load_stage_model
    from xinfer_ros.model.pi0.checkpoint import save_checkpoint

    from .conftest import robot_preset, write_stats

    ckpt = save_checkpoint(unseen_model, tmp_path / "ckpt")
    paligemma_like(ckpt, 300)  # the model embeds 300 (UNSEEN_CONFIG)
    write_stats(ckpt, "openpi")
    served = load_stage_model(str(robot_preset(tmp_path)), model_path=ckpt)
    assert len(served.processor.tokenizer) == 301
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)] * 2
    state = served.prepare(images, "stack <image> blocks", np.zeros(7), seed=1)
    prompt = state.prepared.input_ids[-64:]
    assert served.spec.image_token_id not in prompt  # only the visual tokens carry it
    visual = int((state.prepared.input_ids == served.spec.image_token_id).sum())
    assert visual == 2 * served.spec.tokens_per_image


def test_plain_added_tokens_beyond_the_embedding_are_refused(tmp_path: Path) -> None:
    # PI0Processor adds <loc....> tokens; PaliGemma has them in its base vocabulary,
    # a smaller tokenizer after it, where an instruction could spell one.
    folder = paligemma_like(tmp_path / "tok", 300, added=("<loc0000>",))
    with pytest.raises(CheckpointError) as info:
        load_tokenizer(folder, 300)
    message = str(info.value)
    assert message.startswith(f"{folder / 'tokenizer.json'}: vocab: token '<loc0000>' (id 301)")
    assert "\n" not in message
