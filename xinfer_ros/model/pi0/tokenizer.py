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

Instructions are text: special tokens spelled in them are tokenized as characters
(``split_special_tokens``), so ``"<image>"`` in an instruction never becomes the
image placeholder that ``embed_prefix`` would fill with a camera's features.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from xinfer_ros.model.errors import CheckpointError, InputError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "NEWLINE_RULES",
    "TOKENIZER_FILES",
    "check_prompt_ids",
    "encode_prompt",
    "load_tokenizer",
    "offline_tokenizer",
    "prompt_ids",
]

#: Files of which one makes a directory a tokenizer directory.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")
#: How an instruction gets its closing newline: always (transformers' ``PI0Processor``),
#: only when missing (lerobot's ``pi0_new_line_processor``) or never.
NEWLINE_RULES: tuple[str, ...] = ("always", "if_missing", "never")


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
    # transformers leaves the fast tokenizer's constructor unannotated.
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core, bos_token=bos, eos_token=eos, pad_token=pad, unk_token=unk)


def _tokenizer_file(root: Path) -> Path:
    return next((root / name for name in TOKENIZER_FILES if (root / name).is_file()), root)


def prompt_ids(tokenizer: PreTrainedTokenizerBase) -> dict[int, str]:
    """Every id a prompt can hold, with its token: what :func:`encode_prompt` can emit.

    The base vocabulary and added tokens that are not special (an instruction may
    spell them), plus BOS and the pad token; special added tokens (PaliGemma's
    ``<image>``) are never parsed from an instruction, so they need no embedding row.
    """
    special = {index for index, token in tokenizer.added_tokens_decoder.items()
               if token.special}
    ids = {index: token for token, index in tokenizer.get_vocab().items()
           if index not in special}
    for name in ("bos_token", "pad_token"):
        index = getattr(tokenizer, f"{name}_id")
        if index is not None:
            ids[int(index)] = str(getattr(tokenizer, name))
    return ids


def check_prompt_ids(tokenizer: PreTrainedTokenizerBase, vocab_size: int, where: object) -> int:
    """Refuse a tokenizer whose prompts could hold an id outside the model's embedding.

    Returns:
        The largest id a prompt can hold.

    Raises:
        CheckpointError: Naming ``where``, the id and its token.
    """
    ids = prompt_ids(tokenizer)
    largest = max(ids)
    if largest >= vocab_size:
        raise CheckpointError(where, f"vocab: token {ids[largest]!r} (id {largest}) can appear "
                                     f"in a prompt but the model embeds ids 0..{vocab_size - 1}")
    return largest


def load_tokenizer(directory: str | Path | None, vocab_size: int) -> PreTrainedTokenizerBase:
    """The tokenizer in ``directory``, or the offline one when ``directory`` is None.

    PaliGemma's tokenizer ships as its SentencePiece vocabulary (as many pieces as the
    model embeds) plus ``<image>`` added after it; only the ids a prompt can hold must
    fit the embedding (:func:`check_prompt_ids`).

    Args:
        directory: Tokenizer directory (a checkpoint's, or ``tokenizer_path``).
        vocab_size: Rows of the model's embedding.

    Raises:
        CheckpointError: When the directory has no tokenizer, it does not load, it has
            no BOS token, or a prompt could hold an id the model does not embed.
    """
    if directory is None:
        tokenizer = offline_tokenizer()
        where: object = "offline tokenizer"
    else:
        root = Path(directory)
        if not any((root / name).is_file() for name in TOKENIZER_FILES):
            raise CheckpointError(root, f"no tokenizer ({' or '.join(TOKENIZER_FILES)}); "
                                        "put PaliGemma's tokenizer there or set tokenizer_path")
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
        except (OSError, ValueError, TypeError) as exc:
            raise CheckpointError(root, f"tokenizer does not load: {_first_line(exc)}") from exc
        where = _tokenizer_file(root)
    if tokenizer.bos_token_id is None:
        raise CheckpointError(where, "bos_token: none (π0 prompts start with one)")
    check_prompt_ids(tokenizer, vocab_size, where)
    return tokenizer


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _with_newline(instruction: str, newline: str) -> str:
    if newline == "always" or (newline == "if_missing" and not instruction.endswith("\n")):
        return instruction + "\n"
    return instruction


def encode_prompt(tokenizer: PreTrainedTokenizerBase, instruction: str,
                  length: int, newline: str = "always") -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask of π0's prompt (BOS, instruction, newline), padded.

    The instruction is text: special tokens spelled in it (``<image>``, ``<bos>``) are
    tokenized as the characters they are, never as their ids.

    Args:
        tokenizer: The model's tokenizer.
        instruction: The task instruction.
        length: Prompt length in tokens (the pad tokens are masked out).
        newline: One of :data:`NEWLINE_RULES`: transformers' ``PI0Processor`` always
            appends a newline, lerobot's ``pi0_new_line_processor`` only when missing.

    Returns:
        ``(ids, mask)``, int64 arrays of shape ``(length,)``.

    Raises:
        InputError: When the instruction is not a string or its tokens do not fit.
    """
    if not isinstance(instruction, str):
        raise InputError("instruction", f"expected str, got {type(instruction).__name__}")
    if newline not in NEWLINE_RULES:
        raise ValueError(f"newline rule {newline!r} is not one of {NEWLINE_RULES}")
    body = tokenizer(_with_newline(instruction, newline), add_special_tokens=False,
                     split_special_tokens=True)["input_ids"]
    # <unk> is what the model saw in training for a character it lacks; the others must
    # not appear: split_special_tokens keeps them out, a tokenizer that still emits one
    # is refused.
    special = (set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}) & set(body)
    if special:
        raise InputError("instruction", f"tokenizes to special token ids {sorted(special)}")
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
