#!/usr/bin/env bash
# Peer objectives compared on the synthetic benchmark (docs/objectives.md): the same tiny
# random Qwen2-VL, the same data (`vis-embed synth --size SIZE`), the same identity-aware
# schedule with HN designated hard negatives per anchor, the same steps; only the loss and
# the adaptation style change.  COMBOS x SEEDS training runs:
#   infonce_lora   VisME: InfoNCE + LoRA (the reference)
#   two_tier_lora  NearID (Eq. 1-3): L_disc + 0.5 L_rank, tau 0.07, LoRA
#   two_tier_margin_lora  the pre-issue-27 variant: InfoNCE + margin tier over the look-alikes
#                  (not in the default COMBOS; COMBOS="two_tier_margin_lora" reproduces old rows)
#   hinge_lora     DreamSim: triplet hinge on cosine distances, LoRA
#   infonce_head   TLL / linear probe: InfoNCE, frozen backbone + trained projection head
# Each run is evaluated on the synthetic manifest (MVEB/MMEB-style P@1) and on the peer
# protocols derived from its eval images (eval/objectives_peers.py: NearID SSR/PA, 2AFC, TLL
# asymmetric recall, ID-Sim AP); the untrained model is evaluated once as a reference.
# Writes OUT/<combo>-<seed>/{schedule.parquet,run,eval,eval_peer,log.txt}, OUT/base/, one result
# file per run RESULTS/<combo>_seed<N>.json (+ untrained_seed0.json; committed, default
# docs/results/<TABLE stem>/) and TABLE, built from the result files only.
#
#   bash eval/objectives_comparison.sh                  # docs/objectives.md (12 runs)
#   SEEDS="0 1 2 3 4" JOBS=2 bash eval/objectives_comparison.sh
# JOBS=N runs N trainings at once, one torch thread each (two fit a 2-core machine).  Resumable:
# finished runs are kept, a run with a checkpoint resumes from it.  Accuracy figures are
# deterministic (same seed -> same numbers whatever JOBS); timings are not, and are not reported.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=eval/_study.sh
source eval/_study.sh  # VIS, PY, one thread; check_names, ensure_*, evaluate, launch, wait_all, ...
SIZE=${SIZE:-small}
OUT=${OUT:-objectives_out}
RECIPE=${RECIPE:-recipes/ablation_sampling.yaml}
TABLE=${TABLE:-docs/objectives.md}
SEEDS=${SEEDS:-"0 1 2"}
HN=${HN:-5}
COMBOS=${COMBOS:-"infonce_lora two_tier_lora hinge_lora infonce_head"}
JOBS=${JOBS:-2}
RESULTS=${RESULTS:-docs/results/$(basename "$TABLE" .md)}   # per-seed result files (docs/experiments.md)
COMMAND="SIZE=$SIZE OUT=$OUT RESULTS=$RESULTS TABLE=$TABLE SEEDS=\"$SEEDS\" COMBOS=\"$COMBOS\" HN=$HN JOBS=$JOBS bash eval/objectives_comparison.sh"
mkdir -p "$OUT"
# shellcheck disable=SC2086  # COMBOS is a word list
check_names combination "infonce_lora two_tier_lora two_tier_margin_lora hinge_lora infonce_head" $COMBOS
ensure_benchmark
ensure_model
[ -f "$OUT/peer/benchmark.yaml" ] || $PY eval/objectives_peers.py "$OUT/synth" "$OUT/peer"

# Both evaluations of one model (ADAPTER may be empty) into DIR/eval and DIR/eval_peer.
evaluate_both() {  # dir, adapter
  evaluate "$2" "$1/eval" &&
  evaluate "$2" "$1/eval_peer" "$OUT/peer/benchmark.yaml"
}

# One training + evaluation; its output goes to OUT/<combo>-<seed>/log.txt.
run_one() {
  local combo=$1 seed=$2 kind adaptation
  case $combo in
    infonce_lora)  kind=infonce;       adaptation=lora ;;
    two_tier_lora) kind=two_tier;      adaptation=lora ;;
    two_tier_margin_lora) kind=two_tier_margin; adaptation=lora ;;
    hinge_lora)    kind=triplet_hinge; adaptation=lora ;;
    infonce_head)  kind=infonce;       adaptation=head ;;
  esac
  local dir="$OUT/$combo-$seed"
  [ -f "$RESULTS/${combo}_seed$seed.json" ] && return 0
  mkdir -p "$dir"
  echo "== $combo, seed $seed (log: $dir/log.txt)"
  {  # each step only after the one before succeeded (`set -e` does not hold on the left of `||`)
    { [ -f "$dir/run/final/trainer_state.json" ] || $VIS train "$RECIPE" --resume \
      --set model="$OUT/model" --set data="$OUT/synth/train.yaml" \
      --set schedule="$dir/schedule.parquet" --set output_dir="$dir/run" --set seed="$seed" \
      --set sampling.strategy=identity_aware --set sampling.hard_negatives="$HN" \
      --set loss.kind="$kind" --set adaptation.kind="$adaptation" --set logging.tensorboard=false; } &&
    evaluate_both "$dir" "$dir/run/final" &&
    # the per-seed result file the table is built from (metrics, loss, schedule hash, provenance)
    $PY eval/study_results.py write --study "$(basename "$TABLE" .md)" --arm "$combo" --seed "$seed" \
      --run-dir "$dir/run" --schedule "$dir/schedule.parquet" --extra-eval peer="$dir/eval_peer" \
      --out "$RESULTS" --command "$COMMAND"
  } > "$dir/log.txt" 2>&1 || { echo "!! $combo, seed $seed failed: see $dir/log.txt" >&2; return 1; }
}

# The untrained model: the reference point every combination starts from.
run_base() {
  mkdir -p "$OUT/base"
  [ -f "$RESULTS/untrained_seed0.json" ] && return 0
  { evaluate_both "$OUT/base" "" &&
    $PY eval/study_results.py write --study "$(basename "$TABLE" .md)" --arm untrained --seed 0 \
      --eval-dir "$OUT/base/eval" --extra-eval peer="$OUT/base/eval_peer" --out "$RESULTS" --command "$COMMAND"
  } > "$OUT/base/log.txt" 2>&1 \
    || { echo "!! untrained reference failed: see $OUT/base/log.txt" >&2; return 1; }
}

launch run_base
for seed in $SEEDS; do
  for combo in $COMBOS; do launch run_one "$combo" "$seed"; done
done
wait_all

# shellcheck disable=SC2086  # SEEDS and COMBOS are word lists
$PY eval/objectives_table.py "$OUT" --seeds $SEEDS --combos $COMBOS --synth-size "$SIZE" \
  --recipe "$RECIPE" --hard-negatives "$HN" --out "$TABLE" --results "$RESULTS" --command "$COMMAND"
