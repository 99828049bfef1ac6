#!/usr/bin/env bash
# The paper's sampling ablation (its Table 2) in miniature, on the synthetic benchmark:
# same tiny model, same data, same steps; three schedules x SEEDS training seeds.
#   naive           one sub-dataset per batch, rows drawn uniformly, no identity constraint
#   identity        identity-aware: each identity at most once per batch, p(identity) ∝ instances
#   identity_hn     identity-aware + k=5 structured hard negatives (look-alikes) in the same batch
# Writes OUT/<schedule>-<seed>/{run,eval}/ and docs/ablation.md (mean ± std over seeds).
#
#   bash eval/ablation_sampling.sh [OUT=ablation_out] [SEEDS="0 1 2"]
# The skewed-identity variant (docs/ablation_skewed.md): most train identities have 2 images,
# 2% have 20-60 (`vis-embed synth --size small-skewed`):
#   OUT=ablation_skewed_out SIZE=small-skewed VARIANTS="naive identity" TABLE=docs/ablation_skewed.md \
#     bash eval/ablation_sampling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-ablation_out}
SEEDS=${SEEDS:-"0 1 2"}
SIZE=${SIZE:-small}
VARIANTS=${VARIANTS:-"naive identity identity_hn"}
TABLE=${TABLE:-docs/ablation.md}
VIS=${VIS:-.venv/bin/vis-embed}
RECIPE=recipes/ablation_sampling.yaml
mkdir -p "$OUT"

[ -f "$OUT/synth/synth.json" ] || $VIS synth "$OUT/synth" --seed 0 --size "$SIZE"
[ -f "$OUT/model/config.json" ] || $VIS tiny-model "$OUT/model" --arch qwen2-vl --seed 0

for seed in $SEEDS; do
  for variant in $VARIANTS; do
    case $variant in
      naive)       strategy=naive;          negatives=0 ;;
      identity)    strategy=identity_aware; negatives=0 ;;
      identity_hn) strategy=identity_aware; negatives=5 ;;
    esac
    dir="$OUT/$variant-$seed"
    if [ ! -f "$dir/eval/results.json" ]; then
      echo "== $variant, seed $seed"
      resume=""
      ls -d "$dir"/run/checkpoint-* >/dev/null 2>&1 && resume="--resume"
      [ -f "$dir/run/final/adapter_config.json" ] || $VIS train "$RECIPE" $resume \
        --set model="$OUT/model" --set data="$OUT/synth/train.yaml" \
        --set schedule="$dir/schedule.parquet" --set output_dir="$dir/run" --set seed="$seed" \
        --set sampling.strategy="$strategy" --set sampling.hard_negatives="$negatives"
      $VIS eval --model "$OUT/model" --adapter "$dir/run/final" --benchmark "$OUT/synth/benchmark.yaml" \
        --out "$dir/eval" --no-pictures --quiet
    fi
  done
done
.venv/bin/python eval/ablation_table.py "$OUT" --seeds $SEEDS --synth-size "$SIZE" --out "$TABLE"
