"""The π0 prompt tokenizer: the checkpoint's own (PaliGemma's), or an offline stand-in.

A π0 checkpoint is trained with PaliGemma's SentencePiece tokenizer. lerobot does not
ship it inside its checkpoints (it names ``google/paligemma-3b-pt-224``), so a
deployment puts ``tokenizer.json`` or ``tokenizer.model`` (with its
``tokenizer_config.json``) next to the weights or in ``tokenizer_path``; it is loaded
with ``AutoTokenizer`` and never downloaded.

Random-weight presets have no trained vocabulary to be faithful to; they use
:func:`offline_tokenizer`, a byte-level tokenizer built here with the ``tokenizers``
library (one token per UTF-8 byte, PaliGemma's special ids ``<pad>`` 0, ``<eos>`` 1,
``<bos>`` 2, ``<unk>`` 3). Tests save it into the checkpoints they write.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from xinfer_ros.model.errors import CheckpointError, InputError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["TOKENIZER_FILES", "encode_prompt", "load_tokenizer", "offline_tokenizer"]

#: Files of which one makes a directory a tokenizer directory.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")


def offline_tokenizer() -> PreTrainedTokenizerBase:
    """A byte-level tokenizer with PaliGemma's special-token ids (built, never fetched)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(_SPECIALS)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    pad, eos, bos, unk = _SPECIALS
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=bos, eos_token=eos,
                                   pad_token=pad, unk_token=unk)


def load_tokenizer(directory: str | Path | None, vocab_size: int) -> PreTrainedTokenizerBase:
    """The tokenizer in ``directory``, or the offline one when ``directory`` is None.

    Args:
        directory: Tokenizer directory (a checkpoint's, or ``tokenizer_path``).
        vocab_size: Rows of the model's embedding; every token id must be below it.

    Raises:
        CheckpointError: When the directory has no tokenizer, it does not load, it has
            no BOS token, or its vocabulary does not fit the model.
    """
    if directory is None:
        tokenizer = offline_tokenizer()
        where = "offline tokenizer"
    else:
        root = Path(directory)
        if not any((root / name).is_file() for name in TOKENIZER_FILES):
            raise CheckpointError(root, f"no tokenizer ({' or '.join(TOKENIZER_FILES)}); "
                                        "put PaliGemma's tokenizer there or set tokenizer_path")
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
        except (OSError, ValueError, TypeError) as exc:
            raise CheckpointError(root, f"tokenizer does not load: {exc}") from exc
        where = str(root)
    if tokenizer.bos_token_id is None:
        raise CheckpointError(where, "tokenizer has no BOS token (π0 prompts start with one)")
    if len(tokenizer) > vocab_size:
        raise CheckpointError(where, f"tokenizer has {len(tokenizer)} tokens but the model "
                                     f"embeds {vocab_size}")
    return tokenizer


def encode_prompt(tokenizer: PreTrainedTokenizerBase, instruction: str,
                  length: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask of π0's prompt (BOS, instruction, newline), padded.

    Args:
        tokenizer: The model's tokenizer.
        instruction: The task instruction.
        length: Prompt length in tokens (the pad tokens are masked out).

    Returns:
        ``(ids, mask)``, int64 arrays of shape ``(length,)``.

    Raises:
        InputError: When the instruction is not a string or its tokens do not fit.
    """
    if not isinstance(instruction, str):
        raise InputError("instruction", f"expected str, got {type(instruction).__name__}")
    body = tokenizer(instruction + "\n", add_special_tokens=False)["input_ids"]
    used = 1 + len(body)
    if used > length:
        raise InputError("instruction", f"{used} tokens with BOS exceed the model's prompt "
                                        f"length {length}")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = np.full(length, pad, dtype=np.int64)
    ids[0] = tokenizer.bos_token_id
    ids[1:used] = body
    mask = np.zeros(length, dtype=np.int64)
    mask[:used] = 1
    return ids, mask
