"""Vectors on their way from the device to the host, read one batch behind the forward.

``Embedder.encode`` launches batch i+1 before it reads batch i back.  A plain ``.cpu()`` would
not do: a blocking copy waits for everything queued on the stream, batch i+1's forward
included.  So a GPU's vectors are copied into page-locked memory right behind their own forward
(asynchronously) with an event recorded after the copy, and the host later waits for that
event only.  While the host reads batch i back and takes the next batch from the item feed, the
device runs batch i+1 instead of waiting for it.  (The forward itself still reads one value back:
transformers' check that the visual tokens match the features, mid-forward.)  On a CPU the
forward has finished when it returns and the rows are read at once.
"""

from __future__ import annotations

import numpy as np
import torch


class PendingRows:
    """One batch's vectors (rows ``indices`` of the caller's items), readable by :meth:`numpy`."""

    def __init__(self, indices: list[int], vectors: torch.Tensor) -> None:
        self.indices = indices
        self._copied: torch.cuda.Event | None = None
        if vectors.device.type == "cuda":
            self._host = torch.empty(vectors.shape, dtype=vectors.dtype, pin_memory=True)
            self._host.copy_(vectors, non_blocking=True)
            # blocking: the host waiting for it sleeps rather than spins a core the item feed could use
            self._copied = torch.cuda.Event(blocking=True)
            self._copied.record(torch.cuda.current_stream(vectors.device))  # right behind the copy
        else:
            self._host = vectors.detach().cpu()

    def numpy(self) -> np.ndarray:
        """The rows on the host (waits for this batch's copy only).  From a GPU they are copied
        out of the pinned buffer: the caller keeps row views until the encode ends, and page-locked
        memory held for a whole gallery (1M x 1536 floats: 6 GB) would starve the machine."""
        if self._copied is None:
            return self._host.numpy()
        self._copied.synchronize()
        return self._host.numpy().copy()
