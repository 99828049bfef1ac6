"""The one tie rule of gallery search: the order of a query's hits.

Higher score first, then the smaller row id; missing hits (id -1, an index short of ``k``) last.
Every kind of index is put in this order (:func:`vis_embed.gallery.search.tie_order`), and the
exact kinds choose which of the rows tied at the k-th score make the cut by it too.  A module of
its own (numpy only) so that the index kinds that :mod:`vis_embed.gallery.search` builds
(search_bf16, quantized_index) call the rule itself instead of restating it.
"""

from __future__ import annotations

import numpy as np


def hit_order(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The positions sorting ``scores`` / ``ids`` along their last axis by the rule above."""
    return np.lexsort((ids, -scores, ids < 0), axis=-1)
