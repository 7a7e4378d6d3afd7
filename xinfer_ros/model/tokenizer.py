"""Offline byte-level tokenizer with state-bin tokens.

Why a fallback: no tokenizer can be downloaded here and no installed package ships a
vocabulary for the Qwen or Gemma backbones (transformers ships code, not vocab files).
With random weights the token identities carry no meaning anyway; what matters for
serving is that tokenisation is deterministic, offline and produces a realistic number
of tokens. UTF-8 bytes give one token per byte (an upper bound on a BPE tokenizer's
count for English instructions, which keeps latency estimates conservative).

Vocabulary layout (``ByteTokenizer.vocab_size`` = 528)::

    0 PAD  1 BOS  2 EOS  3 IMAGE  4 STATE_BEGIN  5 STATE_END  6 ACTION  7..15 reserved
    16 .. 271    UTF-8 bytes 0..255
    272 .. 527   robot-state bins 0..255

A real checkpoint whose embedding table uses another vocabulary needs its own
tokenizer; ``ReferenceVLA.from_pretrained`` keeps using this one (see model docs).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ByteTokenizer"]


class ByteTokenizer:
    """Deterministic UTF-8 byte tokenizer plus special and state-bin tokens."""

    PAD: int = 0
    BOS: int = 1
    EOS: int = 2
    IMAGE: int = 3
    STATE_BEGIN: int = 4
    STATE_END: int = 5
    ACTION: int = 6
    BYTE_OFFSET: int = 16

    def __init__(self, state_bins: int = 256) -> None:
        """Create the tokenizer.

        Args:
            state_bins: Number of robot-state bins that get their own token.
        """
        if state_bins < 1:
            raise ValueError(f"state_bins must be >= 1, got {state_bins}")
        self.state_bins = state_bins
        self.state_offset = self.BYTE_OFFSET + 256

    @property
    def vocab_size(self) -> int:
        """Number of token ids this tokenizer can emit."""
        return self.state_offset + self.state_bins

    def encode(self, text: str) -> list[int]:
        """Encode text as one token per UTF-8 byte (no special tokens)."""
        return [self.BYTE_OFFSET + b for b in text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        """Decode byte tokens back to text, skipping special and state tokens."""
        raw = bytes(i - self.BYTE_OFFSET for i in ids if self.BYTE_OFFSET <= i < self.state_offset)
        return raw.decode("utf-8", errors="replace")

    def encode_state(self, bins: np.ndarray) -> list[int]:
        """Map state bins (ints in ``[0, state_bins)``) to token ids.

        Raises:
            ValueError: If a bin is out of range.
        """
        arr = np.asarray(bins, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.state_bins):
            raise ValueError(f"state bins must lie in [0, {self.state_bins})")
        return [self.state_offset + int(b) for b in arr.ravel()]

    def build_prompt(
        self, template: str, instruction: str, state_bins: np.ndarray, state_format: str = "tokens"
    ) -> list[int]:
        """Token ids of the text segment that follows the visual tokens.

        Layout with ``state_format="tokens"``:
        ``BOS, template(instruction), STATE_BEGIN, bin tokens..., STATE_END, ACTION``.
        With ``"text"`` (π0.5 style): ``BOS, template(instruction), "128 127 ...", ACTION``.

        Args:
            template: Prompt template containing ``{instruction}``.
            instruction: Natural-language instruction.
            state_bins: Discretised, padded robot state.
            state_format: ``"tokens"`` or ``"text"``.

        Returns:
            Token ids.
        """
        text = template.replace("{instruction}", instruction)
        if state_format == "text":
            self.encode_state(state_bins)  # range check only
            state_text = " ".join(str(int(b)) for b in np.asarray(state_bins).ravel())
            return [self.BOS, *self.encode(text), *self.encode(state_text), self.ACTION]
        if state_format != "tokens":
            raise ValueError(f"state_format must be 'tokens' or 'text', got {state_format!r}")
        return [
            self.BOS,
            *self.encode(text),
            self.STATE_BEGIN,
            *self.encode_state(state_bins),
            self.STATE_END,
            self.ACTION,
        ]
