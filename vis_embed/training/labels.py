"""What the contrastive loss treats as "the same candidate" (its mask labels)."""

from __future__ import annotations

from typing import Any


def loss_label(dataset: Any, record: dict[str, Any]) -> str:
    """The label the loss masks on: the record's identity, else the content of its candidate.

    Candidates that share query i's label (other than its own positive) are left out of its
    denominator.  Identity rows use their identity key.  A pairs row without identity falls
    back to what its candidate *is* (image file + text): two classification rows whose
    positive is the same label text "circle" are the same candidate, and pushing a query away
    from an identical copy of its own positive would only teach noise.
    """
    key = dataset.identity_key(record)
    if key is not None:
        return key
    item = dataset.positive_item(record)
    image = item.get("image")
    image_key = image if isinstance(image, str) or image is None else f"<in-memory {id(image)}>"
    return f"{dataset.name}::candidate::{image_key}::{item.get('text')}"
