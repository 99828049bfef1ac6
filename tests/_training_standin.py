"""A tiny token-sequence encoder with the EmbeddingModel calling convention (collate/forward).

Used by the loss/GradCache unit tests that must run in milliseconds; the acceptance tests
use the real tiny Qwen-VL checkpoints.  Dropout sits on the hidden states so RNG replay
matters; padding is masked so each chunk's result is independent of its padding length.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TokenItem(list):
    """A prepared stand-in member: its token ids, and their count as ``.length`` (like PreparedItem)."""

    @property
    def length(self) -> int:
        return len(self)


class StandInEncoder(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 16, dropout: float = 0.0, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)

    @staticmethod
    def collate(prepared: list[list[int]]) -> dict[str, Tensor]:
        longest = max(len(p) for p in prepared)
        ids = torch.zeros(len(prepared), longest, dtype=torch.long)
        mask = torch.zeros(len(prepared), longest, dtype=torch.long)
        for row, tokens in enumerate(prepared):
            ids[row, :len(tokens)] = torch.tensor(tokens)
            mask[row, :len(tokens)] = 1
        return {"input_ids": ids, "attention_mask": mask}

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = self.dropout(torch.tanh(self.proj(self.embed(input_ids))))
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        return F.normalize(pooled, dim=-1)


def random_members(count: int, seed: int, vocab: int = 50) -> list[TokenItem]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 9, (count,), generator=generator)
    return [TokenItem(torch.randint(1, vocab, (int(n),), generator=generator).tolist()) for n in lengths]
