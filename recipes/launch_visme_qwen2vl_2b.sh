#!/usr/bin/env bash
# VisME 2B on one node: `bash recipes/launch_visme_qwen2vl_2b.sh [--set key=value ...] [--resume]`
# (NPROC, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT as in recipes/launch.sh)
exec bash "$(dirname "$0")/launch.sh" "$(dirname "$0")/visme_qwen2vl_2b.yaml" "$@"
