"""The Matryoshka width rule as behaviour, beside its source check (tests/test_one_rule.py): every
edge that takes a width -- encode's --dim, a stored index's dim, serve's --dim, a request's
``dimensions``, the recipe's loss.matryoshka_dims, a model's recorded matryoshka_dims, a
truncation -- refuses a bad one with the words of vectors/transforms.py's check_dim /
check_matryoshka_dims, naming its own flag or field.  A restated copy would say something else."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from vis_embed.errors import ConfigError, DataError, VisEmbedError
from vis_embed.vectors.transforms import check_dim, check_matryoshka_dims

WIDTH = 8


def _reason(call) -> str:
    with pytest.raises((VisEmbedError, ValueError)) as caught:
        call()
    return str(caught.value)


def _rule_words(call) -> str:
    """The rule's own message for a width of 9 on a model of WIDTH."""
    with pytest.raises(DataError) as caught:
        call()
    return caught.value.reason


def test_every_width_edge_says_what_check_dim_says() -> None:
    from vis_embed.serving.errors import RequestError
    from vis_embed.serving.gallery_routes import answered_dimensions, check_default_dim
    from vis_embed.vectors.stored_form import StoredForm
    from vis_embed.vectors.transforms import truncate

    words = _rule_words(lambda: check_dim(9, WIDTH))
    assert "from 1 to the model's width 8, got 9" in words
    embedder = SimpleNamespace(embedding_dim=WIDTH, embedding_config=SimpleNamespace(matryoshka_dims=[4, 8]))
    edges = {
        "encode --dim": lambda: StoredForm(dim=9).checked(WIDTH),
        "serve --dim": lambda: check_default_dim(9, embedder),
        "truncate": lambda: truncate(np.ones((2, WIDTH), dtype=np.float32), 9),
    }
    for edge, call in edges.items():
        assert words in _reason(call), edge
    with pytest.raises(RequestError) as refused:
        answered_dimensions(9, None, WIDTH, [4, 8])
    assert refused.value.status == 400 and refused.value.param == "dimensions"
    assert words in refused.value.message, "a request's dimensions"


def test_every_list_of_trained_widths_says_what_check_matryoshka_dims_says() -> None:
    from vis_embed.model.embedding_config import EmbeddingConfig
    from vis_embed.training.recipe import LossConfig

    words = _rule_words(lambda: check_matryoshka_dims([8, 4]))
    assert "strictly increasing" in words
    edges = {"recipe loss.matryoshka_dims": lambda: LossConfig(matryoshka_dims=[8, 4]),
             "embedding_config.json matryoshka_dims": lambda: EmbeddingConfig(matryoshka_dims=[8, 4])}
    for edge, call in edges.items():
        message = _reason(call)
        assert words in message and "matryoshka_dims" in message, (edge, message)


def test_the_rule_is_what_fails_not_a_stand_in() -> None:
    """The edges above raise the project's errors, not an incidental TypeError/IndexError."""
    from vis_embed.vectors.stored_form import StoredForm

    with pytest.raises(ConfigError):
        StoredForm(dim=9).checked(WIDTH)
