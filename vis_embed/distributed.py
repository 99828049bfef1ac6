"""Process-group helpers: rank, world size, barrier, object collectives, the embedding gather.

Every helper also works in a single process without a process group (rank 0 of 1), so the
trainer, checkpoints, GradCache, ``vis-embed encode`` and ``vis-embed eval`` run unchanged
alone and under ``torchrun`` (and the ``deepspeed`` launcher for training).  A torchrun
launch is recognised by its environment (``WORLD_SIZE`` > 1, ``RANK``, ``LOCAL_RANK``); the
rendezvous (one node or many) is torchrun's.  The training backends built on top of this are
in :mod:`vis_embed.training.backends`; sharded encoding in :mod:`vis_embed.embedding_cache`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    return dist.get_rank() if is_distributed() else int(os.environ.get("RANK", 0))


def get_world_size() -> int:
    return dist.get_world_size() if is_distributed() else int(os.environ.get("WORLD_SIZE", 1))


def get_local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def is_main_process() -> bool:
    return get_rank() == 0


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def local_device() -> str | None:
    """``cuda:LOCAL_RANK`` in a multi-process run on GPUs, else None (the caller's default)."""
    if get_world_size() > 1 and torch.cuda.is_available():
        return f"cuda:{get_local_rank()}"
    return None


def init_distributed(use_deepspeed: bool = False, timeout: timedelta | None = None) -> bool:
    """Join the process group when launched by torchrun/deepspeed (``WORLD_SIZE`` > 1).

    Returns whether this is a multi-process run.  NCCL on GPU, gloo on CPU.  ``deepspeed`` is
    an optional extra, imported only when asked for (the recipe loader has already checked
    that it is installed).
    """
    if int(os.environ.get("WORLD_SIZE", 1)) <= 1 or is_distributed():
        return is_distributed()
    if torch.cuda.is_available():
        torch.cuda.set_device(get_local_rank())
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if use_deepspeed:
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend)
    else:
        dist.init_process_group(backend, timeout=timeout)
    return True


# Ranks other than 0 wait in a collective while rank 0 scores a dataset or writes the output,
# which on a large gallery can outlast the backends' default timeouts (NCCL: 10 min).
BATCH_JOB_TIMEOUT = timedelta(hours=2)


@contextlib.contextmanager
def torchrun_group(timeout: timedelta = BATCH_JOB_TIMEOUT) -> Iterator[bool]:
    """Join torchrun's process group for the block (yields whether this is a multi-process run).

    A group that already exists (a library user's own) is used and left alone; one made here
    is destroyed on the way out, after a barrier on success so no rank leaves while rank 0
    still needs it.  Alone (no ``WORLD_SIZE`` > 1) this does nothing.
    """
    created = not is_distributed() and init_distributed(timeout=timeout)
    try:
        yield is_distributed()
        if created:
            barrier()
    finally:
        if created:
            dist.destroy_process_group()


def gather_with_local_grad(local: Tensor) -> Tensor:
    """Concatenate ``local`` (B_local, ...) from all ranks in rank order (same shape on all).

    ``all_gather`` returns tensors without history; we put this rank's own tensor back in its
    slot so gradient flows to the local shard (and only to it).
    """
    if not is_distributed() or get_world_size() == 1:
        return local
    gathered = [torch.empty_like(local) for _ in range(get_world_size())]
    dist.all_gather(gathered, local.detach().contiguous())
    gathered[get_rank()] = local
    return torch.cat(gathered, dim=0)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    if not is_distributed():
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (``[obj]`` alone)."""
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def gather_object(obj: Any, dst: int = 0) -> list[Any] | None:
    """Every rank's ``obj`` in rank order on rank ``dst``; None on the other ranks."""
    if not is_distributed():
        return [obj]
    gathered: list[Any] | None = [None] * get_world_size() if get_rank() == dst else None
    dist.gather_object(obj, gathered, dst=dst)
    return gathered
