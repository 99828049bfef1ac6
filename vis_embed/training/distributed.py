"""Process-group helpers: rank, world size, barrier, broadcast, and the embedding gather.

Every helper also works in a single process without a process group (rank 0 of 1), so the
trainer, checkpoints and GradCache run unchanged under ``vis-embed train``, ``torchrun`` (DDP)
and the ``deepspeed`` launcher.  The training backends built on top of this are in
:mod:`vis_embed.training.backends`.
"""

from __future__ import annotations

import os
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


def init_distributed(use_deepspeed: bool = False) -> bool:
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
        dist.init_process_group(backend)
    return True


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
