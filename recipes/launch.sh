#!/usr/bin/env bash
# Launch any recipe on one node: `bash recipes/launch.sh RECIPE.yaml [--set key=value ...] [--resume]`
# Multi-node: run on every node with NNODES, NODE_RANK, MASTER_ADDR set (torchrun rendezvous).
# NPROC = processes (GPUs) per node.  DeepSpeed is switched on by the recipe's `deepspeed:` key.
set -euo pipefail
RECIPE=${1:?usage: launch.sh RECIPE.yaml [--set key=value ...] [--resume]}
shift
NPROC=${NPROC:-8}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
exec torchrun --nproc_per_node "$NPROC" --nnodes "$NNODES" --node_rank "$NODE_RANK" \
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \
  -m vis_embed train "$RECIPE" "$@"
# Equivalent with the DeepSpeed launcher:
#   deepspeed --no_local_rank --num_gpus "$NPROC" --module vis_embed train "$RECIPE" "$@"
