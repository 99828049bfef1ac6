"""Last-real-token pooling that is correct for any padding side.

The embedding of a sequence is the decoder's final hidden state at its last *real* token.
Taking ``hidden[:, -1]`` is only right under left padding, and ``mask.sum(-1) - 1`` is only
right under right padding; both silently make an item's vector depend on which other items
share its batch.  We locate the last position whose attention-mask entry is 1, which is
right for left, right or no padding alike.
"""

from __future__ import annotations

import torch


def last_token_pool(hidden: torch.Tensor, attention_mask: torch.Tensor,
                    last_index: torch.Tensor | None = None) -> torch.Tensor:
    """``hidden`` (B, L, D), ``attention_mask`` (B, L) of 0/1 -> (B, D) at each row's last real token.
    ``last_index``: :func:`last_token_index` of the mask, computed on the host beforehand (the
    collation does: then nothing is read back from the device here)."""
    if hidden.shape[:2] != attention_mask.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and attention_mask "
                         f"{tuple(attention_mask.shape)} disagree on (batch, length)")
    if last_index is None:
        last_index = last_token_index(attention_mask)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last_index.to(hidden.device)]


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) index of each row's last position whose mask is 1; a row without one is a ValueError."""
    real = attention_mask.bool()
    if not bool(real.any(dim=-1).all()):
        raise ValueError("a sequence has no real token (its attention mask is all zeros)")
    positions = torch.arange(real.shape[1], device=real.device).expand_as(real)
    # Padded positions get -1 so the maximum is the index of the last real token.
    return torch.where(real, positions, torch.full_like(positions, -1)).max(dim=-1).values
