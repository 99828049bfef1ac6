"""The earlier import path of :mod:`vis_embed.vectors.transforms` (Matryoshka truncation and
quantization), kept for code written against it; the vectors live below the model now."""

from __future__ import annotations

from vis_embed.vectors.transforms import (  # noqa: F401  (re-exported)
    BIT_PRECISIONS, PRECISIONS, RANGED_PRECISIONS, bytes_per_vector, calibration_ranges, check_dim,
    check_matryoshka_dims, check_precision, check_ranges, l2_normalise, quantize, truncate,
    vllm_matryoshka_fields)
