"""last_token_pool: the last REAL token for left, right and no padding."""

from __future__ import annotations

import pytest
import torch

from vis_embed.model.network.pooling import last_token_pool


def _hidden(batch: int, length: int, dim: int = 4) -> torch.Tensor:
    # Each position's vector encodes (row, position) so the picked index is readable.
    rows = torch.arange(batch).view(batch, 1, 1).expand(batch, length, dim)
    cols = torch.arange(length).view(1, length, 1).expand(batch, length, dim)
    return (rows * 1000 + cols).float()


def test_right_padding_picks_last_real_token() -> None:
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    pooled = last_token_pool(_hidden(3, 5), mask)
    assert pooled[:, 0].tolist() == [2.0, 1004.0, 2000.0]


def test_left_padding_picks_last_real_token() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    pooled = last_token_pool(_hidden(3, 5), mask)
    assert pooled[:, 0].tolist() == [4.0, 1004.0, 2004.0]


def test_rows_may_use_different_sides_and_bool_masks() -> None:
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    pooled = last_token_pool(_hidden(2, 4), mask)
    assert pooled[:, 0].tolist() == [2.0, 1001.0]


def test_gradient_flows_only_to_pooled_position() -> None:
    hidden = _hidden(1, 3).requires_grad_(True)
    last_token_pool(hidden, torch.tensor([[1, 1, 0]])).sum().backward()
    assert hidden.grad[0, :, 0].tolist() == [0.0, 1.0, 0.0]


def test_empty_row_and_shape_mismatch_are_errors() -> None:
    with pytest.raises(ValueError, match="no real token"):
        last_token_pool(_hidden(2, 3), torch.tensor([[1, 1, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="disagree"):
        last_token_pool(_hidden(2, 3), torch.ones(2, 4))
