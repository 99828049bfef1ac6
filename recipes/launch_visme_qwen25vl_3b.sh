#!/usr/bin/env bash
# VisME 3B on one node: `bash recipes/launch_visme_qwen25vl_3b.sh [--set key=value ...] [--resume]`
# Multi-node: run on every node with NNODES, NODE_RANK, MASTER_ADDR set (torchrun rendezvous).
set -euo pipefail
NPROC=${NPROC:-8}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
exec torchrun --nproc_per_node "$NPROC" --nnodes "$NNODES" --node_rank "$NODE_RANK" \
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \
  -m vis_embed train recipes/visme_qwen25vl_3b.yaml "$@"
# Equivalent with the DeepSpeed launcher:
#   deepspeed --no_local_rank --num_gpus "$NPROC" --module vis_embed train recipes/visme_qwen25vl_3b.yaml "$@"
