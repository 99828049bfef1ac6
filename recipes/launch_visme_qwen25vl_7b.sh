#!/usr/bin/env bash
# VisME 7B on one node: `bash recipes/launch_visme_qwen25vl_7b.sh [--set key=value ...] [--resume]`
# (NPROC, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT as in recipes/launch.sh)
exec bash "$(dirname "$0")/launch.sh" "$(dirname "$0")/visme_qwen25vl_7b.yaml" "$@"
