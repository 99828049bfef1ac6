"""``vis-embed`` under torchrun with two test hooks, for tests/test_distributed_eval.py.

``python _dist_eval_worker.py ARGS...`` runs ``vis_embed.cli.run_as_program(ARGS)`` (what ``-m vis_embed``
runs), with ``{rank}`` in ARGS replaced by this rank (a cache folder per rank stands for one
disk per node), and -- when ``KILL_RANK`` names this rank -- a crash: the rank SIGKILLs itself
right after writing its first cache shard, as a node lost mid-run would.
"""

from __future__ import annotations

import os
import signal
import sys

from vis_embed.cli import run_as_program
from vis_embed.embedding_cache import EmbeddingCache


def die_after_first_shard() -> None:
    write_shard = EmbeddingCache._save

    def write_then_die(self: EmbeddingCache, *args, **kwargs) -> None:
        write_shard(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    EmbeddingCache._save = write_then_die  # type: ignore[method-assign]


if __name__ == "__main__":
    rank = os.environ["RANK"]
    if os.environ.get("KILL_RANK") == rank:
        die_after_first_shard()
    run_as_program([argument.replace("{rank}", rank) for argument in sys.argv[1:]])
